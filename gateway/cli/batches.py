"""``dspark-gateway batches list|show|cancel|wait`` and ``files list|delete``: every key's batches and
files, in the database or on a running gateway with ``--url`` (``/admin/batches``, ``/admin/files``);
a cancel or a delete is audited (:class:`~gateway.admin.batch_admin.BatchAdmin`). ``--json`` prints
the API's objects."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncEngine

from dspark_common.progress import progress_for
from gateway.admin.batch_admin import BatchAdmin, InUseError, NotFoundError
from gateway.auth import KeyStore
from gateway.auth.audit import AuditLog
from gateway.cli import output
from gateway.cli.actor import local_actor
from gateway.cli.failures import CliError
from gateway.cli.local import on_database
from gateway.cli.options import AdminKeyOpt, DatabaseOpt, JsonOpt, UrlOpt, one_place
from gateway.cli.remote import AdminClient
from gateway.cli.settings import settings
from gateway.storage.batches import TERMINAL, BatchStore
from gateway.storage.files import FileStore

T = TypeVar("T")
batches_app = typer.Typer(
    help="Every key's batches: list, show, cancel, wait (database, or --url).", rich_markup_mode=None
)
files_app = typer.Typer(
    help="Every key's uploaded and result files: list, delete (database, or --url).", rich_markup_mode=None
)
Limit = Annotated[int, typer.Option(min=1, max=1000, help="How many, newest first")]
KeyFilter = Annotated[str | None, typer.Option("--key", help="Only this key's (its name or id)")]
BatchId = Annotated[str, typer.Argument(help="The batch's id (batch_…)")]


def _on(
    url: str | None,
    admin_key: str | None,
    database_url: str | None,
    remote: Callable[[AdminClient], T],
    local: Callable[[BatchAdmin], Awaitable[T]],
) -> T:
    """``remote`` on the gateway at ``url`` if given, else ``local`` on the database."""
    one_place(url, database_url)
    if url:
        return remote(AdminClient(url, admin_key))
    config = settings(database_url=database_url)

    async def work(engine: AsyncEngine) -> T:
        files = FileStore(engine, config.files_dir, config.files_max_bytes)
        admin = BatchAdmin(BatchStore(engine), files, KeyStore(engine), AuditLog(engine))
        try:
            return await local(admin)
        except NotFoundError as error:
            raise CliError(str(error)) from None
        except InUseError as error:
            raise CliError(
                f"the file is the input of batch {error}, which has not ended: cancel it first"
            ) from None

    return on_database(config, work)


def _batches_table(batches: list[dict[str, Any]]) -> Table:
    table = output.table("id", "key_id", "status", "endpoint", "done", "failed", "total", "created (UTC)")
    for b in batches:
        counts = b["request_counts"]
        table.add_row(b["id"], b["key_id"], b["status"], b["endpoint"], str(counts["completed"]),
                      str(counts["failed"]), str(counts["total"]), output.when(b["created_at"]))  # fmt: skip
    return table


@batches_app.command("list")
def list_batches(
    limit: Limit = 50,
    key: KeyFilter = None,
    status: Annotated[str | None, typer.Option(help="Only batches in this status")] = None,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """List batches, newest first: id, key, status, lines done / failed / total, created."""
    params = {"limit": limit, "key": key, "status": status}
    rows = _on(url, admin_key, database_url,
               lambda api: api.call("GET", "/batches", params={k: v for k, v in params.items() if v})["data"],
               lambda admin: admin.list_batches(limit, key, status))  # fmt: skip
    output.emit(rows, json_out, _batches_table)


def _batch(batch_id: str, url: str | None, admin_key: str | None, database_url: str | None) -> dict[str, Any]:
    return _on(url, admin_key, database_url, lambda api: api.call("GET", f"/batches/{batch_id}"),
               lambda admin: admin.batch(batch_id))  # fmt: skip


def _say(batch: dict[str, Any]) -> str:
    counts = batch["request_counts"]
    files = ", ".join(f"{kind} file {batch[f'{kind}_file_id']}" for kind in ("output", "error")
                      if batch[f"{kind}_file_id"])  # fmt: skip
    return (f"{batch['id']} ({batch['key_id']}): {batch['status']}, {counts['completed']} done, "
            f"{counts['failed']} failed of {counts['total']}" + (f"; {files}" if files else ""))  # fmt: skip


@batches_app.command("show")
def show(
    batch_id: BatchId,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """One batch: its status, lines done / failed / total, result files (--json: every field)."""
    batch = _batch(batch_id, url, admin_key, database_url)
    output.emit(batch, json_out, _say)


@batches_app.command("cancel")
def cancel(
    batch_id: BatchId,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Cancel a batch: no more of its lines run; it ends cancelled, keeping what it answered."""
    batch = _on(url, admin_key, database_url, lambda api: api.call("POST", f"/batches/{batch_id}/cancel"),
                lambda admin: admin.cancel(local_actor(), batch_id))  # fmt: skip
    output.emit(batch, json_out, _say)


@batches_app.command("wait")
def wait(
    batch_id: BatchId,
    every: Annotated[float, typer.Option(min=0.1, help="Seconds between looks")] = 2.0,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Wait for a batch to end, with a progress bar of its lines; exits 1 unless it completed."""
    with progress_for(Console(stderr=True)) as progress:
        task = progress.add_task(batch_id, total=None)
        while True:
            batch = _batch(batch_id, url, admin_key, database_url)
            counts = batch["request_counts"]
            done = counts["completed"] + counts["failed"]
            shown = f"{batch_id} {batch['status']}"
            progress.update(task, total=counts["total"] or None, completed=done, description=shown)
            if batch["status"] in TERMINAL:
                break
            time.sleep(every)
    output.emit(batch, json_out, _say)
    if batch["status"] != "completed":
        raise typer.Exit(1)


@files_app.command("list")
def list_files(
    limit: Limit = 50,
    key: KeyFilter = None,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """List files, newest first: id, key, purpose, bytes, name, created."""
    params = {"limit": limit, "key": key}
    rows = _on(url, admin_key, database_url,
               lambda api: api.call("GET", "/files", params={k: v for k, v in params.items() if v})["data"],
               lambda admin: admin.list_files(limit, key))  # fmt: skip
    output.emit(rows, json_out, _files_table)


def _files_table(files: list[dict[str, Any]]) -> Table:
    table = output.table("id", "key_id", "purpose", "bytes", "filename", "created (UTC)")
    for f in files:
        table.add_row(
            f["id"], f["key_id"], f["purpose"], f"{f['bytes']:,}", f["filename"], output.when(f["created_at"])
        )
    return table


@files_app.command("show")
def show_file(
    file_id: Annotated[str, typer.Argument(help="The file's id (file-…)")],
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """One file: every field."""
    found = _on(url, admin_key, database_url, lambda api: api.call("GET", f"/files/{file_id}"),
                lambda admin: admin.file(file_id))  # fmt: skip
    output.emit(found, json_out, output.record)


@files_app.command("delete")
def delete_file(
    file_id: Annotated[str, typer.Argument(help="The file's id (file-…)")],
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Delete a file (refused while a batch that has not ended reads it)."""
    _on(url, admin_key, database_url, lambda api: api.call("DELETE", f"/files/{file_id}"),
        lambda admin: admin.delete_file(local_actor(), file_id))  # fmt: skip
    typer.echo(f"Deleted {file_id}.")
