"""Hostile and broken input: every case gets its documented exit code, ONE line on
stderr and never a traceback; nothing hostile is executed, expanded or fetched.

Families (each case is counted into docs/reliability.md):

- XML through ``selfheal fingerprint``: entity expansion, external entities, truncation,
  empty/binary/UTF-16 garbage, wrong root, huge files in bounded memory;
- config files: wrong types, unknown keys, deep nesting, huge files, YAML tags that would
  construct objects (``safe_load`` only: the side effect must not happen);
- hand-edited incident files through ``show``/``status``/``loop``/``report``/``replay``;
- incident ids: traversal, absolute paths, NUL, 10,000 characters, Unicode look-alikes;
- ``plan.json`` verification commands that are not allowlisted or carry shell syntax:
  refused (exit 5), logged as ``decision_point_needed``, never executed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import FULL, PY, capture, cli, make_project, run_env, run_pytest_selfheal, selfheal

from pytest_selfheal.analysis.analyse import analyse_junit
from pytest_selfheal.errors import InputError
from pytest_selfheal.store.root import Store

from .conftest import DETERMINISTIC, check_root, record_figures, tree_snapshot

# --------------------------------------------------------------------------- shared

VALID_JUNIT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites>
  <testsuite name="pytest" tests="3" failures="2" errors="0">
    <testcase classname="tests.test_a" name="test_ok" time="0.001"/>
    <testcase classname="tests.test_a" name="test_bad" time="0.002">
      <failure message="assert 1 == 2">def test_bad():
&gt;       assert 1 == 2
E       assert 1 == 2</failure>
    </testcase>
    <testcase classname="tests.test_b" name="test_worse" time="0.003">
      <failure message="ValueError: nope">ValueError: nope</failure>
    </testcase>
  </testsuite>
</testsuites>
"""


def only_line(stderr: str, prefix: str = "selfheal: error: ") -> str:
    """Exactly one non-empty stderr line, starting with ``prefix``; no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith(prefix), stderr
    return lines[0]


@pytest.fixture(scope="module")
def counts() -> Iterator[dict[str, int]]:
    """Cases tried per family, written to the figures at the end of the module."""
    tally: dict[str, int] = {}
    yield tally
    for family, number in sorted(tally.items()):
        record_figures(f"test_hostile_input.py::{family}", family=family, cases=number, tracebacks=0)


def bump(counts: dict[str, int], family: str, n: int = 1) -> None:
    counts[family] = counts.get(family, 0) + n


# --------------------------------------------------------------------------- XML

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<testsuites><testsuite><testcase classname="c" name="n"><failure message="&lol9;">&lol9;</failure></testcase></testsuite></testsuites>
"""


def quadratic_blowup() -> bytes:
    entity = "x" * 100_000
    refs = "&a;" * 100_000
    return (f'<?xml version="1.0"?>\n<!DOCTYPE t [<!ENTITY a "{entity}">]>\n'
            f'<testsuites><testsuite><testcase classname="c" name="n"><failure message="m">{refs}'
            f'</failure></testcase></testsuite></testsuites>\n').encode()


def external_entity(url: str) -> bytes:
    return (f'<?xml version="1.0"?>\n<!DOCTYPE t [<!ENTITY ext SYSTEM "{url}">]>\n'
            f'<testsuites><testsuite><testcase classname="c" name="n"><failure message="m">&ext;'
            f'</failure></testcase></testsuite></testsuites>\n').encode()


def external_dtd(url: str) -> bytes:
    return (f'<?xml version="1.0"?>\n<!DOCTYPE testsuites SYSTEM "{url}">\n'
            f'<testsuites><testsuite><testcase classname="c" name="n"/></testsuite></testsuites>\n').encode()


def parameter_entity(url: str) -> bytes:
    return (f'<?xml version="1.0"?>\n<!DOCTYPE t [<!ENTITY % p SYSTEM "{url}"> %p;]>\n'
            f'<testsuites><testsuite/></testsuites>\n').encode()


class Listener:
    """A loopback TCP listener that counts connections (an external entity must never fetch)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(5)
        self.sock.settimeout(0.2)
        self.connections = 0
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/evil.dtd"

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self.thread.join(timeout=2)
        self.sock.close()


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


def xml_cases(secret_file: Path, listener: Listener) -> list[tuple[str, bytes, int, str]]:
    """(id, bytes, expected exit code, expected stderr prefix)."""
    err, warn = "selfheal: error: ", "selfheal: warning: "
    file_url = secret_file.as_uri()
    cases = [
        ("billion-laughs", BILLION_LAUGHS, 3, err),
        ("quadratic-blowup", quadratic_blowup(), 3, err),
        ("external-entity-file", external_entity(file_url), 3, err),
        ("external-entity-etc-passwd", external_entity("file:///etc/passwd"), 3, err),
        ("external-entity-http", external_entity(listener.url), 3, err),
        ("external-dtd-http", external_dtd(listener.url), 3, err),
        ("external-dtd-file", external_dtd(file_url), 3, err),
        ("parameter-entity-http", parameter_entity(listener.url), 3, err),
        ("empty", b"", 3, err),
        ("whitespace-only", b"  \n\t\n", 3, err),
        ("binary-random", bytes(range(256)) * 64, 3, err),
        ("binary-nul", b"\x00" * 4096, 3, err),
        ("png-header", b"\x89PNG\r\n\x1a\n" + os.urandom(512), 3, err),
        ("utf16-bom-garbage", b"\xff\xfe" + os.urandom(1024), 3, err),
        ("utf16-declared-but-utf8", VALID_JUNIT.replace(b'encoding="utf-8"', b'encoding="UTF-16"'), 3, err),
        ("unknown-encoding", VALID_JUNIT.replace(b'encoding="utf-8"', b'encoding="x-no-such-codec"'), 3, err),
        ("mutated-encoding-name", VALID_JUNIT.replace(b'encoding="utf-8"', b'encoding="U-F-8"'), 3, err),
        ("latin1-declared-utf8-bytes", VALID_JUNIT.replace(b"nope", "n\u00f6pe\u2603".encode()), 0, ""),
        ("wrong-root-html", b"<html><body>not junit</body></html>", 3, err),
        ("wrong-root-testcase", b'<testcase classname="c" name="n"><failure/></testcase>', 3, err),
        ("plain-text", b"FAILED tests/test_a.py::test_bad - assert 1 == 2\n", 3, err),
        ("json-instead", json.dumps({"testsuites": []}).encode(), 3, err),
        ("mismatched-tags", b"<testsuites><testsuite><testcase></testsuite></testcase></testsuites>", 3, err),
        ("bad-entity-reference", b"<testsuites><testsuite>&undefined;</testsuite></testsuites>", 3, err),
        ("control-characters", b"<testsuites><testsuite><testcase name='a\x01b'/></testsuite></testsuites>", 3, err),
        ("two-documents", VALID_JUNIT + VALID_JUNIT, 0, warn),
        # Refused at the depth bound: expat's tag stack grew to ~1 GB for 52 MB of nesting.
        ("deeply-nested", b"<testsuites>" + b"<testsuite>" * 50_000 + b"</testsuite>" * 50_000 + b"</testsuites>", 3, err),
        ("nested-within-bound", b"<testsuites>" + b"<testsuite>" * 900 + b"</testsuite>" * 900 + b"</testsuites>", 0, ""),
        ("huge-attribute", b'<testsuites><testsuite><testcase classname="c" name="n"><failure message="'
         + b"A" * 5_000_000 + b'">t</failure></testcase></testsuite></testsuites>', 0, warn),  # cut, said
        ("huge-numbers", b'<testsuites tests="99999999999999999999999999"><testsuite time="1e999999">'
         b'<testcase classname="c" name="n" time="NaN" line="-99999999999999999999"><failure message="m"/>'
         b"</testcase></testsuite></testsuites>", 0, ""),
    ]
    # Truncated mid-write at several offsets past the root's start tag: a warning, the
    # complete testcases, exit 0.
    start = VALID_JUNIT.index(b"<testsuite ") + 1
    for offset in range(start, len(VALID_JUNIT) - 20, max(1, (len(VALID_JUNIT) - 20 - start) // (12 if FULL else 6))):
        cases.append((f"truncated-at-{offset}", VALID_JUNIT[:offset], 0, warn))
    cases.append(("truncated-in-prologue", VALID_JUNIT[:15], 3, err))
    return cases


def test_xml_family_through_selfheal_fingerprint(tmp_path: Path, listener: Listener, counts: dict[str, int]) -> None:
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text("TOP-SECRET-CONTENT-4711\n")
    cases = xml_cases(secret_file, listener)
    # Every case through the CLI's main in this process; a sample (all in the full run) through
    # the console script as a real subprocess too.
    through_script = {name for name, _, _, _ in cases[:: 1 if FULL else 6]}
    for name, data, code, prefix in cases:
        path = tmp_path / f"{name}.xml"
        path.write_bytes(data)
        runs = [cli("fingerprint", str(path))]
        if name in through_script:
            done = subprocess.run([PY, "-m", "pytest_selfheal", "fingerprint", str(path)], capture_output=True,
                                  text=True, timeout=120, env=run_env())
            runs.append((done.returncode, done.stdout, done.stderr))
        for got, out, err in runs:
            assert got == code, f"{name}: exit {got}\n{err[:2000]}"
            assert "Traceback" not in err + out, name
            assert "TOP-SECRET-CONTENT" not in out + err, f"{name}: external entity expanded"
            if prefix:
                only_line(err, prefix)
            else:
                assert err.strip() == "", f"{name}: {err[:500]}"
            if name.startswith("truncated-at"):
                # A partial result: every testcase complete before the cut is still fingerprinted.
                assert "truncated" in err, name
                offset = int(name.rsplit("-", 1)[1])
                complete = VALID_JUNIT[:offset].count(b"</testcase>")
                assert len(out.splitlines()) == complete, f"{name}: {out!r}"
        bump(counts, "xml")
    assert listener.connections == 0, "an external entity or DTD was fetched over HTTP"
    # The same inputs on the Python API: never an exception other than InputError.
    for name, _data, code, _ in cases:
        path = tmp_path / f"{name}.xml"
        try:
            analyse_junit(path, warnings=[])
        except InputError:
            assert code != 0, name


def test_missing_file_and_directory_and_several_files(tmp_path: Path, counts: dict[str, int]) -> None:
    good = tmp_path / "good.xml"
    good.write_bytes(VALID_JUNIT)
    (tmp_path / "adir").mkdir()
    for args, code, errors in (
        ([str(tmp_path / "missing.xml")], 3, 1),
        ([str(tmp_path / "adir")], 3, 1),
        ([str(good), str(tmp_path / "missing.xml")], 3, 1),  # the good file is still reported
    ):
        code_, out, err = cli("fingerprint", *args)
        assert code_ == code, (args, err)
        assert len([ln for ln in err.splitlines() if ln.startswith("selfheal: error: ")]) == errors
        if len(args) > 1:
            assert "TEST_ASSERTION" in out
        bump(counts, "xml")


def write_big_junit(path: Path, megabytes: int) -> int:
    """A junit file of about ``megabytes`` MB: many passing testcases, one failure per 1000."""
    case = b'    <testcase classname="tests.test_big" name="test_%07d" time="0.001"/>\n'
    failing = (b'    <testcase classname="tests.test_big" name="test_%07d" time="0.001">'
               b'<failure message="assert %d == 0">' + b"x" * 200 + b"</failure></testcase>\n")
    target = megabytes * 1024 * 1024
    written = 0
    n = 0
    with open(path, "wb") as out:
        out.write(b'<?xml version="1.0" encoding="utf-8"?>\n<testsuites><testsuite name="big">\n')
        chunk: list[bytes] = []
        while written < target:
            line = (failing % (n, n)) if n % 1000 == 999 else (case % n)
            chunk.append(line)
            written += len(line)
            n += 1
            if len(chunk) >= 10_000:
                out.write(b"".join(chunk))
                chunk = []
        out.write(b"".join(chunk))
        out.write(b"</testsuite></testsuites>\n")
    return n


PEAK_RSS_LIMIT_MB = 200
MEASURE = r"""
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # Linux: kilobytes
print(json.dumps({"code": done.returncode, "peak_kb": kb, "lines": done.stdout.count(b"\n"),
                  "stderr": done.stderr.decode(errors="replace")[:2000]}))
"""


def fingerprint_big(tmp_path: Path, megabytes: int) -> dict[str, object]:
    path = tmp_path / f"big-{megabytes}.xml"
    n = write_big_junit(path, megabytes)
    try:
        # A fresh parent process: RUSAGE_CHILDREN then holds exactly the one child's peak.
        measured = subprocess.run([PY, "-c", MEASURE, PY, "-m", "pytest_selfheal", "fingerprint", str(path)],
                                  capture_output=True, text=True, timeout=1800, env=run_env())
    finally:
        path.unlink()
    data = json.loads(measured.stdout)
    assert data["code"] == 0, data["stderr"]
    assert "Traceback" not in str(data["stderr"])
    assert data["lines"] == n // 1000  # every failure found, in one pass
    peak_mb = int(data["peak_kb"]) / 1024  # type: ignore[call-overload]
    assert peak_mb < PEAK_RSS_LIMIT_MB, f"peak RSS {peak_mb:.0f} MB for a {megabytes} MB junit"
    return {"megabytes": megabytes, "testcases": n, "peak_rss_mb": round(peak_mb, 1)}


@pytest.mark.slow  # ~9 s: the bounded-memory reader is covered at small sizes by default (test_junit_bounds.py)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss units")
def test_50mb_junit_streams_in_bounded_memory(tmp_path: Path, counts: dict[str, int]) -> None:
    figures = fingerprint_big(tmp_path, 50)
    bump(counts, "xml")
    record_figures("test_hostile_input.py::test_50mb_junit_streams_in_bounded_memory", **figures)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss units")
def test_500mb_junit_streams_in_bounded_memory(tmp_path: Path, counts: dict[str, int]) -> None:
    figures = fingerprint_big(tmp_path, 500)
    bump(counts, "xml")
    record_figures("test_hostile_input.py::test_500mb_junit_streams_in_bounded_memory", **figures)


# --------------------------------------------------------------------------- config files

PWNED = "PWNED"


def config_cases(tmp: Path) -> list[tuple[str, str, str]]:
    """(id, file name under .planning/ or "global", content)."""
    marker = tmp / PWNED
    deep_json = '{"ralf_lite": ' + "[" * 200_000 + "]" * 200_000 + "}"
    deep_yaml = "ralf_lite:\n  apply_to: " + "[" * 5_000 + "]" * 5_000 + "\n"
    yaml_bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8)
    ) + "ralf_lite:\n  redaction:\n    patterns: *i\n"
    return [
        ("wrong-type-int", "config.json", '{"ralf_lite": {"max_iterations": "three"}}'),
        ("wrong-type-bool-as-int", "config.json", '{"ralf_lite": {"max_iterations": true}}'),
        ("wrong-type-nan", "config.json", '{"ralf_lite": {"max_iterations": NaN}}'),
        ("wrong-type-infinity", "config.json", '{"ralf_lite": {"max_runtime_minutes": Infinity}}'),
        ("wrong-type-object", "config.json", '{"ralf_lite": {"apply_to": true}}'),
        ("wrong-type-list", "config.json", '{"ralf_lite": {"verification": {"allowlist": "pytest"}}}'),
        ("wrong-type-command", "config.json", '{"ralf_lite": {"repair": {"command": "rm -rf /"}}}'),
        ("negative", "config.json", '{"ralf_lite": {"max_iterations": -1}}'),
        ("huge-int", "config.json", '{"ralf_lite": {"max_iterations": ' + "9" * 5000 + "}}"),
        ("ralf-lite-is-list", "config.json", '{"ralf_lite": [1, 2]}'),
        ("top-level-list", "config.json", "[1, 2, 3]"),
        ("unknown-key", "config.json", '{"ralf_lite": {"max_iteration": 3}}'),
        ("unknown-nested-key", "config.json", '{"ralf_lite": {"apply_to": {"everything": true}}}'),
        ("dotted-literal-key", "config.json", '{"ralf_lite": {"apply_to.tdd_tasks": true}}'),
        ("bad-regex", "config.json", '{"ralf_lite": {"redaction": {"patterns": ["("]}}}'),
        ("bad-rule", "config.json", '{"ralf_lite": {"classification": {"rules": [{"name": "x"}]}}}'),
        ("invalid-json", "config.json", '{"ralf_lite": {"max_iterations": 3,}}'),
        ("truncated-json", "config.json", '{"ralf_lite": {"max_iter'),
        ("deep-nesting-json", "config.json", deep_json),
        ("deep-nesting-yaml", "config.yaml", deep_yaml),
        ("huge-file", "config.json", '{"planning": "' + "x" * (9 * 1024 * 1024) + '"}'),
        ("not-utf8", "config.json", "\udcff"),
        ("yaml-python-object-apply", "config.yaml",
         f'ralf_lite: !!python/object/apply:os.system ["touch {marker}"]\n'),
        ("yaml-python-object-new", "config.yaml",
         f'ralf_lite:\n  max_iterations: !!python/object/new:subprocess.Popen [["touch", "{marker}"]]\n'),
        ("yaml-python-name", "config.yml", "ralf_lite: !!python/name:os.system\n"),
        ("yaml-python-module", "config.yaml", "x: !!python/module:os\n"),
        ("yaml-alias-bomb", "config.yaml", yaml_bomb),
        ("yaml-duplicate-anchor-merge", "config.yaml", "ralf_lite:\n  <<: {max_iterations: zero}\n"),
        ("global-wrong-type", "global", '{"ralf_lite": {"no_progress_repeats": 0}}'),
        ("global-yaml-tag-in-json-file", "global", f'ralf_lite: !!python/object/apply:os.system ["touch {marker}"]'),
    ]


def write_config(project: Path, global_dir: Path, name: str, content: str) -> Path:
    if name == "global":
        path = global_dir / "get-shit-done" / "config.json"
    else:
        path = project / ".planning" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if content == "\udcff":
        path.write_bytes(b'{"ralf_lite": {"max_iterations": "\xff\xfe"}}')
    else:
        path.write_text(content, encoding="utf-8")
    return path


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_config_family(tmp_path: Path, global_config_dir: Path, counts: dict[str, int]) -> None:
    """Every bad config is one line naming the file, exit 2 (``selfheal config``), and the
    YAML tags never run: the marker file is never created."""
    project = make_project(tmp_path / "proj", {"test_calc.py": DETERMINISTIC})
    for name, filename, content in config_cases(tmp_path):
        shutil.rmtree(project / ".planning", ignore_errors=True)
        shutil.rmtree(global_config_dir / "get-shit-done", ignore_errors=True)
        path = write_config(project, global_config_dir, filename, content)
        code, out, err = cli("config", "--project", str(project))
        assert code == 2, f"{name}: exit {code}\n{out[:500]}{err[:500]}"
        line = only_line(err)
        assert str(path) in line or path.name in line, f"{name}: {line}"
        assert len(line) < 1000, f"{name}: a one-line error, not a dump ({len(line)} chars)"
        assert not (tmp_path / PWNED).exists(), f"{name}: a YAML tag was executed"
        bump(counts, "config")
    # The same files stop `pytest --selfheal` before any test runs (a sample: a subprocess each).
    for name, filename, content in config_cases(tmp_path)[:: (1 if FULL else 8)]:
        shutil.rmtree(project / ".planning", ignore_errors=True)
        shutil.rmtree(global_config_dir / "get-shit-done", ignore_errors=True)
        write_config(project, global_config_dir, filename, content)
        result = run_pytest_selfheal(project)
        assert result.returncode == 4, f"{name}: pytest exit {result.returncode}\n{result.stdout[-800:]}"
        assert "Traceback" not in result.stdout + result.stderr, name
        assert "selfheal:" in result.stderr and "passed" not in result.stdout, name
        assert not (project / ".selfheal").exists(), f"{name}: a run proceeded on a bad config"
        assert not (tmp_path / PWNED).exists(), name
        bump(counts, "config")


def test_bad_pytest_ini_values(tmp_path: Path, counts: dict[str, int]) -> None:
    for ini in ("selfheal_max_iterations = three\n", "selfheal_config =\n    no_such_key = 1\n",
                "selfheal_repair_command = 'unbalanced\n", "selfheal_max_runtime_minutes = -5\n"):
        project = make_project(tmp_path / f"ini-{counts.get('config', 0)}", {"test_calc.py": DETERMINISTIC}, ini=ini)
        code, _, err = cli("config", "--project", str(project))
        assert code == 2, (ini, err)
        only_line(err)
        result = run_pytest_selfheal(project)
        assert result.returncode == 4 and "Traceback" not in result.stderr, (ini, result.stderr)
        bump(counts, "config", 2)


# --------------------------------------------------------------------------- hand-edited incident files


@pytest.fixture(scope="module")
def looped_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A project whose incident is in the inbox with a plan, an attempt and a run result
    (a replan leaves it open: planned, attempt_01.json, run_result.json)."""
    project = make_project(tmp_path_factory.mktemp("edited") / "proj", {"test_calc.py": DETERMINISTIC})
    incident_id = capture(project)
    done = selfheal(project, "loop", incident_id, "--set", "auto_replan_on_no_progress=true")
    assert done.returncode == 1, done.stdout + done.stderr
    return project, incident_id


def _json_edit(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        doc = json.loads(path.read_text())
        edit(doc)
        path.write_text(json.dumps(doc))
    return apply


def _write(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def _to_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()


INBOX, PLANS, RUNS = "error_inbox/{id}", "error_plans/{id}", "error_runs/{id}"

# (id, file, mutation, expected exit code per command) — commands: show, status, report, replay, loop.
# status lists a corrupted incident and exits 0; replay reads status.txt, the attempts, the run
# result and the events only (not incident.json/plan.json); loop resumes the open incident.
EDITS: list[tuple[str, str, Callable[[Path], None], dict[str, int]]] = [
    ("incident-missing-field", INBOX + "/incident.json", _json_edit(lambda d: d.pop("step")),
     {"show": 3, "status": 0, "report": 3, "replay": 0, "loop": 3}),
    ("incident-wrong-type", INBOX + "/incident.json", _json_edit(lambda d: d.update(year="2026")),
     {"show": 3, "status": 0, "report": 3, "replay": 0, "loop": 3}),
    ("incident-schema-invalid", INBOX + "/incident.json", _json_edit(lambda d: d.update(failure_class=["x"])),
     {"show": 3, "status": 0, "report": 3, "replay": 0, "loop": 3}),
    ("incident-wrong-id", INBOX + "/incident.json",
     _json_edit(lambda d: d.update(incident_id="incident_20200101_000000_other")),
     {"show": 3, "status": 0, "report": 3, "replay": 0, "loop": 3}),
    ("incident-truncated", INBOX + "/incident.json", _truncate,
     {"show": 3, "status": 0, "report": 3, "replay": 0, "loop": 3}),
    ("incident-empty", INBOX + "/incident.json", _write(b""),
     {"show": 3, "status": 0, "report": 3, "replay": 0, "loop": 3}),
    ("incident-array", INBOX + "/incident.json", _write(b"[]"),
     {"show": 3, "status": 0, "report": 3, "replay": 0, "loop": 3}),
    ("incident-binary", INBOX + "/incident.json", _write(b"\xff\xfe\x00garbage"),
     {"show": 3, "status": 0, "report": 3, "replay": 0, "loop": 3}),
    ("incident-is-dir", INBOX + "/incident.json", _to_dir,
     {"show": 3, "status": 0, "report": 3, "replay": 0, "loop": 3}),
    ("status-garbage", INBOX + "/status.txt", _write(b"lol\n"),
     {"show": 3, "status": 0, "report": 3, "replay": 3, "loop": 3}),
    ("status-binary", INBOX + "/status.txt", _write(b"\x00\xff\xfe"),
     {"show": 3, "status": 0, "report": 3, "replay": 3, "loop": 3}),
    ("status-empty", INBOX + "/status.txt", _write(b""),
     {"show": 3, "status": 0, "report": 3, "replay": 3, "loop": 3}),
    ("status-two-words", INBOX + "/status.txt", _write(b"planned running\n"),
     {"show": 3, "status": 0, "report": 3, "replay": 3, "loop": 3}),
    ("status-missing", INBOX + "/status.txt", lambda p: p.unlink(),
     {"show": 3, "status": 0, "report": 3, "replay": 3, "loop": 3}),
    ("plan-truncated", PLANS + "/plan.json", _truncate,
     {"show": 3, "status": 0, "report": 3, "replay": 0, "loop": 3}),
    ("plan-commands-not-list", PLANS + "/plan.json", _json_edit(lambda d: d.update(verification_commands="pytest")),
     {"show": 3, "status": 0, "report": 3, "replay": 0, "loop": 3}),
    ("plan-commands-unbalanced-quote", PLANS + "/plan.json",
     _json_edit(lambda d: d.update(verification_commands=["pytest 'unbalanced"])),
     {"show": 0, "status": 0, "report": 0, "replay": 0, "loop": 3}),
    ("plan-commands-empty", PLANS + "/plan.json", _json_edit(lambda d: d.update(verification_commands=[])),
     {"show": 0, "status": 0, "report": 0, "replay": 0, "loop": 3}),
    ("attempt-truncated", RUNS + "/attempt_01.json", _truncate,
     {"show": 3, "status": 0, "report": 3, "replay": 3, "loop": 3}),
    ("attempt-iteration-mismatch", RUNS + "/attempt_01.json", _json_edit(lambda d: d.update(iteration=7)),
     {"show": 3, "status": 0, "report": 3, "replay": 3, "loop": 3}),
    ("attempt-wrong-type", RUNS + "/attempt_01.json", _json_edit(lambda d: d.update(verification_passed="no")),
     {"show": 3, "status": 0, "report": 3, "replay": 3, "loop": 3}),
    ("run-result-truncated", RUNS + "/run_result.json", _truncate,
     {"show": 3, "status": 0, "report": 3, "replay": 3, "loop": 3}),
    ("run-result-schema-invalid", RUNS + "/run_result.json", _json_edit(lambda d: d.update(loops_used=-1)),
     {"show": 3, "status": 0, "report": 3, "replay": 3, "loop": 3}),
]


def expected_codes() -> dict[str, dict[str, int]]:
    return {name: codes for name, _, _, codes in EDITS}


def test_hand_edited_incident_files(tmp_path: Path, looped_template: tuple[Path, str], counts: dict[str, int]) -> None:
    template, incident_id = looped_template
    for name, relative, mutate, codes in EDITS:
        project = tmp_path / name
        shutil.copytree(template, project)
        root = project / ".selfheal"
        mutate(root / relative.format(id=incident_id))
        for command, code in codes.items():
            args = {"status": ["status", "--json"], "report": ["report", incident_id],
                    "loop": ["loop", incident_id]}.get(command, [command, incident_id])
            before = tree_snapshot(root)
            cwd = os.getcwd()
            os.chdir(project)  # loop reads the project's config from the current directory
            try:
                got, out, err = cli(*args, "--dir", str(root))
            finally:
                os.chdir(cwd)
            assert got == code, f"{name}: selfheal {command} exit {got}, expected {code}\n{err}"
            if code != 0:
                line = only_line(err)
                assert len(line) < 1000, f"{name}: {command}: {line[:200]}…"
            else:
                assert "Traceback" not in err
            if command == "status":
                # Listed, and flagged corrupted exactly when incident.json or status.txt is bad.
                rows = json.loads(out)
                assert [r["incident_id"] for r in rows] == [incident_id]
                bad_listing = relative.startswith(INBOX) and relative.endswith(("incident.json", "status.txt"))
                assert (rows[0]["status"] == "corrupted") == bad_listing, (name, rows)
            if command != "loop" or code != 0:
                assert tree_snapshot(root) == before, f"{name}: {command} changed the root"
            bump(counts, "incident_files")


def test_torn_and_garbage_event_lines_are_warnings(tmp_path: Path, looped_template: tuple[Path, str],
                                                   counts: dict[str, int]) -> None:
    template, incident_id = looped_template
    for name, tail in (("torn-last-line", b'{"event": "verification_fini'),
                       ("garbage-line", b"\x00\xff not json at all\n")):
        project = tmp_path / name
        shutil.copytree(template, project)
        log = project / ".selfheal" / "error_inbox" / incident_id / "audit_tail.jsonl"
        log.write_bytes(log.read_bytes() + tail)
        code, out, err = cli("show", incident_id, "--dir", str(project / ".selfheal"))
        assert code == 0 and "Traceback" not in err
        assert "warning" in (out + err).lower()
        code, _, err = cli("replay", incident_id, "--dir", str(project / ".selfheal"))
        assert code == 0, err
        assert err.startswith("selfheal: warning: ") and len(err.strip().splitlines()) == 1, err
        bump(counts, "incident_files", 2)


# --------------------------------------------------------------------------- incident ids

BAD_IDS = [
    "../x",
    "../../etc/passwd",
    "/etc/passwd",
    "incident_20260101_000000_ab/../../x",
    "incident_20260101_000000_ab/..",
    "a\x00b",
    "incident_20260101_000000_ab\x00",
    "x" * 10_000,
    "incident_20260101_000000_" + "a" * 10_000,
    "incident_20260101_000000_" + "a" * 41,
    "incident_20260101_000000_ab\n",
    "incident_20260101_000000_a b",
    "incident_20260101_000000_a.b",
    "incident_２０２６０１０１_000000_ab",  # fullwidth digits
    "incident_٢٠٢٦٠١٠١_000000_ab",  # Arabic-Indic digits
    "іncident_20260101_000000_ab",  # Cyrillic і
    "incident_20260101_000000_ab\u200b",  # zero-width space
    "incident_20260101_000000_ａｂ",  # fullwidth letters
    "",
    ".",
    "~",
    "C:\\Windows\\x",
]
ID_COMMANDS = [["show"], ["plan"], ["plan", "--force"], ["loop"], ["archive", "--as", "escalated"], ["replay"],
               ["report"]]


def test_invalid_incident_ids(tmp_path: Path, looped_template: tuple[Path, str], counts: dict[str, int]) -> None:
    template, _ = looped_template
    project = tmp_path / "ids"
    shutil.copytree(template, project)
    root = project / ".selfheal"
    before = tree_snapshot(tmp_path)
    for bad in BAD_IDS:
        for command in ID_COMMANDS:
            args = [command[0], bad, *command[1:], "--dir", str(root)]
            code, _, err = cli(*args)
            assert code == 2, f"{command} {bad[:40]!r}: exit {code} {err[:300]}"
            line = only_line(err)
            assert "invalid incident id" in line and len(line) < 300, line[:300]
            bump(counts, "incident_ids")
    # A prefix of a well-formed id (ids accept unique prefixes) that names nothing: exit 4.
    for command in ID_COMMANDS:
        code, _, err = cli(command[0], "incident_20260101_000000_", *command[1:], "--dir", str(root))
        assert code == 4, f"{command}: exit {code} {err[:300]}"
        assert "no incident id starts with" in only_line(err)
    assert tree_snapshot(tmp_path) == before, "an invalid id created or changed something"
    assert not (tmp_path / "x").exists() and not Path("/x").exists()
    # Through the console script too (argv cannot carry NUL: those stay in-process above).
    for bad in ("../x", "/etc/passwd", "x" * 10_000, "incident_２０２６０１０１_000000_ab"):
        result = selfheal(project, "show", bad)
        assert result.returncode == 2
        only_line(result.stderr)
        bump(counts, "incident_ids")


# --------------------------------------------------------------------------- verification commands

HOSTILE_COMMANDS = [
    "rm -rf x",
    f"pytest; touch {PWNED}",
    f"pytest ; touch {PWNED}",
    f"pytest $(touch {PWNED})",
    f"pytest `touch {PWNED}`",
    f"pytest && touch {PWNED}",
    f"pytest || touch {PWNED}",
    f"pytest | tee {PWNED}",
    f"pytest > {PWNED}",
    f"pytest & touch {PWNED}",
    f"sh -c 'touch {PWNED}'",
    f"bash -c 'touch {PWNED}'",
    f"/bin/touch {PWNED}",
    f"touch {PWNED}",
    f"env touch {PWNED}",
    f"python -c \"open('{PWNED}', 'w')\"",
    "python -m pip install evil-package",
    "python -m http.server",
    # Paths to programs named like the runner (test_findings.py has the end-to-end version).
    f"./pytest {PWNED}",
    "bin/pytest -q",
    "/tmp/evil/pytest",
    "evil/python -m pytest",
    f"pytest$(touch {PWNED})",
    f"$(touch {PWNED})",
]


def test_hostile_verification_commands_are_refused_and_logged(tmp_path: Path, counts: dict[str, int]) -> None:
    template = make_project(tmp_path / "template", {"test_calc.py": DETERMINISTIC})
    incident_id = capture(template)
    through_script = set(range(0, len(HOSTILE_COMMANDS), 1 if FULL else 5))
    for n, command in enumerate(HOSTILE_COMMANDS):
        project = tmp_path / f"cmd-{n}"
        shutil.copytree(template, project)
        (project / "x").mkdir()
        (project / "x" / "keep.txt").write_text("keep")
        store = Store(project / ".selfheal")
        plan_path = project / ".selfheal" / "error_plans" / incident_id / "plan.json"
        plan = json.loads(plan_path.read_text())
        plan["verification_commands"] = [command]
        plan_path.write_text(json.dumps(plan))
        doc = json.loads((project / ".selfheal" / "error_inbox" / incident_id / "incident.json").read_text())
        doc["rootdir"] = str(project)
        (project / ".selfheal" / "error_inbox" / incident_id / "incident.json").write_text(json.dumps(doc))
        events_before = len(store.read_events(incident_id)[0])
        if n in through_script:
            result = selfheal(project, "loop", incident_id)
            code, err = result.returncode, result.stdout + result.stderr
            stderr = result.stderr
        else:
            cwd = os.getcwd()
            os.chdir(project)
            try:
                code, out, stderr = cli("loop", incident_id)
            finally:
                os.chdir(cwd)
            err = out + stderr
        assert code == 5, f"{command!r}: exit {code}\n{err}"
        line = only_line(stderr)
        assert "refusing verification command" in line, line
        for where in (project, tmp_path, Path.cwd()):
            assert not (where / PWNED).exists(), f"{command!r} was executed"
        assert (project / "x" / "keep.txt").read_text() == "keep", f"{command!r} was executed"
        events = store.read_events(incident_id)[0][events_before:]
        logged = [e for e in events if e.event == "decision_point_needed" and e.get("refused")]
        assert len(logged) == 1 and logged[0].get("command"), f"{command!r}: not logged: {events}"
        assert store.count_attempts(incident_id) == 0
        assert store.locate(incident_id)[0] == "inbox"
        bump(counts, "verification_commands")
    check_root(tmp_path / "cmd-0" / ".selfheal")
