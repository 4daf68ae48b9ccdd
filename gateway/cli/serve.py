"""Run the gateway under uvicorn, and a backend app beside it when no upstream is configured (the
command line passes the simulator: :mod:`dspark_cli.serve`)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import errno
import gc
import logging
import signal
import socket
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from gateway.app import create_app
from gateway.cli.failures import CliError
from gateway.config import Settings
from gateway.http.access_log import ACCESS_FORMAT, ACCESS_LOGGER
from gateway.http.drain import Drain
from gateway.storage.db import open_engine

log = logging.getLogger("uvicorn.error")
#: After the drain, how long uvicorn still waits for connections before cancelling their tasks, s.
_CUT_AFTER_DRAIN_S = 2
#: Generation-1 collections between two full ones (CPython's default: 10); see ``startup``.
FULL_COLLECTION_EVERY = 100


def log_config() -> dict[str, Any]:
    """uvicorn's logging configuration plus the gateway's access log, on a handler like uvicorn's access
    handler in uvicorn's access format followed by the request ids (:mod:`gateway.http.access_log`:
    written at each response's end, no query string)."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["gateway_access"] = {**config["formatters"]["access"], "fmt": ACCESS_FORMAT}
    config["handlers"]["gateway_access"] = {**config["handlers"]["access"], "formatter": "gateway_access"}
    config["loggers"][ACCESS_LOGGER] = {"handlers": ["gateway_access"], "level": "INFO", "propagate": False}
    return config


def server_config(
    app: Any, host: str, port: int, settings: Settings | None = None, **options: Any
) -> uvicorn.Config:
    """The uvicorn configuration of every server the gateway runs: uvicorn's own access line off (it
    would be written at the response's start, query string and all: ``?api_key=…``), the gateway's on
    (:func:`log_config`), no WebSocket protocol (no route takes one: an upgrade is a plain 404, path
    only in the log), and a short cut of the connections still open after the drain. With
    ``settings`` (the gateway's own server): its connection cap, keep-alive timeout and trusted
    proxies (none by default: ``X-Forwarded-For`` is ignored). ``options`` go to ``uvicorn.Config``.

    What uvicorn cannot do — a timeout on reading a request's headers, a cap on their size before they
    are buffered — the reverse proxy in front does (``deploy/caddy/Caddyfile``: ``read_header``,
    ``max_header_size``); the body is bounded by the gateway itself, in size and in idle time.
    """
    if settings is not None:
        trusted = settings.trusted_proxies
        options = {
            "limit_concurrency": settings.max_connections,
            "timeout_keep_alive": settings.keep_alive_timeout_s,
            "proxy_headers": bool(trusted),
            "forwarded_allow_ips": trusted or "",
            **options,
        }
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        access_log=False,
        log_config=log_config(),
        ws="none",
        timeout_graceful_shutdown=_CUT_AFTER_DRAIN_S,
        **options,
    )


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def abort_unacknowledged(sockets: Iterable[socket.socket], timeout_s: float) -> None:
    """``TCP_USER_TIMEOUT`` (``timeout_s``, in ms to the kernel) on listening ``sockets``: a connection
    accepted from them inherits it (Linux), and the kernel aborts it once bytes sent stay
    unacknowledged that long, a closed receive window included (tcp(7)).

    This is what frees the socket of a stream cut as ``client_slow``: the app then returns with the
    body unfinished and uvicorn closes the transport (``run_asgi``: "returned without completing
    response"), but a close waits for the write buffer to drain (asyncio's transports) and the kernel
    keeps sending the rest to a client that reads nothing — for as long as it keeps its socket
    open. uvicorn hands the app no transport to abort: the listening socket is the public handle.
    A connection accepted before this is set keeps the kernel's default (none)."""
    for sock in sockets:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(timeout_s * 1000))


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signals to the gateway server running beside it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _GatewayServer(uvicorn.Server):
    """A uvicorn server whose first SIGTERM/SIGINT drains before shutting down (:mod:`gateway.http.drain`).

    First signal: new requests get 503 while those in flight run to their end, at most
    ``shutdown_grace_s`` seconds; then uvicorn's own shutdown runs. A second signal ends the drain at
    once; a third SIGINT forces the exit (uvicorn's behaviour).
    """

    def __init__(self, config: uvicorn.Config, drain: Drain, grace_s: float, ack_timeout_s: float) -> None:
        super().__init__(config)
        self._drain = drain
        self._grace_s = grace_s
        self._ack_timeout_s = ack_timeout_s
        self._drainer: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up (the app's lifespan included), then everything it left alive (modules,
        the app, pools: a large heap) moves out of the cyclic GC's sight (:func:`gc.freeze`).

        The listening sockets get :func:`abort_unacknowledged` before the first request is read.

        A full (generation 2) collection traverses every tracked object, tens of milliseconds on that heap
        during which the event loop serves nothing, and it runs whenever objects that outlived two younger
        collections (those of streams in flight) grow by a quarter of the long-lived ones (CPython's
        ``gcmodule.c``). Frozen, start-up's objects are never traversed again; they are freed as ever when
        their reference count drops. Cyclic garbage created from then on is still collected.

        Full collections are also spaced out: one per :data:`FULL_COLLECTION_EVERY` generation-1
        collections instead of CPython's 10 (the other condition, long-lived objects grown by a
        quarter, still holds): while thousands of clients queue, the heap grows with every request,
        and CPython's default makes a full collection many times per ramp with the loop stopped
        (``bench/queue_scale.py`` counts them with ``gc.callbacks``). Cyclic garbage that reached the
        oldest generation waits longer.
        """
        await super().startup(sockets)
        for server in self.servers:
            abort_unacknowledged(server.sockets, self._ack_timeout_s)
        gc.collect()  # start-up's own garbage goes first: frozen, it would stay
        gc.freeze()
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._drain.draining or self._loop is None:
            super().handle_exit(sig, frame)
            return
        self._drain.begin()  # only flags here: logging from a signal handler can hit a reentrant write
        self._loop.call_soon_threadsafe(self._start_drainer)

    def _start_drainer(self) -> None:
        log.warning(
            "Draining: new requests get 503; %d in flight may finish within %.0f s.",
            self._drain.in_flight,
            self._grace_s,
        )
        self._drainer = asyncio.create_task(self._finish_drain())

    async def _finish_drain(self) -> None:
        if not await self._drain.wait_idle(self._grace_s):
            log.warning("Drain grace period over: cutting %d request(s) in flight.", self._drain.in_flight)
        self.should_exit = True


#: Makes the ASGI app of a backend served beside the gateway from the served model's name and the
#: ZMQ endpoints it publishes and replays its KV events on.
EmbeddedBackend = Callable[[str, str, str], Any]


def _other_port(settings: Settings) -> int:
    port = free_loopback_port()
    while port == settings.port:  # the OS may hand out the gateway's own port, not yet bound
        port = free_loopback_port()
    return port


def _embedded(settings: Settings, backend: EmbeddedBackend) -> tuple[_EmbeddedServer, dict[str, str]]:
    """The backend's server on a free loopback port, and the settings that reach it: its URL and its
    KV event endpoints (loopback too)."""
    port = _other_port(settings)
    events, replay = (f"tcp://127.0.0.1:{_other_port(settings)}" for _ in range(2))
    app = backend(settings.served_model, events, replay)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
        timeout_graceful_shutdown=_CUT_AFTER_DRAIN_S,
    )  # fmt: skip
    reach = {"upstream": f"http://127.0.0.1:{port}", "kv_events": events, "kv_events_replay": replay}
    return _EmbeddedServer(config), reach


def check_bindable(host: str, port: int) -> None:
    """Bind ``host:port`` once, as uvicorn will, and let it go: :class:`CliError` saying why in one
    line when it cannot be bound (uvicorn itself logs that across several lines and exits). uvicorn
    binds its own socket: handing it this one (``Server.serve(sockets=…)``, its Gunicorn path) skips
    the lifespan's shutdown on a signal."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise CliError(f"cannot listen on {host}:{port}: the host is unknown ({exc.strerror})") from None
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn's own bind
        try:
            sock.bind((host, port))
        except OSError as exc:
            why = "another process listens there" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise CliError(
                f"cannot listen on {host}:{port}: {why} (choose another with --port or GATEWAY_PORT)"
            ) from None


async def run_gateway(settings: Settings, embedded: EmbeddedBackend | None = None) -> None:
    """Serve until SIGINT/SIGTERM, then drain (:class:`_GatewayServer`) and return (exit status 0).

    With ``settings.upstream`` unset, ``embedded``'s app (the simulator) is served on a free loopback
    port in the same process and event loop, and the gateway forwards to it (logged as a warning);
    without one, ``ValueError``. Raises :class:`~gateway.storage.migrations.schema.SchemaError`
    before anything starts when the database's schema is not this gateway's (met by the lifespan
    inside uvicorn's start-up, it would be a logged traceback).
    """
    await (await open_engine(settings.database_url)).dispose()
    check_bindable(settings.host, settings.port)  # before anything starts: a taken port is one line
    simulator: _EmbeddedServer | None = None
    sim_task: asyncio.Task[None] | None = None
    if settings.upstream is None:
        if embedded is None:
            raise ValueError("no upstream configured (GATEWAY_UPSTREAM) and no backend to serve beside")
        simulator, reach = _embedded(settings, embedded)
        sim_task = asyncio.create_task(simulator.serve())
        while not simulator.started:
            if sim_task.done():
                await sim_task
                raise RuntimeError("the simulator failed to start")
            await asyncio.sleep(0.05)
        settings = settings.model_copy(update=reach)
        log.warning(
            "No upstream configured: forwarding to the built-in SIMULATOR at %s (not a real model).",
            reach["upstream"],
        )
    app = create_app(settings)
    gateway = _GatewayServer(
        server_config(app, settings.host, settings.port, settings),
        app.state.drain,
        settings.shutdown_grace_s,
        settings.client_ack_timeout_s,
    )
    # uvicorn re-raises the signal it handled after a graceful shutdown, for outer handlers; ours
    # have nothing left to do, so the process ends with status 0 instead of dying by the signal.
    # Installed only now: a signal during start-up still ends the process (default action).
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: None)
    try:
        await gateway.serve()
    finally:
        if simulator is not None and sim_task is not None:
            simulator.should_exit = True
            simulator.force_exit = gateway.force_exit  # a forced exit must not wait for streams
            await sim_task
