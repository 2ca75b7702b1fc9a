"""pytest-selfheal: capture failing runs as incidents and drive the bounded RALF-Lite repair loop."""

from __future__ import annotations

__version__ = "0.1.0"
