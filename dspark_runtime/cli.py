"""``dspark-gateway runtime …``: render a rank's ``vllm serve`` command, check a profile before a launch.

Both find the node env files (``runtime/.env.head``, ``runtime/.env.worker``) in the same place; where
one is missing ``render`` shows its ``.example`` template's command, and ``check`` — which must see
the real addresses — says which template to copy. Exit status: 0 fine, 1 ``check`` found problems,
2 an env file is missing or could not be read or parsed.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dspark_runtime.check import check
from dspark_runtime.gateway_check import check_gateway
from dspark_runtime.profile import RUNTIME_DIR, ProfileError, load_node_env, load_profile, read_env_file
from dspark_runtime.render import render, shell_command

runtime_app = typer.Typer(
    help="The TP=2 vLLM backend: render its command, check a profile.", rich_markup_mode=None
)

ProfileOpt = Annotated[
    str,
    typer.Option("--profile", help="Name under dspark_runtime/profiles/ (balanced, throughput) or a path"),
]


#: The node env files by rank (0 = head, 1 = worker), as the compose commands name them.
NODE_FILES = (".env.head", ".env.worker")
#: The gateway's env file on the head node (docs/deploy.md, "First start").
GATEWAY_ENV = RUNTIME_DIR.parent / "deploy" / ".env"


def node_env_file(rank: int, runtime_dir: Path = RUNTIME_DIR) -> Path:
    """``runtime/.env.head`` (rank 0) or ``runtime/.env.worker`` (rank 1)."""
    return runtime_dir / NODE_FILES[rank]


def template_of(path: Path) -> Path:
    """The ``.example`` template a node env file is copied from."""
    return path.with_name(path.name + ".example")


def default_env_file(rank: int, runtime_dir: Path = RUNTIME_DIR) -> Path:
    """``render``'s node file: the rank's (:func:`node_env_file`), else its template (it only prints)."""
    path = node_env_file(rank, runtime_dir)
    return path if path.exists() else template_of(path)


def node_env_files(
    head: Path | None, worker: Path | None, runtime_dir: Path = RUNTIME_DIR
) -> tuple[Path, Path]:
    """``check``'s node files: those given, else found where ``render`` finds them — but never a
    template (its addresses are not this deployment's): :class:`ProfileError`, one line naming the
    ``.example`` files to copy, when one is not there."""
    given = (head, worker)
    paths = [path or node_env_file(rank, runtime_dir) for rank, path in enumerate(given)]
    missing = [
        path for path, was_given in zip(paths, given, strict=True) if not was_given and not path.exists()
    ]
    if missing:
        copies = " and ".join(f"{template_of(path)} to {path}" for path in missing)
        raise ProfileError(
            f"no {' or '.join(str(path) for path in missing)}: copy {copies}, then set each node's "
            "VLLM_HOST_IP, NCCL_IB_GID_INDEX and MASTER_ADDR (or give --head-env and --worker-env)"
        )
    return paths[0], paths[1]


def _load_failed(exc: ProfileError) -> typer.Exit:
    Console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
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
    """Print the rank's environment (KEY=value lines) and its shell-quoted 'vllm serve' command."""
    node_file = env_file or default_env_file(rank)
    try:
        loaded = load_profile(profile, node_file)
        argv, env = render(loaded, rank)
    except ProfileError as exc:
        raise _load_failed(exc) from exc
    except ValueError as exc:
        raise _load_failed(ProfileError(str(exc))) from exc
    if env_file is None and node_file != node_env_file(rank):  # stderr: stdout stays the command
        Console(stderr=True, soft_wrap=True, highlight=False).print(
            f"note: no {node_env_file(rank)}: this is the command with {node_file}'s addresses; "
            f"copy it to {node_env_file(rank)} and set this node's",
            markup=False,
        )
    typer.echo(f"# profile {loaded.name}, rank {rank}, node env {node_file}")
    for key, value in env.items():
        typer.echo(f"{key}={shlex.quote(value)}")
    typer.echo(shell_command(argv))


@runtime_app.command("check")
def check_cmd(
    profile: ProfileOpt = "balanced",
    head_env: Annotated[
        Path | None, typer.Option("--head-env", help="The head node's env file (default runtime/.env.head)")
    ] = None,
    worker_env: Annotated[
        Path | None,
        typer.Option("--worker-env", help="The worker node's env file (default runtime/.env.worker)"),
    ] = None,
    gateway_env: Annotated[
        Path | None,
        typer.Option(
            "--gateway-env",
            help="The gateway's env file, checked to agree with the profile: KV cache events, slots, "
            "model, block size (default deploy/.env where it exists)",
        ),
    ] = None,
) -> None:
    """Refuse unsafe settings (a table of problems, exit 1); the profile is layered over the head env."""
    if gateway_env is None and GATEWAY_ENV.exists():
        gateway_env = GATEWAY_ENV
    try:
        head_env, worker_env = node_env_files(head_env, worker_env)
        loaded = load_profile(profile, head_env)
        worker_loaded = load_profile(profile, worker_env)
        head, worker = load_node_env(head_env), load_node_env(worker_env)
        gateway = read_env_file(gateway_env) if gateway_env is not None else None
    except ProfileError as exc:
        raise _load_failed(exc) from exc
    problems = check(loaded, head, worker)
    # The worker's effective profile is checked too (its env file may carry its own overrides).
    seen = set(problems)
    problems += [p for p in check(worker_loaded, head, worker) if p not in seen]
    if gateway is not None:
        problems += check_gateway(loaded, gateway)
    else:
        typer.echo(
            f"note: no {GATEWAY_ENV}: the gateway's settings were not checked (--gateway-env)", err=True
        )
    console = Console(soft_wrap=False, width=160)
    if not problems:
        checked = f", gateway {gateway_env}" if gateway_env is not None else ""
        typer.echo(f"profile {loaded.name}: OK (head {head_env}, worker {worker_env}{checked})")
        return
    table = Table(title=f"profile {loaded.name}: {len(problems)} problem(s)")
    for column in ("where", "setting", "reason"):
        table.add_column(column, overflow="fold")
    for problem in problems:
        table.add_row(problem.where, problem.setting, problem.reason)
    console.print(table)
    raise typer.Exit(code=1)
