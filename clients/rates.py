"""Rate limits as configured: "N/P" strings parsed into a ``Rate``, split into shards.

Nothing here touches Django, so the settings can refuse a malformed limit as the process
starts (``config.settings``) rather than at its first selection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RATE = re.compile(r"(?P<count>[0-9]+)\s*/\s*(?P<period>[0-9]*\.?[0-9]+)?\s*(?P<unit>[smhd]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

# A bucket is split into shards of at least this much capacity, at most MAX_SHARDS of them; a
# small limit (a few per minute) stays one exact bucket.
SHARD_CAPACITY = 50
MAX_SHARDS = 8


@dataclass(frozen=True)
class Rate:
    """At most ``count`` requests per ``period`` seconds, replenishing continuously."""

    count: int
    period: float

    @property
    def shards(self) -> int:
        """Return how many buckets share this rate."""
        return max(1, min(MAX_SHARDS, self.count // SHARD_CAPACITY))


def parse_rate(value: object) -> Rate | None:
    """Parse "N/P" with an optional unit (s, m, h, d) after P, e.g. "600/60s"; None disables."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in {"", "0", "none", "off"}:
        return None
    match = _RATE.fullmatch(text)
    if not match:
        raise ValueError(f"rate limit {value!r} is not of the form 'N/Ps', e.g. '600/60s'")
    count = int(match["count"])
    period = float(match["period"] or 1) * _UNIT_SECONDS[match["unit"]]
    if count == 0:
        return None
    if period <= 0:
        raise ValueError(f"rate limit {value!r} needs a positive period")
    return Rate(count, period)
