"""Redaction by place: credentials found where they sit (URL userinfo whatever its
characters, command-line options, signed-URL parameters, webhook URLs, header tuples), values
split by a line break, and names that are names (``TestToken``, ``'/etc/passwd'``). Both sides
are measured on the corpora of tests/redaction_corpus/ (scripts/redaction_figures.py prints the
figures of docs/redaction.md)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest
from helpers import cli, git_commit_all

from pytest_selfheal.redact import REDACTED, URL_MASK, Redactor

ROOT = Path(__file__).resolve().parent.parent
CORPUS: dict[str, Any] = runpy.run_path(str(ROOT / "scripts" / "redaction_figures.py"))
REDACTOR = Redactor({})

# (text, what must be gone, what the redacted text is)
PLACES = [
    # URL userinfo, whatever its characters: the whole password goes, host and path stay.
    ("postgres://app:Zx9/Qm2+Lp7Kd4Vt8Rw1@db/app", "Qm2+Lp7Kd4Vt8Rw1", f"postgres://app:{URL_MASK}@db/app"),
    ("postgres://app:p@ss@w0rd@db:5432/app", "w0rd", f"postgres://app:{URL_MASK}@db:5432/app"),
    ("mysql://root:p%40ss%2Fw%3Ard@localhost/test", "p%40ss", f"mysql://root:{URL_MASK}@localhost/test"),
    ("https://u:p@ss/w@rd@registry.example.com/@scope/pkg?email=dev@example.com", "rd",
     f"https://u:{URL_MASK}@registry.example.com/@scope/pkg?email=dev@example.com"),
    ("amqp://guest:gu:est@1@rabbit:5672/%2F", "est@1", f"amqp://guest:{URL_MASK}@rabbit:5672/%2F"),
    # Command lines, also as Python argv lists.
    ("curl -u admin:s3cretpw https://api.example.com", "s3cretpw", f"curl -u admin:{REDACTED} https://api.example.com"),
    ("curl --user admin:s3cretpw https://x", "s3cretpw", f"curl --user admin:{REDACTED} https://x"),
    ("curl -sS -uadmin:s3cretpw https://x", "s3cretpw", f"curl -sS -uadmin:{REDACTED} https://x"),
    ("Command '['curl', '-u', 'admin:s3cretpw', 'https://x']' returned non-zero exit status 22.", "s3cretpw",
     f"Command '['curl', '-u', 'admin:{REDACTED}', 'https://x']' returned non-zero exit status 22."),
    ("sshpass -p Hunter2pw ssh deploy@staging", "Hunter2pw", f"sshpass -p {REDACTED} ssh deploy@staging"),
    ("sshpass -pHunter2pw scp a b", "Hunter2pw", f"sshpass -p{REDACTED} scp a b"),
    ("['sshpass', '-p', 'Hunter2pw', 'ssh']", "Hunter2pw", f"['sshpass', '-p', '{REDACTED}', 'ssh']"),
    ("docker login -u ci -p Dk3rPassw0rd reg.example.com", "Dk3rPassw0rd", f"docker login -u ci -p {REDACTED} reg.example.com"),
    ("docker login --password Dk3rPassw0rd reg", "Dk3rPassw0rd", f"docker login --password {REDACTED} reg"),
    ("docker login --password=Dk3rPassw0rd reg", "Dk3rPassw0rd", f"docker login --password={REDACTED} reg"),
    ("['docker', 'login', '-p', 'Dk3rPassw0rd', 'reg']", "Dk3rPassw0rd", f"['docker', 'login', '-p', '{REDACTED}', 'reg']"),
    ("['docker', 'login', '--password', 'Dk3rPassw0rd']", "Dk3rPassw0rd", f"['docker', 'login', '--password', '{REDACTED}']"),
    ("['mysql', '-uroot', '-pMyS3cret', 'db']", "MyS3cret", f"['mysql', '-uroot', '-p{REDACTED}', 'db']"),
    ("sshpass -p 'Hunter2pw' ssh h", "Hunter2pw", f"sshpass -p '{REDACTED}' ssh h"),  # quoted, as scripts write it
    ("mysql -uroot -p'MyS3cret' db", "MyS3cret", f"mysql -uroot -p'{REDACTED}' db"),
    ("curl -u 'admin:s3cretpw' https://x", "s3cretpw", f"curl -u 'admin:{REDACTED}' https://x"),
    ("docker login -p \"Dk3rPassw0rd\" reg", "Dk3rPassw0rd", f"docker login -p \"{REDACTED}\" reg"),
    # Signed-URL and credential query parameters.
    ("https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524&X-Amz-Signature=aeeed9bbccd4d02e",
     "aeeed9bbccd4d02e", f"https://b.s3.amazonaws.com/k?X-Amz-Credential={REDACTED}&X-Amz-Signature={REDACTED}"),
    ("https://storage.googleapis.com/b/o?X-Goog-Signature=3f9a1c2e7b5d4f6a", "3f9a1c2e7b5d4f6a",
     f"https://storage.googleapis.com/b/o?X-Goog-Signature={REDACTED}"),
    ("https://a.blob.core.windows.net/c?sv=2020-08-04&sig=abcDEF123%2Bxyz%3D&se=2021", "abcDEF123",
     f"https://a.blob.core.windows.net/c?sv=2020-08-04&sig={REDACTED}&se=2021"),
    ("https://maps.googleapis.com/x?address=Paris&key=abcdef123456789", "abcdef123456789",
     f"https://maps.googleapis.com/x?address=Paris&key={REDACTED}"),
    ("GET /v1/me?access_token=t0k3nv4lue&fields=id", "t0k3nv4lue", f"GET /v1/me?access_token={REDACTED}&fields=id"),
    # Webhook URLs: the path is the secret.
    ("https://discord.com/api/webhooks/123456789/abcdefABCDEF_123", "abcdefABCDEF_123",
     f"https://discord.com/api/webhooks/{REDACTED}"),
    ("https://ci.example.com/webhook/a1b2c3d4e5f6 -> 500", "a1b2c3d4e5f6", f"https://ci.example.com/webhook/{REDACTED} -> 500"),
    ("https://hooks.zapier.com/hooks/catch/123/abcdef", "abcdef", f"https://hooks.zapier.com/{REDACTED}"),
    # Header tuples as ASGI (bytes) and WSGI/requests write them.
    ("[(b'host', b'testserver'), (b'cookie', b'session=abc123def456')]", "abc123def456",
     f"[(b'host', b'testserver'), (b'cookie', b'{REDACTED}')]"),
    ("[(b'authorization', b'Bearer abc123def456ghi')]", "abc123def456ghi", f"[(b'authorization', b'{REDACTED}')]"),
    ("('Authorization', 'Bearer abcdef123456')", "abcdef123456", f"('Authorization', '{REDACTED}')"),
    ("(('X-Vault-Token', 'hvs.CAESIJ3dE5gH7jK9'),)", "CAESIJ3dE5gH7jK9", f"(('X-Vault-Token', '{REDACTED}'),)"),
]


@pytest.mark.parametrize("text, secret, expected", PLACES, ids=[p[0][:40] for p in PLACES])
def test_a_credential_is_found_by_its_place(text: str, secret: str, expected: str) -> None:
    out = REDACTOR.redact(text)
    assert secret not in out
    assert out == expected
    assert REDACTOR.redact(out) == out


GHP = "ghp_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"
       ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
PEM_LINES = ["MIIEowIBAAKCAQEA7bq98wVx3v1Rq2k2JvY1nQ0iLq0x", "k2JvY1nQ0iLq0x+/==", "ZmFrZWtleWZha2VrZXk="]


@pytest.mark.parametrize("text, pieces, kept", [
    (f"token = {GHP[:20]}\n{GHP[20:]}", [GHP[:20], GHP[20:]], ["token = "]),
    (f"{GHP[:20]}\r\n{GHP[20:]}", [GHP[20:]], []),
    (f"{GHP[:30]}\n{GHP[30:]}later words", [GHP[30:]], ["later words"]),
    (f"Authorization: Bearer {JWT[:90]}\n{JWT[90:]}\nTraceback (most recent call last):", [JWT[90:]],
     ["Traceback (most recent call last):"]),
    (f"jwt: {JWT[:25]}\n{JWT[25:]}", [JWT[:25], JWT[25:]], ["jwt: "]),
    ("aws_access_key_id = AKIAIOSFOD\nNN7EXAMPLE", ["NN7EXAMPLE"], ["aws_access_key_id = "]),
    ("log tail (cut):\n" + "\n".join(PEM_LINES) + "\n-----END RSA PRIVATE KEY-----\nafter the key", PEM_LINES,
     ["log tail (cut):\n", "-----END RSA PRIVATE KEY-----\nafter the key"]),
    ("E   ValueError: '" + "\\n".join(PEM_LINES) + "\\n-----END PRIVATE KEY-----\\n'", PEM_LINES,
     ["E   ValueError: '", "\\n-----END PRIVATE KEY-----\\n'"]),
])
def test_a_value_split_by_a_line_break_is_still_a_value(text: str, pieces: list[str], kept: list[str]) -> None:
    out = REDACTOR.redact(text)
    assert not [piece for piece in pieces if piece in out], out
    assert all(part in out for part in kept), out
    assert REDACTOR.redact(out) == out


@pytest.mark.parametrize("text", [
    f"{GHP}\nnext line",  # a whole token ends its line: the next line's first word is a word
    f"got {JWT}\nTraceback (most recent call last):",
    "ghp_short\nnext",
])
def test_the_line_after_a_whole_value_keeps_its_words(text: str) -> None:
    out = REDACTOR.redact(text)
    assert out.split("\n")[1] == text.split("\n")[1]


@pytest.mark.parametrize("text", [
    "tests/test_auth.py::TestToken::test_refresh",
    "tests/test_auth.py::TestSecret::test_rotation FAILED",
    "tests/test_auth.py::TestPasswordReset::test_email_sent",
    "tests/test_auth.py::TestCookie::test_set",
    "tests/test_auth.py::TestAuthorization::test_header",
    "FAILED tests/test_auth.py::test_password_reset - assert 1 == 2",
    "FileNotFoundError: [Errno 2] No such file or directory: '/etc/passwd': expected a file",
    "IsADirectoryError: '../../etc/passwd': expected a file",
    "tokenize.TokenError: ('EOF in multi-line statement', (3, 0))",
    "assert {'token_type': 'bearer'} == {'token_type': 'mac'}",
    "pass: 12, fail: 3, skip: 1",
    '    password = form.cleaned_data["password"]',
    "E       +  where 'passwd' = os.path.basename('/etc/passwd')",
    "docker run -p 8080:80 nginx",
    "http://localhost:8080/users/bob@example.com",
    "src/webhook/handlers.py:12: in handle",
])
def test_names_are_names(text: str) -> None:
    assert REDACTOR.redact(text) == text


@pytest.mark.parametrize("text, secret", [
    ("DB_PASS=123456", "123456"),  # a number after a label of a word of its own is no count
    ("client_secret: abc123xyz[", "abc123xyz"),  # no dotted call: not code
    ("config: /home/runner/.app password=hunter2", "hunter2"),  # a path before it is not its word
    ("api_token: s3cr3tv4lue", "s3cr3tv4lue"),
    ("secret_key_base: abcdef123456", "abcdef123456"),
    ("self.password = 'hunter2'", "hunter2"),
])
def test_no_name_rule_hides_a_secret(text: str, secret: str) -> None:
    assert secret not in REDACTOR.redact(text)


def test_every_word_of_the_ordinary_corpus_survives() -> None:
    lines = CORPUS["ordinary_lines"]()
    assert len(lines) >= 300
    changed = [(line, out) for line in lines if (out := REDACTOR.redact(line)) != line]
    assert changed == []


def test_every_secret_of_the_secrets_corpus_is_gone_and_the_rest_stays() -> None:
    cases = CORPUS["secret_cases"]()
    assert len(cases) >= 60
    kept_secrets, lost_words = [], []
    for text, secrets, rest in cases:
        out = REDACTOR.redact(text)
        kept_secrets += [secret for secret in secrets if secret in out]
        kept, total = CORPUS["kept_words"](rest, out)
        if kept < total:
            lost_words.append((text, out))
    assert kept_secrets == []
    assert lost_words == []


def test_the_figures_script_prints_both_figures(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["redaction_figures.py", "--quiet"])
    assert CORPUS["main"]() == 0
    out = capsys.readouterr().out
    assert "words kept" in out and "= 100.0 %" in out and "secrets caught" in out


TOKEN_TESTS = """
from auth import refresh, expiry

class TestToken:
    def test_refresh(self):
        assert refresh("abc") == "abc-2"

    def test_expiry(self):
        assert expiry() == 3600

class TestPasswordReset:
    def test_sent(self):
        assert True
"""
BUGGY = 'def refresh(token):\n    return token + "-1"\n\ndef expiry():\n    return 60\n'
FIXED = 'def refresh(token):\n    return token + "-2"\n\ndef expiry():\n    return 3600\n'


@pytest.mark.slow  # ~4 s end to end (capture, loop, fix); the redactor keeps such names in the tests above
def test_a_test_class_named_token_is_captured_whole_and_verified(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(auth=BUGGY, test_auth=TOKEN_TESTS)
    (pytester.path / ".gitignore").write_text(".selfheal/\n__pycache__/\n")
    git_commit_all(pytester.path, "project")
    assert pytester.runpytest("--selfheal").ret == 1
    (incident_dir,) = (pytester.path / ".selfheal" / "error_inbox").glob("incident_*")
    incident = json.loads((incident_dir / "incident.json").read_text())
    ids = sorted(failure["nodeid"] for failure in incident["failures"])
    # Two tests, two identities: nothing of the node ids is read as a label's value.
    assert ids == ["test_auth.py::TestToken::test_expiry", "test_auth.py::TestToken::test_refresh"]
    (pytester.path / "auth.py").write_text(FIXED)
    looped = cli("loop", incident_dir.name, "--json", cwd=pytester.path)
    result = json.loads(looped.stdout)
    assert result["stop_reason"] == "success", looped.stdout + looped.stderr
