"""Property-based: random junit and config documents never crash anything, and a capture or a
loop writes nothing outside the reports root.

- junit: documents built from a strategy over element names, attributes and text (control
  characters, huge numbers, entities, CDATA, broken nesting), and random byte mutations of
  the real junit files of tests/golden/ → ``junit.iter_testcases`` /
  ``analyse.analyse_junit`` raise nothing but ``errors.InputError``; a sample goes
  through the ``selfheal fingerprint`` console script: no traceback, exit 0 or 3;
- config: random JSON values under ``ralf_lite`` (and random ``KEY=VALUE`` overrides) →
  a valid ``EffectiveConfig`` or ``errors.ConfigError``, nothing else;
- writes: a capture of a random failure message, and the loop after it, change nothing
  outside ``.selfheal/`` (tmp tree snapshot before/after; the loop's temp files go away).

Example counts: 200 per property by default, 2,000 with SELFHEAL_RELIABILITY_FULL=1.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import FULL, PY, capture, make_project, run_env, selfheal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_selfheal.analysis.analyse import analyse_junit
from pytest_selfheal.config.files import load_config
from pytest_selfheal.config.keys import SCHEMA
from pytest_selfheal.config.settings import EffectiveConfig, parse_override
from pytest_selfheal.errors import ConfigError, InputError
from pytest_selfheal.junit.reader import iter_testcases

from .conftest import record_figures, tree_snapshot

EXAMPLES = 2000 if FULL else 100
CLI_EXAMPLES = 60 if FULL else 8
WRITE_EXAMPLES = 12 if FULL else 2
GOLDEN = sorted((Path(__file__).resolve().parents[1] / "golden").glob("*.xml"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not FULL,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def examples() -> Iterator[dict[str, int]]:
    """Examples run per property (hypothesis calls the test body once per example)."""
    seen: dict[str, int] = {}
    yield seen
    for name, number in sorted(seen.items()):
        record_figures(f"test_property_inputs.py::{name}", examples=number, failures=0)


def count(examples: dict[str, int], name: str) -> None:
    examples[name] = examples.get(name, 0) + 1


# --------------------------------------------------------------------------- junit strategies

NAMES = ["testsuites", "testsuite", "testcase", "failure", "error", "skipped", "system-out", "system-err",
         "properties", "property", "rerunFailure", "flakyFailure", "rerunError", "flakyError", "x", "html"]
ATTRS = ["classname", "name", "message", "type", "time", "line", "file", "tests", "failures", "timestamp", "xmlns"]
# Text with the awkward parts of real output: control characters, XML specials, huge numbers.
TEXT = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x3F), max_size=20),
    st.sampled_from(["1e999", "-0", "NaN", "inf", "9" * 400, "0x1f", "1,234.5", "  ", "&amp;", "&#0;", "&#x1F600;",
                     "]]>", "<![CDATA[x]]>", "\x00", "\ufffe", "\U0001f600", "E   assert 1 == 2"]),
)


def _escape(text: str, raw: bool) -> str:
    return text if raw else text.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")


@st.composite
def element(draw: Any, depth: int = 0) -> str:
    name = draw(st.sampled_from(NAMES))
    raw = draw(st.booleans()) and draw(st.booleans())  # mostly well-formed, sometimes not
    attrs = draw(st.dictionaries(st.sampled_from(ATTRS), TEXT, max_size=3))
    attr_text = "".join(f' {k}="{_escape(v, raw)}"' for k, v in attrs.items())
    if depth >= 3 or draw(st.integers(0, 3)) == 0:
        return f"<{name}{attr_text}/>"
    children = draw(st.lists(element(depth + 1), max_size=3))
    text = _escape(draw(TEXT), raw)
    close = name if draw(st.integers(0, 20)) else draw(st.sampled_from(NAMES))  # sometimes mismatched
    return f"<{name}{attr_text}>{text}{''.join(children)}</{close}>"


@st.composite
def junit_document(draw: Any) -> bytes:
    body = draw(element())
    prolog = draw(st.sampled_from(["", '<?xml version="1.0"?>\n', '<?xml version="1.0" encoding="utf-8"?>\n',
                                   '<?xml version="1.1"?>\n', "\ufeff"]))
    text = prolog + body
    data = text.encode("utf-8", errors="surrogatepass")
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]  # truncated mid-write
    return data


@st.composite
def mutated_golden(draw: Any) -> bytes:
    data = bytearray(draw(st.sampled_from(GOLDEN)).read_bytes())
    for _ in range(draw(st.integers(1, 8))):
        if not data:
            break
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "duplicate"]))
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[at: at + draw(st.integers(1, 64))]
        elif kind == "truncate":
            del data[at:]
        else:
            end = min(len(data), at + draw(st.integers(1, 200)))
            data[at:at] = data[at:end]
    return bytes(data)


def read_everything(data: bytes, tmp: Path) -> None:
    """Both readers, to the end; only InputError may come out."""
    warnings: list[str] = []
    try:
        for case in iter_testcases(io.BytesIO(data), warnings=warnings):
            assert isinstance(case.test, str)
    except InputError as exc:
        assert "\n" not in str(exc)
    path = tmp / "junit.xml"
    path.write_bytes(data)
    try:
        failures = [failure for failure, _ in analyse_junit(path, warnings=warnings)]
    except InputError as exc:
        assert "\n" not in str(exc)
    else:
        for failure in failures:
            assert failure.fingerprint and isinstance(failure.signature, str)
    assert all("\n" not in w for w in warnings)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("property")


@SETTINGS
@given(data=junit_document())
def test_random_junit_documents(data: bytes, scratch: Path, examples: dict[str, int]) -> None:
    read_everything(data, scratch)
    count(examples, "test_random_junit_documents")


@SETTINGS
@given(data=mutated_golden())
def test_random_mutations_of_real_junit(data: bytes, scratch: Path, examples: dict[str, int]) -> None:
    read_everything(data, scratch)
    count(examples, "test_random_mutations_of_real_junit")


@settings(max_examples=CLI_EXAMPLES, deadline=None, derandomize=not FULL,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.one_of(junit_document(), mutated_golden()))
def test_random_junit_through_the_console_script(data: bytes, scratch: Path, examples: dict[str, int]) -> None:
    path = scratch / "cli.xml"
    path.write_bytes(data)
    result = subprocess.run([PY, "-m", "pytest_selfheal", "fingerprint", "--json", str(path)], capture_output=True,
                            text=True, timeout=60, env=run_env())
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode in (0, 3), result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert all(ln.startswith(("selfheal: error: ", "selfheal: warning: ")) for ln in lines), lines
    if result.returncode == 0:
        json.loads(result.stdout)
    count(examples, "test_random_junit_through_the_console_script")


# --------------------------------------------------------------------------- config documents

KNOWN = sorted({spec.key.split(".")[0] for spec in SCHEMA} | {spec.key.split(".")[-1] for spec in SCHEMA})
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10 ** 30), max_value=10 ** 30),
                      st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
                      st.sampled_from(["pytest", "(", "*TOKEN*", "[a-z]+", "TOOLING_ENV", "{prompt_file}", ""]))
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KNOWN) | st.text(max_size=8), inner,
                                                                 max_size=5),
    max_leaves=25,
)
RALF_LITE = st.one_of(JSON_VALUE, st.dictionaries(st.sampled_from(KNOWN), JSON_VALUE, max_size=6))


def check_effective(effective: Any) -> None:
    assert isinstance(effective, EffectiveConfig)
    values = effective.to_json()["ralf_lite"]
    json.dumps(values, allow_nan=False)  # every accepted number is finite
    for spec in SCHEMA:
        value = effective.get(spec.key)
        if value is None:
            assert spec.nullable or spec.default is None, spec.key
        elif spec.kind in ("int",):
            assert isinstance(value, int) and not isinstance(value, bool), spec.key
        elif isinstance(value, float):
            assert math.isfinite(value), spec.key


@SETTINGS
@given(ralf_lite=RALF_LITE, as_yaml=st.booleans(), other=JSON_VALUE)
def test_random_config_documents(ralf_lite: Any, as_yaml: bool, other: Any, scratch: Path,
                                 examples: dict[str, int]) -> None:
    project = scratch / "config-project"
    planning = project / ".planning"
    planning.mkdir(parents=True, exist_ok=True)
    for old in planning.iterdir():
        old.unlink()
    document = {"ralf_lite": ralf_lite, "planning": other}  # other tools' keys are never read
    if as_yaml:
        import yaml  # type: ignore[import-untyped,unused-ignore]

        (planning / "config.yaml").write_text(yaml.safe_dump(document, allow_unicode=True))
    else:
        (planning / "config.json").write_text(json.dumps(document))
    env = {"OPENCODE_CONFIG_DIR": str(scratch / "no-global"), "HOME": str(scratch)}
    try:
        effective = load_config(project, env=env, ini={})
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc)
    else:
        check_effective(effective)
    count(examples, "test_random_config_documents")


@SETTINGS
@given(key=st.sampled_from([s.key for s in SCHEMA]) | st.text(max_size=20), value=st.text(max_size=40))
def test_random_overrides(key: str, value: str, examples: dict[str, int], scratch: Path) -> None:
    try:
        override = parse_override(f"{key}={value}", "--set")
        effective = load_config(scratch / "empty-project", env={"OPENCODE_CONFIG_DIR": str(scratch / "none")},
                                ini={}, overrides=[override])
    except ConfigError as exc:
        assert "\n" not in str(exc)
    else:
        check_effective(effective)
    count(examples, "test_random_overrides")


# --------------------------------------------------------------------------- nothing written outside the root

MESSAGES = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=200)


# Side effects of the tools selfheal runs, not files of ours: git refreshes the stat cache of its
# index (content unchanged: `git status` is compared), pytest's cacheprovider updates
# .pytest_cache in the verification runs exactly as any pytest run of those tests would.
TOOL_SIDE_EFFECTS = ("proj/.git/index", "proj/.pytest_cache")


def _git_status(project: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=project, capture_output=True,
                          text=True, check=True).stdout


@settings(max_examples=WRITE_EXAMPLES, deadline=None, derandomize=not FULL,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(message=MESSAGES, stdout=MESSAGES)
def test_capture_and_loop_write_only_under_the_reports_root(message: str, stdout: str, scratch: Path,
                                                           examples: dict[str, int]) -> None:
    base = Path(tempfile.mkdtemp(dir=scratch))
    project = make_project(base / "proj", {"test_random.py": f"""
        def test_random():
            print({stdout!r})
            raise AssertionError({message!r})
    """})
    private_tmp = base / "tmp"
    private_tmp.mkdir()
    env = {"TMPDIR": str(private_tmp)}  # the loop's verification temp dirs land here
    status_before = _git_status(project)
    before = tree_snapshot(base)
    incident_id = capture(project, env=env)
    done = selfheal(project, "loop", incident_id, env=env)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    after = tree_snapshot(base)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    # Folders whose entries changed ("proj" gains .selfheal; "tmp" held the loop's temp dir)
    # show up through their mtime; what matters is what is inside them.
    outside = sorted(p for p in changed if not p.startswith("proj/.selfheal") and p not in ("proj", "proj/.git", "tmp")
                     and not p.startswith(TOOL_SIDE_EFFECTS))
    assert outside == [], f"written outside the reports root: {outside}"
    assert list(private_tmp.iterdir()) == [], "temp files left behind"
    assert _git_status(project).replace("!! .pytest_cache/\n", "").replace("!! .selfheal/\n", "") == \
        status_before, "the repository's state changed"
    count(examples, "test_capture_and_loop_write_only_under_the_reports_root")
