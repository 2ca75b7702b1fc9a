"""Regenerate the golden fingerprint corpus in tests/golden/.

Every ``tests/golden/<name>.xml`` (junit from some runner) has ``<name>.expected.json``
beside it: the output of ``selfheal fingerprint <name>.xml --json`` run from that
directory (so ``file`` is the bare file name). tests/test_golden.py fails when they drift.

    python scripts/regen_golden.py            # rewrite every <name>.expected.json
    python scripts/regen_golden.py --check    # exit 1 and list the drifted files
    python scripts/regen_golden.py --inputs   # first re-run pytest to re-make the inputs
                                              # marked "generated" below, then rewrite

Review the diff before committing: a changed fingerprint is a changed contract (bump
fingerprint.SCHEME when normalisation changes). Inputs from other runners (jest, go,
Surefire, mocha, unittest-xml-reporting, pytest-rerunfailures) are hand-written to the
real formats and never regenerated.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"

# -- the projects pytest is really run on (--inputs) ---------------------------------------

APP_TESTS = '''
import datetime
import os
import socket
import subprocess
import uuid

import pytest


class Widget:
    pass


def test_passes():
    assert 1 + 1 == 2


def test_assert_sum():
    assert sum([1, 2]) == 4


@pytest.mark.parametrize("value,expected", [(1, 2), (3, 7), ("a-b", "a_b"), ("café", "cafe")])
def test_double(value, expected):
    assert value * 2 == expected


def test_reads_tmp_file(tmp_path):
    with open(tmp_path / "data" / "config.json") as fh:
        fh.read()


def test_object_repr_and_pid():
    raise ValueError(f"unexpected {Widget()!r} from worker pid {os.getpid()}")


def test_request_id_and_time():
    started = datetime.datetime.now(datetime.timezone.utc).isoformat()
    raise AssertionError(f"request {uuid.uuid4()} started {started} failed after 0.25s")


@pytest.fixture
def database():
    raise RuntimeError("database fixture failed to start")


def test_setup_error(database):
    pass


@pytest.fixture
def lock_file():
    yield
    raise OSError("teardown could not remove the lock file")


def test_fails_then_teardown_error(lock_file):
    assert [1, 2, 3] == [1, 2, 4]


@pytest.mark.skip(reason="not on this platform")
def test_skipped():
    pass


@pytest.mark.xfail(strict=True, reason="known bug 12")
def test_xpass_strict():
    pass


def test_connection_refused():
    socket.create_connection(("127.0.0.1", 9), timeout=2)


def test_timeout():
    raise TimeoutError("operation timed out after 1.5s")


def test_missing_command():
    subprocess.run(["definitely-not-an-installed-command"], check=True)


class TestGroup:
    def test_key_error(self):
        {}["missing"]
'''

COLLECTION_TESTS = {
    "test_syntax.py": "def test_syntax(:\n    pass\n",
    "test_missing_module.py": "import definitely_not_installed_pkg\n\n\ndef test_never():\n    pass\n",
    "test_import_name.py": "from os.path import no_such_name\n\n\ndef test_never():\n    pass\n",
}

# The same bug run twice (different basetemp, tmp path, pid, address in the message) must
# fingerprint the same; the "other bug" variant must not.
PAIR_TESTS = '''
import os


class Connection:
    pass


def load_report(path):
    {load_body}


def test_report_written(tmp_path):
    target = tmp_path / "out" / "report.txt"
    load_report(target)


def test_unrelated():
    assert "ok" == "ok"
'''
PAIR_BUG = (
    'raise AssertionError(f"expected {path} to exist (worker pid {os.getpid()},'
    ' via {Connection()!r})")'
)
PAIR_OTHER_BUG = 'raise KeyError(f"report format {str(path)[-3:]!r} not registered")'


def _pytest(project: Path, junit: Path, *args: str) -> None:
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:selfheal",  # the corpus is the plain runner's output
        "-p",
        "no:cacheprovider",
        "-q",
        f"--junitxml={junit}",
        *args,
    ]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    subprocess.run(argv, cwd=project, env=env, stdout=subprocess.DEVNULL, check=False)
    if not junit.is_file():
        raise SystemExit(f"pytest wrote no junit for {junit.name}")


def regenerate_inputs() -> list[str]:
    """Run pytest for real and (re)write the generated inputs; returns their names."""
    made = []
    with tempfile.TemporaryDirectory(prefix="selfheal-golden-") as tmp:
        base = Path(tmp)
        app = base / "app"
        app.mkdir()
        (app / "test_app.py").write_text(textwrap.dedent(APP_TESTS).lstrip(), encoding="utf-8")
        for family in ("xunit1", "xunit2"):
            name = f"pytest_{family}.xml"
            _pytest(app, GOLDEN / name, "-o", f"junit_family={family}", "test_app.py")
            made.append(name)
        _pytest(app, GOLDEN / "pytest_xdist.xml", "-n", "2", "test_app.py")
        made.append("pytest_xdist.xml")

        broken = base / "broken"
        broken.mkdir()
        for filename, source in COLLECTION_TESTS.items():
            (broken / filename).write_text(source, encoding="utf-8")
        _pytest(broken, GOLDEN / "pytest_collection_errors.xml")
        made.append("pytest_collection_errors.xml")

        (base / "elsewhere").mkdir()  # pytest creates --basetemp itself, not its parents
        for name, body, extra in (
            ("pair_run_a.xml", PAIR_BUG, ()),
            ("pair_run_b.xml", PAIR_BUG, (f"--basetemp={base / 'elsewhere' / 'basetemp'}",)),
            ("pair_other_bug.xml", PAIR_OTHER_BUG, ()),
        ):
            project = base / name.replace(".xml", "")
            project.mkdir()
            source = textwrap.dedent(PAIR_TESTS).lstrip().replace("{load_body}", body)
            (project / "test_pair.py").write_text(source, encoding="utf-8")
            _pytest(project, GOLDEN / name, *extra)
            made.append(name)
    return made


# -- expected outputs -----------------------------------------------------------------------


def expected_for(xml: Path) -> list[dict[str, Any]]:
    """What ``selfheal fingerprint <xml> --json`` prints, run from the file's directory."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # run from a checkout without installing
    from pytest_selfheal.cli.reports import collect

    warnings: list[str] = []
    errors: list[str] = []
    found = collect([str(xml)], warnings, errors)
    if errors:
        raise SystemExit(f"{xml.name}: {errors[0]}")
    return [row._replace(file=xml.name).to_json() for row in found]


def render(rows: list[dict[str, Any]]) -> str:
    """The stored form of an expected file: indented, key-sorted JSON."""
    return json.dumps(rows, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def golden_inputs() -> list[Path]:
    """Every junit input of the corpus."""
    return sorted(GOLDEN.glob("*.xml"))


def expected_path(xml: Path) -> Path:
    """``<name>.expected.json`` beside ``<name>.xml``."""
    return xml.with_name(xml.name[: -len(".xml")] + ".expected.json")


def main(argv: Sequence[str] = ()) -> int:
    """Rewrite (or ``--check``) every expected file; ``--inputs`` re-runs pytest first."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report drift, write nothing")
    parser.add_argument("--inputs", action="store_true", help="re-make the pytest inputs first")
    args = parser.parse_args(list(argv))
    if args.inputs and not args.check:
        for name in regenerate_inputs():
            print(f"regenerated input {name}")
    drifted = []
    for xml in golden_inputs():
        target = expected_path(xml)
        text = render(expected_for(xml))
        current = target.read_text(encoding="utf-8") if target.is_file() else None
        if current == text:
            continue
        drifted.append(target.name)
        if not args.check:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target.relative_to(ROOT)}")
    if args.check and drifted:
        print("drifted: " + ", ".join(drifted))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
