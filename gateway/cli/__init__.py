"""``dspark-gateway`` command line (typer): serve, sim, keys, token, usage."""

from gateway.cli.keys import keys_app
from gateway.cli.main import app

app.add_typer(keys_app, name="keys")

__all__ = ["app"]
