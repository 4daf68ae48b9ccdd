"""PostgreSQL and Redis servers for tests: given, found on loopback, or started for the session.

A URL comes from, in order:

1. ``TEST_POSTGRES_URL`` (``postgresql+asyncpg://user@host:port/db``) / ``TEST_REDIS_URL``
   (``redis://host:port/db``);
2. a server on its default local port that really answers: PostgreSQL on 127.0.0.1:5432 accepting
   user ``postgres`` into database ``test`` without a password (trust auth), Redis on 127.0.0.1:6379
   answering ``PING``;
3. a throwaway server of our own on a free loopback port, in a temporary folder deleted when it
   stops: PostgreSQL made by ``initdb`` (trust auth, user ``postgres``, a database ``test``, its unix
   socket in that folder), ``redis-server`` keeping nothing on disk.

``TEST_SERVICES=own`` skips 1 and 2 (``auto``, the default, tries them). Binaries are looked up on the
``PATH``, PostgreSQL's also in ``/usr/lib/postgresql/<version>/bin`` (Debian keeps them there). initdb
refuses to run as root, so as root PostgreSQL runs as the ``postgres`` system user, which Debian's
``postgresql`` package creates. When none of 1-3 works, :class:`ServiceUnavailable` says why and
names ``make test-deps``.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import redis
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.support.servers import free_port

LOCAL_POSTGRES_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
LOCAL_REDIS_URL = "redis://127.0.0.1:6379/0"
#: Where Debian's postgresql-<version> packages put initdb, pg_ctl and postgres (not on the PATH).
DEBIAN_POSTGRES_BINS = Path("/usr/lib/postgresql")
#: Longest wait for a throwaway server to accept connections, s.
START_TIMEOUT_S = 60
HINT = (
    "run `make test-deps` (installs Debian's postgresql and redis-server), or set TEST_POSTGRES_URL / "
    "TEST_REDIS_URL to servers of yours"
)


class ServiceUnavailable(RuntimeError):
    """No server could be given, found or started; the message says why and what to do."""


@contextmanager
def own_database(server_url: str, prefix: str) -> Iterator[str]:
    """An empty database named ``prefix`` + a random suffix on the PostgreSQL server at
    ``server_url`` (an async SQLAlchemy URL), dropped at the end: its URL."""

    async def execute(statement: str) -> None:
        engine = create_async_engine(server_url, isolation_level="AUTOCOMMIT")
        async with engine.connect() as conn:
            await conn.execute(text(statement))
        await engine.dispose()

    name = prefix + uuid.uuid4().hex[:12]
    asyncio.run(execute(f"CREATE DATABASE {name}"))
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(execute(f"DROP DATABASE {name} WITH (FORCE)"))


def postgres_server() -> AbstractContextManager[str]:
    """The session's PostgreSQL: ``postgresql+asyncpg://postgres@127.0.0.1:PORT/test`` or
    ``TEST_POSTGRES_URL``."""
    return _first_of("TEST_POSTGRES_URL", LOCAL_POSTGRES_URL, postgres_answers, own_postgres)


def redis_server() -> AbstractContextManager[str]:
    """The session's Redis: ``redis://127.0.0.1:PORT/0`` or ``TEST_REDIS_URL``."""
    return _first_of("TEST_REDIS_URL", LOCAL_REDIS_URL, redis_answers, own_redis)


@contextmanager
def _first_of(
    variable: str,
    local_url: str,
    answers: Callable[[str], bool],
    own: Callable[[], AbstractContextManager[str]],
) -> Iterator[str]:
    mode = os.environ.get("TEST_SERVICES", "auto")
    if mode not in ("auto", "own"):
        raise ServiceUnavailable(f"TEST_SERVICES={mode!r}: expected 'auto' (the default) or 'own'")
    given = os.environ.get(variable) if mode == "auto" else None
    if given:
        yield given
    elif mode == "auto" and answers(local_url):
        yield local_url
    else:
        with own() as url:
            yield url


def postgres_answers(url: str) -> bool:
    """True if PostgreSQL at ``url`` (SQLAlchemy form) lets us in and runs a query within 2 s."""

    async def probe() -> None:
        connection = await asyncpg.connect(url.replace("+asyncpg", "", 1), timeout=2)
        try:
            await connection.fetchval("SELECT 1")
        finally:
            await connection.close()

    try:
        asyncio.run(probe())
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return False
    return True


def redis_answers(url: str) -> bool:
    """True if Redis at ``url`` answers ``PING`` within 1 s."""
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


@contextmanager
def own_postgres() -> Iterator[str]:
    """A throwaway PostgreSQL 127.0.0.1:PORT, database ``test``, user ``postgres``, trust auth; stopped
    and deleted on exit."""
    initdb = _postgres_binary("initdb")
    pg_ctl = str(Path(initdb).resolve().parent / "pg_ctl")  # postgres and pg_ctl sit beside initdb
    owner = _postgres_owner()
    folder = Path(tempfile.mkdtemp(prefix="test-postgres-"))
    try:
        if owner is not None:
            os.chown(folder, owner.pw_uid, owner.pw_gid)
        data, log, port = folder / "data", folder / "server.log", free_port()
        run = _runner(owner, folder)
        run([initdb, "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C",
             "--no-sync"])  # fmt: skip
        # one server for the tests' throwaway data: durability off, loopback TCP and our own socket
        options = f"-p {port} -k {shlex.quote(str(folder))} -c listen_addresses=127.0.0.1 -c fsync=off"
        run([pg_ctl, "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", str(START_TIMEOUT_S),
             "start"], log)  # fmt: skip
        try:
            _create_database(port)
            yield f"postgresql+asyncpg://postgres@127.0.0.1:{port}/test"
        finally:
            run([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def own_redis() -> Iterator[str]:
    """A throwaway ``redis-server`` on 127.0.0.1:PORT, nothing saved; stopped and deleted on exit."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServiceUnavailable(f"no Redis to use and no redis-server on the PATH to start one: {HINT}")
    folder = Path(tempfile.mkdtemp(prefix="test-redis-"))
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    log = folder / "server.log"
    try:
        with log.open("wb") as out:
            process = subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                 "no", "--dir", str(folder)], stdout=out, stderr=subprocess.STDOUT, cwd=folder,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not redis_answers(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise ServiceUnavailable(f"redis-server did not start: {_tail(log)}")
                time.sleep(0.05)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=30)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _postgres_binary(name: str) -> str:
    """``name`` from the PATH, else from the newest ``/usr/lib/postgresql/<version>/bin``."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(
        (path for path in DEBIAN_POSTGRES_BINS.glob(f"*/bin/{name}") if path.parts[-3].isdigit()),
        key=lambda path: int(path.parts[-3]),
    )
    if not versions:
        raise ServiceUnavailable(
            f"no PostgreSQL to use and no {name} on the PATH or in {DEBIAN_POSTGRES_BINS}/*/bin: {HINT}"
        )
    return str(versions[-1])


def _postgres_owner() -> pwd.struct_passwd | None:
    """The user PostgreSQL runs as: ``postgres`` when we are root (initdb refuses root), else us."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise ServiceUnavailable(
            f"initdb refuses to run as root and there is no `postgres` user to run it as: {HINT}"
        ) from None


def _runner(owner: pwd.struct_passwd | None, folder: Path) -> Callable[..., None]:
    """``run(argv, log=None)``: run ``argv`` as ``owner`` in ``folder``; on failure ServiceUnavailable
    with its output (and the tail of ``log``)."""
    as_owner: dict[str, Any] = {}
    if owner is not None:
        as_owner = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}

    def run(argv: Sequence[str], log: Path | None = None) -> None:
        done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, check=False, **as_owner)
        if done.returncode != 0:
            detail = (done.stdout + done.stderr).strip() + (f"\n{_tail(log)}" if log else "")
            raise ServiceUnavailable(f"{Path(argv[0]).name} failed (exit {done.returncode}): {detail}")

    return run


def _create_database(port: int) -> None:
    async def create() -> None:
        connection = await asyncpg.connect(
            host="127.0.0.1", port=port, user="postgres", database="postgres", timeout=10
        )
        try:
            await connection.execute("CREATE DATABASE test")
        finally:
            await connection.close()

    asyncio.run(create())


def _tail(log: Path, lines: int = 20) -> str:
    """The last lines of a server's log, for the error that says it failed."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return "\n".join(text.strip().splitlines()[-lines:])
