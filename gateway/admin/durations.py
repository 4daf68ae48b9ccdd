"""Parse human durations such as ``30d``, ``12h``, ``15m``, ``90s`` and ``since`` filters (CLI, admin API)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

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
    try:
        return timedelta(**{_UNITS[unit]: value})
    except OverflowError:
        raise ValueError(f"duration {text!r} is longer than {timedelta.max.days} days") from None


def expires_after(duration: timedelta) -> datetime:
    """The instant ``duration`` from now (UTC): a key's expiry from ``--expires-in`` / ``expires_in``.
    Raises ``ValueError`` past the year 9999."""
    try:
        return datetime.now(UTC) + duration
    except OverflowError:
        raise ValueError(f"an expiry {duration.days} days from now is after the year 9999") from None


def parse_since(text: str | None) -> datetime | None:
    """``"7d"`` -> now minus 7 days; an ISO 8601 time -> that instant (UTC if no offset); None -> None.

    Raises ``ValueError`` for anything else, its message the rule without a subject (``must be …``):
    the caller names what was given (``--since: …``, the API's ``since …``).
    """
    if not text:
        return None
    try:
        duration = parse_duration(text)
    except ValueError:
        pass
    else:
        try:
            return datetime.now(UTC) - duration
        except OverflowError:
            raise ValueError(f"{text!r} reaches before the year 1") from None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    except ValueError:
        raise ValueError(f"must be a positive duration like 7d or an ISO 8601 time; got {text!r}") from None
    except OverflowError:
        raise ValueError(f"{text!r} is outside the years 1 to 9999 in UTC") from None
