"""Redaction as one boundary.

- A PEM private key inside a Python repr (``raise ValueError(repr(pem))``: its line breaks
  are ``\\n`` escapes) is redacted whole, BEGIN through END, in log_tail.txt, the repair
  prompt and every file written.
- Secrets in node ids (parametrize ids built from ``DATABASE_URL`` and a ``ghp_`` token) are
  redacted everywhere an id is written or posted: incident.json, plan.json/md, attempts
  (``outcomes`` keys), run_result, the audit log, the history, the reports, the job summary,
  the PR comment and selfheal's own stdout. The redacted id is still verified: the loop runs
  its runnable parent (the test without its parametrize id) and a fix resolves it.

The secrets live outside the project (environment, a file in tmp), so a hit can only come
from something selfheal wrote.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

from fake_github import FakeGitHub
from helpers import PY, capture, cli, make_project, run_pytest_selfheal, selfheal

from pytest_selfheal.redact import Redactor
from pytest_selfheal.store.root import Store

from .conftest import walk_written
from .test_secrets_everywhere import RNG, ci_env

PEM_LINES = ["".join(RNG.choice(string.ascii_letters + string.digits + "+/") for _ in range(64)) for _ in range(5)]
PEM = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(PEM_LINES) + "\n-----END RSA PRIVATE KEY-----\n"

DB_PASSWORD = "Pw" + "".join(RNG.choice(string.ascii_letters + string.digits) for _ in range(20))
GH_TOKEN_VALUE = "ghp_" + "".join(RNG.choice(string.ascii_letters + string.digits) for _ in range(36))
ID_SECRETS = [DB_PASSWORD, GH_TOKEN_VALUE, GH_TOKEN_VALUE[4:20]]


def _leaks(files: list[Path], secrets: list[str]) -> list[str]:
    found = []
    for path in files:
        text = path.read_bytes().decode("utf-8", errors="replace")
        found += [f"{path}: {s[:6]}…" for s in secrets if s in text]
    return found


def test_a_private_key_in_a_repr_is_redacted_whole(tmp_path: Path) -> None:
    key_file = tmp_path / "outside" / "key.pem"
    key_file.parent.mkdir()
    key_file.write_text(PEM)
    project = make_project(tmp_path / "p", {"test_key.py": """
        import os

        def test_key():
            pem = open(os.environ["KEY_FILE"]).read()
            raise ValueError(repr(pem))
    """})
    env = {"KEY_FILE": str(key_file)}
    incident_id = capture(project, env=env)
    root = project / ".selfheal"
    tail = (root / "error_inbox" / incident_id / "log_tail.txt").read_text()
    # The block was there, and went whole: BEGIN ... [REDACTED] ... END, on one repr line.
    assert "-----BEGIN RSA PRIVATE KEY-----\\n[REDACTED]\\n-----END RSA PRIVATE KEY-----" in tail, tail[-2000:]
    # A repair provider that changes nothing: the prompt gets the same (redacted) tail.
    provider = json.dumps([PY, "-c", "pass"])
    done = selfheal(project, "loop", incident_id, "--set", f"repair.command={provider}", env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    prompts = sorted((root / "error_runs" / incident_id).glob("prompt_*.md"))
    assert prompts, "no prompt written"
    assert "[REDACTED]" in prompts[0].read_text()
    assert _leaks(walk_written(project), PEM_LINES) == []
    assert all(line not in done.stdout + done.stderr for line in PEM_LINES)


SECRET_IDS = """
    import os

    import pytest

    FIXED = os.path.join(os.path.dirname(__file__), "fixed.flag")


    @pytest.mark.parametrize("url", [os.environ["DATABASE_URL"]])
    def test_db(url):
        assert os.path.exists(FIXED), "cannot reach the database"


    @pytest.mark.parametrize("token", [os.environ["API_GH"]])
    def test_api(token):
        assert os.path.exists(FIXED), "unauthorised"


    def test_plain():
        assert os.path.exists(FIXED), "plain failure"
"""


def _id_env() -> dict[str, str]:
    return {"DATABASE_URL": f"postgres://app:{DB_PASSWORD}@db.internal:5432/app", "API_GH": GH_TOKEN_VALUE}


def test_secrets_in_node_ids_are_redacted_everywhere_and_still_verified(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"test_ids.py": SECRET_IDS})
    env = _id_env()
    captured = run_pytest_selfheal(project, "--selfheal-report=report.md", env=env)
    assert captured.returncode == 1, captured.stdout + captured.stderr
    # pytest itself printed the real ids (the secrets were really there) ...
    assert DB_PASSWORD in captured.stdout
    root = project / ".selfheal"
    (incident_id,) = [p.name for p in (root / "error_inbox").iterdir()]
    incident = json.loads((root / "error_inbox" / incident_id / "incident.json").read_text())
    assert sorted(incident["nodeids"]) == [
        "test_ids.py::test_api[[REDACTED]]",
        "test_ids.py::test_db[postgres://app:***@db.internal:5432/app]",
        "test_ids.py::test_plain",
    ]
    # The failing output of every test is in the log tail, the ones with redacted ids too.
    tail = (root / "error_inbox" / incident_id / "log_tail.txt").read_text()
    assert "cannot reach the database" in tail and "unauthorised" in tail and "plain failure" in tail, tail
    # ... and selfheal's own lines carry the redacted ids only.
    selfheal_lines = [line for line in captured.stdout.splitlines() if "selfheal" in line or "test_ids.py::" in line
                      and "FAILED" not in line]
    assert not any(s in line for line in selfheal_lines for s in ID_SECRETS), selfheal_lines
    plan = json.loads((root / "error_plans" / incident_id / "plan.json").read_text())
    # The redacted ids cannot be selected: their runnable parents are.
    assert "test_ids.py::test_db" in plan["verification_commands"][0]

    # Still failing: the loop verifies every id (none is "missing") and stops.
    done = selfheal(project, "loop", incident_id, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    attempt = json.loads((root / "error_runs" / incident_id / "attempt_01.json").read_text())
    assert {attempt["outcomes"][n] for n in incident["nodeids"]} == {"failed"}, attempt["outcomes"]
    for fmt in ("md", "json"):
        out = selfheal(project, "report", incident_id, "--format", fmt, env=env)
        assert out.returncode == 0, out.stderr
        assert not any(s in out.stdout for s in ID_SECRETS)
    assert _leaks(walk_written(project), ID_SECRETS) == []


def test_a_fix_resolves_an_incident_whose_ids_were_redacted(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"test_ids.py": SECRET_IDS})
    env = _id_env()
    incident_id = capture(project, env=env)
    (project / "fixed.flag").write_text("")
    done = selfheal(project, "loop", incident_id, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    root = project / ".selfheal"
    attempt = json.loads((root / "error_runs" / incident_id / "attempt_01.json").read_text())
    assert attempt["outcomes"]["test_ids.py::test_api[[REDACTED]]"] == "passed", attempt["outcomes"]
    assert not any(s in done.stdout + done.stderr for s in ID_SECRETS)
    assert _leaks(walk_written(project), ID_SECRETS) == []


def test_secret_node_ids_never_reach_github(tmp_path: Path, fake_github: FakeGitHub) -> None:
    project = make_project(tmp_path / "ci", {"test_ids.py": SECRET_IDS})
    env = ci_env(tmp_path, fake_github, _id_env())
    done = cli("ci", "--", "-q", cwd=project, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert fake_github.requests_to("POST"), "no comment was posted"
    bodies = [r.body for r in fake_github.requests] + [str(c["body"]) for c in fake_github.comments(7)]
    assert not any(s in body for body in bodies for s in ID_SECRETS)
    assert "test_db[postgres://app:***@db.internal:5432/app]" in str(fake_github.comments(7)[0]["body"]) or any(
        "test_db" in str(c["body"]) for c in fake_github.comments(7))
    files = [Path(env["GITHUB_STEP_SUMMARY"]), Path(env["GITHUB_OUTPUT"])] + walk_written(project / ".selfheal")
    assert _leaks(files, ID_SECRETS) == []
    # selfheal ci's own lines (not pytest's streamed output) hold no id secret either.
    own = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("selfheal")]
    assert not any(s in line for line in own for s in ID_SECRETS), own


def test_the_ci_process_redacts_what_its_token_less_capture_could_not(tmp_path: Path) -> None:
    """``selfheal ci``'s pytest child never sees a ``*TOKEN*`` variable, so it cannot redact
    that value when a test prints it (got from elsewhere); ci redacts the captured files again."""
    value = "tok-" + "".join(RNG.choice(string.ascii_letters) for _ in range(20))
    project = make_project(tmp_path / "p", {"test_t.py": f"""
        def test_t():
            assert False, "got {value} from a file"
    """})
    incident_id = capture(project)  # this child had no such variable either
    root = project / ".selfheal"
    assert _leaks(walk_written(root), [value]) != []  # it is there, unredacted ...
    store = Store(root, redactor=Redactor({"DEPLOY_TOKEN": value}))
    held = Store(root).read_incident(incident_id)
    assert value in json.dumps(held.to_json())
    redacted, plan = store.redact_again(held)
    assert value not in json.dumps(redacted.to_json())  # the records the caller holds from here on ...
    assert (redacted, plan) == (store.read_incident(incident_id), store.read_plan(incident_id))  # ... are those written
    assert _leaks(walk_written(root), [value]) == []  # ... and every file is clean
    assert selfheal(project, "status").returncode == 0  # every file still reads
