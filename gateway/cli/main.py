"""``dspark-gateway`` itself (its ``--debug``, ``--version``: :data:`app`) and ``token``; the command
line (:mod:`dspark_cli`) mounts every command on :data:`app`.

Flags override ``GATEWAY_*`` environment variables (they are passed to :class:`Settings` directly).
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated

import typer

from gateway.admin.durations import parse_duration
from gateway.cli.failures import Invocation, checked
from gateway.cli.settings import fail, settings

__all__ = ["app", "token"]

app = typer.Typer(
    help="dspark-gateway: authenticated OpenAI-compatible gateway for DeepSeek-V4 on vLLM.",
    rich_markup_mode=None,
)


def _version(asked: bool) -> None:
    if asked:
        typer.echo(f"dspark-gateway {version('dspark-gateway')}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", envvar="DSPARK_DEBUG", help="On a failure, Python's traceback instead of one line"
        ),
    ] = False,
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit"),
    ] = False,
) -> None:
    ctx.ensure_object(Invocation).debug = debug


def token(
    subject: Annotated[
        str, typer.Option("--sub", help="Who the token is for (shown as jwt:<issuer digest>:<sub>)")
    ] = "admin",
    scope: Annotated[list[str] | None, typer.Option(help="Scope to grant (repeatable), e.g. admin")] = None,
    ttl: Annotated[str, typer.Option(help="Lifetime, e.g. 15m")] = "15m",
) -> None:
    """Mint a short-lived gateway JWT (HS256 with GATEWAY_JWT_SECRET); printed alone on stdout."""
    from gateway.app import token_config

    config = token_config(settings())
    if config is None or not config.secret:
        raise fail("GATEWAY_JWT_SECRET is not set")
    lifetime = checked("--ttl", parse_duration, ttl)
    from gateway.auth.tokens import mint

    typer.echo(mint(config, subject, list(scope or []), lifetime.total_seconds()))
