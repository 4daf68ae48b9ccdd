"""Usage over time, for the console's charts and their CSV/JSON: the window a page asks for, the size
of its buckets, and the ledger's rows (:meth:`~gateway.telemetry.ledger.UsageLedger.series`) laid out
as one array per series over every bucket. Pure: no I/O, no web framework.

A window is the last hour, day or week, or a custom ``from``/``to`` (from 1970, at most
:data:`LONGEST_S`); a time typed without an offset is the browser's local time when the page says how
far it is from UTC (``from_tz``, ``to_tz``, else ``tz``: JavaScript's ``Date.getTimezoneOffset()``,
minutes to add to local time to get UTC), else UTC.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gateway.telemetry.ledger import SeriesBy

#: The windows a page may name, s.
RANGES = {"hour": 3600, "day": 86_400, "week": 604_800}
#: Bucket sizes, s: a window gets the smallest that gives at most :data:`MOST_POINTS` buckets.
BUCKETS = (60, 300, 900, 1800, 3600, 10_800, 21_600, 86_400, 604_800)
MOST_POINTS = 120
#: The longest custom window, s (a chart of it has at most 57 weekly points), and its earliest start.
LONGEST_S = 400 * 86_400
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
#: Series drawn one by one; the rest are summed as ``other``.
TOP = 8
#: A series' name for requests of keys in no group.
NO_GROUP = "(no group)"


@dataclass(frozen=True, slots=True)
class Window:
    """``[start, end)`` (UTC), the bucket size in s, and what the page called it."""

    start: datetime
    end: datetime
    bucket_s: int
    name: str

    @property
    def unit(self) -> str:
        """The bucket as words, for axis labels ("15 min", "3 h", "1 day")."""
        for size, word in ((86_400, "day"), (3600, "h"), (60, "min")):
            if self.bucket_s % size == 0:
                return f"{self.bucket_s // size} {word}"
        return f"{self.bucket_s} s"


def window(params: Mapping[str, str], now: datetime) -> Window:
    """The window of a page's query ``params`` (``range``: hour | day | week | custom, with ``from``,
    ``to`` and ``tz`` for custom); ``ValueError`` saying what is wrong."""
    name = params.get("range") or "day"
    if name in RANGES:
        start, end = now - timedelta(seconds=RANGES[name]), now
    elif name == "custom":
        start = _instant(params, "from")
        end = _instant(params, "to") if params.get("to") else now
        if end <= start:
            raise ValueError("the end of the range must come after its start")
        if start < EARLIEST or (end - start).total_seconds() > LONGEST_S:
            raise ValueError(f"a range starts in 1970 or later and spans at most {LONGEST_S // 86_400} days")
    else:
        raise ValueError(f"range must be hour, day, week or custom; got {name!r}")
    return Window(start, end, bucket_for((end - start).total_seconds()), name)


def _offset(text: str | None) -> timedelta:
    try:
        minutes = int(text) if text else 0
    except ValueError:
        raise ValueError("tz must be a number of minutes") from None
    if abs(minutes) > 24 * 60:
        raise ValueError("tz must be within a day of UTC")
    return timedelta(minutes=minutes)


def _instant(params: Mapping[str, str], what: str) -> datetime:
    """The time ``params[what]`` (UTC); typed without an offset, the browser's local time, which is
    ``{what}_tz`` minutes from UTC on that day (the browser's ``getTimezoneOffset()`` for that date, so
    a summer date in winter is read right), else ``tz``."""
    text = params.get(what)
    if not text:
        raise ValueError(f"a custom range needs its {what} time")
    offset = _offset(params.get(f"{what}_tz") or params.get("tz"))
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{what} must be a time such as 2026-12-01T09:00; got {text!r}") from None
    try:
        return (parsed if parsed.tzinfo else (parsed + offset).replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{what} is outside the years 1 to 9999") from None


def bucket_for(span_s: float) -> int:
    """The smallest of :data:`BUCKETS` that cuts ``span_s`` into at most :data:`MOST_POINTS`."""
    return next((size for size in BUCKETS if span_s / size <= MOST_POINTS), BUCKETS[-1])


def layout(
    rows: Iterable[Mapping[str, Any]], split_by: SeriesBy, span: Window, top: int = TOP
) -> dict[str, Any]:
    """The ledger's ``rows`` as the chart draws them::

        {"split_by", "start", "end" (ISO 8601), "bucket_s", "unit",
         "buckets": [Unix time of each bucket's start, s],
         "series": [{"name", "requests": [...], "prompt_tokens": [...], "completion_tokens": [...],
                     "tokens": [...]}, ...]}

    one value per bucket (0 where nothing arrived); the ``top`` series with the most tokens, by name,
    then ``other`` summing the rest."""
    size = span.bucket_s
    first = math.floor(span.start.timestamp() / size) * size
    buckets = list(range(first, math.ceil(span.end.timestamp() / size) * size, size))
    index = {bucket: i for i, bucket in enumerate(buckets)}
    figures = ("requests", "prompt_tokens", "completion_tokens")
    by_name: dict[str, dict[str, list[int]]] = {}
    for row in rows:
        name = row[split_by] if row[split_by] is not None else NO_GROUP
        arrays = by_name.setdefault(name, {figure: [0] * len(buckets) for figure in figures})
        at = index.get(int(row["bucket"]))
        if at is not None:
            for figure in figures:
                arrays[figure][at] += int(row[figure] or 0)
    for arrays in by_name.values():
        arrays["tokens"] = [
            p + c for p, c in zip(arrays["prompt_tokens"], arrays["completion_tokens"], strict=True)
        ]
    ranked = sorted(by_name, key=lambda name: (-sum(by_name[name]["tokens"]), name))
    series = [{"name": name, **by_name[name]} for name in sorted(ranked[:top])]
    if len(ranked) > top:
        rest = [by_name[name] for name in ranked[top:]]
        summed = {
            f: [sum(at) for at in zip(*(a[f] for a in rest), strict=True)] for f in (*figures, "tokens")
        }
        series.append({"name": "other", **summed})
    return {
        "split_by": split_by,
        "start": span.start.isoformat(),
        "end": span.end.isoformat(),
        "bucket_s": size,
        "unit": span.unit,
        "buckets": buckets,
        "series": series,
    }


#: The CSV export's columns.
CSV_COLUMNS = ("bucket_start", "name", "requests", "prompt_tokens", "completion_tokens", "tokens")


def csv_rows(laid_out: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per bucket and series where anything arrived (:data:`CSV_COLUMNS`; ``bucket_start``
    ISO 8601 UTC)."""
    rows = []
    for i, bucket in enumerate(laid_out["buckets"]):
        start = datetime.fromtimestamp(bucket, UTC).isoformat()
        for series in laid_out["series"]:
            if series["requests"][i]:
                figures = {column: series[column][i] for column in CSV_COLUMNS[2:]}
                rows.append({"bucket_start": start, "name": series["name"], **figures})
    return rows
