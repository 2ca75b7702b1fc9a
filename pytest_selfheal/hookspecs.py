"""Extension points of pytest-selfheal, registered with ``pytest_addhooks``.

This module *is* the plugin API: implement these hooks in a ``conftest.py`` or a plugin.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("pytest")
