"""How the CLI fails: one line on stderr (``error: …``) and a non-zero exit status, never a traceback.

:func:`run` is the entry point's body. It runs the typer app's click command in non-standalone mode
(click's public ``Command.main``), so every failure comes back here and is written the same way:

- a usage error (unknown option, missing argument, bad choice): its message and where the help is,
  status 2 (click's); a group made to show its help when run bare (``no_args_is_help``) shows it;
- :class:`CliError`, a failure a command explains (a bad duration, no such key, HTTP 403 from the
  gateway, a database it cannot open): its message, its status (1 unless it says otherwise);
- settings that do not validate (pydantic): each bad setting and why, status 1;
- anything else: its type and message, status 1; ``--debug`` (or ``DSPARK_DEBUG=1``) lets it — and
  a :class:`CliError`'s cause — go on to Python's traceback instead.

Ctrl-C is status 130, as a shell reports a process stopped by SIGINT.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar, overload

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

PROG = "dspark-gateway"
T = TypeVar("T")


class CliError(Exception):
    """A failure of a command, explained for the user in ``message`` (one line); exit ``status``."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass
class Invocation:
    """What the root command's options say about this run (its click context's ``obj``)."""

    debug: bool = False


@overload
def checked(flag: str, parse: Callable[[str], T], value: str) -> T: ...
@overload
def checked(flag: str, parse: Callable[[str], T], value: str | None) -> T | None: ...
def checked(flag: str, parse: Callable[[str], T], value: str | None) -> T | None:
    """``parse(value)``, its ``ValueError`` a :class:`CliError` naming ``flag``; None for None."""
    if value is None:
        return None
    try:
        return parse(value)
    except ValueError as exc:
        raise CliError(f"{flag}: {exc}") from None


def first_line(text: str) -> str:
    """The first line of ``text`` that is not blank, stripped ('' when there is none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception on one line (its message's first line)."""
    message = first_line(str(exc))
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def validation_message(exc: ValidationError) -> str:
    """A pydantic refusal on one line: ``field: why; field: why``."""

    def one(error: object) -> str:
        assert isinstance(error, dict)
        where = ".".join(str(part) for part in error["loc"])
        why = first_line(str(error["msg"])).removeprefix("Value error, ")
        return f"{where}: {why}" if where else why

    return "; ".join(one(error) for error in exc.errors())


def error_line(message: str) -> None:
    """Write ``error: message`` as one line on stderr (never wrapped: long lines stay one line)."""
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    console.print(f"[red]error:[/red] {escape(first_line(message) or 'failed')}")


def _usage(exc: typer.TyperException) -> str:
    ctx = getattr(exc, "ctx", None)  # click's usage errors name the command that refused
    where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return first_line(exc.format_message()) + where


def run(app: typer.Typer, args: Sequence[str] | None = None) -> int:
    """Run ``app`` on ``args`` (``sys.argv[1:]`` when None) and return its exit status; a failure is
    written as one line on stderr (see the module's docstring)."""
    invocation = Invocation()
    try:
        result = typer.main.get_command(app).main(
            args=args, prog_name=PROG, standalone_mode=False, obj=invocation
        )
    except typer.TyperException as exc:  # click's usage errors (ClickException) are TyperExceptions
        if type(exc).__name__ == "NoArgsIsHelpError":  # a group run bare: its help (as typer tells it)
            typer.echo(exc.format_message(), err=True)
        else:
            error_line(_usage(exc))
        return exc.exit_code
    except typer.Abort:
        error_line("aborted")
        return 1
    except CliError as exc:
        if invocation.debug:
            raise
        error_line(exc.message)
        return exc.status
    except ValidationError as exc:
        if invocation.debug:
            raise
        error_line(f"invalid {exc.title}: {validation_message(exc)}")
        return 1
    except Exception as exc:
        if invocation.debug:
            raise
        error_line(f"{describe(exc)} (--debug shows the traceback)")
        return 1
    return result if isinstance(result, int) else 0
