"""``dspark-gateway runtime …``: render a rank's ``vllm serve`` command, check a profile before a launch.

Exit status: 0 fine, 1 ``check`` found problems, 2 an env file could not be read or parsed.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gateway.runtime.check import check
from gateway.runtime.profile import RUNTIME_DIR, ProfileError, load_node_env, load_profile
from gateway.runtime.render import render, shell_command

runtime_app = typer.Typer(help="The TP=2 vLLM backend: render its command, check a profile.")

ProfileOpt = Annotated[
    str, typer.Option("--profile", help="Name under runtime/profiles/ (balanced, throughput) or a path")
]


def default_env_file(rank: int) -> Path:
    """``runtime/.env.head`` (rank 0) / ``.env.worker`` (rank 1), else its ``.example`` template."""
    path = RUNTIME_DIR / (".env.head" if rank == 0 else ".env.worker")
    return path if path.exists() else path.with_name(path.name + ".example")


def _load_failed(exc: ProfileError) -> typer.Exit:
    Console(stderr=True).print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


@runtime_app.command("render")
def render_cmd(
    profile: ProfileOpt = "balanced",
    rank: Annotated[
        int, typer.Option("--rank", min=0, max=1, help="0 = head (API), 1 = headless worker")
    ] = 0,
    env_file: Annotated[
        Path | None, typer.Option("--env-file", help="Node env file (default runtime/.env.head|.env.worker)")
    ] = None,
) -> None:
    """Print the rank's environment (``KEY=value``) and its shell-quoted ``vllm serve`` command."""
    node_file = env_file or default_env_file(rank)
    try:
        loaded = load_profile(profile, node_file)
        argv, env = render(loaded, rank)
    except ProfileError as exc:
        raise _load_failed(exc) from exc
    except ValueError as exc:
        raise _load_failed(ProfileError(str(exc))) from exc
    typer.echo(f"# profile {loaded.name}, rank {rank}, node env {node_file}")
    for key, value in env.items():
        typer.echo(f"{key}={shlex.quote(value)}")
    typer.echo(shell_command(argv))


@runtime_app.command("check")
def check_cmd(
    profile: ProfileOpt = "balanced",
    head_env: Annotated[Path, typer.Option("--head-env", help="The head node's env file")] = RUNTIME_DIR
    / ".env.head",
    worker_env: Annotated[Path, typer.Option("--worker-env", help="The worker node's env file")] = RUNTIME_DIR
    / ".env.worker",
) -> None:
    """Refuse unsafe settings (a table of problems, exit 1); the profile is layered over the head env."""
    try:
        loaded = load_profile(profile, head_env)
        worker_loaded = load_profile(profile, worker_env)
        head, worker = load_node_env(head_env), load_node_env(worker_env)
    except ProfileError as exc:
        raise _load_failed(exc) from exc
    problems = check(loaded, head, worker)
    # The worker's effective profile is checked too (its env file may carry its own overrides).
    seen = set(problems)
    problems += [p for p in check(worker_loaded, head, worker) if p not in seen]
    console = Console(soft_wrap=False, width=160)
    if not problems:
        console.print(f"profile {loaded.name}: OK (head {head_env}, worker {worker_env})", highlight=False)
        return
    table = Table(title=f"profile {loaded.name}: {len(problems)} problem(s)")
    for column in ("where", "setting", "reason"):
        table.add_column(column, overflow="fold")
    for problem in problems:
        table.add_row(problem.where, problem.setting, problem.reason)
    console.print(table)
    raise typer.Exit(code=1)
