"""``plan.md``: the plan as a person reads it, bounded at any size (pure; docs/loop.md "The plan")."""

from __future__ import annotations

import re
from collections.abc import Sequence

from pytest_selfheal.plan.build import plan_revision, readable_command, shorten
from pytest_selfheal.plan.suspects import where_lines
from pytest_selfheal.records.plan import Plan, PlanAction

MAX_PLAN_MD_BYTES = 64 * 1024
_MD_MAX_ROWS = 200  # actions, hypotheses and earlier revisions listed in plan.md
_MD_MAX_COMMAND = 8000  # a longer verification command is shown cut (plan.json holds it whole)


def _cell(value: object) -> str:
    text = ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split()) or "—"


def fence(text: str) -> str:
    """A code fence longer than any backtick run inside ``text``, so nothing in it can close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _code_block(text: str, lang: str = "sh") -> list[str]:
    ticks = fence(text)
    return [f"{ticks}{lang}", text, ticks]


def _where_md(action: PlanAction) -> list[str]:
    """The action's top suspect, assertion and code excerpt (nothing for an older plan)."""
    lines = [f"- {shorten(line, 600)}" for line in where_lines(action)]
    for code in (action.excerpt, action.also_excerpt):
        if code is not None:
            lines += [""] + _code_block("\n".join(code.numbered()), "python")
    return lines + [""] if lines else []


def _listed(items: Sequence[str], limit: int) -> list[str]:
    return list(items[:limit]) + ([f"… {len(items) - limit} more"] if len(items) > limit else [])


def _size(lines: list[str]) -> int:
    return sum(len(line.encode("utf-8", "surrogatepass")) + 1 for line in lines)


def render_plan_md(plan: Plan) -> str:
    """``plan.md``: actions past :data:`MAX_PLAN_MD_BYTES` counted, not shown (plan.json holds all)."""
    lines: list[str] = [f"# Remediation plan: {plan.incident_id}", ""]
    meta = f"Generated {plan.generated_at}"
    revision = plan_revision(plan)
    if revision > 1:
        meta += f" · revision {revision}"
    lines += [meta, "", "## Summary", "", shorten(plan.summary, 2000), ""]
    lines += ["## Root-cause hypotheses", ""]
    for hyp in plan.root_cause_hypotheses[:_MD_MAX_ROWS]:
        lines.append(f"- **{hyp.id}** ({hyp.confidence}): {shorten(hyp.reason, 600)}")
    actions = plan.actions
    # The tail is always written; the actions share what is left of the budget.
    tail = ["", "## Verification commands", ""]
    for command in plan.verification_commands:
        text = readable_command(command)
        tail += _code_block(shorten(text, _MD_MAX_COMMAND) if len(text) > _MD_MAX_COMMAND else text)
    tail += ["", "## Done criteria", ""]
    tail += [f"- [ ] {c}" for c in plan.done_criteria]
    if plan.replan_history:
        tail += ["", "## Previous attempts", ""]
        for entry in plan.replan_history[-_MD_MAX_ROWS:]:
            fps = ", ".join(_listed(entry.fingerprints_seen, 10)) or "none"
            tail.append(f"- Revision {entry.revision}: {entry.iterations} iteration(s), fingerprints seen: {fps}")
    budget = MAX_PLAN_MD_BYTES - _size(tail) - 200  # 200: the "… N more actions" lines
    lines += ["", "## Actions", ""]
    lines += ["| ID | Priority | Risk | Title | Target paths | Test paths | Tests |",
              "|----|----------|------|-------|--------------|------------|-------|"]
    size = _size(lines)  # kept running, not recounted from the top for each block

    def within(block: list[str], always: bool = False) -> bool:
        nonlocal size
        if size + _size(block) > budget and not always:
            return False
        lines.extend(block)
        size += _size(block)
        return True

    shown = 0
    for action in actions[:_MD_MAX_ROWS]:
        row = "| " + " | ".join(_cell(v) for v in (
            action.id, action.priority, action.risk, action.title, _listed(action.target_paths, 5),
            _listed(action.test_paths, 5), _listed(action.nodeids, 3))) + " |"
        if not within([row]):
            break
        shown += 1
    if shown < len(actions):
        within([f"\n… {len(actions) - shown} more actions: see plan.json"], always=True)
    detailed = 0
    for action in actions[:shown]:
        block = ["", f"### {action.id}: {action.title}", ""]
        if action.signature:
            signature = " ".join(action.signature.split()).replace("`", "'")
            block += [f"Signature: `{shorten(signature, 300)}`", ""]
        block += _where_md(action)
        for command in action.verification:
            block += _code_block(readable_command(command))
        if not within(block):
            break
        detailed += 1
    if detailed < len(actions):
        lines += ["", f"The commands of {len(actions) - detailed} more actions are in plan.json."]
    lines += tail
    return "\n".join(lines) + "\n"
