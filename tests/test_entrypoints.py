"""The entry-point reader of the ``selfheal`` command answers as ``importlib.metadata`` does
(pytest_selfheal/entrypoints.py), on the real environment and on a crafted ``sys.path``."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from pytest_selfheal.entrypoints import EntryPoint, entry_points_in


def _pairs(group: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    mine = [(e.name, e.value) for e in entry_points_in(group)]
    theirs = [(e.name, e.value) for e in importlib.metadata.entry_points(group=group)]
    return mine, theirs


def _dist(site: Path, dirname: str, entry_points: str) -> None:
    info = site / dirname
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dirname.split('-')[0]}\nVersion: 1\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.mark.parametrize("group", ["pytest11", "console_scripts"])
def test_the_installed_groups_read_as_importlib_metadata_reads_them(group: str) -> None:
    mine, theirs = _pairs(group)
    assert mine == theirs and mine


def test_order_shadowing_comments_and_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "ep_target.py").write_text("class Box:\n    inner = 42\n")
    _dist(first, "Ep.Thing-2.0.dist-info", "# a comment\n[ep_group]\nbox = ep_target:Box.inner\n\n[other]\nx = y\n")
    _dist(first, "ep_egg.egg-info", "[ep_group]\n  mod =  ep_target  [extra]\n")
    # The same distribution later on sys.path is shadowed, as importlib.metadata shadows it.
    _dist(second, "ep_thing-1.0.dist-info", "[ep_group]\nold = ep_target:Box\n")
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    mine, theirs = _pairs("ep_group")
    assert mine == theirs == [("box", "ep_target:Box.inner"), ("mod", "ep_target  [extra]")]
    box, module = entry_points_in("ep_group")
    assert box.load() == 42 and module.load() is sys.modules["ep_target"]
    assert entry_points_in("no_such_group") == []
    with pytest.raises(ValueError):
        EntryPoint("bad", "not a value!", "ep_group").load()
