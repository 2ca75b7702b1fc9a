"""Target paths from traceback frames (frames.py): inside the repo only, pure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_selfheal.analysis.frames import frame_paths, repo_relative, target_paths

ROOT = "/home/dev/proj"

PYTHON_TRACEBACK = f"""\
Traceback (most recent call last):
  File "{ROOT}/tests/test_calc.py", line 7, in test_add
    assert add(1, 2) == 4
  File "{ROOT}/src/calc/core.py", line 3, in add
    return helper(a, b)
  File "{ROOT}/.venv/lib/python3.11/site-packages/pluggy/_hooks.py", line 513, in __call__
  File "/usr/lib/python3.11/json/__init__.py", line 346, in loads
  File "<frozen importlib._bootstrap>", line 1204, in _gcd_import
  File "<string>", line 1, in <module>
  File "{ROOT}/src/calc/core.py", line 9, in helper
AssertionError
"""

PYTEST_SHORT = """\
    def test_add():
>       assert add(1, 2) == 4
E       assert 3 == 4

tests/test_calc.py:7: in test_add
    assert add(1, 2) == 4
src/calc/core.py:3: in add
    return helper(a, b)
src/calc/util.py:12: AssertionError
"""

JEST = f"""\
  ● sum › adds

    expect(received).toBe(expected)

      at Object.<anonymous> ({ROOT}/web/sum.test.js:12:5)
      at {ROOT}/web/src/sum.ts:4:10
      at Promise.then.completed ({ROOT}/node_modules/jest-circus/build/utils.js:298:28)
"""

GO = """\
=== RUN   TestAdd
    calc_test.go:12: got 3, want 4
    internal/calc/calc.go:30: helper failed
--- FAIL: TestAdd (0.00s)
"""


@pytest.mark.parametrize(
    "text,expected",
    [
        (PYTHON_TRACEBACK, ["tests/test_calc.py", "src/calc/core.py"]),
        (PYTEST_SHORT, ["tests/test_calc.py", "src/calc/core.py", "src/calc/util.py"]),
        (JEST, ["web/sum.test.js", "web/src/sum.ts"]),
        (GO, ["calc_test.go", "internal/calc/calc.go"]),
    ],
    ids=["python", "pytest-short", "jest", "go"],
)
def test_recognised_forms(text: str, expected: list[str]) -> None:
    assert target_paths(text, ROOT) == expected


def test_order_of_first_appearance_and_dedup() -> None:
    text = "src/b.py:1: in f\nsrc/a.py:2: in g\nsrc/b.py:3: in h\n"
    assert target_paths(text, ROOT) == ["src/b.py", "src/a.py"]


def test_escapes_and_foreign_paths_are_dropped() -> None:
    text = "\n".join(
        [
            "../outside.py:3: in x",
            "src/../../etc/passwd.py:1: in y",
            '  File "/elsewhere/proj/x.py", line 1, in z',
            f'  File "{ROOT}-other/x.py", line 1, in z',  # a sibling with the same prefix
            f'  File "{ROOT}/venv/lib/python3.9/site-packages/a.py", line 1',
            f'  File "{ROOT}/build/lib/python3.12/b.py", line 1',
            "node_modules/jest/x.js:1:2",
            "connection refused: db.example.com:5432",
            "see http://localhost:8080/path",
        ]
    )
    assert target_paths(text, ROOT) == []


def test_relative_paths_are_normalised() -> None:
    assert target_paths("./src//pkg/./m.py:3: in f", ROOT) == ["src/pkg/m.py"]
    assert target_paths('File "src/pkg/../m.py", line 3', ROOT) == ["src/m.py"]


def test_trailing_slash_and_relative_root() -> None:
    assert target_paths(f'File "{ROOT}/a.py", line 1', ROOT + "/") == ["a.py"]
    assert target_paths('File "a.py", line 1', ".") == ["a.py"]


def test_windows_paths() -> None:
    text = "C:\\work\\proj\\src\\mod.py:3: in f\nsrc\\other.py:4: in g\n"
    assert target_paths(text, "C:\\work\\proj") == ["src/mod.py", "src/other.py"]
    assert target_paths(text, "/home/dev/proj") == ["src/other.py"]


def test_extra_paths_follow_the_frames() -> None:
    text = "src/calc.py:3: in add"
    extra = ["tests/test_calc.py", "src/calc.py", "../x.py", f"{ROOT}/tests/conftest.py"]
    assert target_paths(text, ROOT, extra=extra) == ["src/calc.py", "tests/test_calc.py", "tests/conftest.py"]


def test_no_filesystem_access(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import os.path

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("frames.py must not touch the filesystem")

    for name in ("getcwd",):
        monkeypatch.setattr(os, name, boom)
    for name in ("exists", "isfile", "realpath", "abspath"):
        monkeypatch.setattr(os.path, name, boom)
    assert target_paths(PYTHON_TRACEBACK + PYTEST_SHORT, ROOT) == [
        "tests/test_calc.py",
        "src/calc/core.py",
        "src/calc/util.py",
    ]
    assert target_paths("x.py:1: in f", "relative/root") == ["x.py"]


def test_frame_paths_raw() -> None:
    assert list(frame_paths('File "a.py", line 1\nb/c.go:3: x')) == ["a.py", "b/c.go"]


def test_repo_relative_edge_cases() -> None:
    assert repo_relative(ROOT, ROOT) is None
    assert repo_relative("", ROOT) is None
    assert repo_relative("..", ROOT) is None
    assert repo_relative(f"{ROOT}/.git/hooks/x.py", ROOT) is None
    assert repo_relative(f"{ROOT}/src/site-packages.py", ROOT) == "src/site-packages.py"


@given(st.text(max_size=400))
def test_any_text_gives_safe_relative_paths(text: str) -> None:
    for path in target_paths(text, ROOT):
        assert not path.startswith("/")
        assert ".." not in path.split("/")
        assert "\\" not in path
        assert path and path != "."
