"""Repo-relative target paths from traceback text (pure): the files a failure's traceback
points at inside the repository, where a fix most likely goes; installed packages and
virtualenvs dropped, existence not checked (the frames describe the run that failed).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Sequence
from typing import Optional

# Source-like extensions of the ``path:line`` forms: the list keeps ``host.com:5432`` out of the plan.
_EXTENSIONS = (
    "py|pyi|pyx|pxd|js|jsx|mjs|cjs|ts|tsx|mts|cts|vue|svelte|go|java|kt|kts|scala|groovy|rb|rs|"
    "c|h|cc|cpp|cxx|hpp|hh|m|mm|cs|fs|php|swift|dart|ex|exs|erl|lua|pl|pm|sh|bash|feature|"
    "robot|sql|ya?ml|json|toml|ini|cfg|tpl|j2|jinja2?|html?|css|scss"
)

_FRAME_RE = re.compile(
    # Python traceback line.
    r'File "(?P<py>[^"\n]+)", line \d+'
    # Every "path.ext:LINE" form, starting at a delimiter ("xfoo.py:1" is not cut in two).
    r"|(?<![^\s(\"'\[=,;])(?P<loc>(?:[A-Za-z]:)?[^\s:\"'()<>\[\],;]+\.(?:" + _EXTENSIONS + r")):\d+",
)

# Directory names that hold installed or generated code, never a fix target.
_EXCLUDED_DIRS = frozenset({
    "site-packages", "dist-packages", "__pypackages__", "node_modules", ".venv", "venv", "virtualenv", ".virtualenvs",
    ".tox", ".nox", ".eggs", ".git", "__pycache__", ".selfheal",
})
# lib/python3.11/ (a virtualenv or an interpreter's stdlib), also lib64/.
_PYTHON_LIB_RE = re.compile(r"(?:^|/)lib(?:64)?/(?:python|pypy)\d+(?:\.\d+)*(?:/|$)")
_DRIVE_RE = re.compile(r"^[A-Za-z]:")


def _posix(path: str) -> str:
    path = path.replace("\\", "/")
    # Windows drive letters compare case-insensitively.
    if _DRIVE_RE.match(path):
        path = path[0].lower() + path[1:]
    return path


def _is_absolute(path: str) -> bool:
    return path.startswith("/") or bool(_DRIVE_RE.match(path))


def repo_relative(path: str, repo_root: str) -> Optional[str]:
    """``path`` as a repo-relative POSIX path, or None outside ``repo_root`` or in installed packages."""
    path = _posix(path.strip())
    if not path or path.startswith("<"):  # <string>, <frozen importlib._bootstrap>
        return None
    root = posixpath.normpath(_posix(repo_root.strip() or "."))
    if _is_absolute(path):
        norm = posixpath.normpath(path)
        prefix = root if root.endswith("/") else root + "/"
        if not norm.startswith(prefix):
            return None
        rel = norm[len(prefix):]
    else:
        rel = posixpath.normpath(path)
    if rel in (".", "") or rel == ".." or rel.startswith("../") or _is_absolute(rel):
        return None
    parts = rel.split("/")
    if any(part in _EXCLUDED_DIRS for part in parts[:-1]) or _PYTHON_LIB_RE.search(rel):
        return None
    return rel


def frame_paths(text: str) -> Iterator[str]:
    for match in _FRAME_RE.finditer(text):
        yield match.group("py") or match.group("loc")


def target_paths(text: str, repo_root: str, *, extra: Sequence[str] = (), base: str = "") -> list[str]:
    """Repo-relative paths of the frames in ``text`` (relative to ``base``), then of ``extra``, each once."""
    seen: list[str] = []
    frames = [posixpath.join(base, p) if base and not _is_absolute(_posix(p)) else p for p in frame_paths(text)]
    for raw in frames + list(extra):
        rel = repo_relative(raw, repo_root)
        if rel is not None and rel not in seen:
            seen.append(rel)
    return seen


_TEST_DIRS = frozenset({"test", "tests", "testing"})


def is_test_file(path: str) -> bool:
    """A test, a conftest or a fixture: any file below a ``test``/``tests``/``testing`` directory too."""
    text = path.replace("\\", "/").strip()
    parts = (posixpath.normpath(text) if text else "").split("/")
    name = parts[-1]
    return (name == "conftest.py" or (name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.py")
            or any(part in _TEST_DIRS for part in parts[:-1]))
