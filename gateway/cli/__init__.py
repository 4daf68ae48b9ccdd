"""``dspark-gateway`` command line (typer): serve, sim, keys, db, token, usage, audit, requests,
status, runtime, bench, proof. :func:`main` is the entry point (``[project.scripts]``)."""

from gateway.cli import reads
from gateway.cli.db import db_app
from gateway.cli.failures import run
from gateway.cli.keys import keys_app
from gateway.cli.main import app
from gateway.qualify import bench_command, proof_command
from gateway.runtime.cli import runtime_app

app.add_typer(keys_app, name="keys")
app.add_typer(db_app, name="db")
app.add_typer(runtime_app, name="runtime")
for read in (reads.usage, reads.audit, reads.requests, reads.status):
    app.command()(read)
app.command("bench")(bench_command)
app.command("proof")(proof_command)


def main() -> None:
    """``dspark-gateway``: the command line, each failure one line on stderr (:func:`run`)."""
    raise SystemExit(run(app))


__all__ = ["app", "main"]
