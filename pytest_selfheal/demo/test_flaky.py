"""A flaky test: it times out on its first run in this folder and passes afterwards."""

from pathlib import Path

_SEEN = Path(__file__).with_name(".flaky-seen")


def test_upstream_answers():
    if not _SEEN.exists():
        _SEEN.write_text("seen\n")
        raise TimeoutError("upstream did not answer within 2.0s (simulated flake)")
