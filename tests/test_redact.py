"""Secrets redaction: each kind, env values, config, idempotence, no survivors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_selfheal.config.settings import ConfigLayer, merge_layers
from pytest_selfheal.errors import ConfigError
from pytest_selfheal.redact import (
    BUILTIN_KINDS,
    DEFAULT_ENV_NAMES,
    REDACTED,
    URL_MASK,
    Redactor,
    default_redactor,
)

GHP = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5"
GHO = "gho_" + "Z" * 36
GHU = "ghu_" + "0123456789" * 4
GHS = "ghs_" + "s1" * 18
GHR = "ghr_" + "r2" * 18
GITHUB_PAT = "github_pat_11ABCDEFG0123456789abc_" + "x9" * 29
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_TEMP_KEY_ID = "ASIAJEXAMPLEXEG2JICEA"[:20]
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SLACK_BOT = "xoxb-2345678901-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
SLACK_USER = "xoxp-2345678901-2345678901-AbCdEfGhIjKl"
SLACK_WEBHOOK_PATH = "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM_BODY = "MIIEowIBAAKCAQEA7bq98wVx3v1Rq2\nk2JvY1nQ0iLq0x+/==\nZmFrZWtleWZha2VrZXk="
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
OPENSSH = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----"
PYPI = "pypi-AgEIcHlwaS5vcmcCJGRhYjQ4YjAzLWYxNTAtNDZmMi04NjA4"
NPM = "npm_" + "a1B2c3D4e5" * 3 + "F6g7H8"
GOOGLE = "AIza" + "SyD-1234567890abcdefghijklmnopqrstu"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"

# (kind, planted text, the secret that must not survive, text expected around it)
CASES: list[tuple[str, str, str, str]] = [
    ("ghp", f"token {GHP} end", GHP, f"token {REDACTED} end"),
    ("gho", f"x={GHO}", GHO, f"x={REDACTED}"),
    ("ghu", GHU, GHU, REDACTED),
    ("ghs", f"({GHS})", GHS, f"({REDACTED})"),
    ("ghr", GHR, GHR, REDACTED),
    ("github_pat", f"use {GITHUB_PAT}", GITHUB_PAT, f"use {REDACTED}"),
    ("aws_key_id", f"key id {AWS_KEY_ID}.", AWS_KEY_ID, f"key id {REDACTED}."),
    ("aws_temp_key_id", f"{AWS_TEMP_KEY_ID}", AWS_TEMP_KEY_ID, REDACTED),
    ("aws_secret", f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, f"aws_secret_access_key = {REDACTED}"),
    ("aws_secret_json", f'{{"SecretAccessKey": "{AWS_SECRET}"}}', AWS_SECRET, f'{{"SecretAccessKey": "{REDACTED}"}}'),
    ("aws_secret_env", f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", AWS_SECRET, f"AWS_SECRET_ACCESS_KEY={REDACTED}"),
    ("slack_bot", f"slack {SLACK_BOT}", SLACK_BOT, f"slack {REDACTED}"),
    ("slack_user", SLACK_USER, SLACK_USER, REDACTED),
    (
        "slack_webhook",
        f"POST https://hooks.slack.com/services/{SLACK_WEBHOOK_PATH} ok",
        SLACK_WEBHOOK_PATH,
        f"POST https://hooks.slack.com/services/{REDACTED} ok",
    ),
    ("jwt", f"jwt={JWT}", JWT, f"jwt={REDACTED}"),
    ("jwt_bare", f"got {JWT}!", JWT, f"got {REDACTED}!"),
    (
        "pem",
        f"key:\n{PEM}\nafter",
        PEM_BODY,
        f"key:\n-----BEGIN RSA PRIVATE KEY-----\n{REDACTED}\n-----END RSA PRIVATE KEY-----\nafter",
    ),
    (
        "openssh",
        OPENSSH,
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU=",
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{REDACTED}\n-----END OPENSSH PRIVATE KEY-----",
    ),
    (
        "pem_cut_short",
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
        f"-----BEGIN PRIVATE KEY-----\n{REDACTED}\n",
    ),
    ("auth_bearer", "Authorization: Bearer abc.def-ghi", "abc.def-ghi", f"Authorization: Bearer {REDACTED}"),
    ("auth_lower", "authorization: bearer s3cr3tv4lue", "s3cr3tv4lue", f"authorization: bearer {REDACTED}"),
    ("auth_basic", "AUTHORIZATION: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", f"AUTHORIZATION: Basic {REDACTED}"),
    ("auth_token", "curl -H 'Authorization: token abcd1234' u", "abcd1234", f"curl -H 'Authorization: token {REDACTED}' u"),
    ("auth_dict", "{'Authorization': 'Bearer zzTopSecret'}", "zzTopSecret", f"{{'Authorization': 'Bearer {REDACTED}'}}"),
    ("auth_proxy", "Proxy-Authorization: Basic cHJveHk6cGFzcw==", "cHJveHk6cGFzcw==", f"Proxy-Authorization: Basic {REDACTED}"),
    ("bearer_bare", "sent Bearer abcdefghijklmnop_1234 to", "abcdefghijklmnop_1234", f"sent Bearer {REDACTED} to"),
    ("url_creds", "git clone https://user:hunter2pw@example.com/r.git", "hunter2pw", f"git clone https://user:{URL_MASK}@example.com/r.git"),
    ("url_token_user", f"https://{GHP}:x-oauth-basic@github.com/o/r", GHP, f"https://{URL_MASK}:{URL_MASK}@github.com/o/r"),
    ("url_user_only", "https://a1b2c3d4e5f6g7h8i9j0k1@host/x", "a1b2c3d4e5f6g7h8i9j0k1", f"https://{URL_MASK}@host/x"),
    ("url_empty_user", "redis://:p4ssw0rd@localhost:6379/0", "p4ssw0rd", f"redis://:{URL_MASK}@localhost:6379/0"),
    ("password_eq", "password=hunter2 next", "hunter2", f"password={REDACTED} next"),
    ("password_json", '{"password": "hunter2"}', "hunter2", f'{{"password": "{REDACTED}"}}'),
    ("password_upper", "DB_PASSWORD='s3cr3t!'", "s3cr3t!", f"DB_PASSWORD='{REDACTED}'"),
    ("secret_yaml", "client_secret: abc123xyz", "abc123xyz", f"client_secret: {REDACTED}"),
    ("api_key", "api_key=AbCd1234", "AbCd1234", f"api_key={REDACTED}"),
    ("api_key_dash", "--api-key: k3yv4lue", "k3yv4lue", f"--api-key: {REDACTED}"),
    ("token_query", "GET /x?access_token=t0k3nv4l&y=1", "t0k3nv4l", f"GET /x?access_token={REDACTED}&y=1"),
    ("passphrase", "passphrase => 'open sesame'", "open sesame", f"passphrase => '{REDACTED}'"),
    ("pypi", f"TWINE_PASSWORD {PYPI}", PYPI, f"TWINE_PASSWORD {REDACTED}"),
    ("npm", f"//registry.npmjs.org/:_authToken {NPM}", NPM, f"//registry.npmjs.org/:_authToken {REDACTED}"),
    ("google", f"maps {GOOGLE}", GOOGLE, f"maps {REDACTED}"),
    ("stripe", f"stripe {STRIPE}", STRIPE, f"stripe {REDACTED}"),
    # A PEM block inside a Python repr (escaped line breaks), whole.
    ("pem_repr", f"ValueError: {PEM!r}", "k2JvY1nQ0iLq0x+/==",
     f"ValueError: '-----BEGIN RSA PRIVATE KEY-----\\n{REDACTED}\\n-----END RSA PRIVATE KEY-----'"),
    ("pem_repr_of_repr", repr(repr(PEM)), "ZmFrZWtleWZha2VrZXk=",
     f"\"'-----BEGIN RSA PRIVATE KEY-----\\\\n{REDACTED}\\\\n-----END RSA PRIVATE KEY-----'\""),
    # The misses of the adversarial review.
    ("db_pass", "DB_PASS=hunter2xyz ok", "hunter2xyz", f"DB_PASS={REDACTED} ok"),
    ("smtp_pass", "export SMTP_PASS='abc def'", "abc def", f"export SMTP_PASS='{REDACTED}'"),
    ("azure_account_key", "AccountName=acct;AccountKey=abcdEFGH1234/+==;EndpointSuffix=core",
     "abcdEFGH1234/+==", f"AccountName=acct;AccountKey={REDACTED};EndpointSuffix=core"),
    ("mysql_p", "mysql -uroot -pS3cretPw1 appdb", "S3cretPw1", f"mysql -uroot -p{REDACTED} appdb"),
    ("netrc", "machine api.example.com\n  login bob\n  password s3cr3tpw", "s3cr3tpw",
     f"machine api.example.com\n  login bob\n  password {REDACTED}"),
    ("odbc_pwd", "Server=x;Uid=u;pwd=s3cr3tpw;", "s3cr3tpw", f"Server=x;Uid=u;pwd={REDACTED};"),
    ("json_in_json", 'msg = "{\\"password\\": \\"s3cr3tpw\\"}"', "s3cr3tpw",
     f'msg = "{{\\"password\\": \\"{REDACTED}\\"}}"'),
    ("cookie", "Cookie: sessionid=abcdef123456; csrftoken=xyz", "abcdef123456", f"Cookie: {REDACTED}"),
    ("sessionid", "set sessionid=abcdef123456", "abcdef123456", f"set sessionid={REDACTED}"),
    ("gitlab", "glpat-abcdefghij1234567890 x", "glpat-abcdefghij1234567890", f"{REDACTED} x"),
    ("huggingface", "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH", "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH", REDACTED),
    ("sendgrid", "SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG", "abcdefghijklmnopqrstuv",
     REDACTED),
    ("aws_pair_unlabelled", f"('{AWS_KEY_ID}', '{AWS_SECRET}')", AWS_SECRET, f"('{REDACTED}', '{REDACTED}')"),
    ("shortened_item", "E     '...v2H4s9ZAs1kmrvnaI',", "v2H4s9ZAs1kmrvnaI", f"E     '...{REDACTED}',"),
]

ENV: dict[str, str] = {
    "MY_SERVICE_TOKEN": "tok-value-1234567",
    "db_password": "pa55-word-value",
    "Signing_Key": "k-e-y-v-a-l-u-e",
    "CLIENT_SECRET": "shh-its-a-secret",
    "SHORT_KEY": "abc",  # too short to redact
    "USE_KEYRING": "true",  # obviously not a secret
    "MARKER_TOKEN": "DACT",  # a substring of the marker: ignored (idempotence)
    "HOME": "/home/runner",  # name does not match
}


@pytest.fixture
def redactor() -> Redactor:
    return Redactor(ENV)


@pytest.mark.parametrize("kind, text, secret, expected", CASES, ids=[c[0] for c in CASES])
def test_each_kind_is_redacted_and_the_label_kept(
    redactor: Redactor, kind: str, text: str, secret: str, expected: str
) -> None:
    out = redactor.redact(text)
    assert secret not in out
    assert out == expected
    assert redactor.redact(out) == out


def test_builtin_kinds_are_documented() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "redaction.md").read_text(encoding="utf-8")
    for kind in BUILTIN_KINDS:
        assert f"`{kind}`" in doc, kind


@pytest.mark.parametrize(
    "text",
    [
        "assert tokens == ['a', 'b']",
        "File \"/usr/lib/python3.11/tokenize.py\", line 12, in generate_tokens",
        "E       AssertionError: assert 1 == 2",
        "https://github.com/octo/hello/pull/7 and http://localhost:8080/x",
        "key=value and keys: [1, 2]",
        "the bearer of bad news",
        "ssh git@github.com:octo/hello.git",
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        "a normal log line with /home/runner/work and true and abc",
        "password",
        "",
        "passed: 3, failed: 1",
        "    pass\n    return x",
        "PWD=/home/runner/work",
        "pytest -q -pno:cacheprovider",
        "'...short words'",
    ],
)
def test_ordinary_text_is_untouched(redactor: Redactor, text: str) -> None:
    assert redactor.redact(text) == text


def test_env_values_redacted_by_name_pattern(redactor: Redactor) -> None:
    text = "a tok-value-1234567 b pa55-word-value c k-e-y-v-a-l-u-e d shh-its-a-secret e abc f true g /home/runner"
    out = redactor.redact(text)
    assert out == f"a {REDACTED} b {REDACTED} c {REDACTED} d {REDACTED} e abc f true g /home/runner"


def test_env_values_longest_first() -> None:
    r = Redactor({"A_TOKEN": "abcd", "B_TOKEN": "abcdefgh"})
    assert r.redact("xabcdefghy abcd") == f"x{REDACTED}y {REDACTED}"


def test_env_names_are_case_insensitive_globs() -> None:
    r = Redactor({"github_token": "gh-value-1", "MyKeyName": "kv-value-2", "OTHER": "plain-value"}, env_names=["*TOKEN*", "*key*"])
    assert r.redact("gh-value-1 kv-value-2 plain-value") == f"{REDACTED} {REDACTED} plain-value"


def test_marker_substrings_in_env_never_break_idempotence() -> None:
    r = Redactor({"X_TOKEN": "REDA", "Y_TOKEN": "ACTED]", "Z_KEY": "***"})
    out = r.redact("password=hunter2 and https://u:p@h")
    assert out == f"password={REDACTED} and https://u:{URL_MASK}@h"
    assert r.redact(out) == out


def test_custom_patterns_whole_match_and_first_group() -> None:
    r = Redactor({}, patterns=[r"ACME-[0-9]{6}", r"internal-id: (\w+)"])
    out = r.redact("ticket ACME-123456, internal-id: zzz123 done")
    assert out == f"ticket {REDACTED}, internal-id: {REDACTED} done"


def test_default_redactor_reads_config_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_API_TOKEN", "from-os-environ-1")
    monkeypatch.setenv("DEPLOY_CREDENTIAL", "credential-value-2")
    r = default_redactor(patterns=(r"corp-\d+",), env_names=("*CREDENTIAL*",))
    assert set(DEFAULT_ENV_NAMES) <= set(r.env_names) and "*CREDENTIAL*" in r.env_names
    out = r.redact("from-os-environ-1 credential-value-2 corp-42")
    assert out == f"{REDACTED} {REDACTED} {REDACTED}"
    # An explicit env mapping replaces os.environ.
    assert default_redactor(env={}).redact("from-os-environ-1") == "from-os-environ-1"


@pytest.mark.parametrize(
    "section, message",
    [
        ({"patterns": "not-a-list"}, "redaction.patterns"),
        ({"env_names": [1]}, "redaction.env_names"),
        ({"env_names": "X"}, "redaction.env_names"),
        ({"patterns": ["[bad"]}, "redaction.patterns"),
        ({"patterns": [""]}, "redaction.patterns"),
    ],
)
def test_bad_redaction_config_is_refused_by_the_config_merge(section: dict[str, object], message: str) -> None:
    # The redactor reads checked settings; the config merge is the one validator.
    with pytest.raises(ConfigError, match=message):
        merge_layers([ConfigLayer.of("project.yaml", {"redaction": section})])


def test_redact_obj_recurses_into_keys_and_values(redactor: Redactor) -> None:
    # Keys too: node ids are keys of ``outcomes``.
    obj = {
        "password": "password=hunter2",
        "nested": [{"log": f"t {GHP}"}, ("x", AWS_KEY_ID)],
        "count": 3,
        "none": None,
        GHP: "a key holding a token",
    }
    out = redactor.redact_obj(obj)
    assert out == {
        "password": f"password={REDACTED}",
        "nested": [{"log": f"t {REDACTED}"}, ("x", REDACTED)],
        "count": 3,
        "none": None,
        REDACTED: "a key holding a token",
    }
    assert obj["password"] == "password=hunter2" and GHP in obj  # not mutated


def test_callable(redactor: Redactor) -> None:
    assert redactor(f"x {GHP}") == f"x {REDACTED}"


@pytest.mark.parametrize(
    "hostile",
    [
        "a" * 300_000,
        "secret" * 50_000,
        "password=" + '"' + "a" * 300_000,
        "-----BEGIN PRIVATE KEY-----x" * 10_000,
        "://a:" * 60_000,
        "eyJa." * 60_000,
        "Authorization: " * 20_000,
        "token" + "_" * 300_000 + "=",
        "ghp_" * 75_000,
        "login a password " * 20_000,
        "mysql -p" * 40_000,
        "'..." * 80_000,
        "AKIAIOSFODNN7EXAMPLE " * 15_000,
        "Cookie: " * 400_000,  # 3 MB: a label's value runs to the end, matched again at each label: hours
        "pass=" * 600_000,
        '\\"password\\": \\"' * 20_000,
        "://a:@" * 30_000,
        "://a:" * 30_000 + "@",
        "curl -u a:b\n" * 20_000,
        "sshpass -p" * 20_000,
        "&sig=a" * 30_000,
        "://a" + "/b" * 100_000 + "/webhook/x",
        ("ghp_" + "a\n" * 20) * 5_000,
        ("eyJ" + "a\n") * 30_000,
        "-----END PRIVATE KEY-----\n" * 20_000,
        (("A" * 64 + "\n") * 300 + "-----END PRIVATE KEY-----\n") * 50,
        "(b'cookie', b'" * 20_000,
        "TestToken::" * 30_000,
    ],
    ids=["letters", "keywords", "open-quote", "pem-headers", "url-colons", "jwt-dots", "auth-labels", "long-label",
         "prefixes", "netrc", "mysql", "shortened", "aws-ids", "cookies", "bare-pass", "escaped-json", "url-ats",
         "url-one-at", "curl-lines", "sshpass", "query", "webhook-path", "wrapped-tokens", "wrapped-jwt-heads",
         "pem-ends", "pem-cut-bodies", "header-tuples", "node-ids"],
)
def test_hostile_inputs_stay_linear(redactor: Redactor, hostile: str) -> None:
    # No timing assert: a quadratic scan of these would take minutes, so finishing is the test.
    out = redactor.redact(hostile)
    assert redactor.redact(out) == out


# --- properties ---------------------------------------------------------------------------

FRAGMENTS = [
    "password", "Password", "secret", "token", "api_key", "Authorization", "bearer ", "Basic ",
    "=", "==", ":", " ", "\n", '"', "'", "=>", "@", "://", "https://", "user", "/", ".",
    REDACTED, URL_MASK, "[", "]", "REDA", "ghp_", "A" * 20, "0" * 16, "AKIA", "eyJ", "xoxb-",
    "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "hooks.slack.com/services/",
    "tok-value-1234567", "pa55-word-value", "İ", "é", "\t", "-", "_",
    "::", "curl -u ", "sshpass -p", "docker login -p ", "?sig=", "&key=", "/webhook/", "(b'cookie', b'",
    "-----END PRIVATE KEY-----", "\r\n", "TestToken", "/etc/passwd'",
]
fragment_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), max_size=40).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=300), fragment_text))
def test_redact_never_raises_and_is_idempotent(text: str) -> None:
    r = Redactor(ENV)
    once = r.redact(text)
    assert isinstance(once, str)
    assert Redactor(ENV).redact(once) == once  # a fresh redactor: this one remembers what it wrote
    assert r.redact(once) == once


def test_a_string_is_scanned_once_however_many_documents_write_it() -> None:
    scanned: list[str] = []

    class Counting(Redactor):
        def _redact(self, text: str) -> str:
            scanned.append(text)
            return super()._redact(text)

    r = Counting(ENV)
    nodeid = f"tests/test_api.py::test_login[{ENV['MY_SERVICE_TOKEN']}]"
    written = r.redact(nodeid)
    assert ENV["MY_SERVICE_TOKEN"] not in written
    passes = len(scanned)
    for _ in range(3):  # the incident, the plan, the report write it again, already redacted
        assert r.redact(written) == written and r.redact(nodeid) == written
    assert len(scanned) == passes


# Secrets planted in random surrounding text. Separators are likely, so secrets sit both glued
# to and apart from the noise.
noise = st.text(
    alphabet=st.one_of(st.sampled_from(list(" \n\t,;:()[]{}<>'\"=/.-_#")), st.characters(blacklist_categories=("Cs",))),
    max_size=30,
)
PLANTED = [(kind, text, secret) for kind, text, secret, _ in CASES] + [
    ("env_token", "tok-value-1234567", "tok-value-1234567"),
    ("env_password", "pa55-word-value", "pa55-word-value"),
]


@settings(max_examples=60, deadline=None)
@given(prefix=noise, suffix=noise, data=st.data())
def test_planted_secret_never_survives(prefix: str, suffix: str, data: st.DataObject) -> None:
    kind, planted, secret = data.draw(st.sampled_from(PLANTED), label="kind")
    out = Redactor(ENV).redact(prefix + planted + suffix)
    assert secret not in out, kind


@pytest.mark.parametrize(
    "text, kept",
    [
        ("aider --api-key abcdef123456 --yes", "aider --api-key [REDACTED] --yes"),
        ("codex --TOKEN xyz123 --model o3", "codex --TOKEN [REDACTED] --model o3"),
        ("E  assert 'ghp_abcdefghijkl...' == x", "E  assert '[REDACTED]...' == x"),
        ("key=sk-proj-abcdefghijklmnopqrstuvwxyz0123", "key=[REDACTED]"),
    ],
)
def test_cli_options_shortened_tokens_and_sk_keys(text: str, kept: str) -> None:
    assert Redactor({}).redact(text) == kept


def test_option_form_leaves_prose_and_flags_alone() -> None:
    for text in ("the token is valid", "pytest --tb=short -p no:cacheprovider", "--token --other"):
        assert Redactor({}).redact(text) == text
