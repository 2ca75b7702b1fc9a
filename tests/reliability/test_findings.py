"""Bugs the reliability suite found in other modules, each as the smallest test that shows it.

Fixed ones stay here as regression tests (docs/reliability.md "Findings" says when and where
they were fixed). Open ones are ``xfail(strict=True)`` with the module and the reproduction
in the reason, so the suite stays green until the fix lands — and turns red (XPASS) the
moment it does, as a reminder to drop the marker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import capture, make_project, selfheal

from pytest_selfheal.store.root import Store

from .test_secrets_everywhere import ENV_SECRETS, KINDS, hits


def test_loop_resolves_a_fixed_test_when_the_ini_lives_below_the_capture_rootdir(tmp_path: Path) -> None:
    project = make_project(tmp_path / "mono", {
        "pkg/pytest.ini": "[pytest]\n",
        "pkg/test_x.py": """
            import os

            def test_x():
                assert os.path.exists(os.path.join(os.path.dirname(__file__), "fixed.flag"))
        """,
    })
    (project / "pytest.ini").unlink()  # no ini at the root: pytest's rootdir is the repo root
    incident_id = capture(project)
    incident = json.loads((project / ".selfheal" / "error_inbox" / incident_id / "incident.json").read_text())
    assert incident["nodeids"] == ["pkg/test_x.py::test_x"]
    (project / "pkg" / "fixed.flag").write_text("")  # the fix
    result = selfheal(project, "loop", incident_id)
    attempt = json.loads((project / ".selfheal" / "error_runs" / incident_id / "attempt_01.json").read_text())
    assert attempt["outcomes"].get("pkg/test_x.py::test_x") == "passed", attempt["outcomes"]
    assert result.returncode == 0, result.stdout + result.stderr


def test_loop_does_not_run_an_incident_whose_archive_was_interrupted(tmp_path: Path) -> None:
    project = make_project(tmp_path / "flaky", {"test_f.py": """
        import os

        def test_flaky():
            assert os.environ.get("SELFHEAL_VERIFYING"), "fails outside the loop only"
    """})
    incident_id = capture(project)
    store = Store(project / ".selfheal")
    # Exactly the state a SIGKILL leaves between archive step 2 (status) and step 4 (rename).
    store.set_status(incident_id, "escalated", reason="archive")
    result = selfheal(project, "loop", incident_id)
    assert "Traceback" not in result.stderr
    assert store.count_attempts(incident_id) == 0, "a verification ran on an escalated incident"
    assert store.read_run_result(incident_id) is None
    assert result.returncode in (1, 5), result.stdout + result.stderr


def test_unknown_xml_encoding_is_one_line_exit_3(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_bytes(b'<?xml version="1.0" encoding="x-no-such-codec"?>\n<testsuites><testsuite/></testsuites>\n')
    result = selfheal(tmp_path, "fingerprint", str(path))
    assert "Traceback" not in result.stderr, result.stderr[-600:]
    assert result.returncode == 3


@pytest.mark.parametrize("command", ["bin/pytest -q", "./bin/pytest", "evil/python -m pytest"])
def test_allowlist_is_not_bypassed_by_a_path_named_like_the_runner(tmp_path: Path, command: str) -> None:
    project = make_project(tmp_path / "p", {"test_calc.py": """
        def test_sub():
            assert 5 + 2 == 3
    """})
    marker = tmp_path / "PWNED"
    for name in ("bin/pytest", "evil/python"):
        script = project / name
        script.parent.mkdir(exist_ok=True)
        script.write_text(f"#!/bin/sh\ntouch {marker}\n")
        script.chmod(0o755)
    incident_id = capture(project)
    plan_path = project / ".selfheal" / "error_plans" / incident_id / "plan.json"
    plan = json.loads(plan_path.read_text())
    plan["verification_commands"] = [command]
    plan_path.write_text(json.dumps(plan))
    result = selfheal(project, "loop", incident_id)
    assert not marker.exists(), f"{command!r} executed a program that is not the allowlisted runner"
    assert result.returncode == 5, result.stdout + result.stderr


# Once a strict xfail: pytest's diff cuts a long item's head ('...tail'), so the
# rest lost its label or prefix. Fixed in redact.py (kind ``shortened_item``: token-like runs
# in a quoted item starting with '...'; ``aws_secret_next_to_key_id``); the limit that stays
# is in docs/redaction.md "Shortened values".
def test_shortened_diff_items_do_not_leak_secrets(tmp_path: Path) -> None:
    planted = tmp_path / "secrets.json"
    planted.write_text(json.dumps([text for kind, (text, _) in KINDS.items() if not kind.startswith("env_")]))
    project = make_project(tmp_path / "p", {"test_cmp.py": """
        import json, os

        def test_comparison():
            lines = json.loads(open(os.environ["PLANTED_SECRETS_FILE"]).read())
            lines += [os.environ[k] for k in ("DB_PASSWORD", "MY_API_TOKEN", "SIGNING_SECRET", "STRIPE_KEY")]
            got = {"credentials": "\\n".join(lines).splitlines()}
            assert got == {"credentials": []}
    """})
    incident_id = capture(project, env={"PLANTED_SECRETS_FILE": str(planted), **ENV_SECRETS})
    log_tail = (project / ".selfheal" / "error_inbox" / incident_id / "log_tail.txt").read_bytes()
    assert hits(log_tail) == ([], []), hits(log_tail)


def test_a_suspicious_user_regex_prints_no_python_warning(tmp_path: Path) -> None:
    result = selfheal(tmp_path, "config", "--set", 'redaction.patterns=["[[a]"]')
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
