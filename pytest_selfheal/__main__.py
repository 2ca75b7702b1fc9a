from __future__ import annotations

import sys

from pytest_selfheal.cli.main import main

sys.exit(main())
