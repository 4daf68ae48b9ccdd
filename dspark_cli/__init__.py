"""``dspark-gateway``, the one command line: ``serve`` (:mod:`dspark_cli.serve`), the gateway's own
commands (:mod:`gateway.cli`: token, keys, db, usage, audit, requests, status), ``sim``
(:mod:`dspark_sim.cli`), ``runtime`` (:mod:`dspark_runtime.cli`), ``bench`` and ``proof``
(:mod:`dspark_qualify.cli`). :func:`main` is the entry point (``[project.scripts]``).

A run imports the module of the one command it names and no other: importing them all (the
simulator, the qualifier, the gateway's every layer) took most of a short command's second.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

import typer

from gateway.cli.failures import run
from gateway.cli.main import app

#: Every command, in the order help lists them: its name -> ``(module, attribute)``, a function (a
#: command) or a :class:`typer.Typer` (a group of commands).
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("dspark_cli.serve", "serve"),
    "sim": ("dspark_sim.cli", "sim"),
    "token": ("gateway.cli.main", "token"),
    "usage": ("gateway.cli.reads", "usage"),
    "audit": ("gateway.cli.reads", "audit"),
    "requests": ("gateway.cli.reads", "requests"),
    "status": ("gateway.cli.reads", "status"),
    "bench": ("dspark_qualify", "bench_command"),
    "proof": ("dspark_qualify", "proof_command"),
    "keys": ("gateway.cli.keys", "keys_app"),
    "groups": ("gateway.cli.groups", "groups_app"),
    "batches": ("gateway.cli.batches", "batches_app"),
    "files": ("gateway.cli.batches", "files_app"),
    "db": ("gateway.cli.db", "db_app"),
    "runtime": ("dspark_runtime.cli", "runtime_app"),
}


def command_line(args: Sequence[str]) -> typer.Typer:
    """:data:`app` with what a run on ``args`` can reach mounted: the one command its first word
    names (the root's own options are flags, so it is the first word not starting with ``-``), or
    every command (help, shell completion, a word that names none). Call it once per process."""
    named = next((arg for arg in args if not arg.startswith("-")), None)
    for name in [named] if named in COMMANDS else COMMANDS:
        module, attribute = COMMANDS[name]
        found = getattr(importlib.import_module(module), attribute)
        if isinstance(found, typer.Typer):
            app.add_typer(found, name=name)
        else:
            app.command(name)(found)
    return app


def main(args: Sequence[str] | None = None) -> None:
    """``dspark-gateway``: the command line, each failure one line on stderr (:func:`run`)."""
    given = sys.argv[1:] if args is None else args
    raise SystemExit(run(command_line(given), given))


__all__ = ["COMMANDS", "command_line", "main"]
