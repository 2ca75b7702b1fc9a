"""The names the pytest plugin registers (ini options, the verification marker variable).

Kept apart from settings.py so that ``pytest_addoption`` costs nothing in runs without
``--selfheal``: this module imports nothing.
"""

from __future__ import annotations

# pytest ini option -> dotted config key (layer 4). The plugin registers these names with
# ``parser.addini``; ``selfheal_config`` is not one key but a linelist of KEY=VALUE overrides.
INI_OVERRIDES = "selfheal_config"
INI_KEYS: dict[str, str] = {
    "selfheal_dir": "reports_dir",
    "selfheal_report": "report_path",
    "selfheal_max_iterations": "max_iterations",
    "selfheal_error_fingerprint_repeats": "error_fingerprint_repeats",
    "selfheal_no_progress_repeats": "no_progress_repeats",
    "selfheal_max_runtime_minutes": "max_runtime_minutes",
    "selfheal_approve": "repair.approve",
    "selfheal_repair_command": "repair.command",
    INI_OVERRIDES: "",
}

# Set by the loop in the verification runs it starts: the child run stays passive, so a
# verification run never captures an incident or records an attempt of its own.
VERIFYING_ENV = "SELFHEAL_VERIFYING"
# `selfheal ci` gives its pytest child a fresh random token here: the capture records it as
# incident.json `ci_run`, and ci loops only the incident holding its own token (docs/github.md).
CI_RUN_ENV = "SELFHEAL_CI_RUN"
