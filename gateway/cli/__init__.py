"""``dspark-gateway`` command line (typer): serve, sim, keys, token, usage, runtime, bench, proof."""

from gateway.cli.keys import keys_app
from gateway.cli.main import app
from gateway.qualify import bench_command, proof_command
from gateway.runtime.cli import runtime_app

app.add_typer(keys_app, name="keys")
app.add_typer(runtime_app, name="runtime")
app.command("bench")(bench_command)
app.command("proof")(proof_command)

__all__ = ["app"]
