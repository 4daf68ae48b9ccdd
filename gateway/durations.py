"""Parse human durations such as ``30d``, ``12h``, ``15m``, ``90s`` (CLI flags)."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)


def parse_duration(text: str) -> timedelta:
    """``"30d"`` -> ``timedelta(days=30)``. Units: s, m, h, d, w. Raises ``ValueError`` otherwise."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"invalid duration {text!r}: use a number and a unit s|m|h|d|w, e.g. 30d")
    value, unit = float(match.group(1)), match.group(2).lower()
    if value <= 0:
        raise ValueError(f"duration must be positive: {text!r}")
    return timedelta(**{_UNITS[unit]: value})
