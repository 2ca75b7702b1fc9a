"""The ``## RALF Lite Loop Report`` (SPEC §10): its data, markdown, terminal lines, merging.

Pure: no file I/O, no clock. The input is plain dicts as the store reads them
(``incident.json``, ``plan.json``, ``attempt_XX.json``, ``run_result.json``); the output is
the report JSON (``build_report``), its markdown (``render_markdown``), a few lines for
pytest's terminal summary (``render_terminal``) and the union of several shard reports
(``merge_reports``). Every field and rule is documented in docs/report.md; keep the two
in step.

Everything rendered is deterministic (sorted, no timestamps but those in the data) so
golden files stay stable. Input is assumed to be redacted already; the caller applies
the redactor to the final text too.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from pytest_selfheal.config.settings import DEFAULT_ORIGIN, DEFAULTS, ROOT_KEY
from pytest_selfheal.errors import InputError, UsageError
from pytest_selfheal.loop import messages, policy

REPORT_SCHEMA_VERSION = 1
REPORT_TITLE = "RALF Lite Loop Report"
REPORT_HEADING = f"## {REPORT_TITLE}"

# The config keys of the head line, in the order GSD plan summaries write them.
HEAD_CONFIG_KEYS: Tuple[str, ...] = ("max_iterations", "error_fingerprint_repeats", "no_progress_repeats")

# Bounds that keep a report readable (and a PR comment far below GitHub's limits).
GRID_MAX_TESTS = 30
GRID_MAX_COLUMNS = 10  # the capture column included
MERMAID_MAX_INCIDENTS = 3
MERMAID_MAX_ITERATIONS = 10
CELL_LIMIT = 200  # characters of one value in a table cell or list item
LIST_LIMIT = 5  # node ids / fingerprints shown in one cell
TERMINAL_MAX_INCIDENTS = 5
TERMINAL_MAX_TESTS = 3

NOT_RUN = "not run"
DASH = "—"
INBOX = "inbox"
# Origin of config values taken from a run_result.json when no effective config was given.
RUN_RESULT_ORIGIN = "run_result.json"

# Keys a report JSON must have (``validate_report``), top level and per incident.
REQUIRED_KEYS: Tuple[str, ...] = (
    "schema_version", "title", "enabled", "effective_config", "origins", "auto_tasks_looped",
    "total_retries", "incidents", "stop_reason", "final_status", "recommended_next_action",
)
INCIDENT_KEYS: Tuple[str, ...] = (
    "incident_id", "status", "bucket", "final_status", "stop_reason", "loops_used", "tasks",
    "iterations", "fingerprints_per_iteration", "tests_fixed", "flaky_tests",
)
TASK_KEYS: Tuple[str, ...] = ("task", "attempts", "stop_reason")

# Plan-level "worst" rule (docs/report.md): first by outcome, then by stop reason.
# Outcome: escalated, then replan_requested, then not finished, then resolved last.
_OUTCOME_RANK: Dict[str, int] = {
    policy.FINAL_ESCALATED: 0,
    policy.FINAL_REPLAN_REQUESTED: 1,
    policy.FINAL_RESOLVED: 3,
}
_UNFINISHED_RANK = 2
# Stop reasons in the loop's own precedence (most specific diagnosis first), except that
# success ranks last and "no stop reason yet" just before it.
REASON_ORDER: Tuple[Optional[str], ...] = tuple(
    r for r in policy.PRECEDENCE if r != policy.SUCCESS
) + (None, policy.SUCCESS)

_PASS, _FAIL, _WARN = "✅", "❌", "⚠️"
_CELL_SYMBOL = {
    "passed": _PASS,
    "failed": _FAIL,
    "error": _FAIL,
    "skipped": _WARN,
    "missing": _WARN,
}
_MERMAID_UNSAFE = re.compile(r"[^A-Za-z0-9 _.,:()/+-]")
_MENTION = re.compile(r"@(?=[A-Za-z0-9])")


# --------------------------------------------------------------------------- input


@dataclass(frozen=True)
class IncidentRun:
    """One incident's files as read from the store: the input of :func:`build_report`.

    ``bucket`` is where the incident folder is: ``inbox``, ``resolved`` or ``escalated``.
    ``incident["status"]`` should carry the authoritative status (``status.txt``).
    """

    incident: Mapping[str, Any]
    plan: Optional[Mapping[str, Any]] = None
    attempts: Sequence[Mapping[str, Any]] = ()
    run_result: Optional[Mapping[str, Any]] = None
    bucket: str = INBOX

    def to_dict(self) -> Dict[str, Any]:
        """JSON-friendly form (the shape of the golden-file inputs)."""
        return {
            "incident": copy.deepcopy(dict(self.incident)),
            "plan": copy.deepcopy(dict(self.plan)) if self.plan is not None else None,
            "attempts": [copy.deepcopy(dict(a)) for a in self.attempts],
            "run_result": copy.deepcopy(dict(self.run_result)) if self.run_result is not None else None,
            "bucket": self.bucket,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "incident run") -> "IncidentRun":
        """The inverse of :meth:`to_dict`; ``InputError`` naming ``source`` on a bad shape."""
        if not isinstance(data, Mapping):
            raise InputError(f"{source}: expected an object")
        incident = data.get("incident")
        if not isinstance(incident, Mapping) or not isinstance(incident.get("incident_id"), str):
            raise InputError(f"{source}: 'incident' must be an object with a string incident_id")
        plan = data.get("plan")
        run_result = data.get("run_result")
        attempts = data.get("attempts", [])
        if plan is not None and not isinstance(plan, Mapping):
            raise InputError(f"{source}: 'plan' must be an object or null")
        if run_result is not None and not isinstance(run_result, Mapping):
            raise InputError(f"{source}: 'run_result' must be an object or null")
        if not isinstance(attempts, list) or not all(isinstance(a, Mapping) for a in attempts):
            raise InputError(f"{source}: 'attempts' must be a list of objects")
        bucket = data.get("bucket", INBOX)
        if not isinstance(bucket, str):
            raise InputError(f"{source}: 'bucket' must be a string")
        return cls(incident, plan, tuple(attempts), run_result, bucket)


# --------------------------------------------------------------------------- small helpers


def _str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _opt_str(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _opt_bool(value: Any) -> Optional[bool]:
    return value if isinstance(value, bool) else None


def _dicts(value: Any) -> List[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, (list, tuple)) else []


def _strs(value: Any) -> List[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, (list, tuple)) else []


def _unique(items: Iterable[str]) -> List[str]:
    return list(dict.fromkeys(items))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _nodeid(failure: Mapping[str, Any]) -> Optional[str]:
    """A failure's selection: its pytest node id, else its runner-independent test identity."""
    return _opt_str(failure.get("nodeid")) or _opt_str(failure.get("test"))


def _unwrap_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    # Accept both the bare ralf_lite mapping and the files' {"ralf_lite": {...}} form.
    inner = config.get(ROOT_KEY)
    if len(config) == 1 and isinstance(inner, Mapping):
        return inner
    return config


def _deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> Dict[str, Any]:
    merged: Dict[str, Any] = copy.deepcopy(dict(base))
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """``{dotted key: value}`` for every leaf of a (nested) ralf_lite mapping."""
    flat: Dict[str, Any] = {}
    for key in sorted(config, key=str):
        value = config[key]
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(flatten_config(value, dotted))
        else:
            flat[dotted] = value
    return flat


def _strip_root(key: str) -> str:
    return key[len(ROOT_KEY) + 1:] if key.startswith(ROOT_KEY + ".") else key


def _scalar(value: Any) -> str:
    """A config value as the head line and tables write it: JSON, but bare strings."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


# --------------------------------------------------------------------------- build


def _resolve_config(
    effective_config: Optional[Mapping[str, Any]],
    origins: Optional[Mapping[str, str]],
    runs: Sequence[IncidentRun],
) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """The report's config (every ralf_lite key present) and the origin of every leaf.

    The given config wins; without one, the first recorded ``run_result.effective_config``
    (origin ``run_result.json``); else the built-in defaults. Missing keys are filled
    from the defaults (origin ``default``).
    """
    given: Optional[Mapping[str, Any]] = None
    given_origin: Optional[str] = None
    if effective_config is not None:
        given = _unwrap_config(effective_config)
    else:
        for run in runs:
            recorded = (run.run_result or {}).get("effective_config")
            if isinstance(recorded, Mapping):
                given, given_origin = _unwrap_config(recorded), RUN_RESULT_ORIGIN
                break
    values = _deep_merge(DEFAULTS, given or {})
    named = {_strip_root(str(k)): str(v) for k, v in (origins or {}).items()}
    given_keys = set(flatten_config(given or {}))
    resolved: Dict[str, str] = {}
    for key in flatten_config(values):
        if key in named:
            resolved[key] = named[key]
        elif given_origin is not None and key in given_keys:
            resolved[key] = given_origin
        else:
            resolved[key] = DEFAULT_ORIGIN
    return values, resolved


def _iteration_entry(attempt: Mapping[str, Any]) -> Dict[str, Any]:
    raw_outcomes = attempt.get("outcomes")
    outcomes = (
        {str(k): str(v) for k, v in sorted(raw_outcomes.items(), key=lambda kv: str(kv[0]))}
        if isinstance(raw_outcomes, Mapping)
        else {}
    )
    repair = attempt.get("repair")
    return {
        "iteration": _int(attempt.get("iteration")),
        "mode": _opt_str(attempt.get("mode")),
        "started_at": _opt_str(attempt.get("started_at")),
        "finished_at": _opt_str(attempt.get("finished_at")),
        "result": _opt_str(attempt.get("result")),
        "stop_reason": _opt_str(attempt.get("stop_reason")),
        "verification_passed": attempt.get("verification_passed") is True,
        "outcomes": outcomes,
        "fingerprints": [_str(f.get("fingerprint")) for f in _dicts(attempt.get("failures")) if f.get("fingerprint")],
        "error_signature": _opt_str(attempt.get("error_signature")),
        "fingerprint_changed": _opt_bool(attempt.get("fingerprint_changed")),
        "progress": _opt_bool(attempt.get("progress")),
        "progress_reasons": _strs(attempt.get("progress_reasons")),
        "diff_hash": _opt_str(attempt.get("diff_hash")),
        "repair_result": _opt_str(repair.get("result")) if isinstance(repair, Mapping) else None,
        "timed_out": attempt.get("timed_out") is True,
    }


def _task_progress(nodeids: Sequence[str], iterations: Sequence[Mapping[str, Any]]) -> Tuple[int, bool]:
    """``(attempts, passed)`` of one plan action (docs/report.md "Task attempts").

    An iteration counts when it verified any of the action's node ids, until every one of
    them has passed (its latest outcome). Without node ids or per-test outcomes, every
    iteration counts and ``verification_passed`` decides.
    """
    latest: Dict[str, str] = {}
    count = 0
    for iteration in iterations:
        outcomes: Mapping[str, str] = iteration["outcomes"]
        if nodeids and outcomes:
            touched = [n for n in nodeids if n in outcomes]
            if not touched:
                continue
            count += 1
            latest.update({n: outcomes[n] for n in touched})
            if all(latest.get(n) == "passed" for n in nodeids):
                return count, True
        else:
            count += 1
            if iteration["verification_passed"]:
                return count, True
    return count, False


def _observations(run: IncidentRun) -> List[policy.Observation]:
    """The loop's observations (capture + attempts), or [] when the records do not allow it."""
    try:
        capture = policy.capture_observation(run.incident)
        return [capture] + [policy.observation_from_attempt(a) for a in run.attempts]
    except (InputError, ValueError, TypeError, KeyError, AttributeError):
        return []


def _next_action(incident_id: str, stop_reason: Optional[str], finished: bool, looped: bool, has_plan: bool) -> str:
    if not finished:
        if looped:
            return f"Continue the loop: selfheal loop {incident_id}"
        if not has_plan:
            return f"Generate the plan and run the loop: selfheal plan {incident_id}, then selfheal loop {incident_id}"
        return f"Run the loop: selfheal loop {incident_id}"
    try:
        return messages.recommended_next_action(stop_reason)
    except ValueError:  # a stop reason this version does not know
        return f"Investigate manually: selfheal show {incident_id}"


def _incident_entry(run: IncidentRun) -> Dict[str, Any]:
    incident = run.incident
    incident_id = _str(incident.get("incident_id"))
    status = _str(incident.get("status"), "new")
    attempts = sorted(run.attempts, key=lambda a: _int(a.get("iteration")))
    iterations = [_iteration_entry(a) for a in attempts]
    rr = run.run_result
    last = iterations[-1] if iterations else None
    stopped_attempt = last is not None and last["result"] == policy.ACTION_STOP
    finished = rr is not None or stopped_attempt
    stop_reason: Optional[str] = _opt_str(rr.get("stop_reason")) if rr is not None else None
    if stop_reason is None and stopped_attempt and last is not None:
        stop_reason = last["stop_reason"]
    final_status = _str(rr.get("final_status"), status) if rr is not None else status
    loops_used = _int(rr.get("loops_used"), len(iterations)) if rr is not None else len(iterations)

    failures = _dicts(incident.get("failures"))
    capture_fps = [_str(f.get("fingerprint")) for f in failures if f.get("fingerprint")]
    fingerprints_per_iteration = [capture_fps] + [list(i["fingerprints"]) for i in iterations]

    # The loop's own verdicts when recorded; else the same rules over the recorded observations.
    recorded = rr or {}
    needs_observations = "flaky_tests" not in recorded or "tests_fixed" not in recorded
    observations = _observations(run) if needs_observations else []
    flaky = _strs(recorded["flaky_tests"]) if "flaky_tests" in recorded else (
        policy.flaky_tests(observations) if observations else [])
    fixed = _strs(recorded["tests_fixed"]) if "tests_fixed" in recorded else (
        policy.fixed_tests(observations) if observations else [])
    # A test that passed on re-run with no code change was not fixed: it is flaky.
    tests_fixed = [t for t in _unique(fixed) if t not in flaky]

    tasks: List[Dict[str, Any]] = []
    for action in _dicts((run.plan or {}).get("actions")):
        nodeids = _strs(action.get("nodeids"))
        count, passed = _task_progress(nodeids, iterations)
        if passed:
            task_stop: Optional[str] = policy.SUCCESS
        elif finished and (count > 0 or loops_used == 0):
            task_stop = stop_reason  # the loop stopped while this action was still failing
        else:
            task_stop = None  # not run (yet), or never verified by the loop
        tasks.append({
            "task": _str(action.get("id"), f"A{len(tasks) + 1}"),
            "label": _str(action.get("id"), f"A{len(tasks) + 1}"),
            "title": _str(action.get("title")),
            "nodeids": nodeids,
            "attempts": count,
            "stop_reason": task_stop,
            "passed": passed,
            "flaky": bool(nodeids) and passed and all(n in flaky for n in nodeids),
            "fingerprint": _opt_str(action.get("fingerprint")),
            "fingerprints": _strs(action.get("fingerprints")),
            "signature": _opt_str(action.get("signature")),
            "failure_type": _opt_str(action.get("failure_type")),
        })

    new_failures: List[Dict[str, Any]] = []
    seen: Set[Tuple[str, str]] = set()
    for attempt in attempts:
        for failure in _dicts(attempt.get("new_failures")):
            key = (_nodeid(failure) or "", _str(failure.get("fingerprint")))
            if key in seen:
                continue
            seen.add(key)
            new_failures.append({
                "nodeid": _nodeid(failure),
                "fingerprint": _opt_str(failure.get("fingerprint")),
                "signature": _opt_str(failure.get("signature")),
                "failure_type": _opt_str(failure.get("failure_type")),
                "iteration": _int(attempt.get("iteration")),
            })

    recommended = _next_action(incident_id, stop_reason, finished, bool(iterations), run.plan is not None)
    recorded_handoff = rr.get("handoff") if rr is not None else None
    if isinstance(recorded_handoff, Mapping):
        handoff = copy.deepcopy(dict(recorded_handoff))
        if isinstance(handoff.get("recommended_next_action"), str):
            recommended = handoff["recommended_next_action"]
    else:
        handoff = {
            "iterations": len(iterations),
            "fingerprints_per_iteration": copy.deepcopy(fingerprints_per_iteration),
            "fixed": list(tests_fixed),
            "flaky_tests": list(flaky),
        }
    handoff["recommended_next_action"] = recommended
    decision = rr.get("decision_point") if rr is not None else None
    run_config = rr.get("effective_config") if rr is not None else None
    runtime = rr.get("runtime_minutes") if rr is not None else None

    return {
        "incident_id": incident_id,
        "status": status,
        "bucket": run.bucket,
        "created_at": _opt_str(incident.get("created_at")),
        "step": _opt_str(incident.get("step")),
        "failure_class": _opt_str(incident.get("failure_class")),
        "error_signature": _opt_str(incident.get("error_signature")),
        "capture_tests": _unique(n for n in (_nodeid(f) for f in failures) if n),
        "plan_revision": _int((run.plan or {}).get("revision"), 1) if run.plan is not None else None,
        "finished": finished,
        "final_status": final_status,
        "stop_reason": stop_reason,
        "loops_used": loops_used,
        "same_error_repeats": _int(rr.get("same_error_repeats")) if rr is not None else None,
        "runtime_minutes": runtime if isinstance(runtime, (int, float)) and not isinstance(runtime, bool) else None,
        "archived_to": _opt_str(rr.get("archived_to")) if rr is not None else None,
        "run_config": copy.deepcopy(dict(_unwrap_config(run_config))) if isinstance(run_config, Mapping) else None,
        "tasks": tasks,
        "iterations": iterations,
        "fingerprints_per_iteration": fingerprints_per_iteration,
        "tests_fixed": tests_fixed,
        "flaky_tests": list(_unique(flaky)),
        "new_failures": new_failures,
        "decision_point": copy.deepcopy(dict(decision)) if isinstance(decision, Mapping) else None,
        "handoff": handoff,
    }


def _short_ids(incident_ids: Sequence[str]) -> Dict[str, str]:
    """The shortest common suffix length (from 6) that tells the incidents apart."""
    unique = _unique(incident_ids)
    longest = max((len(i) for i in unique), default=0)
    for size in range(6, longest + 1):
        suffixes = {i: (i if len(i) <= size else "…" + i[-size:]) for i in unique}
        if len(set(suffixes.values())) == len(unique):
            return suffixes
    return {i: i for i in unique}


def _label_tasks(incidents: List[Dict[str, Any]]) -> None:
    """Plain task ids, or ``A1 (…ab12cd)`` for every task when an id repeats across incidents."""
    owners: Dict[str, Set[str]] = {}
    for entry in incidents:
        for task in entry["tasks"]:
            owners.setdefault(str(task["task"]), set()).add(str(entry["incident_id"]))
    collide = any(len(ids) > 1 for ids in owners.values())
    short = _short_ids([str(e["incident_id"]) for e in incidents])
    for entry in incidents:
        for task in entry["tasks"]:
            task["label"] = f"{task['task']} ({short[str(entry['incident_id'])]})" if collide else str(task["task"])


def _severity(entry: Mapping[str, Any]) -> Tuple[int, int]:
    outcome = _OUTCOME_RANK.get(str(entry.get("final_status")), _UNFINISHED_RANK)
    if outcome != _UNFINISHED_RANK and not entry.get("finished", True):
        outcome = _UNFINISHED_RANK  # a status that looks final, but no run recorded
    reason = entry.get("stop_reason")
    # Even ranks for known reasons; an unknown one sits after the known failures and
    # before "no stop reason yet".
    rank = 2 * REASON_ORDER.index(reason) if reason in REASON_ORDER else 2 * REASON_ORDER.index(None) - 1
    return outcome, rank


def deciding_incident(incidents: Sequence[Mapping[str, Any]]) -> Optional[Mapping[str, Any]]:
    """The incident whose outcome is the plan's: the "worst" one (docs/report.md).

    Worst first by outcome (escalated, replan_requested, not finished, resolved), then by
    stop reason in the loop's precedence (success last), then report order.
    """
    best: Optional[Mapping[str, Any]] = None
    for entry in incidents:
        if best is None or _severity(entry) < _severity(best):
            best = entry
    return best


def _finish(report: Dict[str, Any]) -> Dict[str, Any]:
    """Fill the derived plan-level fields from ``report["incidents"]``."""
    incidents: List[Dict[str, Any]] = report["incidents"]
    _label_tasks(incidents)
    report["auto_tasks_looped"] = sum(1 for e in incidents for t in e["tasks"] if _int(t.get("attempts")) > 0)
    report["total_retries"] = sum(_int(e.get("loops_used")) for e in incidents)
    worst = deciding_incident(incidents)
    if worst is None:
        report["stop_reason"] = None
        report["final_status"] = "no_incidents"
        report["recommended_next_action"] = "Nothing to do: no incident was captured."
        report["deciding_incident"] = None
    else:
        report["stop_reason"] = worst.get("stop_reason")
        report["final_status"] = worst.get("final_status")
        action = _str((worst.get("handoff") or {}).get("recommended_next_action"))
        report["recommended_next_action"] = (
            f"{worst['incident_id']}: {action}" if len(incidents) > 1 else action
        )
        report["deciding_incident"] = worst["incident_id"]
    return report


def build_report(
    *,
    incidents: Sequence[IncidentRun],
    effective_config: Optional[Mapping[str, Any]] = None,
    origins: Optional[Mapping[str, str]] = None,
    enabled: bool = True,
) -> Dict[str, Any]:
    """The report JSON for ``incidents`` (fields: docs/report.md "JSON").

    ``effective_config`` is the ralf_lite mapping (``EffectiveConfig.values``; the files'
    ``{"ralf_lite": ...}`` form is accepted too) and ``origins`` its ``{dotted key:
    origin}``. ``enabled`` is False when selfheal itself is off; the report says
    ``Enabled: false`` also when ``ralf_lite.enabled`` is false. Incidents are sorted by
    ``created_at`` then id; a repeated id is kept once (the first).
    """
    values, resolved = _resolve_config(effective_config, origins, incidents)
    runs: List[IncidentRun] = []
    seen: Set[str] = set()
    for run in incidents:
        incident_id = _str(run.incident.get("incident_id"))
        if incident_id in seen:
            continue
        seen.add(incident_id)
        runs.append(run)
    runs.sort(key=lambda r: (_str(r.incident.get("created_at")), _str(r.incident.get("incident_id"))))
    report: Dict[str, Any] = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "title": REPORT_TITLE,
        "enabled": bool(enabled) and values.get("enabled") is not False,
        "effective_config": values,
        "origins": resolved,
        "config_differences": [],
        "shards": [],
        "incidents": [_incident_entry(run) for run in runs],
    }
    return _finish(report)


# --------------------------------------------------------------------------- validation


def _expect(condition: bool, source: str, where: str, expected: str) -> None:
    if not condition:
        raise InputError(f"{source}: {where}: expected {expected}")


def validate_report(data: Any, source: str = "report") -> Dict[str, Any]:
    """``data`` if it is a report JSON this version can render and merge, else ``InputError``.

    Checks ``schema_version`` and the keys listed in docs/report.md "Validation";
    the message names ``source`` and the first bad key (one line).
    """
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a JSON object (a report from selfheal report --format json)")
    version = data.get("schema_version")
    if isinstance(version, bool) or version != REPORT_SCHEMA_VERSION:
        raise InputError(f"{source}: unsupported report schema_version {json.dumps(version)} "
                         f"(expected {REPORT_SCHEMA_VERSION})")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise InputError(f"{source}: not a RALF Lite Loop Report: missing key {missing[0]!r}")
    _expect(isinstance(data["effective_config"], dict), source, "effective_config", "an object")
    _expect(isinstance(data["origins"], dict), source, "origins", "an object")
    _expect(isinstance(data["enabled"], bool), source, "enabled", "true or false")
    _expect(isinstance(data["incidents"], list), source, "incidents", "a list")
    for i, entry in enumerate(data["incidents"]):
        where = f"incidents[{i}]"
        _expect(isinstance(entry, dict), source, where, "an object")
        for key in INCIDENT_KEYS:
            _expect(key in entry, source, f"{where}.{key}", "a value (missing)")
        _expect(isinstance(entry["incident_id"], str), source, f"{where}.incident_id", "a string")
        _expect(isinstance(entry["loops_used"], int) and not isinstance(entry["loops_used"], bool), source,
                f"{where}.loops_used", "an integer")
        for key in ("tasks", "iterations", "fingerprints_per_iteration", "tests_fixed", "flaky_tests"):
            _expect(isinstance(entry[key], list), source, f"{where}.{key}", "a list")
        for j, task in enumerate(entry["tasks"]):
            _expect(isinstance(task, dict) and all(k in task for k in TASK_KEYS), source,
                    f"{where}.tasks[{j}]", "an object with task, attempts, stop_reason")
            _expect(isinstance(task["attempts"], int) and not isinstance(task["attempts"], bool), source,
                    f"{where}.tasks[{j}].attempts", "an integer")
        for j, iteration in enumerate(entry["iterations"]):
            _expect(isinstance(iteration, dict) and isinstance(iteration.get("outcomes", {}), dict), source,
                    f"{where}.iterations[{j}]", "an object with an outcomes object")
    return data


# --------------------------------------------------------------------------- merge


def merge_reports(reports: Sequence[Mapping[str, Any]], *, names: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """One report from several shard reports (e.g. the jobs of a CI matrix).

    Incidents are concatenated in shard order, a repeated incident id kept once (the
    first); counts and the plan-level stop reason are derived again from the result (the
    same worst rule). The effective config is the first shard's; keys whose value differs
    in another shard are listed per shard in ``config_differences``. ``names`` label the
    shards (default ``shard 1``, ``shard 2``…). Every input is checked first
    (``InputError``).
    """
    if not reports:
        raise UsageError("nothing to merge: give at least one report")
    labels = list(names) if names is not None else [f"shard {i}" for i in range(1, len(reports) + 1)]
    if len(labels) != len(reports):
        raise UsageError(f"{len(labels)} names for {len(reports)} reports: give one --name per report")
    checked = [copy.deepcopy(validate_report(r, label)) for r, label in zip(reports, labels)]
    first = checked[0]
    base = flatten_config(first["effective_config"])
    differences: List[Dict[str, Any]] = []
    for label, shard in zip(labels, checked):
        # A merged report merged again keeps the differences it already knew about.
        for inner in _dicts(shard.get("config_differences")):
            differences.append({
                "shard": f"{label} / {_str(inner.get('shard'))}",
                "keys": _strs(inner.get("keys")),
                "values": copy.deepcopy(dict(inner.get("values") or {})),
            })
        if shard is first:
            continue
        other = flatten_config(shard["effective_config"])
        keys = sorted(k for k in set(base) | set(other) if base.get(k, ...) != other.get(k, ...))
        values = {k: other.get(k) for k in keys}
        # "(enabled)": the report's own flag (selfheal off) when the config key agrees.
        if shard["enabled"] != first["enabled"] and "enabled" not in keys:
            keys = ["(enabled)"] + keys
            values["(enabled)"] = shard["enabled"]
        if keys:
            differences.append({"shard": label, "keys": keys, "values": values})
    incidents: List[Dict[str, Any]] = []
    seen: Set[str] = set()
    shards: List[Dict[str, Any]] = []
    for label, shard in zip(labels, checked):
        ids: List[str] = []
        duplicates: List[str] = []
        for entry in shard["incidents"]:
            incident_id = entry["incident_id"]
            if incident_id in seen:
                duplicates.append(incident_id)
                continue
            seen.add(incident_id)
            ids.append(incident_id)
            incidents.append(entry)
        shards.append({
            "name": label,
            "incidents": ids,
            "duplicates": duplicates,
            "stop_reason": shard["stop_reason"],
            "final_status": shard["final_status"],
            "total_retries": shard["total_retries"],
        })
    merged: Dict[str, Any] = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "title": REPORT_TITLE,
        "enabled": first["enabled"],
        "effective_config": first["effective_config"],
        "origins": first["origins"],
        "config_differences": differences,
        "shards": shards,
        "incidents": incidents,
    }
    return _finish(merged)


# --------------------------------------------------------------------------- markdown helpers


def _one_line(value: Any) -> str:
    return " ".join(str(value).split())


def _truncate(text: str, limit: int = CELL_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def text(value: Any, limit: int = CELL_LIMIT) -> str:
    """Data as safe inline markdown: one line, bounded, no raw HTML (``<``/``>`` escaped).

    Escaping ``<`` also keeps data from forging the hidden HTML marker of the PR comment;
    a zero-width space after ``@`` keeps ``@name`` from notifying anyone.
    """
    flat = _truncate(_one_line(value), limit)
    flat = flat.replace("<", "&lt;").replace(">", "&gt;")
    # "@name" in a test message must not notify a GitHub user from the PR comment.
    return _MENTION.sub("@\u200b", flat)


def code(value: Any, limit: int = CELL_LIMIT) -> str:
    """Data as an inline code span, safe for any backticks inside; ``—`` when empty."""
    flat = _truncate(_one_line(value), limit)
    if not flat:
        return DASH
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def cell(markdown: str) -> str:
    """A table cell: pipes escaped (GitHub honours ``\\|`` inside code spans in tables too)."""
    return markdown.replace("|", "\\|")


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    return [_row(header), "|" + "|".join("-" * (len(h) + 2) for h in header) + "|"] + [_row(r) for r in rows]


def _codes(items: Sequence[str], limit: int = LIST_LIMIT, sep: str = ", ") -> str:
    if not items:
        return DASH
    shown = sep.join(code(i) for i in items[:limit])
    return shown + (f"{sep}… +{len(items) - limit}" if len(items) > limit else "")


def _reason(value: Any) -> str:
    return code(value) if isinstance(value, str) and value else DASH


def _yes_no(value: Any) -> str:
    return DASH if value is None else ("yes" if value else "no")


def _minutes(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return DASH
    return (f"{float(value):.2f}".rstrip("0").rstrip(".") or "0") + " min"


def _multi(report: Mapping[str, Any]) -> bool:
    return len(report["incidents"]) > 1


def _sub(report: Mapping[str, Any], entry: Mapping[str, Any]) -> List[str]:
    """A per-incident sub-heading, only when the report has several incidents."""
    return [f"#### {code(entry['incident_id'])}", ""] if _multi(report) else []


# --------------------------------------------------------------------------- markdown


def render_headline(report: Mapping[str, Any]) -> str:
    """The one status line put *before* the report heading for PR comments and job summaries.

    ``**selfheal: escalated — stop reason `repeated_fingerprint`** (incident_…, 2 iterations)``
    """
    incidents = report["incidents"]
    if not incidents:
        return "**selfheal: no incidents — nothing to loop**"
    who = str(incidents[0]["incident_id"]) if len(incidents) == 1 else _plural(len(incidents), "incident")
    iterations = sum(_int(e.get("loops_used")) for e in incidents)
    details = [who, _plural(iterations, "iteration")]
    flaky = sum(len(e.get("flaky_tests") or []) for e in incidents)
    if flaky:
        details.append(_plural(flaky, "flaky test"))
    status = text(report.get("final_status") or "unknown", 60)
    reason = report.get("stop_reason")
    if isinstance(reason, str) and reason:
        verdict = f"{status} — stop reason {code(reason, 60)}"
    elif not any(e.get("loops_used") for e in incidents):
        verdict = f"{status} — loop not run yet"
    else:
        verdict = f"{status} — loop not finished"
    return f"**selfheal: {verdict}** ({', '.join(details)})"


def _head(report: Mapping[str, Any]) -> List[str]:
    config = report["effective_config"]
    head_config = ", ".join(f"{k}={_scalar(config.get(k))}" for k in HEAD_CONFIG_KEYS)
    lines = [
        REPORT_HEADING,
        "",
        f"- Enabled: {'true' if report['enabled'] else 'false'}",
        f"- Effective config: {head_config}",
        f"- Auto tasks looped: {report['auto_tasks_looped']}",
        f"- Total retries: {report['total_retries']}",
        "",
        "### Task Attempts",
        "",
        "| Task | Attempts | Stop Reason |",
        "|------|----------|-------------|",
    ]
    for entry in report["incidents"]:
        for task in entry["tasks"]:
            label = cell(text(task.get("label") or task["task"], 80))
            stop = task["stop_reason"]
            lines.append(f"| {label.ljust(4)} | {str(task['attempts']).ljust(8)} | "
                         f"{cell(text(stop, 60)) if stop else DASH} |")
    return lines


def _section_stop(report: Mapping[str, Any]) -> List[str]:
    lines = ["### Stop Reason and Final Status", ""]
    incidents = report["incidents"]
    if not incidents:
        return lines + ["No incident was captured: nothing to loop."]
    reason = report["stop_reason"]
    if reason:
        shown = _reason(reason)
    else:
        shown = "not finished" if report["total_retries"] else f"{NOT_RUN} (the loop has not run yet)"
    lines.append(f"- Stop reason: {shown}")
    lines.append(f"- Final status: {text(report['final_status'])}")
    if len(incidents) > 1 and report.get("deciding_incident"):
        lines.append(f"- Decided by: {code(report['deciding_incident'])} (the worst outcome; docs/report.md)")
    lines.append("")
    rows = []
    for e in incidents:
        archived = e.get("archived_to")
        rows.append([
            code(e["incident_id"]), text(e["status"]), text(e["final_status"]),
            _reason(e["stop_reason"]) if e["stop_reason"] else (NOT_RUN if not e["loops_used"] else DASH),
            str(e["loops_used"]),
            DASH if e.get("same_error_repeats") is None else str(e["same_error_repeats"]),
            _minutes(e.get("runtime_minutes")),
            code(archived) if archived else DASH,
        ])
    lines += _table(["Incident", "Status", "Final Status", "Stop Reason", "Iterations", "Same Error Repeats",
                     "Runtime", "Archived To"], rows)
    signatures = [(e["incident_id"], e.get("error_signature")) for e in incidents if e.get("error_signature")]
    if signatures:
        lines.append("")
        for incident_id, signature in signatures:
            prefix = f"{code(incident_id)} error signature" if len(incidents) > 1 else "Error signature"
            lines.append(f"- {prefix}: {code(signature)}")
    return lines


def _section_tasks(report: Mapping[str, Any]) -> List[str]:
    rows = []
    for entry in report["incidents"]:
        for task in entry["tasks"]:
            stop = task.get("stop_reason")
            rows.append([
                text(task.get("label") or task["task"], 80),
                text(task.get("title") or DASH),
                _codes(_strs(task.get("nodeids")), sep="<br>"),
                str(task["attempts"]),
                _reason(stop) if stop else (NOT_RUN if not task["attempts"] else DASH),
                "yes" if task.get("flaky") else "no",
            ])
    if not rows:
        return ["### Tasks", "", "No plan yet: the tasks appear once `selfheal plan` has run."]
    return ["### Tasks", ""] + _table(["Task", "Title", "Tests", "Attempts", "Stop Reason", "Flaky"], rows)


def _config_difference_lines(report: Mapping[str, Any]) -> List[str]:
    lines: List[str] = []
    for diff in _dicts(report.get("config_differences")):
        raw = diff.get("values")
        values: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        shown = [f"{k}={_scalar(values[k])}" if k in values else k for k in _strs(diff.get("keys"))]
        lines.append(f"- Shard {text(diff.get('shard'))} ran with {_codes(shown, limit=20)} "
                     "(the table shows the first shard's config)")
    base = flatten_config(report["effective_config"])
    for entry in report["incidents"]:
        recorded = entry.get("run_config")
        if not isinstance(recorded, Mapping):
            continue
        own = flatten_config(recorded)
        keys = sorted(k for k in own if k in base and own[k] != base[k])
        if keys:
            ran_with = ", ".join(f"{k}={_scalar(own[k])}" for k in keys)
            lines.append(f"- {code(entry['incident_id'])} ran with {code(ran_with)} (from its run_result.json)")
    return lines


def _section_config(report: Mapping[str, Any]) -> List[str]:
    origins = report["origins"]
    rows = [
        [code(key), code(_scalar(value)), text(origins.get(key, DASH))]
        for key, value in flatten_config(report["effective_config"]).items()
    ]
    lines = ["### Effective Config", ""] + _table(["Key", "Value", "Origin"], rows)
    notes = _config_difference_lines(report)
    return lines + ([""] + notes if notes else [])


def _section_fingerprints(report: Mapping[str, Any]) -> List[str]:
    lines = ["### Fingerprint per Iteration", ""]
    for entry in report["incidents"]:
        lines += _sub(report, entry)
        fpi = entry["fingerprints_per_iteration"]
        capture = _strs(fpi[0]) if fpi and isinstance(fpi[0], list) else []
        rows = [["0", "capture", _FAIL if capture or entry.get("capture_tests") else DASH, _codes(capture), DASH, DASH]]
        for it in entry["iterations"]:
            reasons = _strs(it.get("progress_reasons"))
            progress = _yes_no(it.get("progress"))
            if reasons and it.get("progress") is not None:
                progress += f" ({', '.join(text(r, 40) for r in reasons)})"
            rows.append([
                str(it.get("iteration")),
                text(it.get("mode") or DASH),
                _PASS if it.get("verification_passed") else _FAIL,
                _codes(_strs(it.get("fingerprints"))),
                _yes_no(it.get("fingerprint_changed")),
                progress,
            ])
        lines += _table(["Iteration", "Mode", "Passed", "Fingerprints", "Changed", "Progress"], rows) + [""]
    return lines[:-1]


def _test_list(report: Mapping[str, Any], key: str, empty: str) -> List[str]:
    items: List[str] = []
    for entry in report["incidents"]:
        for nodeid in _strs(entry.get(key)):
            where = f" — {code(entry['incident_id'])}" if _multi(report) else ""
            items.append(f"- {code(nodeid)}{where}")
    return items or [empty]


def _section_fixed(report: Mapping[str, Any]) -> List[str]:
    return ["### Tests Fixed Along the Way", ""] + _test_list(report, "tests_fixed", "None.")


def _section_flaky(report: Mapping[str, Any]) -> List[str]:
    lines = ["### Flaky Tests", ""]
    items = _test_list(report, "flaky_tests", "None.")
    if items != ["None."]:
        lines += ["Failed, then passed on re-run with no code change:", ""]
    return lines + items


def _section_new_failures(report: Mapping[str, Any]) -> List[str]:
    rows = []
    for entry in report["incidents"]:
        for f in _dicts(entry.get("new_failures")):
            row = [code(f.get("nodeid") or DASH), code(f.get("fingerprint") or ""), str(f.get("iteration"))]
            rows.append(([code(entry["incident_id"])] if _multi(report) else []) + row)
    if not rows:
        return []
    header = (["Incident"] if _multi(report) else []) + ["Test", "Fingerprint", "First Seen (Iteration)"]
    return ["### New Failures", "", "Failures outside the verification selection:", ""] + _table(header, rows)


def _grid_tests(entry: Mapping[str, Any]) -> List[str]:
    tests = _strs(entry.get("capture_tests"))
    for task in entry["tasks"]:
        tests += _strs(task.get("nodeids"))
    rest: Set[str] = set()
    for it in entry["iterations"]:
        rest.update(str(k) for k in (it.get("outcomes") or {}))
    ordered = _unique(tests)
    return ordered + sorted(rest - set(ordered))


def _section_grid(report: Mapping[str, Any]) -> List[str]:
    lines = ["### Iterations × Tests", ""]
    for entry in report["incidents"]:
        lines += _sub(report, entry)
        tests = _grid_tests(entry)
        if not tests:
            lines += ["No per-test outcomes recorded.", ""]
            continue
        iterations = list(entry["iterations"])
        hidden_iterations = max(0, len(iterations) - (GRID_MAX_COLUMNS - 1))
        shown = iterations[hidden_iterations:]
        capture = set(_strs(entry.get("capture_tests")))
        header = ["Test", "capture"] + [str(it.get("iteration")) for it in shown]
        rows = []
        for nodeid in tests[:GRID_MAX_TESTS]:
            row = [code(nodeid, 120), _FAIL if nodeid in capture else DASH]
            for it in shown:
                outcome = (it.get("outcomes") or {}).get(nodeid)
                row.append(_CELL_SYMBOL.get(str(outcome), _WARN) if outcome is not None else DASH)
            rows.append(row)
        lines += _table(header, rows)
        notes = []
        if len(tests) > GRID_MAX_TESTS:
            notes.append(f"… {len(tests) - GRID_MAX_TESTS} more tests not shown")
        if hidden_iterations:
            notes.append(f"… {_plural(hidden_iterations, 'earlier iteration')} not shown")
        lines += ([""] + ["; ".join(notes) + "."] if notes else []) + [""]
    lines.append(f"{_PASS} passed · {_FAIL} failed or error · {_WARN} skipped or missing from the results · "
                 f"{DASH} not run in that iteration")
    return lines


def _mermaid_label(value: str) -> str:
    return _MERMAID_UNSAFE.sub("", value)[:80]


def _mermaid(entry: Mapping[str, Any]) -> List[str]:
    capture_count = len(_strs(entry.get("capture_tests"))) or len(_strs((entry["fingerprints_per_iteration"] or [[]])[0]))
    nodes = [f'  c0["capture: {capture_count} failing"]']
    edges: List[str] = []
    passes: List[str] = []
    fails = ["c0"]
    previous = "c0"
    iterations = list(entry["iterations"])
    hidden = max(0, len(iterations) - MERMAID_MAX_ITERATIONS)
    if hidden:
        nodes.append(f'  skip["{hidden} earlier iterations"]')
        edges.append(f"  {previous} --> skip")
        previous = "skip"
    for it in iterations[hidden:]:
        number = _int(it.get("iteration"))
        node = f"i{number}"
        mode = _mermaid_label(str(it.get("mode") or "verify"))
        failing = sum(1 for o in (it.get("outcomes") or {}).values() if o in ("failed", "error"))
        failing = failing or len(_strs(it.get("fingerprints")))
        state = "passed" if it.get("verification_passed") else f"{failing} failing"
        nodes.append(f'  {node}["iteration {number} ({mode}): {state}"]')
        changed = it.get("fingerprint_changed")
        arrow = " -->" if changed is None or it.get("verification_passed") else (
            " -->|new fingerprint|" if changed else " -->|same fingerprint|")
        edges.append(f"  {previous}{arrow} {node}")
        (passes if it.get("verification_passed") else fails).append(node)
        previous = node
    reason = entry.get("stop_reason")
    if isinstance(reason, str) and reason:
        status = str(entry.get("final_status"))
        end = _mermaid_label(reason if status == reason else f"{reason}: {status}")
    elif not iterations:
        end = "loop not run yet"
    else:
        end = "loop not finished"
    nodes.append(f'  stop(["{end}"])')
    edges.append(f"  {previous} --> stop")
    (passes if reason == policy.SUCCESS else fails).append("stop")
    return (["```mermaid", "flowchart LR"] + nodes + edges + [
        "  classDef pass fill:#dafbe1,stroke:#1a7f37",
        "  classDef fail fill:#ffebe9,stroke:#cf222e",
    ] + ([f"  class {','.join(passes)} pass"] if passes else []) + [f"  class {','.join(fails)} fail", "```"])


def _section_timeline(report: Mapping[str, Any]) -> List[str]:
    incidents = report["incidents"]
    if not incidents:
        return []
    lines = ["### Loop Timeline", ""]
    if len(incidents) > MERMAID_MAX_INCIDENTS:
        return lines + [f"Omitted for more than {MERMAID_MAX_INCIDENTS} incidents; see the tables above."]
    for entry in incidents:
        lines += _sub(report, entry) + _mermaid(entry) + [""]
    return lines[:-1]


def _option_line(option: Any) -> str:
    if isinstance(option, Mapping):
        label = text(option.get("label") or option.get("id") or DASH)
        oid = f"{code(option['id'])}: " if isinstance(option.get("id"), str) else ""
        command = f" — {code(option['command'])}" if isinstance(option.get("command"), str) else ""
        return f"  - {oid}{label}{command}"
    return f"  - {text(option)}"


def _section_decision(report: Mapping[str, Any]) -> List[str]:
    lines = ["### Decision Point", ""]
    for entry in report["incidents"]:
        lines += _sub(report, entry)
        point = entry.get("decision_point")
        if not isinstance(point, Mapping):
            lines += ["None recorded: the loop has not stopped." if not entry.get("finished") else "None recorded.", ""]
            continue
        lines.append(f"- Reason: {_reason(point.get('reason'))}")
        if point.get("message"):
            lines.append(f"- Message: {text(point['message'], 500)}")
        options = point.get("options")
        if isinstance(options, list) and options:
            lines.append("- Options:")
            lines += [_option_line(o) for o in options]
        lines.append("")
    return lines[:-1] if lines[-1] == "" else lines


def _section_next(report: Mapping[str, Any]) -> List[str]:
    lines = ["### Recommended Next Action", ""]
    incidents = report["incidents"]
    if len(incidents) <= 1:
        return lines + [text(report["recommended_next_action"], 500)]
    for entry in incidents:
        action = (entry.get("handoff") or {}).get("recommended_next_action") or DASH
        lines.append(f"- {code(entry['incident_id'])}: {text(action, 500)}")
    return lines


def _section_shards(report: Mapping[str, Any]) -> List[str]:
    shards = _dicts(report.get("shards"))
    if not shards:
        return []
    notes = any(_strs(shard.get("duplicates")) for shard in shards)
    rows = []
    for shard in shards:
        ids = _strs(shard.get("incidents"))
        dup = _strs(shard.get("duplicates"))
        row = [
            text(shard.get("name")), _codes(ids, sep="<br>") if ids else "none",
            _reason(shard.get("stop_reason")), text(shard.get("final_status") or DASH),
        ]
        if notes:
            row.append(f"{_plural(len(dup), 'incident')} already in an earlier shard: {_codes(dup)}" if dup else "")
        rows.append(row)
    header = ["Shard", "Incidents", "Stop Reason", "Final Status"] + (["Note"] if notes else [])
    return ["### Shards", ""] + _table(header, rows)


def render_markdown(
    report: Mapping[str, Any],
    *,
    extra_sections: Sequence[Mapping[str, str]] = (),
    headline: bool = False,
    mermaid: bool = True,
) -> str:
    """The report as markdown: the head GSD plan summaries paste unchanged, then details.

    ``headline=True`` (PR comment, job summary) puts one status line *before* the
    ``## RALF Lite Loop Report`` heading, so the pasteable section stays unchanged.
    ``extra_sections`` (``[{title, markdown}]``, e.g. from the
    ``pytest_selfheal_report_sections`` hook) are appended as ``### title`` sections;
    their markdown is the hook's own and is inserted as given.
    """
    lines: List[str] = [render_headline(report), ""] if headline else []
    lines += _head(report)
    sections = [
        _section_stop(report),
        _section_tasks(report),
        _section_config(report),
        _section_fingerprints(report) if report["incidents"] else [],
        _section_fixed(report) if report["incidents"] else [],
        _section_flaky(report) if report["incidents"] else [],
        _section_new_failures(report),
        _section_grid(report) if report["incidents"] else [],
        _section_timeline(report) if mermaid else [],
        _section_decision(report) if report["incidents"] else [],
        _section_next(report),
        _section_shards(report),
    ]
    for extra in extra_sections:
        title = text(extra.get("title") or "Extra", 120)
        body = str(extra.get("markdown") or "").strip("\n")
        sections.append([f"### {title}", ""] + ([body] if body else []))
    for section in sections:
        if section:
            lines += [""] + section
    return "\n".join(line.rstrip() if line.strip() else "" for line in lines) + "\n"


# --------------------------------------------------------------------------- terminal


def render_terminal(report: Mapping[str, Any]) -> List[str]:
    """A few plain lines for pytest's terminal summary (no markdown, each one line)."""
    incidents = report["incidents"]
    if not incidents:
        return [f"{REPORT_TITLE}: no incidents"]
    reason = report.get("stop_reason")
    if reason:
        verdict = f"stop reason {reason}"
    else:
        verdict = "loop not finished" if report["total_retries"] else "loop not run yet"
    retries = report["total_retries"]
    lines = [
        f"{REPORT_TITLE}: {report.get('final_status')}, {verdict} ({_plural(len(incidents), 'incident')}, "
        f"{retries} {'retry' if retries == 1 else 'retries'}{'' if report['enabled'] else ', disabled'})"
    ]
    for entry in incidents[:TERMINAL_MAX_INCIDENTS]:
        tasks = [f"{t['task']} {t['attempts']}x {t['stop_reason'] or NOT_RUN}" for t in entry["tasks"]]
        shown = ", ".join(tasks[:6]) + (f", +{len(tasks) - 6} more" if len(tasks) > 6 else "") or "no plan yet"
        state = entry["stop_reason"] or ("not finished" if entry["loops_used"] else NOT_RUN)
        lines.append(f"  {entry['incident_id']}: {entry['final_status']} ({state}) "
                     f"after {_plural(entry['loops_used'], 'iteration')}: {shown}")
    if len(incidents) > TERMINAL_MAX_INCIDENTS:
        lines.append(f"  … {len(incidents) - TERMINAL_MAX_INCIDENTS} more incidents")
    for key, label in (("flaky_tests", "flaky"), ("tests_fixed", "fixed")):
        tests = _unique(t for e in incidents for t in _strs(e.get(key)))
        if tests:
            more = f", +{len(tests) - TERMINAL_MAX_TESTS} more" if len(tests) > TERMINAL_MAX_TESTS else ""
            lines.append(f"  {label}: {', '.join(tests[:TERMINAL_MAX_TESTS])}{more}")
    lines.append(f"  next: {report['recommended_next_action']}")
    # Data may hold newlines: keep every entry one terminal line.
    return [("  " if line.startswith("  ") else "") + _one_line(line) for line in lines]
