"""The signed record of what a verification run saw fail, beside its junit file (pure): the
run's plugin writes it (capture/outcomes.py), the loop checks it (loop/verify.py ``forged``)."""

from __future__ import annotations

import hashlib
import hmac
import json

SIGNED_SUFFIX = ".signed"


def signature(key: str, failed: list[str]) -> str:
    """The HMAC of the sorted failed test names under the run's one-off key."""
    return hmac.new(key.encode(), json.dumps(sorted(failed)).encode(), hashlib.sha256).hexdigest()
