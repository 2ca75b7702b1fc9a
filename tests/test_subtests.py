"""A test whose subtests fail is one failure, the same at capture and at verification: the
first failing report of a phase speaks, as in pytest's junit, which a verification reads."""

from __future__ import annotations

from pathlib import Path

from helpers import cli, make_project, run_pytest_selfheal

CASES = '''
    import unittest


    def last(items):
        return items[-2]  # the bug


    class LastTests(unittest.TestCase):
        def test_last(self):
            for items, expected in (([1, 2, 3], 3), ([4, 5], 5), ([7, 8, 9, 10], 10)):
                with self.subTest(items=items):
                    self.assertEqual(last(items), expected)
'''


def test_a_test_whose_subtests_fail_repeats_as_the_same_failure(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"test_last.py": CASES})
    captured = run_pytest_selfheal(project, "-p", "no:randomly")
    assert captured.returncode == 1, captured.stdout
    (incident_id,) = [p.name for p in (project / ".selfheal" / "error_inbox").iterdir()]
    looped = cli("loop", incident_id, cwd=project)
    assert "fingerprint same, progress no -> STOP repeated_fingerprint" in looped.stdout, looped.stdout
    assert "message unstable" not in looped.stdout
