"""The loop's localisation run (edge): the failing tests' files re-run with
:envvar:`SELFHEAL_LOCALISE` naming the file the controller writes the spectrum evidence and
scores to (docs/loop.md "Suspects").
"""

from __future__ import annotations

import pytest

from pytest_selfheal.capture.spectrum import SpectrumHook
from pytest_selfheal.plan.suspects import passing_spectrum
from pytest_selfheal.store.fsio import atomic_write_json

_NAME = "selfheal-localise"


class LocaliseHook:
    def __init__(self, spectrum: SpectrumHook, path: str) -> None:
        self.spectrum = spectrum
        self.path = path

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        found = self.spectrum.evidence()
        doc: dict[str, object] = {
            "spectrum": {n: [r.to_json() for r in refs] for n, refs in found.top.items()},
            "scores": [[*key, round(score, 3)] for key, score in sorted(found.scores.items())],
            **passing_spectrum(self.spectrum.covered, self.spectrum.passed),  # the regression check's reach
        }
        if not found.top:
            doc["unrecorded"] = self.spectrum.why_empty()
        atomic_write_json(self.path, doc)


def start(config: pytest.Config, path: str) -> None:
    """Record this run's spectrum (every xdist worker too) and, on the controller, write it to ``path``."""
    worker = hasattr(config, "workerinput")
    spectrum = SpectrumHook(str(config.rootpath), worker=worker)
    config.pluginmanager.register(spectrum, f"{_NAME}-spectrum")
    if not worker:
        config.pluginmanager.register(LocaliseHook(spectrum, path), _NAME)


__all__ = ["LocaliseHook", "start"]
