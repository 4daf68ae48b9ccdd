"""``dspark-gateway`` command line (typer): serve, sim, keys, token, usage, runtime, bench, proof."""

from gateway.cli.keys import keys_app
from gateway.cli.main import app
from gateway.runtime.cli import runtime_app

app.add_typer(keys_app, name="keys")
app.add_typer(runtime_app, name="runtime")

__all__ = ["app"]
