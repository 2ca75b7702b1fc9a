"""Secrets everywhere: plant every kind of secret in every channel of failing test
output, run every writer, then grep every byte written — zero occurrences.

Channels: an assertion message, ``print`` to stdout and stderr (captured by pytest), an
exception message, a fixture error (setup), a logged error. (A comparison that pytest
explains with a shortened diff cuts labels and token prefixes off: that channel is
test_findings.py::test_shortened_diff_items_do_not_leak_secrets.)

Writers ("surfaces"): the capture (``pytest --selfheal``, with ``--selfheal-report``), the
verify-only loop, ``selfheal report --output`` (markdown and JSON), a repair provider's
prompt and log (a provider command that prints its environment and changes nothing), and
``selfheal ci`` against the loopback fake GitHub: step summary, outputs file, report files
and every request body the fake GitHub received.

The secrets are never written into the project: the failing tests read them from a file
outside it and from the environment, so a hit can only come from something we wrote.
"""

from __future__ import annotations

import base64
import json
import random
import shutil
import string
from collections.abc import Iterable
from pathlib import Path

import pytest
from fake_github import FakeGitHub
from helpers import PY, capture, cli, make_project, run_env, selfheal

from .conftest import record_figures, walk_written

RNG = random.Random(20260217)


def _rand(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


def _b64url(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


PEM_BODY = [_rand(64, string.ascii_letters + string.digits + "+/") for _ in range(6)]
ENV_SECRETS = {  # values with no recognisable format: only the env-name rule can catch them
    "MY_API_TOKEN": _rand(24),
    "DB_PASSWORD": _rand(18),
    "SIGNING_SECRET": _rand(32),
    "STRIPE_KEY": _rand(28),
}
# kind -> (text planted in the output, the secret part that must never be written)
KINDS: dict[str, tuple[str, list[str]]] = {}


def _kind(name: str, text: str, *secrets: str) -> None:
    KINDS[name] = (text, list(secrets))


_gh = _rand(36)
_kind("github_ghp", f"token ghp_{_gh}", f"ghp_{_gh}", _gh)
_gho = _rand(36)
_kind("github_gho", f"oauth gho_{_gho}", f"gho_{_gho}", _gho)
_pat = f"{_rand(22)}_{_rand(59)}"
_kind("github_pat", f"pat github_pat_{_pat}", f"github_pat_{_pat}", _pat)
_akia = _rand(16, string.ascii_uppercase + string.digits)
_kind("aws_key_id", f"key id AKIA{_akia}", f"AKIA{_akia}")
_aws = _rand(40, string.ascii_letters + string.digits + "/+")
_kind("aws_secret_key", f"aws_secret_access_key = {_aws}", _aws)
_xoxb = f"{RNG.randrange(10**11, 10**12)}-{RNG.randrange(10**11, 10**12)}-{_rand(24)}"
_kind("slack_bot", f"slack xoxb-{_xoxb}", f"xoxb-{_xoxb}", _xoxb)
_hook = f"T{_rand(8, string.ascii_uppercase + string.digits)}/B{_rand(10, string.ascii_uppercase + string.digits)}/{_rand(24)}"
_kind("slack_webhook", f"posting to https://hooks.slack.com/services/{_hook}", _hook)
_jwt = f"{_b64url({'alg': 'HS256', 'typ': 'JWT'})}.{_b64url({'sub': _rand(12), 'admin': True})}.{_rand(43)}"
_kind("jwt", f"session {_jwt}", _jwt, _jwt.split(".")[2])
_kind("pem_private_key", "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(PEM_BODY) + "\n-----END RSA PRIVATE KEY-----",
      *PEM_BODY)
_bearer = _rand(40)
_kind("authorization_bearer", f"Authorization: Bearer {_bearer}", _bearer)
_basic = base64.b64encode(f"admin:{_rand(16)}".encode()).decode()
_kind("authorization_basic", f"Authorization: Basic {_basic}", _basic)
_pw = _rand(20)
_kind("url_credentials", f"cloning https://deploy:{_pw}@git.example.com/org/repo.git", _pw)
for _name, _value in ENV_SECRETS.items():
    _kind(f"env_{_name}", f"connected with {_value}", _value)

WINDOW = 12  # also flag any 12-character piece of a secret (a truncated repr leaking part of it)

FAILING_TESTS = """
    import json, logging, os, sys

    import pytest

    PLANTED = json.loads(open(os.environ["PLANTED_SECRETS_FILE"]).read())
    # The env secrets' values come from the file too: a *TOKEN* variable never reaches a child
    # that selfheal starts (process.child_environment), but selfheal's own environment has
    # them, so only its env-name rule can catch them in the output.
    ENV_VALUES = json.loads(open(os.environ["PLANTED_SECRETS_FILE"] + ".env").read())
    ALL = "\\n".join(PLANTED) + "\\n" + "\\n".join(ENV_VALUES[k] for k in {env_names!r})


    @pytest.fixture
    def broken_fixture():
        raise ValueError("fixture could not connect: " + ALL)


    def test_assert_message():
        assert False, "login failed:\\n" + ALL


    def test_print_then_fail():
        print("stdout:", ALL)
        print("stderr:", ALL, file=sys.stderr)
        assert 1 == 2


    def test_exception():
        raise RuntimeError("upstream said: " + ALL)


    def test_fixture_error(broken_fixture):
        pass


    def test_logged():
        logging.getLogger("app").error("request failed: %s", ALL)
        assert 0
"""


def hits(data: bytes) -> tuple[list[str], list[str]]:
    """(kinds whose whole secret occurs, kinds of which a 12-character piece occurs)."""
    text = data.decode("utf-8", errors="replace")
    whole, partial = [], []
    for kind, (_, secrets) in KINDS.items():
        if any(s in text for s in secrets):
            whole.append(kind)
        elif any(s[i:i + WINDOW] in text for s in secrets for i in range(0, max(1, len(s) - WINDOW + 1))):
            partial.append(kind)
    return whole, partial


class Surfaces:
    """Each surface's bytes, checked for every kind."""

    def __init__(self) -> None:
        self.checked: dict[str, int] = {}
        self.leaks: list[str] = []
        self.partial: list[str] = []

    def check(self, surface: str, blobs: Iterable[tuple[str, bytes]]) -> None:
        n = 0
        for where, data in blobs:
            whole, partial = hits(data)
            self.leaks += [f"{surface}: {where}: {k}" for k in whole]
            self.partial += [f"{surface}: {where}: {k}" for k in partial]
            n += 1
        assert n, f"{surface}: nothing was written, nothing checked"
        self.checked[surface] = n

    def files(self, surface: str, paths: Iterable[Path], base: Path) -> None:
        self.check(surface, [(str(p.relative_to(base)) if base in p.parents else str(p), p.read_bytes())
                             for p in paths])


@pytest.fixture
def planted(tmp_path: Path) -> dict[str, str]:
    """The environment every child gets: the secrets file (outside the project) and env secrets."""
    path = tmp_path / "outside" / "secrets.json"
    path.parent.mkdir()
    path.write_text(json.dumps([text for kind, (text, _) in KINDS.items() if not kind.startswith("env_")]))
    Path(f"{path}.env").write_text(json.dumps(ENV_SECRETS))
    return {"PLANTED_SECRETS_FILE": str(path), **ENV_SECRETS}


def failing_project(root: Path) -> Path:
    return make_project(root, {"test_leaky.py": FAILING_TESTS.format(env_names=sorted(ENV_SECRETS))})


@pytest.mark.slow  # ~7 s; each redaction form has its own fast test (test_redaction_forms.py, test_redact.py)
def test_every_secret_kind_on_every_surface(tmp_path: Path, planted: dict[str, str], fake_github: FakeGitHub) -> None:
    surfaces = Surfaces()
    project = failing_project(tmp_path / "proj")
    for path in walk_written(project):  # nothing planted in the project itself
        assert hits(path.read_bytes()) == ([], []), path
    root = project / ".selfheal"

    # 1. capture, with the plugin's markdown report
    incident_id = capture(project, "--selfheal-report=selfheal-report.md", env=planted)
    surfaces.files("capture (reports root)", walk_written(root), project)
    surfaces.files("capture (--selfheal-report)", [project / "selfheal-report.md"], project)
    incident = json.loads((root / "error_inbox" / incident_id / "incident.json").read_text())
    assert len(incident["failures"]) == 5, [f["nodeid"] for f in incident["failures"]]
    repair_copy = tmp_path / "repair"
    shutil.copytree(project, repair_copy)

    # 2. the verify-only loop
    done = selfheal(project, "loop", incident_id, env=planted)
    assert done.returncode == 1, done.stdout + done.stderr
    surfaces.files("loop (reports root)", walk_written(root), project)

    # 3. selfheal report --output, markdown and JSON
    for fmt in ("md", "json"):
        out = tmp_path / f"report.{fmt}"
        done = selfheal(project, "report", incident_id, "--format", fmt, "--output", str(out), env=planted)
        assert done.returncode == 0, done.stderr
        surfaces.files(f"report --output ({fmt})", [out], tmp_path)

    # 4. a repair provider that prints its environment and changes nothing: prompt + log
    _fix_rootdir(repair_copy, incident_id)
    provider = json.dumps([PY, "-c", "import os; [print(k, v) for k, v in sorted(os.environ.items())]"])
    done = selfheal(repair_copy, "loop", incident_id, "--set", f"repair.command={provider}", env=planted)
    assert done.returncode == 1, done.stdout + done.stderr
    runs = repair_copy / ".selfheal" / "error_runs" / incident_id
    prompts = sorted(runs.glob("prompt_*.md"))
    logs = sorted(runs.glob("repair_*.log"))
    assert prompts and logs, sorted(p.name for p in runs.iterdir())
    surfaces.files("repair prompt", prompts, repair_copy)
    surfaces.files("repair log", logs, repair_copy)
    surfaces.files("repair (reports root)", walk_written(repair_copy / ".selfheal"), repair_copy)

    # 5. selfheal ci against the fake GitHub
    ci_project = failing_project(tmp_path / "ci-proj")
    env = ci_env(tmp_path, fake_github, planted)
    done = cli("ci", "--", "-q", cwd=ci_project, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert fake_github.requests_to("POST"), "no comment was posted"
    surfaces.files("ci step summary", [Path(env["GITHUB_STEP_SUMMARY"])], tmp_path)
    surfaces.files("ci outputs file", [Path(env["GITHUB_OUTPUT"])], tmp_path)
    surfaces.check("ci requests to GitHub", [(f"{r.method} {r.path}", r.body.encode()) for r in fake_github.requests])
    surfaces.check("ci comment bodies", [(str(c["id"]), str(c["body"]).encode()) for c in fake_github.comments(7)])
    surfaces.files("ci (reports root and report files)", walk_written(ci_project / ".selfheal"), ci_project)

    # Everything under every project, once more, whatever wrote it.
    surfaces.files("every file under the projects", [p for d in (project, repair_copy, ci_project)
                                                     for p in walk_written(d)], tmp_path)

    kinds = len(KINDS)
    record_figures("test_secrets_everywhere.py::test_every_secret_kind_on_every_surface", kinds=kinds,
                   surfaces=len(surfaces.checked), checks=kinds * len(surfaces.checked),
                   files=sum(surfaces.checked.values()), leaks=len(surfaces.leaks),
                   partial_leaks=len(surfaces.partial))
    assert surfaces.leaks == [], "\n".join(surfaces.leaks)
    assert surfaces.partial == [], "\n".join(surfaces.partial)
    # The planted output did reach pytest's own log (the secrets were really there).
    assert KINDS["github_ghp"][1][0] in done.stdout


def _fix_rootdir(project: Path, incident_id: str) -> None:
    path = project / ".selfheal" / "error_inbox" / incident_id / "incident.json"
    doc = json.loads(path.read_text())
    doc["rootdir"] = str(project)
    path.write_text(json.dumps(doc))


def ci_env(tmp_path: Path, fake: FakeGitHub, planted: dict[str, str]) -> dict[str, str]:
    """An Actions environment (temp files) pointing at the fake GitHub, plus the planted secrets."""
    env = run_env(planted)
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)  # ci's pytest must load the plugin like in a real job
    files = {"GITHUB_STEP_SUMMARY": tmp_path / "summary.md", "GITHUB_OUTPUT": tmp_path / "output.txt"}
    for path in files.values():
        path.write_text("")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    env.update({k: str(v) for k, v in files.items()})
    env.update({
        "GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": fake.repository, "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event), "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567",
        "GITHUB_RUN_ID": "4242", "GITHUB_SERVER_URL": "https://github.com", "GITHUB_API_URL": fake.url,
        "GITHUB_TOKEN": fake.token, "PYTEST_ADDOPTS": "-p no:hypothesispytest -p no:cacheprovider",
    })
    return env

