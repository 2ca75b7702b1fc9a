"""``selfheal mcp`` as an agent meets it on a real project: groups ranked by size and
reachable in full page by page, the bound at ``mcp.max_chars=200``, cancellation and a client
that goes away, a server started outside a project, the output schema, the options check of a
capture that recorded none. The SDK's own client over stdio, as in test_mcp.py."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import PY, make_project, run_env
from mcp import Client, StdioServerParameters
from mcp.types import ListRootsResult, Root
from test_mcp import session, size_of, text_of
from test_process import gone_within  # a liveness wait with a generous deadline, not a speed check

from pytest_selfheal.mcp_server.digest import (
    bounded_verdict,
    code_line,
    fit,
    group_page,
    ranked_causes,
    structured_size,
    verdict_lines,
)
from pytest_selfheal.records.incident import Failure, Incident
from pytest_selfheal.records.incident_view import IncidentView
from pytest_selfheal.records.mcp import RunDecision, RunVerdict
from pytest_selfheal.records.plan import GroupKey, PlanAction
from pytest_selfheal.redact import default_redactor
from pytest_selfheal.repair.patches import PatchSummary, ProposedPatch

# 3 failures of one bug collected first, then 520 of another: the big group must come first.
TWO_GROUPS = {
    "calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n",
    "test_a_small.py": """\
        import pytest

        from calc import mul


        @pytest.mark.parametrize("n", range(3))
        def test_mul(n):
            assert mul(n, 1) == n
        """,
    "test_b_big.py": """\
        import pytest

        from calc import add


        @pytest.mark.parametrize("n", range(520))
        def test_add(n):
            assert add(n, 1) == n + 1
        """,
}

SLOW = """\
    import os
    import time


    def test_slow():
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "slow.pid"), "w") as handle:
            handle.write(str(os.getpid()))
        time.sleep(120)
    """


@pytest.mark.slow  # ~10 s; by default: test_the_bound_holds_at_200_characters_structured_part_included
def test_groups_ranked_by_size_and_a_520_test_group_reachable_page_by_page(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", TWO_GROUPS)

    async def scenario() -> None:
        async with session(project) as client:
            first = await client.call_tool("run_tests", {})
            text = text_of(first)
            incident_id = (first.structured_content or {})["captured"]
            # Largest first, whatever the collection order.
            assert re.search(r"## Root cause 1 of 2: .*, 520 failing test\(s\)", text), text
            assert size_of(first) <= 8000
            seen: list[str] = []
            offset = None
            pages = 0
            while True:
                args: dict[str, Any] = {"incident_id": incident_id, "group": 1}
                if offset is not None:
                    args["offset"] = offset
                page = await client.call_tool("show", args)
                assert not page.is_error, text_of(page)
                body = text_of(page)
                assert size_of(page) <= 8000
                seen += re.findall(r"^- (test_b_big\.py::test_add\[\d+\]): assert ", body, re.M)
                pages += 1
                found = re.search(r"next: show group=1 offset=(\d+)\]$", body)
                if not found:
                    break
                assert int(found.group(1)) == len(seen)  # the next page starts where this one ended
                offset = int(found.group(1))
            assert sorted(seen) == sorted(f"test_b_big.py::test_add[{n}]" for n in range(520))
            assert pages > 1
            past = await client.call_tool("show", {"incident_id": incident_id, "group": 1, "offset": 520})
            assert past.is_error and "offset 520" in text_of(past)
            alone = await client.call_tool("show", {"incident_id": incident_id, "offset": 3})
            assert alone.is_error and "give group too" in text_of(alone)
            small = await client.call_tool("show", {"incident_id": incident_id, "group": 2})
            assert "3 failing test(s)" in text_of(small) and "next: show" not in text_of(small)

    anyio.run(scenario)


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_the_bound_holds_at_200_characters_structured_part_included(tmp_path: Path) -> None:
    files = dict(TWO_GROUPS, **{"test_b_big.py": TWO_GROUPS["test_b_big.py"].replace("range(520)", "range(20)")})
    project = make_project(tmp_path / "proj", files)

    async def scenario() -> None:
        async with session(project, "--set", "mcp.max_chars=200") as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            schema = tools["run_tests"].output_schema or {}
            assert schema.get("required") == ["decision"] and "stop_reason" in schema["properties"]
            first = await client.call_tool("run_tests", {})
            assert not first.is_error, text_of(first)
            assert size_of(first) <= 200 and text_of(first).startswith("CONTINUE"), (text_of(first), first.structured_content)
            verdict = first.structured_content or {}
            # Only the decision and the incident fit beside the text.
            assert set(verdict) == {"decision", "incident_id"} and verdict["decision"] == "CONTINUE"
            incident_id = verdict["incident_id"]
            results = [await client.call_tool("status", {}), await client.call_tool("report", {}),
                       await client.call_tool("show", {"incident_id": incident_id}),
                       await client.call_tool("show", {"incident_id": incident_id, "group": 1}),
                       await client.call_tool("show", {"incident_id": incident_id, "group": 1, "offset": 7}),
                       await client.call_tool("show", {"incident_id": "nope"})]
            for result in results:
                assert size_of(result) <= 200, text_of(result)
            assert "next: show group=1 offset=" in text_of(results[3])

    anyio.run(scenario)


def test_cancelling_run_tests_stops_pytest_and_the_server_goes_on(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"test_slow.py": SLOW, "test_ok.py": "def test_ok():\n    pass\n"})
    pidfile = project / "slow.pid"

    async def scenario() -> None:
        async with session(project) as client:
            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, "run_tests", {"selection": ["test_slow.py"]})
                while not pidfile.exists() or not pidfile.read_text():
                    await anyio.sleep(0.05)
                group.cancel_scope.cancel()
            pid = int(pidfile.read_text())
            assert await anyio.to_thread.run_sync(gone_within, pid, 30), "pytest outlived the cancelled call"
            # The server is free for the next call at once, not after the 120 s test.
            ok = await client.call_tool("run_tests", {"selection": ["test_ok.py"]})
            assert not ok.is_error and (ok.structured_content or {})["status"] == "passed", text_of(ok)

    anyio.run(scenario)


@pytest.mark.slow  # ~5 s; by default: test_cancelling_run_tests_stops_pytest_and_the_server_goes_on
def test_a_client_that_goes_away_mid_run_ends_the_server_and_pytest(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"test_slow.py": SLOW})
    env = run_env({"PYTEST_PLUGINS": "pytest_selfheal.plugin"})
    server = subprocess.Popen([PY, "-m", "pytest_selfheal", "mcp"], cwd=project, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert server.stdin is not None and server.stdout is not None
    try:
        for message in (
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_tests", "arguments": {}}},
        ):
            server.stdin.write((json.dumps(message) + "\n").encode())
            server.stdin.flush()
        assert b'"id":1' in server.stdout.readline()
        deadline = time.monotonic() + 60
        while not (project / "slow.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int((project / "slow.pid").read_text())
        server.stdin.close()  # the client is gone
        assert server.wait(timeout=60) == 0
        assert gone_within(pid, 30), "pytest outlived its server"
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGKILL)
            server.wait()


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_outside_a_project_tests_run_only_in_a_root_the_client_names(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "test_elsewhere.py").write_text("def test_x():\n    assert False\n")
    project = make_project(tmp_path / "proj", {"test_ok.py": "def test_ok():\n    pass\n"})
    params = StdioServerParameters(command=PY, args=["-m", "pytest_selfheal", "mcp"], cwd=str(home),
                                   env=run_env({"PYTEST_PLUGINS": "pytest_selfheal.plugin"}))

    async def roots(context: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=project.as_uri(), name="proj")])  # type: ignore[arg-type]

    async def scenario() -> None:
        async with Client(params, read_timeout_seconds=300, mode="legacy") as client:
            refused = await client.call_tool("run_tests", {})
            assert refused.is_error and "is not a project" in text_of(refused) and "\n" not in text_of(refused)
            assert not (home / ".selfheal").exists()
        async with Client(params, read_timeout_seconds=300, mode="legacy", list_roots_callback=roots) as client:
            ran = await client.call_tool("run_tests", {})
            assert not ran.is_error and (ran.structured_content or {})["status"] == "passed", text_of(ran)
            assert not (home / ".selfheal").exists()

    anyio.run(scenario)


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_a_capture_without_recorded_options_refuses_runs_with_other_options(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"calc.py": "def add(a, b):\n    return a - b\n",
                                               "test_calc.py": "from calc import add\n\n\ndef test_add():\n"
                                                               "    assert add(1, 2) == 3\n"})

    async def scenario() -> None:
        async with session(project) as client:
            first = await client.call_tool("run_tests", {})
            incident_id = (first.structured_content or {})["captured"]
            # As an incident captured before options were recorded has it: no pytest_options
            # (none recorded is no key too) and no seal (sealing came later).
            path = project / ".selfheal" / "error_inbox" / incident_id / "incident.json"
            doc = json.loads(path.read_text())
            doc.pop("pytest_options", None)
            doc.pop("seal", None)
            path.write_text(json.dumps(doc))
            other = await client.call_tool("run_tests", {"pytest_args": ["-p", "no:cacheprovider"]})
            assert other.is_error and "captured before pytest options were recorded" in text_of(other)
            attempts: set[str] = {p.name for p in (project / ".selfheal" / "error_runs").rglob("attempt_*.json")}
            assert attempts == set()  # nothing counted
            again = await client.call_tool("run_tests", {})
            assert (again.structured_content or {})["iteration"] == 1, text_of(again)

    anyio.run(scenario)


# --------------------------------------------------------------------------- pure parts


def _view(sizes: list[int]) -> IncidentView:
    causes, failures = [], []
    for index, size in enumerate(sizes):
        ids = tuple(f"tests/test_{index}.py::test_case[{n}]" for n in range(size))
        causes.append(PlanAction(id=f"A{index + 1}", title="", priority="", risk="", target_paths=(), verification=(),
                                 root_cause=GroupKey("frame", f"pkg/m{index}.py", f"f{index}"), nodeids=ids))
        failures += [Failure(nodeid=i, message=f"AssertionError: {'x' * 80} {i}", fingerprint="abc") for i in ids]
    incident = Incident(step="collection", failure_class="test", message="", error_signature="", failures=tuple(failures))
    return IncidentView(incident_id="incident_x", status="new", bucket="inbox", path="inbox/incident_x",
                        incident=incident, root_causes=tuple(causes), plan=None, attempts=(), run_result=None,
                        events=0, warnings=())


@pytest.mark.parametrize("limit", [200, 333, 1000, 8000])
def test_every_test_of_a_group_is_on_some_page_within_the_bound(limit: int) -> None:
    view = _view([3, 40, 7])
    assert [len(c.nodeids) for c in ranked_causes(view)] == [40, 7, 3]
    seen: list[str] = []
    offset = 0
    while True:
        page = group_page(view, 1, offset, limit)
        assert len(page) <= limit
        seen += re.findall(r"^- (tests/test_1\.py::test_case\[\d+\])", page, re.M)
        found = re.search(r"offset=(\d+)\]$", page)
        if not found:
            break
        assert int(found.group(1)) > offset  # always moves on
        offset = int(found.group(1))
    assert sorted(set(seen)) == sorted(f"tests/test_1.py::test_case[{n}]" for n in range(40))


def test_the_approval_question_says_whether_the_patch_was_verified(tmp_path: Path) -> None:
    summary = PatchSummary(("a.py",), (), (), ())
    partial = ProposedPatch("incident_x", b"", tmp_path / "final.patch", tmp_path, summary, False,
                            verified=False, stop_reason="no_fix_found")
    assert partial.question.endswith("The patch is partial, NOT verified: the loop stopped with no_fix_found "
                                     "and the incident's tests did not pass with it.")
    verified = ProposedPatch("incident_x", b"", tmp_path / "final.patch", tmp_path, summary, False,
                             verified=True, stop_reason="success")
    assert verified.question.endswith("The patch is verified: the incident's tests passed with it.")


def test_a_code_excerpt_keeps_its_indentation_on_one_escaped_line() -> None:
    # Seen on toolz: "  319 | \"\"\" The first n" lost the docstring's four spaces.
    assert code_line('  319 |     """ The first n elements', 200) == '  319 |     """ The first n elements'
    assert code_line("> 12 |         x = 1\x1b[2J\rz", 200) == "> 12 |         x = 1\\x1b[2J\\rz"
    assert code_line("  1 | " + "y" * 300, 40) == "  1 | " + "y" * 33 + "…"


def test_the_verdict_json_keeps_the_key_order_the_tool_sends_and_its_text_reads_the_record() -> None:
    made = partial(RunVerdict, pytest_exit_code=1, counts=(("failed", 2),), max_iterations=5)
    ran = made(RunDecision.CONTINUE, None, "running", "s", "n", incident_id="i1", iteration=2,
               fingerprint_changed=True, progress=False, tests_fixed=("t::a",), flaky=True, bucket="inbox")
    head = ["pytest_exit_code", "counts", "max_iterations", "incident_id", "iteration", "captured",
            "fingerprint_changed", "progress"]
    assert list(ran.to_json()) == [*head, "tests_fixed", "flaky", "decision", "stop_reason", "status", "bucket",
                                   "summary", "next"]
    captured = made(RunDecision.CONTINUE, None, "captured", "s", "n", incident_id="i2", captured="i2",
                    tests_fixed=(), bucket="inbox")
    assert list(captured.to_json()) == [*head, "decision", "stop_reason", "status", "tests_fixed", "bucket",
                                        "summary", "next"]
    assert ran.to_json()["counts"] == {"failed": 2} and ran.to_json()["decision"] == "CONTINUE"
    assert verdict_lines(ran)[:3] == ["CONTINUE: s", "pytest: 2 failed (exit code 1)",
                                      "incident i1: iteration 2 of 5, fingerprint changed, progress no (flaky)"]
    redacted = replace(ran, summary="token ghp_" + "a" * 36).redacted(default_redactor().redact_obj)
    assert "ghp_" not in redacted.summary and redacted.decision is RunDecision.CONTINUE


def test_fit_shortens_the_least_valuable_first_and_keeps_the_essentials() -> None:
    blocks = ["**verdict**", "## Head\n" + "h\n" * 50, "### Stop\nwhy", "### Config\n" + "c\n" * 300,
              "### Failures\n" + "f\n" * 100, "### Decision Point\noptions", "### Recommended Next Action\ndo this"]
    value = {"**": 0, "## Head": 4, "### Stop": 1, "### Config": 8, "### Failures": 2, "### Decision Point": 0,
             "### Recommended Next Action": 0}
    rank = lambda block: next(v for k, v in value.items() if block.startswith(k))  # noqa: E731
    text = fit(blocks, 400, value=rank, essential=2, more="see all")
    assert len(text) <= 400
    assert "### Config" not in text and "### Failures\nf\n" in text  # the config goes before the failures
    for kept in ("**verdict**", "### Stop\nwhy", "### Decision Point\noptions", "### Recommended Next Action\ndo this"):
        assert kept in text
    assert "## Head\nh\n" in text and "h\n…\n\n### Stop" in text  # shortened, after the config went
    assert text.endswith("[cut: 2 section(s) shortened or left out; see all]")
    # Less room than the essentials need: they are shortened, never left out.
    tiny = fit(blocks, 150, value=rank, essential=2, more="x")
    assert len(tiny) <= 150 and "### Decision Point" in tiny and "### Recommended Next Action" in tiny
    assert fit(blocks[:1], 400, value=rank, essential=2, more="x") == "**verdict**"


def test_the_output_schema_is_the_verdict_records_json() -> None:
    from pytest_selfheal.mcp_server.server import verdict_model
    from pytest_selfheal.records.mcp import ClosedRun

    Verdict = verdict_model()

    every = RunVerdict(RunDecision.STOP, "already_stopped", "escalated", "s", "n", 1, (("failed", 2),), 5,
                       incident_id="i1", iteration=2, captured="i2", fingerprint_changed=False, progress=False,
                       tests_fixed=("t::a",), flaky=False, bucket="archive",
                       closed=ClosedRun("i0", 3, "success", "resolved"), stopped_because="no_progress")
    schema = Verdict.model_json_schema()
    # Every key the tool sends is declared: the verdict's, and the digest of its groups.
    assert set(schema["properties"]) == {*every.to_json(), "digest"}
    assert schema["required"] == ["decision"] and schema["properties"]["decision"]["enum"] == ["CONTINUE", "STOP"]
    assert Verdict.model_validate(every.to_json()).model_dump(exclude_unset=True) == every.to_json()


def test_the_structured_part_holds_the_groups_that_fit_and_says_what_was_left_out() -> None:
    verdict = RunVerdict(RunDecision.CONTINUE, None, "captured", "captured incident i1", "fix it", 1,
                         (("failed", 3),), 3, incident_id="i1", captured="i1")
    groups = [f"## Root cause {n} of 3: pkg/m{n}.py::f\ntarget paths (fix here): pkg/m{n}.py\n" + "x" * 300
              for n in (1, 2, 3)]
    whole = bounded_verdict(verdict, 8000, groups, text_chars=500, more="call show")
    assert whole["digest"] == groups and whole["decision"] == "CONTINUE"
    for limit in (1800, 1400, 1000):
        data = bounded_verdict(verdict, limit, groups, text_chars=500, more="call show")
        assert structured_size(data) + 500 <= limit, limit
        kept = data.get("digest", [])
        assert kept and kept[-1].startswith("[cut: ") and kept[-1].endswith("left out; call show]"), (limit, kept)
        assert kept[:-1] == groups[:len(kept) - 1]
    assert "digest" not in bounded_verdict(verdict, 600, groups, text_chars=500, more="call show")
