"""What the coding agents hand a stop hook and take back, and their settings files (pure;
docs/agents.md). Cursor shows the person nothing of a hook's answer but the follow-up it sends
on, so the gate tells them on stderr.

The settings files are someone else's JSON, written back with its meaning unchanged: numbers
kept as their source text (``1e400`` stays ``1e400``); what cannot be written back as read is
refused with one line: a key given twice, ``NaN``, a lone surrogate escape, deep nesting.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePath
from typing import Any, Optional

from pytest_selfheal.errors import InputError, one_line

MAX_DEPTH = 100  # settings files nest a few levels; the copy and the writer recurse per level


class Number(str):
    """A JSON number as its source text: written back exactly as it was read."""

    __slots__ = ()


def _no_constant(name: str) -> Any:
    raise InputError(f"{name} is not JSON")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise InputError(f"the key {json.dumps(key, ensure_ascii=True)} is given twice in one object "
                             "(only one would be kept)")
        obj[key] = value
    return obj


def _check_text(value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"the string {json.dumps(value[:40])} holds a lone surrogate escape "
                         "(no character to write back)") from None


def loads(text: str) -> Any:
    """The JSON value of ``text``, numbers as :class:`Number`; ``InputError`` (one line) otherwise."""
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_float=Number, parse_int=Number,
                           parse_constant=_no_constant)
    except InputError:
        raise
    except RecursionError:
        raise InputError("nested too deeply") from None
    except ValueError as exc:
        raise InputError(f"not JSON ({exc})") from None
    _walk_strings(value)
    return value


def _walk_strings(value: Any) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)) and depth > MAX_DEPTH:
            raise InputError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            for key, inner in item.items():
                _check_text(key)
                stack.append((inner, depth + 1))
        elif isinstance(item, list):
            stack.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, str) and not isinstance(item, Number):
            _check_text(item)


def dumps(value: Any, level: int = 0) -> str:
    """``value`` as JSON text, indented by two spaces; a :class:`Number` as its source text."""
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(value, Number):
        return str.__str__(value)
    if isinstance(value, dict) and value:
        items = (f"{inner}{json.dumps(k, ensure_ascii=False)}: {dumps(v, level + 1)}" for k, v in value.items())
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and value:
        return "[\n" + ",\n".join(f"{inner}{dumps(v, level + 1)}" for v in value) + f"\n{pad}]"
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


MAX_PAYLOAD_BYTES = 1 << 20  # a hook payload is a few hundred bytes; more is not one


class Agent(str, Enum):
    CLAUDE = "claude"
    CURSOR = "cursor"


@dataclass(frozen=True)
class HookPayload:
    """The parts of a stop hook's payload the gate reads."""

    agent: Agent
    session: str  # Claude's session_id, Cursor's conversation_id ("" when absent)
    directory: Optional[str]  # Claude's cwd, Cursor's first workspace root
    continued: bool  # the agent goes on because a stop hook blocked before
    loop_count: Optional[int] = None  # Cursor: follow-ups already sent in this conversation
    status: Optional[str] = None  # Cursor: how the turn ended (completed, aborted, error); None when absent


@dataclass(frozen=True)
class GateAnswer:
    """``block``: the agent must continue with ``message``; else it stops (``message`` tells the person why)."""

    block: bool
    message: str = ""


def _field(data: Mapping[str, Any], name: str, kind: type, default: Any) -> Any:
    value = data.get(name, default)
    # bool is an int to isinstance: a ``true`` loop_count is as wrong as a string.
    if value is not None and (not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool)):
        raise InputError(f"hook payload: {name} is not a {kind.__name__}")
    return value


def parse_payload(agent: Agent, raw: bytes) -> HookPayload:
    """The hook's stdin ``raw``; an InputError (one line) when it is not a payload of ``agent``."""
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise InputError(f"hook payload: more than {MAX_PAYLOAD_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8-sig"))  # utf-8-sig: some agents send a byte-order mark
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"hook payload: not JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise InputError("hook payload: not a JSON object")
    if agent is Agent.CLAUDE:
        return HookPayload(agent, _field(data, "session_id", str, "") or "", _field(data, "cwd", str, None),
                           bool(_field(data, "stop_hook_active", bool, False)))
    roots = _field(data, "workspace_roots", list, []) or []
    first = next((root for root in roots if isinstance(root, str) and root), None)
    loops = _field(data, "loop_count", int, 0) or 0
    if loops < 0:
        raise InputError("hook payload: loop_count is negative")
    return HookPayload(agent, _field(data, "conversation_id", str, "") or "", first, loops > 0, loops,
                       _field(data, "status", str, None))


def answer_json(agent: Agent, answer: GateAnswer) -> dict[str, str]:
    """The JSON the agent reads on the hook's stdout."""
    if agent is Agent.CLAUDE:
        if answer.block:
            return {"decision": "block", "reason": answer.message}
        return {"systemMessage": answer.message} if answer.message else {}
    return {"followup_message": answer.message} if answer.block else {}


def hook_output(agent: Agent, answer: GateAnswer, lines: Sequence[str], redact: Callable[[str], str]) -> tuple[str, str]:
    """What the hook writes, redacted: the answer (stdout) and the lines for the person (stderr)."""
    shown = answer_json(agent, answer)
    out = json.dumps({key: redact(value) for key, value in shown.items()}, ensure_ascii=False) + "\n"
    return out, "".join(redact(line) + "\n" for line in lines)


def cannot_judge(agent: Agent, why: str) -> tuple[GateAnswer, list[str]]:
    """Fail open, visibly: let the agent stop and tell the person why."""
    line = f"selfheal: the stop gate could not judge the tests, so it let the agent stop: {one_line(why, 600)}"
    return GateAnswer(False, line), [f"selfheal: error: stop-gate {agent.value}: {one_line(why, 600)}; "
                                     "letting the agent stop"]


def hook_call(words: Sequence[str]) -> Optional[Agent]:
    """The agent a ``selfheal stop-gate WORD …`` command line answers as a hook, or None (``install``,
    ``--help``). A word that names no agent answers as Claude Code: that shape shows the person a
    line, and Cursor ignores the unknown key."""
    if words[:1] != ["stop-gate"] or words[1:2] == ["install"] or {"-h", "--help"} & set(words):
        return None
    return Agent.CURSOR if words[1:2] == [Agent.CURSOR.value] else Agent.CLAUDE


def is_gate_command(command: Any, agent: Agent) -> bool:
    """Whether the hook command line ``command`` runs exactly ``selfheal stop-gate <agent>`` (or
    ``python -m pytest_selfheal …``); one that merely mentions them is someone else's."""
    try:
        argv = shlex.split(command) if isinstance(command, str) else []
    except ValueError:  # an unclosed quote: not a command of ours
        return False
    if argv[-2:] != ["stop-gate", agent.value]:
        return False
    program = argv[:-2]
    if len(program) == 1:
        return PurePath(program[0]).name in ("selfheal", "selfheal.exe")
    return len(program) == 3 and program[1:] == ["-m", "pytest_selfheal"]


def _json(value: Any, where: str, kind: type = dict) -> Any:
    if not isinstance(value, kind):
        raise InputError(f"{where} is not a JSON {'object' if kind is dict else 'list'}")
    return value


class Change(str, Enum):
    NONE = "none"  # the hook is there, running this command
    ADDED = "added"
    UPDATED = "updated"  # the gate's own hook now runs this command (another selfheal before), or its timeout was short


def _put(entries: list[Any], where: str, agent: Agent, command: str) -> Change:
    """Point the gate's own entry of ``entries`` at ``command``; ``NONE`` when already so,
    ``ADDED`` (nothing appended yet) when there is no entry of ours."""
    for entry in entries:
        found = _json(entry, where)
        if found.get("command") == command:
            return Change.NONE
    for entry in entries:
        if is_gate_command(entry.get("command"), agent):
            entry["command"] = command
            return Change.UPDATED
    return Change.ADDED


def _at_least(value: Any, seconds: int) -> bool:
    """Whether a hook's ``timeout`` (as read: a number's source text) is ``seconds`` or more."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Number)):
        return False
    try:
        return float(value) >= seconds
    except ValueError:
        return False


def merged_settings(agent: Agent, existing: Optional[Any], command: str,
                    timeout_seconds: int) -> tuple[dict[str, Any], Change]:
    """The parsed settings file ``existing`` with the gate's stop hook running ``command`` (its own
    hook repointed, never doubled; everything else kept), and what changed. InputError when
    the file's shape is not the agent's."""
    settings = _json(copy.deepcopy(existing) if existing is not None else {}, "the settings file")
    hooks = _json(settings.setdefault("hooks", {}), "hooks")
    if agent is Agent.CLAUDE:
        groups = _json(hooks.setdefault("Stop", []), "hooks.Stop", list)
        inner = [_json(_json(group, "an entry of hooks.Stop").get("hooks", []), "hooks.Stop[].hooks", list)
                 for group in groups]
        found = [entry for entries in inner for entry in entries]
        change = _put(found, "an entry of hooks.Stop[].hooks", agent, command)
        if change is Change.ADDED:
            groups.append({"hooks": [{"type": "command", "command": command, "timeout": timeout_seconds}]})
            return settings, change
        # Claude Code kills a hook past its timeout and says nothing: the gate's own must
        # outlast the test run, also after gate.timeout_seconds was raised since an install.
        ours = next(entry for entry in found if entry.get("command") == command)
        if not _at_least(ours.get("timeout"), timeout_seconds):
            ours["timeout"] = timeout_seconds
            change = Change.UPDATED
        return settings, change
    version = settings.setdefault("version", 1)
    if not (version == 1 and type(version) is int) and not (isinstance(version, Number) and float(version) == 1):
        raise InputError(f"version {dumps(version)} is not the hooks.json version 1")
    entries = _json(hooks.setdefault("stop", []), "hooks.stop", list)
    change = _put(entries, "an entry of hooks.stop", agent, command)
    if change is Change.ADDED:
        entries.append({"command": command})
    return settings, change
