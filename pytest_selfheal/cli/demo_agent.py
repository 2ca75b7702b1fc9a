"""A stand-in for an AI coding agent, used by ``selfheal demo``: it fixes the demo's bug.

Run as the repair command ``python demo_agent.py {worktree} {prompt_file}``: it reads the
repair prompt (as a real agent would) and edits ``calc.py`` inside the worktree it is given.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    worktree, prompt_file = Path(argv[1]), Path(argv[2])
    prompt = prompt_file.read_text(encoding="utf-8")
    target = worktree / "calc.py"
    if "calc.py" not in prompt or not target.is_file():
        return 0  # nothing this agent knows how to fix: an empty diff
    source = target.read_text(encoding="utf-8")
    target.write_text(source.replace("return a - b  # the bug: should be a + b", "return a + b"), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
