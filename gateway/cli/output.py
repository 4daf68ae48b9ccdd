"""How every command prints what it got, the same way for the same kind of result:

- rows (``list``, ``usage``, ``audit``, ``requests``): a table;
- one record (``show``): a ``field  value`` line each;
- a change (``create``, ``update``, ``revoke`` …): a sentence;
- with ``--json``, whatever the command: the admin API's objects as JSON on stdout, nothing else.

A table wraps a cell only when the terminal is too narrow for it; where stdout is not a terminal (and
``COLUMNS`` is not set) it is as wide as its rows, so a pipe to ``grep`` gets a row on one line.
Times are ``YYYY-MM-DD HH:MM:SS``, UTC.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import typer
from rich import box
from rich.console import Console, RenderableType
from rich.table import Table

#: Where a table is as wide as its rows (stdout not a terminal): more than any row needs.
UNBOUNDED = 100_000


def console() -> Console:
    """stdout for tables: a terminal's width on a terminal (or ``COLUMNS``, when set), else
    :data:`UNBOUNDED`."""
    out = Console()
    return out if _sized(out) else Console(width=UNBOUNDED)


def _sized(out: Console) -> bool:
    return out.is_terminal or bool(os.environ.get("COLUMNS"))


def joined(values: Iterable[str]) -> str:
    """The values of one cell: a line each where the table has a width (a terminal), ``; ``
    between them where a row must stay on one line (stdout a file or a pipe)."""
    return ("\n" if _sized(Console()) else "; ").join(values)


def table(*columns: str, narrow: bool = False) -> Table:
    """A table of ``columns``, each as wide as its widest cell while the width allows, folding when it
    must; a time's (named ``… (UTC)``) never folds, or, ``narrow``, shows its date over its time."""
    out = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in columns:
        if column.endswith("(UTC)"):
            out.add_column(column, no_wrap=not narrow, max_width=len("YYYY-MM-DD") if narrow else None)
        else:
            out.add_column(column, overflow="fold")
    return out


def when(value: str | int | float | None) -> str:
    """An ISO 8601 time or a Unix time as ``YYYY-MM-DD HH:MM:SS`` (UTC); ``-`` for none."""
    if value is None or value == "":
        return "-"
    at = (
        datetime.fromtimestamp(value, UTC)
        if isinstance(value, int | float)
        else datetime.fromisoformat(value)
    )
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def shown(value: Any) -> str:
    """A field's value as text: lists comma-separated, objects as JSON, none as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "[]"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def record(fields: Mapping[str, Any]) -> Table:
    """One record: a ``field  value`` row each (times, ``…_at`` and ``…_until``, as :func:`when` in UTC)."""
    out = Table(box=None, show_header=False, pad_edge=False)
    out.add_column("field", style="bold", no_wrap=True)
    out.add_column("value", overflow="fold")
    for name, value in fields.items():
        is_time = (name.endswith("_at") or name.endswith("_until")) and value is not None
        out.add_row(name, f"{when(value)} UTC" if is_time else shown(value))
    return out


def emit(data: Any, json_out: bool, render: Callable[[Any], RenderableType | str]) -> None:
    """``data`` as JSON (``--json``) or as ``render`` shows it (a table, a record, a sentence)."""
    if json_out:
        typer.echo(json.dumps(data, indent=2))
        return
    shown_as = render(data)
    if isinstance(shown_as, str):
        typer.echo(shown_as)
    else:
        console().print(shown_as)
