"""action.yml, this repository's workflows and the workflows in docs/action.md: composite,
inputs only through ``env:``, no ``${{ }}`` in shell code, least-privilege permissions."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped,unused-ignore]

from pytest_selfheal.github import ci, ci_inputs
from pytest_selfheal.records.ci import CiVerdict

ROOT = Path(__file__).resolve().parent.parent
ACTION = ROOT / "action.yml"
DOC = ROOT / "docs" / "action.md"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))

_INPUT_REF = re.compile(r"\$\{\{\s*inputs\.([A-Za-z0-9_-]+)\s*\}\}")
_STEP_OUTPUT = re.compile(r"^\$\{\{\s*steps\.([A-Za-z0-9_-]+)\.outputs\.([A-Za-z0-9_-]+)\s*\}\}$")


def _load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), path
    return data


def _action() -> dict[Any, Any]:
    return _load(ACTION)


def _steps() -> list[dict[str, Any]]:
    return list(_action()["runs"]["steps"])


def _doc_yaml_blocks() -> list[tuple[int, Any]]:
    """Every ```yaml block of docs/action.md, parsed: (line number, document)."""
    text = DOC.read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^```ya?ml\n(.*?)^```", text, flags=re.S | re.M):
        line = text.count("\n", 0, match.start()) + 1
        body = match.group(1)
        try:
            blocks.append((line, yaml.safe_load(body)))
        except yaml.YAMLError:
            # A job or step snippet indented as inside a workflow: parse it dedented.
            import textwrap

            blocks.append((line, yaml.safe_load(textwrap.dedent(body))))
    return blocks


def _doc_workflows() -> list[tuple[int, dict[Any, Any]]]:
    return [(line, doc) for line, doc in _doc_yaml_blocks() if isinstance(doc, dict) and "jobs" in doc]


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(path, key, value) of every mapping entry, recursively."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}"
            yield here, key, value
            yield from _walk(value, here)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, f"{path}[{index}]")


def _doc_table(heading: str) -> set[str]:
    """The first-column names (`name`) of the table under ``## heading`` in docs/action.md."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Za-z0-9_-]+)` \|", section, flags=re.M))


# --------------------------------------------------------------------------- action.yml


def test_action_is_composite_and_installs_from_its_own_path() -> None:
    action = _action()
    assert action["runs"]["using"] == "composite"
    install = _steps()[0]
    assert install["env"]["ACTION_PATH"] == "${{ github.action_path }}"
    assert '"$ACTION_PATH"' in install["run"]
    for step in _steps():
        if "run" in step:
            assert step.get("shell") == "bash"


def test_every_input_reaches_a_step_through_env_only() -> None:
    inputs = set(_action()["inputs"])
    referenced: set[str] = set()
    for step in _steps():
        for value in (step.get("env") or {}).values():
            referenced.update(_INPUT_REF.findall(str(value)))
    assert inputs == referenced
    # Nowhere else: not in `with:`, `working-directory:`, `if:`, names…
    for step in _steps():
        outside = {k: v for k, v in step.items() if k != "env"}
        assert not _INPUT_REF.search(str(outside)), step.get("id")


def test_the_brief_inputs_and_defaults() -> None:
    inputs = _action()["inputs"]
    assert inputs["pytest-args"]["default"] == ""
    assert inputs["working-directory"]["default"] == "."
    assert inputs["comment"]["default"] == "true"
    assert inputs["fail-on-unresolved"]["default"] == "true"
    assert inputs["report-name"]["default"] == "default"
    assert inputs["github-token"]["default"] == "${{ github.token }}"
    for name in ("config", "repair-command", "python"):
        assert inputs[name]["default"] == ""
    selfheal = next(s for s in _steps() if s.get("id") == "selfheal")
    assert "GITHUB_TOKEN" not in selfheal["env"] and "--action-inputs" in selfheal["run"]
    post = next(s for s in _steps() if s.get("id") == "post")
    assert post["env"]["GITHUB_TOKEN"] == "${{ inputs.github-token }}"


def test_no_expression_in_shell_code_of_the_action() -> None:
    for step in _steps():
        assert "${{" not in str(step.get("run", "")), step.get("id")


def test_input_variables_are_exactly_what_python_reads() -> None:
    selfheal = next(s for s in _steps() if s.get("id") == "selfheal")
    passed = {k for k in selfheal["env"] if k.startswith("INPUT_")}
    assert passed == {variable for variable, _, _ in ci_inputs.ACTION_INPUTS}


def test_outputs_map_to_the_outputs_selfheal_ci_writes() -> None:
    action = _action()
    step_ids = {s.get("id") for s in _steps()}
    written = set(ci.CiResult(0, CiVerdict("passed", "none", 0, None, 0), "").outputs())
    assert {"final-status", "stop-reason", "iterations", "incident-id", "report-path"} <= set(action["outputs"])
    for name, spec in action["outputs"].items():
        match = _STEP_OUTPUT.match(str(spec["value"]))
        assert match, name
        assert match.group(1) == "selfheal" and match.group(1) in step_ids
        assert match.group(2) == name
        assert name in written
    assert set(action["outputs"]) == written


def test_every_input_and_output_is_documented() -> None:
    action = _action()
    assert _doc_table("Inputs") == set(action["inputs"])
    assert _doc_table("Outputs") == set(action["outputs"])
    for name, spec in action["inputs"].items():
        assert spec.get("description"), name


# --------------------------------------------------------------------------- workflows


def _workflow_sources() -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = [(str(p.relative_to(ROOT)), _load(p)) for p in WORKFLOWS]
    found += [(f"docs/action.md:{line}", doc) for line, doc in _doc_yaml_blocks()]
    return found


def test_there_is_something_to_check() -> None:
    assert any(p.name == "selfheal.yml" for p in WORKFLOWS)
    assert len(_doc_workflows()) >= 3


@pytest.mark.parametrize(("where", "doc"), _workflow_sources(), ids=lambda v: v if isinstance(v, str) else "")
def test_no_expression_in_any_run_script(where: str, doc: Any) -> None:
    for path, key, value in _walk(doc):
        if key == "run":
            assert "${{" not in str(value), f"{where}: {path}"


def _permission_sets(doc: dict[Any, Any]) -> list[Any]:
    sets = [doc.get("permissions")]
    for job in (doc.get("jobs") or {}).values():
        if isinstance(job, dict) and "permissions" in job:
            sets.append(job["permissions"])
    return sets


@pytest.mark.parametrize(
    ("where", "doc"),
    [(str(p.relative_to(ROOT)), _load(p)) for p in WORKFLOWS] + [(f"docs/action.md:{n}", d) for n, d in _doc_workflows()],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_workflows_request_least_privilege(where: str, doc: dict[Any, Any]) -> None:
    assert isinstance(doc.get("permissions"), dict), f"{where}: top-level permissions: missing"
    # contents: write only where no pull request runs: pushing the shared failure history.
    push_only = set(doc.get("on") or doc.get(True) or {}) == {"push"}
    for perms in _permission_sets(doc):
        assert perms not in ("write-all", "read-all"), where
        assert isinstance(perms, dict), where
        for scope, level in perms.items():
            allowed = level in ("read", "none") or (scope, level) == ("pull-requests", "write")
            assert allowed or (push_only and (scope, level) == ("contents", "write")), f"{where}: {scope}: {level}"


def test_the_copy_paste_workflow_asks_for_exactly_the_comment_permission() -> None:
    first = _doc_workflows()[0][1]
    assert first["permissions"] == {"contents": "read", "pull-requests": "write"}
    own = _load(ROOT / ".github" / "workflows" / "selfheal.yml")
    assert own["permissions"] == {"contents": "read", "pull-requests": "write"}


def test_the_dogfood_workflow_uses_this_action_on_this_repository() -> None:
    own = _load(ROOT / ".github" / "workflows" / "selfheal.yml")
    steps = [s for job in own["jobs"].values() for s in job["steps"]]
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/checkout@") for u in uses)
    assert any(u.startswith("actions/setup-python@") for u in uses)
    action_step = next(s for s in steps if s.get("uses") == "./")
    assert "pytest-args" in action_step["with"]


def test_the_workflow_checks_what_the_code_claims() -> None:
    """ruff and mypy strict run in CI, and the tests run on the oldest and newest Python the
    package declares, not only on the one this machine has."""
    own = _load(ROOT / ".github" / "workflows" / "selfheal.yml")
    lint = " ".join(s.get("run", "") for s in own["jobs"]["lint"]["steps"])
    assert "ruff check" in lint and "mypy" in lint
    versions = own["jobs"]["tests"]["strategy"]["matrix"]["python-version"]
    requires = re.search(r'^requires-python = "(.*)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert requires and requires.group(1) == f">={versions[0]}", (requires, versions)
    assert versions[-1] == "3.15"


# The first major of each GitHub action that runs on Node 24 (Node 20 left the runners on
# 2026-09-16). An action missing here must be looked up before it is used.
NODE24_MAJORS = {"actions/checkout": 5, "actions/setup-python": 6, "actions/cache": 5, "actions/cache/restore": 5,
                 "actions/cache/save": 5, "actions/upload-artifact": 6, "actions/download-artifact": 7}
_USES = re.compile(r"\b(actions/[A-Za-z0-9_./-]+)@v(\d+)\b")


def test_every_action_used_or_shown_runs_on_node_24() -> None:
    texts = [ACTION, DOC, ROOT / "README.md", *WORKFLOWS, *sorted((ROOT / "docs").glob("*.md"))]
    found = {(path.name, name, int(major)) for path in dict.fromkeys(texts)
             for name, major in _USES.findall(path.read_text(encoding="utf-8"))}
    assert {name for _, name, _ in found} >= {"actions/checkout", "actions/cache/restore", "actions/upload-artifact"}
    old = sorted((where, f"{name}@v{major}") for where, name, major in found
                 if major < NODE24_MAJORS.get(name, 1 << 30))
    assert not old, f"Node 20 (or unknown) action majors: {old}"


def _nodes(node: Any) -> Iterator[Any]:
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    for child in children:
        yield from _nodes(child)


def test_examples_only_use_inputs_the_action_has() -> None:
    inputs = set(_action()["inputs"])
    seen = 0
    for where, doc in _workflow_sources():
        for node in _nodes(doc):
            if isinstance(node, dict) and (node.get("uses") == "./" or "pytest-selfheal@" in str(node.get("uses", ""))):
                seen += 1
                unknown = set(node.get("with") or {}) - inputs
                assert not unknown, f"{where}: {unknown}"
    assert seen >= 6


def test_the_fork_recipe_is_split_safely() -> None:
    """The trusted workflow_run half checks out nothing and posts with comment-from."""
    trusted = [d for _, d in _doc_workflows() if "workflow_run" in (d.get("on") or d.get(True) or {})]
    assert trusted
    for doc in trusted:
        steps = [s for job in doc["jobs"].values() for s in job["steps"]]
        assert not any(str(s.get("uses", "")).startswith("actions/checkout@") for s in steps)
        action = next(s for s in steps if "pytest-selfheal@" in str(s.get("uses", "")))
        assert action["with"]["comment-from"] and "head_sha" in action["with"]["expected-head-sha"]
    untrusted = next(d for _, d in _doc_workflows() if set(d.get("on") or d.get(True) or {}) == {"pull_request"})
    assert untrusted["permissions"] == {"contents": "read"}


def test_the_failure_history_is_cached_per_branch_and_run_and_restored_from_the_base_branch() -> None:
    steps = _steps()
    ids = [s.get("id") for s in steps]
    assert ids.index("history") < ids.index("history-restore") < ids.index("history-pull") < ids.index("selfheal")
    assert ids.index("selfheal") < ids.index("post") < ids.index("history-push") < ids.index("history-save")
    locate = steps[ids.index("history")]
    assert "history --path" in locate["run"] and locate["env"]["INPUT_WORKING_DIRECTORY"] == "${{ inputs.working-directory }}"
    restore, save = steps[ids.index("history-restore")], steps[ids.index("history-save")]
    assert restore["uses"].startswith("actions/cache/restore@") and save["uses"].startswith("actions/cache/save@")
    for step in (restore, save):
        assert step["with"]["path"].strip().splitlines() == ["${{ steps.history.outputs.path }}",
                                                             "${{ steps.history.outputs.segments }}"]
        assert "steps.history.outputs.path != ''" in step["if"]
    key = restore["with"]["key"]
    assert save["with"]["key"] == key and "github.run_id" in key and "github.head_ref || github.ref_name" in key
    fallbacks = [k.strip() for k in restore["with"]["restore-keys"].splitlines() if k.strip()]
    assert [k for k in fallbacks if key.startswith(k)]  # this branch's newest entry first
    assert "github.base_ref" in fallbacks[-1]  # then, on a pull request, its base branch's
    assert save["if"].startswith("always()")  # a red run's history is the one worth keeping
    assert "actions/cache" in DOC.read_text(encoding="utf-8")
    pull, push = steps[ids.index("history-pull")], steps[ids.index("history-push")]
    assert pull["if"] == "steps.history.outputs.pull == 'true'" and "history pull" in pull["run"]
    assert "steps.history.outputs.push == 'true'" in push["if"] and "history push" in push["run"]
    for step in (pull, push):  # the token, in an interpreter that runs no project code
        assert " -I -S " in step["run"] and step["env"]["GITHUB_TOKEN"] == "${{ inputs.github-token }}"


_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def _render(template: str, contexts: dict[str, str]) -> str:
    """``template`` with each ``${{ a || b }}`` replaced as Actions would: the first non-empty
    value. A context the test did not give fails (the key would hold an unknown value)."""
    def value(match: re.Match[str]) -> str:
        names = [n.strip() for n in match.group(1).split("||")]
        assert all(n in contexts for n in names), names
        return next((contexts[n] for n in names if contexts[n]), "")

    return _EXPRESSION.sub(value, template)


def test_the_cache_keys_of_a_two_entry_matrix_are_distinct() -> None:
    steps = {s.get("id"): s for s in _steps()}
    restore = steps["history-restore"]
    run = {"runner.os": "Linux", "github.job": "test", "steps.history.outputs.key": "1a2b3c4d",
           "github.head_ref": "", "github.ref_name": "main", "github.base_ref": "",
           "github.event.repository.default_branch": "main", "github.run_id": "42", "github.run_attempt": "1"}
    entries = [{**run, "strategy.job-index": str(index)} for index in (0, 1)]
    keys = [_render(restore["with"]["key"], entry) for entry in entries]
    assert keys[0] != keys[1] and _render(steps["history-save"]["with"]["key"], entries[1]) == keys[1]
    for entry, key in zip(entries, keys):
        assert "," not in key and "--" not in key and len(key) <= 512  # what actions/cache accepts; nothing empty
        # Each entry restores its own lineage, never the other entry's entries.
        prefixes = [_render(k.strip(), entry) for k in restore["with"]["restore-keys"].splitlines() if k.strip()]
        assert any(key.startswith(p) for p in prefixes)
        other = keys[1 - entries.index(entry)]
        assert not any(other.startswith(p) for p in prefixes)


def _locate(tmp_path: Path, event: str, sync: str, comment_from: str = "") -> tuple[int, dict[str, str]]:
    """The ``history`` step's script in a project, as the runner runs it: exit code and outputs."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    outputs = project / "github_output"
    outputs.write_text("")
    script = next(s for s in _steps() if s.get("id") == "history")["run"]
    env = {"PATH": os.environ["PATH"], "SELFHEAL_PYTHON": sys.executable, "INPUT_WORKING_DIRECTORY": str(project),
           "INPUT_HISTORY_SYNC": sync, "GITHUB_EVENT_NAME": event, "GITHUB_OUTPUT": str(outputs),
           "INPUT_COMMENT_FROM": comment_from,
           "GITHUB_WORKSPACE": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          stdin=subprocess.DEVNULL)
    found = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    return done.returncode, found


def test_the_history_modes_pull_everywhere_and_push_only_what_selfheal_ci_names(tmp_path: Path) -> None:
    code, pushed = _locate(tmp_path, "push", "auto")
    assert code == 0 and (pushed["pull"], pushed["push"]) == ("true", "true")
    assert pushed["path"].endswith("/.selfheal/history.sqlite3")
    assert pushed["segments"].endswith("/.selfheal/history-segments")
    assert len(pushed["key"]) == 8
    code, pr = _locate(tmp_path, "pull_request", "auto")
    assert code == 0 and pr["pull"] == "true" and pr["key"] == pushed["key"]
    # Whatever the mode, the push step shares only the segments `selfheal ci` names, and it
    # names none for an event that tests code not merged yet (tests/test_ci_events.py).
    push_step = next(s for s in _steps() if s.get("id") == "history-push")
    assert "steps.selfheal.outputs.history-segments != ''" in push_step["if"]
    assert '--segments "$SELFHEAL_SEGMENTS"' in push_step["run"]
    # Comment-only mode (the trusted half of the workflow_run recipe) touches no history.
    code, comment_only = _locate(tmp_path, "workflow_run", "auto", comment_from="report.json")
    assert code == 0 and comment_only["path"] == "" and comment_only["pull"] == comment_only["push"] == "false"
    assert _locate(tmp_path, "push", "pull")[1]["push"] == "false"
    assert _locate(tmp_path, "push", "off")[1]["pull"] == "false"
    code, found = _locate(tmp_path, "push", "sometimes")
    assert code == 2 and found == {}
