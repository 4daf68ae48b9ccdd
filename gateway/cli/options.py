"""Options several commands share: the database, a running gateway's admin API, JSON output."""

from __future__ import annotations

from typing import Annotated

import typer

from dspark_common.gateway_url import URL_ENV
from gateway.cli.failures import CliError

#: The environment variable an admin key for ``--url`` may come from (not ``GATEWAY_*``: that prefix
#: is the server's own configuration, and ``GATEWAY_ADMIN_KEY_SHA256`` holds no plaintext).
ADMIN_KEY_ENV = "DSPARK_ADMIN_KEY"

DatabaseOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="A SQLite file path, sqlite:///…, postgresql://… or any SQLAlchemy async URL "
        "(default: GATEWAY_DATABASE_URL, else the SQLite file under ~/.local/share/dspark-gateway)",
    ),
]
UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar=URL_ENV,
        show_envvar=True,
        help="A running gateway's address (http://head:8080, /v1 or not): act through its admin API, "
        "not the database",
    ),
]
AdminKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--admin-key",
        envvar=ADMIN_KEY_ENV,
        show_envvar=True,
        help="Admin key or token for --url (the environment keeps it out of the process list)",
    ),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print JSON (the admin API's objects) instead of a table")
]


def one_place(url: str | None, database_url: str | None) -> None:
    """Refuse ``--url`` with ``--database-url``: a command acts on a gateway or on a database, and
    silently dropping one would act where the user did not mean to."""
    if url and database_url:
        raise CliError("--url and --database-url name two places to act on: give one")
