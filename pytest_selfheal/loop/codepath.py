"""In a repair worktree, the code under test is the worktree's (docs/repair.md "Editable installs").

An editable install or a ``PYTHONPATH`` entry inside the project imports the *user's* tree
from anywhere, so a verification in the worktree would test the unchanged code. Every import
location inside the project is mapped to the worktree and put first on ``PYTHONPATH``, which
Python consults before ``.pth`` entries and editable finders.
"""

from __future__ import annotations

import ast
import os
import re
import site
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

_FINDER_GLOB = "__editable___*_finder.py"
_MAPPING = re.compile(r"^MAPPING\s*(?::[^=]*)?=\s*(\{.*?\})\s*$", re.MULTILINE | re.DOTALL)


@dataclass
class Redirection:
    """The verification's environment, what was redirected, and what could not be."""

    env: dict[str, str]
    redirected: list[str] = field(default_factory=list)  # worktree paths put first on PYTHONPATH
    missing: list[str] = field(default_factory=list)  # project paths with no worktree twin


def _inside(path: Path, root: Path) -> Optional[Path]:
    try:
        return path.resolve().relative_to(root)
    except (ValueError, OSError):
        return None


def finder_paths(site_dirs: Iterable[str]) -> list[str]:
    """The import paths of setuptools' editable finders' packages in ``site_dirs``."""
    found: list[str] = []
    for folder in site_dirs:
        for finder in sorted(Path(folder).glob(_FINDER_GLOB)) if Path(folder).is_dir() else []:
            try:
                match = _MAPPING.search(finder.read_text(encoding="utf-8", errors="replace"))
                mapping = ast.literal_eval(match.group(1)) if match else {}
            except (OSError, ValueError, SyntaxError):
                continue
            if isinstance(mapping, dict):
                found.extend(str(Path(str(path)).parent) for path in mapping.values())
    return found


def site_dirs() -> list[str]:
    """This interpreter's site-packages folders (where ``.pth`` files and finders live)."""
    folders = list(getattr(site, "getsitepackages", lambda: [])())
    user = getattr(site, "getusersitepackages", lambda: None)()
    return folders + ([user] if isinstance(user, str) else [])


def redirect_to_worktree(env: Mapping[str, str], project_root: Path, worktree: Path, *,
                         path_entries: Optional[Sequence[str]] = None,
                         finders: Optional[Sequence[str]] = None) -> Redirection:
    """``env`` with every import location inside ``project_root`` redirected to ``worktree``;
    one with no twin there (an untracked folder) is reported in ``missing``."""
    root = project_root.resolve()
    entries = list(sys.path if path_entries is None else path_entries)
    entries += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    entries += list(finder_paths(site_dirs()) if finders is None else finders)
    result = Redirection(dict(env))
    for entry in entries:
        relative = _inside(Path(entry or "."), root)
        if relative is None:
            continue
        twin = str(worktree / relative)
        if twin in result.redirected or entry in result.missing:
            continue
        if Path(twin).is_dir():
            result.redirected.append(twin)
        else:
            result.missing.append(entry)
    if result.redirected:
        rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        result.env["PYTHONPATH"] = os.pathsep.join(result.redirected + rest)
    return result
