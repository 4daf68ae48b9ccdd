"""Usage ledger: one row per request, written off the hot path in batches.

:meth:`UsageLedger.add` only appends to an in-memory batch; a background task writes the batch every
``flush_interval_s`` seconds (or as soon as it holds ``batch_size`` rows) in one transaction (in
statements of at most 10 rows, so a large batch never holds the event loop for long), and
:meth:`close` writes what is left on shutdown. At most one interval of rows is at risk if the process
is killed without a shutdown. No prompt text and no key are ever stored: the key's id and name only.

A write that fails (the database locked, read-only, full or unreachable) keeps every row of it in
memory, in order, for the next try: a row is written once, when a transaction holding it commits.
Only a row the database refuses for what it holds (a constraint, a value it can't store) is dropped,
and logged, so it can't block the others. While rows wait after a failure, :meth:`UsageLedger.trouble`
says why (``/health`` reports it); once ``max_pending`` rows wait, :meth:`UsageLedger.check` refuses
new requests (503 ``ledger_unavailable``) rather than let them be served unrecorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import BigInteger, String, and_, cast, extract, func, insert, or_, select
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import ColumnElement

from gateway.errors import GatewayError
from gateway.storage.failures import reason
from gateway.storage.tables import UsageRow, utc
from gateway.telemetry.record import RequestTelemetry

log = logging.getLogger("gateway.ledger")
#: Rows per INSERT statement of a flush (see :meth:`UsageLedger.flush`): small, so the event loop
#: serves requests between statements (the slot idle gap ``queue_scale`` measures is lower with 10
#: than with 50, at no more CPU per request).
_STATEMENT_ROWS = 10
GroupBy = Literal["day", "key", "group", "model", "route", "batch"]
#: What a usage time series is split by.
SeriesBy = Literal["key", "group", "model"]
#: Failures of a row the database refuses for what it holds: that row is dropped (and logged). Any
#: other failure is the database's, and keeps every row for the next try.
_REFUSED_ROW = (IntegrityError, DataError)


_COLUMNS = [c.name for c in UsageRow.__table__.columns if c.name != "id"]
#: The columns that are a record's attributes as they are (the two JSON columns are not).
_SCALARS = tuple(name for name in _COLUMNS if name not in ("spec", "spec_candidates"))
#: One statement object for every flush (a statement is immutable; built once, not per flush).
_INSERT = insert(UsageRow)


def _row(record: RequestTelemetry) -> dict[str, Any]:
    row = {name: getattr(record, name) for name in _SCALARS}
    row["spec"] = record.spec.as_dict() if record.spec else None
    row["spec_candidates"] = [stats.as_dict() for stats in record.spec_candidates]
    return row


#: What vLLM puts before the request id in an answer's ``id`` (``chatcmpl-req-…``): a client searching
#: for the id it got finds its request.
RESPONSE_ID_PREFIXES = ("chatcmpl-", "cmpl-")


@dataclass(frozen=True, slots=True)
class RequestFilter:
    """Which rows a request log shows; every condition given holds: ``key`` and ``group`` (names;
    ``group=""``: keys in none), ``route``, ``status`` (a code, or a class ``2xx`` | ``4xx`` | ``5xx``),
    ``end_reason``, arrival in [``since``, ``until``), and ``search``: text the request id, the
    client's ``x-request-id`` or the trace id contains (an answer's id, ``chatcmpl-…``, too)."""

    key: str | None = None
    group: str | None = None
    route: str | None = None
    status: str | None = None
    end_reason: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    search: str | None = None

    def conditions(self) -> list[ColumnElement[bool]]:
        """The WHERE conditions; ``ValueError`` for a status that is neither a code nor a class."""
        out: list[ColumnElement[bool]] = []
        if self.key:
            out.append(UsageRow.key_name == self.key)
        if self.group is not None:
            out.append(UsageRow.group_name == self.group if self.group else UsageRow.group_name.is_(None))
        if self.route:
            out.append(UsageRow.route == self.route)
        if self.status:
            out.append(_status(self.status))
        if self.end_reason:
            out.append(UsageRow.end_reason == self.end_reason)
        if self.since is not None:
            out.append(UsageRow.arrived_at >= self.since.astimezone(UTC))
        if self.until is not None:
            out.append(UsageRow.arrived_at < self.until.astimezone(UTC))
        if self.search:
            text = self.search.strip()
            for prefix in RESPONSE_ID_PREFIXES:  # vLLM's answer ids are the request id behind these
                text = text.removeprefix(prefix)
            columns = (UsageRow.request_id, UsageRow.client_request_id, UsageRow.trace_id)
            out.append(or_(*(column.contains(text, autoescape=True) for column in columns)))
        return out


def _status(text: str) -> ColumnElement[bool]:
    if len(text) == 3 and text[0] in "12345" and text[1:].lower() == "xx":
        low = int(text[0]) * 100
        return and_(UsageRow.status >= low, UsageRow.status < low + 100)
    if text.isdigit() and len(text) == 3:
        return UsageRow.status == int(text)
    raise ValueError(f"status must be a code such as 429 or a class such as 5xx; got {text!r}")


def _view(row: Any) -> dict[str, Any]:
    item = {name: row[name] for name in ("id", *_COLUMNS)}
    arrived = utc(row["arrived_at"])
    item["arrived_at"] = arrived.isoformat() if arrived else None
    return item


class UsageLedger:
    """Batched writer and reader of :class:`UsageRow`."""

    def __init__(
        self,
        engine: AsyncEngine,
        flush_interval_s: float = 1.0,
        batch_size: int = 500,
        max_pending: int = 10_000,
    ) -> None:
        self._engine = engine
        self._interval = flush_interval_s
        self._batch_size = batch_size
        self._max_pending = max_pending
        self._pending: list[dict[str, Any]] = []
        self._writing = 0  # rows of the write under way
        #: Why the last write failed, until one succeeds (None: it did).
        self.failure: str | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        """Start the background writer (inside a running event loop)."""
        self._task = asyncio.create_task(self._run())

    def add(self, record: RequestTelemetry) -> None:
        """Queue one row (O(1), no I/O)."""
        self._pending.append(_row(record))
        if len(self._pending) >= self._batch_size and self.failure is None:
            self._wake.set()  # after a failure, the next try waits its interval

    @property
    def unwritten(self) -> int:
        """Rows not written yet: waiting, and in the write under way."""
        return len(self._pending) + self._writing

    @property
    def backlog(self) -> int:
        """Rows not written yet after a failed write (0 while writes succeed: rows between two
        flushes are not a backlog)."""
        return self.unwritten if self.failure is not None else 0

    def trouble(self) -> str | None:
        """Why rows wait unwritten, while any wait after a failed write; None otherwise."""
        if not self.backlog:
            return None
        return f"{self.backlog} usage row(s) not written yet: {self.failure}"

    def check(self) -> None:
        """Raises 503 ``ledger_unavailable`` while ``max_pending`` rows or more wait after a failed
        write: a request served now would not be recorded."""
        if self.backlog >= self._max_pending:
            message = f"The gateway cannot record usage ({self.failure}): requests are refused until it can."
            raise GatewayError("ledger_unavailable", message)

    async def flush(self) -> int:
        """Write the pending rows now; return how many were written.

        If the batch fails because of the database, every row is kept for the next try; if the
        database refuses a row's content, rows are tried one by one and only those refused are dropped
        (logged).
        """
        batch, self._pending = self._pending, []
        if not batch:
            return 0
        self._writing = len(batch)
        try:
            return await self._write(batch)
        finally:
            self._writing = 0

    async def _write(self, batch: list[dict[str, Any]]) -> int:
        try:
            await self._insert(batch)
            self.failure = None
            return len(batch)
        except _REFUSED_ROW:
            log.warning("usage ledger batch of %d refused; retrying row by row", len(batch))
        except Exception as error:
            return self._keep(batch, error)
        written = 0
        for index, row in enumerate(batch):
            try:
                await self._insert([row])
                written += 1
            except _REFUSED_ROW:
                log.exception("usage ledger dropped row of request %s: refused", row.get("request_id"))
            except Exception as error:
                self._keep(batch[index:], error)
                return written
        self.failure = None
        return written

    async def _insert(self, rows: list[dict[str, Any]]) -> None:
        async with self._engine.begin() as conn:
            # one transaction, but statements of at most _STATEMENT_ROWS rows: binding rows takes the
            # event loop's time, and the loop serves requests between statements
            for start in range(0, len(rows), _STATEMENT_ROWS):
                await conn.execute(_INSERT, rows[start : start + _STATEMENT_ROWS])

    def _keep(self, rows: list[dict[str, Any]], error: Exception) -> int:
        """``rows`` (not written for ``error``) kept ahead of those queued since, for the next try."""
        self._pending[:0] = rows
        self.failure = reason(error)
        log.error("usage ledger: %d row(s) kept for the next try: %s", self.unwritten, self.failure)
        return 0

    async def _run(self) -> None:
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._interval)
            self._wake.clear()
            await self.flush()

    async def close(self) -> None:
        """Stop the writer and write what is left. The writer is never cancelled: a batch it is
        writing would be lost with the cancelled transaction; it finishes, then stops."""
        try:
            if self._task is not None:
                self._stopping = True
                self._wake.set()
                await self._task
        except Exception:
            log.exception("usage ledger writer failed")
        finally:
            await self.flush()
            if self._pending:
                log.error("usage ledger: %d row(s) could not be written at shutdown", len(self._pending))

    async def recent(
        self, limit: int, where: RequestFilter | None = None, offset: int = 0
    ) -> list[dict[str, Any]]:
        """The rows ``where`` selects, latest arrival first, ``offset`` of them skipped, at most
        ``limit``: dicts of every column, ``id`` included, ``arrived_at`` ISO 8601 UTC."""
        query = (
            select(UsageRow)
            .where(*(where or RequestFilter()).conditions())
            .order_by(UsageRow.arrived_at.desc(), UsageRow.id.desc())
            .offset(offset)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [_view(row) for row in (await conn.execute(query)).mappings().all()]

    async def one(self, row_id: int) -> dict[str, Any] | None:
        """The row ``row_id`` (as :meth:`recent` gives it), None if there is none."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(UsageRow).where(UsageRow.id == row_id))).mappings().first()
        return _view(row) if row is not None else None

    async def routes(self) -> list[str]:
        """Every route the ledger has rows of, sorted (a request log's choices)."""
        async with self._engine.connect() as conn:
            return list(
                (await conn.execute(select(UsageRow.route).distinct().order_by(UsageRow.route))).scalars()
            )

    async def spent(self, holder: str, since: datetime) -> tuple[int, int, int, int]:
        """What ``holder`` (``key:<id>`` or ``group:<id>``) used since ``since``: prompt, cached,
        completion and reasoning tokens (what a quota's counter starts from: :mod:`gateway.limits.quota`)."""
        kind, _, ident = holder.partition(":")
        column = UsageRow.group_id if kind == "group" else UsageRow.key_id
        query = select(
            *(
                func.coalesce(func.sum(c), 0)
                for c in (
                    UsageRow.prompt_tokens,
                    UsageRow.cached_tokens,
                    UsageRow.completion_tokens,
                    UsageRow.reasoning_tokens,
                )
            )
        ).where(column == ident, UsageRow.arrived_at >= since.astimezone(UTC))
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).one()
        return int(row[0]), int(row[1]), int(row[2]), int(row[3])

    async def usage(
        self,
        group_by: GroupBy,
        since: datetime | None = None,
        key_name: str | None = None,
        until: datetime | None = None,
    ) -> list[dict[str, Any]]:
        """Totals per day, key, group of keys (null: keys in none), model, route (the client API: chat,
        Responses, Messages ...) or batch (null: requests clients sent) of the requests that arrived
        in [``since``, ``until``): requests and prompt/completion/cached/reasoning tokens."""
        group = {
            "day": func.substr(func.cast(UsageRow.arrived_at, String), 1, 10),
            "key": UsageRow.key_name,
            "group": UsageRow.group_name,
            "model": UsageRow.model,
            "route": UsageRow.route,
            "batch": UsageRow.batch_id,
        }[group_by]
        conditions: list[ColumnElement[bool]] = []
        if since is not None:
            conditions.append(UsageRow.arrived_at >= since.astimezone(UTC))
        if until is not None:
            conditions.append(UsageRow.arrived_at < until.astimezone(UTC))
        if key_name is not None:
            conditions.append(UsageRow.key_name == key_name)
        query = (
            select(  # type: ignore[var-annotated]  # SQLAlchemy 2.1 variadic Select
                group.label(group_by),
                func.count().label("requests"),
                func.sum(UsageRow.prompt_tokens).label("prompt_tokens"),
                func.sum(UsageRow.completion_tokens).label("completion_tokens"),
                func.sum(UsageRow.cached_tokens).label("cached_tokens"),
                func.sum(UsageRow.reasoning_tokens).label("reasoning_tokens"),
            )
            .where(*conditions)
            .group_by(group)
            .order_by(group)
        )
        async with self._engine.connect() as conn:
            return [dict(row) for row in (await conn.execute(query)).mappings().all()]

    async def series(
        self, split_by: SeriesBy, start: datetime, end: datetime, bucket_s: int
    ) -> list[dict[str, Any]]:
        """The requests that arrived in [``start``, ``end``) totalled per ``bucket_s``-second bucket of
        arrival and per key name, group name (null: in none) or model: rows ``{"bucket": Unix time of
        the bucket's start, s (a multiple of bucket_s), split_by: name, "requests", "prompt_tokens",
        "completion_tokens"}`` by bucket. The bucket is computed by the database (``FLOOR(EXTRACT(EPOCH
        …))`` on PostgreSQL, ``strftime('%s', …)``, whole seconds, on SQLite), so a week of rows is not
        read one by one."""
        name = {"key": UsageRow.key_name, "group": UsageRow.group_name, "model": UsageRow.model}[split_by]
        epoch: ColumnElement[Any] = extract("epoch", UsageRow.arrived_at)
        if self._engine.dialect.name == "postgresql":  # EXTRACT gives fractions; a cast would round
            epoch = func.floor(epoch)
        bucket = cast(epoch, BigInteger) // bucket_s * bucket_s
        query = (
            select(  # type: ignore[var-annotated]  # SQLAlchemy 2.1 variadic Select
                bucket.label("bucket"),
                name.label(split_by),
                func.count().label("requests"),
                func.sum(UsageRow.prompt_tokens).label("prompt_tokens"),
                func.sum(UsageRow.completion_tokens).label("completion_tokens"),
            )
            .where(UsageRow.arrived_at >= start.astimezone(UTC), UsageRow.arrived_at < end.astimezone(UTC))
            .group_by(bucket, name)
            .order_by(bucket)
        )
        async with self._engine.connect() as conn:
            return [dict(row) for row in (await conn.execute(query)).mappings().all()]
