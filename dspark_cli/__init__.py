"""``dspark-gateway``, the one command line: ``serve`` (:mod:`dspark_cli.serve`), the gateway's own
commands (:mod:`gateway.cli`: token, keys, db, usage, audit, requests, status), ``sim``
(:mod:`dspark_sim.cli`), ``runtime`` (:mod:`dspark_runtime.cli`), ``bench`` and ``proof``
(:mod:`dspark_qualify.cli`). :func:`main` is the entry point (``[project.scripts]``)."""

from dspark_cli.serve import serve
from dspark_qualify import bench_command, proof_command
from dspark_runtime.cli import runtime_app
from dspark_sim.cli import sim
from gateway.cli import READS, app, batches_app, db_app, files_app, groups_app, keys_app, token
from gateway.cli.failures import run

app.command()(serve)
app.command()(sim)
app.command()(token)
app.add_typer(keys_app, name="keys")
app.add_typer(groups_app, name="groups")
app.add_typer(batches_app, name="batches")
app.add_typer(files_app, name="files")
app.add_typer(db_app, name="db")
app.add_typer(runtime_app, name="runtime")
for read in READS:
    app.command()(read)
app.command("bench")(bench_command)
app.command("proof")(proof_command)


def main() -> None:
    """``dspark-gateway``: the command line, each failure one line on stderr (:func:`run`)."""
    raise SystemExit(run(app))


__all__ = ["app", "main"]
