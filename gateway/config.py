"""Gateway settings: the only module that reads the environment.

Every field can be set as ``GATEWAY_<FIELD>`` (e.g. ``GATEWAY_SLOTS=2``) or passed to
:class:`Settings` directly; the CLI passes its flags that way, so flags win over the environment.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from dspark_common.zmq_endpoints import check_endpoint

#: The async driver of each database a URL may name without one (``sqlite://``, ``postgresql://``).
#: The kinds of tokens a quota weighs (:class:`gateway.limits.quota.QuotaWeights`).
QUOTA_KINDS = ("prompt", "cached_prompt", "output", "reasoning")
ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
}


def data_dir() -> Path:
    """``$XDG_DATA_HOME/dspark-gateway`` (``~/.local/share`` when unset): where the gateway keeps its
    data by default, so the CLI and a running server on the same machine and user find the same files
    without configuration."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "dspark-gateway"


def default_database_url() -> str:
    """SQLite file ``gateway.db`` in :func:`data_dir`."""
    return f"sqlite+aiosqlite:///{data_dir() / 'gateway.db'}"


def default_files_dir() -> Path:
    """``files`` in :func:`data_dir`."""
    return data_dir() / "files"


def async_database_url(value: str) -> str:
    """``value`` as the SQLAlchemy async URL the gateway opens.

    A path (``./gw.db``, ``/var/lib/x.db``, ``~/gw.db``: anything without ``://``) is a SQLite file,
    made absolute; ``sqlite:///…`` gets aiosqlite and ``postgresql://…`` (or ``postgres://``) asyncpg;
    a URL that names its driver (``postgresql+asyncpg://…``) is kept as given. Raises ``ValueError``
    for an empty value or one SQLAlchemy cannot parse.
    """
    if not value.strip():
        raise ValueError("the database URL is empty")
    if "://" not in value:
        path = Path(value).expanduser().absolute()
        return URL.create("sqlite+aiosqlite", database=str(path)).render_as_string(hide_password=False)
    try:
        url = make_url(value)
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        raise ValueError(f"not a database URL or path: {value!r} ({exc})") from None
    driver = ASYNC_DRIVERS.get(url.drivername)
    if driver is None:
        return value
    return url.set(drivername=driver).render_as_string(hide_password=False)


def http_base_url(value: str) -> str:
    """``value`` if it is an absolute ``http://`` or ``https://`` URL with a host (and a port in
    0-65535, if it has one), e.g. ``http://127.0.0.1:8000``; else ``ValueError``. Checked at start:
    ``localhost:8000`` would start a gateway whose every request fails (no HTTP scheme)."""
    try:
        parts = urlsplit(value)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 (parsed when read: ValueError for a port that is not one)
    except ValueError:  # also a malformed IPv6 host
        valid = False
    if not valid:
        raise ValueError(
            f"must be an absolute http:// or https:// URL with a host, like http://127.0.0.1:8000; "
            f"got {value!r}"
        )
    return value


def upstream_list(value: str) -> tuple[tuple[str, str], ...]:
    """``GATEWAY_UPSTREAM`` -> ``((name, base URL), ...)``: ``url``, or ``name=url`` items separated by
    commas. An unnamed URL is ``default`` when it is the only one, else its ``host:port``. Each URL as
    :func:`http_base_url` wants it (without a trailing ``/``); ``ValueError`` for a repeated name, or
    a name not of ``[A-Za-z0-9_.:-]`` (it keys the shared admission's Redis keys and metric labels)."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    named: list[tuple[str, str]] = []
    for item in items:
        name, _, url = item.partition("=") if "=" in item.split("://", 1)[0] else ("", "", item)
        url = http_base_url(url).rstrip("/")
        if not name:
            parts = urlsplit(url)
            name = "default" if len(items) == 1 else f"{parts.hostname}:{parts.port or 80}"
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", name):
            raise ValueError(f"a backend name must be 1-64 of A-Z a-z 0-9 _ . : -, not {name!r}")
        named.append((name, url))
    names = [name for name, _ in named]
    if len(set(names)) != len(names):
        raise ValueError(f"backend names must differ: {', '.join(names)}")
    if not named:
        raise ValueError("no upstream URL given")
    return tuple(named)


def endpoint_map(value: str | None, names: list[str]) -> dict[str, str]:
    """``name=endpoint`` or bare ZMQ endpoints (``tcp://``, ``ipc://``), comma-separated -> ``{backend
    name: endpoint}``, a bare one for the backend in its place of ``names``; ``ValueError`` for an
    unknown name, one too many, or an endpoint that may not carry KV events (:func:`check_endpoint`:
    ipc, or tcp on loopback)."""
    mapped: dict[str, str] = {}
    for index, item in enumerate(part.strip() for part in (value or "").split(",") if part.strip()):
        name, _, endpoint = item.partition("=") if "=" in item.split("://", 1)[0] else ("", "", item)
        if not name:
            if index >= len(names):
                raise ValueError(f"{item}: more endpoints than backends ({len(names)})")
            name = names[index]
        if name not in names:
            raise ValueError(f"{item}: no backend is named {name!r}")
        mapped[name] = check_endpoint(endpoint)
    return mapped


def comma_list(value: object) -> object:
    """A comma-separated string (an environment variable's value) as a tuple of its stripped parts;
    anything else as it is."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


class Settings(BaseSettings):
    """Runtime configuration of one gateway process.

    Times are in seconds, sizes in tokens unless the name says otherwise.
    """

    model_config = SettingsConfigDict(env_prefix="GATEWAY_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8080
    upstream: str | None = Field(
        default=None,
        description="Base URL of the vLLM OpenAI server (e.g. http://127.0.0.1:8000), or several "
        "comma-separated, one per backend pair, each optionally named (spark1=http://10.0.0.2:8000). "
        "None: `serve` starts the built-in simulator on loopback.",
    )
    served_model: str = Field(default="deepseek-v4-flash-0731", description="vLLM --served-model-name")
    model_aliases: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Comma-separated model names or globs (claude-*, gpt-5*) that mean the served model, "
        "for clients that insist on their own model names (gateway.proxy.aliases)",
    )
    slots: int = Field(default=2, ge=1, description="Requests in flight upstream; vLLM --max-num-seqs")
    queue_max: int = Field(default=64, ge=0, description="Requests allowed to wait for a slot")
    queue_timeout_s: float = Field(default=600.0, gt=0, description="Longest wait for a slot")
    database_url: str = Field(
        default_factory=default_database_url,
        description="SQLAlchemy URL or SQLite file path of keys, ledger and audit (async_database_url)",
    )
    files_dir: Path = Field(
        default_factory=default_files_dir,
        description="Where uploaded files' content is kept (the Files API); replicas share one directory",
    )
    files_max_bytes: int = Field(
        default=200 * 1024 * 1024,
        ge=1,
        description="Largest uploaded file, bytes (OpenAI's bound of a batch input: 200 MB); more -> 413",
    )
    files_max_bytes_per_key: int | None = Field(
        default=10 * 1024**3,
        ge=1,
        description="Bytes of files one key may keep (its batches' results count); past it an upload is "
        "refused 400 storage_quota_exceeded; null: no bound",
    )
    files_max_count_per_key: int | None = Field(
        default=1000, ge=1, description="Files one key may keep (results count); null: no bound"
    )
    files_max_bytes_per_group: int | None = Field(
        default=None, ge=1, description="Bytes of files the keys of one group may keep together; null: none"
    )
    files_max_count_per_group: int | None = Field(
        default=None, ge=1, description="Files the keys of one group may keep together; null: no bound"
    )
    files_max_total_bytes: int | None = Field(
        default=None,
        ge=1,
        description="Bytes of files all keys may keep; past it an upload is refused 507 "
        "insufficient_storage; null: no bound",
    )
    files_min_free_bytes: int = Field(
        default=256 * 1024**2,
        ge=0,
        description="Free bytes an upload leaves on the files directory's disk: below it, 507 "
        "insufficient_storage (the database and the ledger need room too)",
    )
    files_default_expiry_s: int | None = Field(
        default=30 * 86_400,
        ge=1,
        description="Lifetime of a file uploaded without expires_after, and of a batch's result files "
        "(OpenAI's default for batch files: 30 days); null: kept until deleted",
    )
    files_sweep_s: float = Field(
        default=60.0, gt=0, description="Interval of the sweep that deletes expired files, seconds"
    )
    message_batch_max_bytes: int | None = Field(
        default=None,
        ge=1024,
        description="Largest body of an Anthropic message batch create, bytes, read as it arrives; "
        "None: 4 x GATEWAY_MAX_BODY_BYTES; more -> 413",
    )
    batch_lease_ttl_s: float = Field(
        default=30.0,
        gt=0,
        description="How long a replica's claim on a batch lasts unrenewed (renewed every third of it); "
        "a replica that dies leaves its batches to another this long after",
    )
    batch_max_running: int = Field(
        default=4,
        ge=1,
        description="Batches one gateway process runs at once, each under its own claim; their lines "
        "share the backends' slots in turns across keys, so a key's small batch does not wait for "
        "another key's large one. 1: one batch after another",
    )
    batch_preemption: bool = Field(
        default=True,
        description="An interactive request that waits for a slot or KV while batch lines hold them takes "
        "them back: the youngest lines are aborted and sent again later (their prompts stay in the "
        "prefix cache; their output so far is lost). false: a line keeps its slot until it ends",
    )
    prefill_preemption: bool = Field(
        default=True,
        description="An interactive request that waits for a slot takes it from a streamed request still in "
        "its prefill that is due after it in the fair queue and expected to take 8 times as long (1 s at "
        "least): that one is aborted and sent again at once with its place kept, resuming from the blocks "
        "it computed (vLLM keeps them cached). false: a prefill keeps its slot until it ends",
    )
    key_cache_ttl_s: float = Field(
        default=1.0, ge=0, description="How long a key lookup is reused; bounds how late a revoke lands"
    )
    upstream_connect_timeout_s: float = 5.0
    upstream_read_timeout_s: float | None = Field(
        default=None,
        description="Longest silence from upstream between bytes. None: wait forever (a 1M-token prefill "
        "can take ~18 minutes before the first token).",
    )
    max_body_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=1024,
        description="Largest request body, bytes (32 MiB holds a 1M-token prompt as JSON text); more -> 413",
    )
    body_idle_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Longest wait for the next piece of a request body (not for the whole body: a "
        "1M-token upload is legitimate); past it: 408 request_timeout",
    )
    tpm_output_reserve_tokens: int = Field(
        default=1024,
        ge=1,
        description="Tokens per minute reserved for each sequence's output when a request sets no "
        "max_tokens (the reservation is settled against real usage afterwards)",
    )
    quota_weights: Annotated[dict[str, float], NoDecode] = Field(
        default_factory=dict,
        description="What a token of each kind costs against quotas, e.g. "
        "prompt=1,cached_prompt=0.1,output=4,reasoning=4 (kinds not named cost 1)",
    )
    body_min_rate_bytes_s: float = Field(
        default=1024,
        gt=0,
        description="Once a request body has taken GATEWAY_BODY_IDLE_TIMEOUT_S, it must have come at "
        "this average rate at least, bytes/s; slower: 408",
    )
    max_n: int = Field(
        default=1,
        ge=1,
        description="Most answers (sequences) one request may ask for (OpenAI's n); each takes a slot",
    )
    extra_body_fields: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(),
        description="Request body fields forwarded on every inference route beyond those the gateway "
        "serves (gateway/dialects/fields.py), comma-separated: e.g. a field a new client release sends",
    )
    upstream_priority: bool = Field(
        default=False,
        description="Send vLLM a batch request's class as its priority (1; interactive: 0, the default). "
        "Only with vLLM's --scheduling-policy priority (the runtime profile's SCHEDULING_POLICY), which "
        "refuses any other priority than 0 without it",
    )
    upstream_restart_hold_s: float = Field(
        default=30.0,
        ge=0,
        description="A request whose backend can't be reached (a restart) waits for it until this "
        "long after the outage began, then is served, instead of an immediate 503 (a stream gets "
        "': queued 0 backend' comments meanwhile); 0: 503 at once",
    )
    count_concurrency: int = Field(
        default=2,
        ge=1,
        description="Prompt counts (vLLM's /tokenize before admission, /v1/messages/count_tokens) in "
        "flight at once to one backend, outside the slots, on a connection pool of their own",
    )
    count_concurrency_per_key: int = Field(
        default=1,
        ge=1,
        description="Of those, one key's at most (a count_tokens past it: 429; a prompt past it is "
        "estimated)",
    )
    stream_buffer_bytes: int = Field(
        default=1024 * 1024,
        ge=64 * 1024,
        description="Bytes of a stream held for a client that reads slower than the backend writes: the "
        "upstream is read into it so the slot is released when the backend finishes",
    )
    client_write_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="A stream's client that reads nothing for this long while its buffer "
        "(GATEWAY_STREAM_BUFFER_BYTES) is full, or once the backend has finished, is cut and its "
        "upstream aborted (end: client_slow)",
    )
    client_ack_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="A connection whose sent bytes the client leaves unacknowledged this long (its "
        "window closed: it reads nothing) is aborted by the kernel (TCP_USER_TIMEOUT on the listening "
        "socket): a stream cut as client_slow does not keep its socket and buffers until the client "
        "closes",
    )
    keep_alive_s: float = Field(
        default=15.0,
        gt=0,
        description="Send ': keep-alive' to a stream after this long without a byte to the client",
    )
    shutdown_grace_s: float = Field(
        default=1500.0,
        ge=0,
        description="After SIGTERM, how long requests in flight may run to their end while new ones "
        "get 503 (then they are cut). 25 min: a 1M-token prefill alone takes ~18 min; keep it below "
        "the orchestrator's kill timeout (the deploy files allow 30 min)",
    )
    max_connections: int = Field(
        default=4096,
        ge=1,
        description="Connections (and requests) the server takes at once; past it new ones get 503 "
        "(uvicorn --limit-concurrency). Queued clients each hold one",
    )
    keep_alive_timeout_s: int = Field(
        default=5, ge=1, description="How long an idle keep-alive connection stays open after a response"
    )
    trusted_proxies: str | None = Field(
        default=None,
        description="Comma-separated addresses (or CIDRs) of the reverse proxies whose X-Forwarded-For / "
        "-Proto are believed (uvicorn --forwarded-allow-ips); unset: none, the peer address is the "
        "client's (the audit's client address can't be spoofed with a header)",
    )
    ready_timeout_s: float = Field(default=2.0, gt=0, description="Timeout of the /ready upstream probe")
    reasoning_split: Literal["auto", "gateway", "upstream", "off"] = Field(
        default="auto",
        description="Who splits <think>…</think> from the answer: auto (the gateway, until the upstream "
        "shows it has a reasoning parser), gateway, upstream, off (untouched)",
    )
    reasoning_fields: Annotated[tuple[str, ...], NoDecode] = Field(
        default=("reasoning_content", "reasoning"),
        description="Client-facing field name(s) of reasoning, comma-separated",
    )
    reasoning_start: str = Field(
        default="<think>",
        min_length=1,
        description="Marker opening reasoning in the model's raw text, where the gateway splits it "
        "(vLLM --reasoning-config reasoning_start_str)",
    )
    reasoning_end: str = Field(
        default="</think>",
        min_length=1,
        description="Marker closing reasoning in the model's raw text (reasoning_end_str)",
    )
    backend_reasoning_field: str = Field(
        default="reasoning", description="Field the backend reads on assistant messages (vLLM >= 0.16)"
    )
    default_thinking: Literal["off", "low", "high", "max"] = Field(
        default="low", description="Thinking mode when neither the request nor the key sets one"
    )

    spec_k: int = Field(default=5, ge=0, description="Draft tokens per speculative step (DSpark K5)")
    spec_counters: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="Read vLLM's spec-decode counters before and after each request (metrics_delta "
        "acceptance): auto = only while the upstream sends no per-request metrics",
    )
    backend_poll_s: float = Field(default=2.0, gt=0, description="Interval of the upstream /metrics poll")
    loop_lag_interval_s: float = Field(
        default=0.005,
        ge=0,
        description="How often the event loop's lag is sampled (gateway_event_loop_lag_seconds), s; 0: never",
    )
    ledger_flush_s: float = Field(default=1.0, gt=0, description="Usage ledger batch interval (rows at risk)")
    ledger_max_pending_rows: int = Field(
        default=10_000,
        ge=1,
        description="Usage rows kept in memory while the database refuses them; at this many, inference "
        "requests are refused 503 ledger_unavailable rather than served unrecorded",
    )
    metrics_token: str | None = Field(
        default=None,
        min_length=16,
        description="If set, GET /metrics needs this bearer token (16+ characters); if not, it answers "
        "loopback clients only",
    )

    admin_key_sha256: str | None = Field(
        default=None,
        description="SHA-256 (hex) of a bootstrap admin key, for containers: no plaintext in env",
    )
    jwt_secret: str | None = Field(
        default=None,
        min_length=32,
        description="HS256 secret of gateway-minted tokens: at least 32 characters (RFC 7518 section "
        "3.2: a key as long as the hash)",
    )
    cache_salt_secret: str | None = Field(
        default=None,
        min_length=32,
        description="Secret the prefix cache's per-group cache_salt is derived from (32+ characters); "
        "none: one generated once and kept in the database (gateway_secrets), read by every replica",
    )
    jwt_issuer: str = "dspark-gateway"
    jwt_audience: str = "dspark-gateway"
    jwt_jwks_file: str | None = Field(default=None, description="JWKS file of an external identity provider")
    jwt_idp_issuer: str | None = None
    jwt_idp_audience: str | None = None
    jwt_idp_algorithms: Annotated[tuple[str, ...], NoDecode] = ("RS256",)
    limits_storage: str = Field(
        default="memory://",
        description="Rate-limit state: memory:// (this process) or redis://host:port/db (shared by replicas)",
    )
    auth_failures_per_minute: int | None = Field(
        default=60,
        ge=1,
        description="Failed authentications one client address may make a minute; past them its "
        "requests get 429 until the minute ends (none: no limit)",
    )
    public_requests_per_minute: int | None = Field(
        default=1200,
        ge=1,
        description="Requests one client address may make a minute to /health, /ready, /metrics",
    )
    limits_window_s: int = Field(
        default=60, ge=1, description="Window of the rpm/tpm limits, seconds (60: per minute, as named)"
    )
    queue_max_per_key: int = Field(default=32, ge=0, description="Requests one key may have waiting")
    rotate_grace_s: float = Field(
        default=86_400, ge=0, description="How long a rotated-out secret still works"
    )

    runtime_profile: str | None = Field(
        default=None,
        description="Backend profile (runtime/profiles name or a path): slots default to its max-num-seqs",
    )

    kv_budget_tokens: int = Field(
        default=1_372_579,
        ge=1,
        description="The backend's shared KV pool, tokens (balanced: 1,372,579): running requests' prompt "
        "+ output budgets together must fit it; a request that alone can't is refused at once",
    )
    max_model_len: int = Field(
        default=1_048_576, ge=1, description="The backend's context window, tokens (vLLM --max-model-len)"
    )
    output_reserve_tokens: int = Field(
        default=32_768,
        ge=1,
        description="Output budget given to each sequence of a request that sets none (max_tokens, "
        "max_completion_tokens, max_output_tokens), spliced into its body as its cap and reserved of its "
        "quotas and the KV pool; 32,768 holds an agent's turn (its reasoning, then its answer or tool "
        "calls, rarely past 20k tokens). vLLM's own default, the rest of a 1M context, would let one "
        "such request hold a whole group's quota and the KV pool of one more",
    )
    long_prompt_tokens: int = Field(
        default=32_768,
        ge=1,
        description="Prompts of this many tokens or more to compute (those the backend's prefix cache "
        "holds not counted) are long: they take the long-prompt lane (profile: 8 x MAX_NUM_BATCHED_TOKENS)",
    )
    prefix_caching: bool = Field(
        default=True,
        description="The backends keep a prefix cache (vLLM --enable-prefix-caching, its V1 default): a "
        "request is sized by the prompt tokens left to compute and agent sessions are held. false "
        "(--no-enable-prefix-caching): every prompt is sized whole and no session is held",
    )
    kv_events: str | None = Field(
        default=None,
        description="Where each backend publishes its KV cache events (vLLM --kv-events-config "
        "endpoint): ZMQ endpoints, comma-separated, each name=endpoint or in GATEWAY_UPSTREAM's order: "
        "ipc:///path in a directory others cannot reach (e.g. ipc:///run/dspark/kv-events/events), or "
        "tcp on loopback; anything else is refused (the events carry every tenant's token ids). A "
        "backend without: its prefix cache is estimated",
    )
    kv_events_replay: str | None = Field(
        default=None,
        description="The replay endpoints of those events (vLLM's replay_endpoint), in the same form",
    )
    kv_events_bind: bool = Field(
        default=False,
        description="Bind GATEWAY_KV_EVENTS instead of connecting to them (tcp only): vLLM, given a tcp "
        "endpoint without a wildcard (tcp://127.0.0.1:5557), connects its publisher there (one gateway "
        "process per endpoint). vLLM binds every ipc:// endpoint itself: the gateway connects",
    )
    session_hold_s: float = Field(
        default=3.0,
        ge=0,
        description="When an agent session's turn ends, hold its prefix in the backend's cache this long "
        "for its next turn: a request that would evict it waits, at most this long (0: no holds), s",
    )
    kv_block_size: int = Field(
        default=256,
        ge=1,
        description="Tokens per KV block (vLLM --block-size): the estimate's unit, and the only block size "
        "of KV events believed (events of another are counted and ignored)",
    )
    kv_events_max_bytes: int = Field(
        default=1 << 20,
        ge=4096,
        description="Largest KV event message taken, bytes (ZMQ_MAXMSGSIZE: libzmq cuts the connection "
        "that sends a larger one). A batch holds one engine step's blocks: ~5 bytes per token of "
        "MAX_NUM_BATCHED_TOKENS. The receive queue holds 32 MiB of such messages",
    )
    kv_events_stale_s: float = Field(
        default=10.0,
        gt=0,
        description="A backend's events are stale when none came this long after a request it computed "
        "blocks for: admission uses the estimate until they come again, s",
    )
    queue_order: Literal["work", "arrival"] = Field(
        default="work",
        description="How waiting requests are ordered, within each class and fairly over keys: by their "
        "expected work (uncached prefill and expected output at the backend's measured rates: a short "
        "chat goes before a cold long prompt) or as if every request were alike (each key in turn, in "
        "arrival order)",
    )
    express_slots: int = Field(
        default=1,
        ge=0,
        description="Slots kept for short prompts while long ones run (0: no express lane; profile: 1 "
        "with two slots or more)",
    )
    queue_timeout_long_s: float = Field(
        default=3600.0,
        gt=0,
        description="Longest wait of a long prompt: it may wait for another's whole prefill (a 950k-token "
        "prefill took 1,058 s)",
    )
    admission_store: str = Field(
        default="memory://",
        description="Where slots, KV reservations and the fair queue live: memory:// (this process) or "
        "redis://host:port/db (shared by the replicas in front of one backend)",
    )
    console: bool = Field(default=True, description="Serve the admin console under /console")
    oidc_issuer: str | None = Field(
        default=None,
        description="The identity provider admins sign in to the console with (OpenID Connect, "
        "authorization code + PKCE): its issuer URL; none: admin keys and JWTs only",
    )
    oidc_client_id: str | None = Field(default=None, description="The console's client id at the provider")
    oidc_client_secret: str | None = Field(
        default=None, description="Its client secret; none: a public client (PKCE alone)"
    )
    oidc_scopes: str = Field(default="openid email profile", description="The scopes asked for")
    oidc_admin_claim: str = Field(
        default="groups", description="The ID token claim (a string or a list) that makes an admin"
    )
    oidc_admin_values: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), description="Values of that claim that make an admin, comma-separated"
    )
    oidc_name_claim: str = Field(
        default="email", description="The claim that names the admin in the audit trail (else sub)"
    )
    oidc_redirect_url: str | None = Field(
        default=None,
        description="The callback URL registered at the provider: the console's public address + "
        "/console/oidc/callback; required with GATEWAY_OIDC_ISSUER (never taken from a request's Host "
        "header, which the client chooses)",
    )
    oidc_label: str = Field(
        default="single sign-on", description="What the sign-in button calls the provider"
    )
    console_session_ttl_s: float = Field(
        default=8 * 3600.0, gt=0, description="A console sign-in lasts this long, s"
    )
    console_secret: str | None = Field(
        default=None,
        min_length=32,
        description="Key of what the console seals into the browser (a pending sign-in at the identity "
        "provider, the sign-in form's CSRF token): at least 32 characters; none: one generated once "
        "and kept in the database (gateway_secrets), read by every replica",
    )
    affinity: bool = Field(
        default=True,
        description="With several backends, keep a conversation on one (its x-session-affinity header, "
        "prompt_cache_key, user or metadata.user_id) for vLLM's prefix cache; false: least loaded always",
    )
    admission_namespace: str = Field(
        default="dspark",
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="Prefix of the shared admission's Redis keys: the replicas of one deployment use "
        "the same, another deployment on the same Redis another",
    )
    admission_lease_ttl_s: float = Field(
        default=10.0,
        ge=1.0,
        description="Shared admission: a lease or a queued place outlives its replica's last renewal "
        "this long, s (a replica killed with -9 gives its slots back within it)",
    )
    bypass_limit: int = Field(
        default=8,
        ge=1,
        description="Requests that may be admitted past one that waits for KV or the lane before it is "
        "guarded (no one passes it any more)",
    )
    tokenize_min_bytes: int = Field(
        default=16_384,
        ge=0,
        description="Bodies this large or larger have their prompt counted by the backend (/tokenize) "
        "before admission; smaller ones are estimated (at most as many tokens as bytes: not long)",
    )
    tokenize_timeout_s: float = Field(
        default=30.0, gt=0, description="Longest wait for the backend's prompt count; then it is estimated"
    )

    @model_validator(mode="after")
    def _defaults_from_profile(self) -> Settings:
        if self.runtime_profile:
            from dspark_runtime import gateway_defaults, load_profile

            defaults = gateway_defaults(load_profile(self.runtime_profile))
            if "slots" not in self.model_fields_set:
                self.slots = defaults["slots"]
            if "kv_budget_tokens" not in self.model_fields_set and defaults["kv_budget_tokens"]:
                self.kv_budget_tokens = defaults["kv_budget_tokens"]
            for name in (
                "served_model",
                "max_model_len",
                "long_prompt_tokens",
                "express_slots",
                "upstream_priority",
                "kv_events",
                "kv_events_replay",
                "kv_events_bind",
                "kv_block_size",
            ):
                if name not in self.model_fields_set:
                    setattr(self, name, defaults[name])  # type: ignore[literal-required]
        if self.express_slots >= self.slots:
            if "express_slots" in self.model_fields_set:
                raise ValueError(
                    f"express_slots ({self.express_slots}) must be below slots ({self.slots}): long "
                    "prompts could never run"
                )
            self.express_slots = self.slots - 1  # one slot: no lane to keep
        if self.max_n > self.slots:
            raise ValueError(
                f"max_n ({self.max_n}) may not exceed slots ({self.slots}): a request could never run"
            )
        return self

    @model_validator(mode="after")
    def _kv_endpoints(self) -> Settings:
        if self.upstream:
            feeds = self.kv_feeds  # checked at start: a bad endpoint would never be subscribed
            if self.kv_events_bind and any(e.startswith("ipc://") for e, _ in feeds.values()):
                raise ValueError("kv_events_bind is for tcp endpoints: vLLM binds an ipc:// one itself")
        return self

    @model_validator(mode="after")
    def _oidc_complete(self) -> Settings:
        if self.oidc_issuer and not (self.oidc_client_id and self.oidc_admin_values):
            raise ValueError("oidc_issuer needs oidc_client_id and oidc_admin_values (who is an admin)")
        if self.oidc_issuer and not self.oidc_redirect_url:
            raise ValueError(
                "oidc_issuer needs oidc_redirect_url (GATEWAY_OIDC_REDIRECT_URL): the callback URL "
                "registered at the provider, https://<console address>/console/oidc/callback"
            )
        return self

    @model_validator(mode="after")
    def _distinct_markers(self) -> Settings:
        if self.reasoning_start == self.reasoning_end:
            raise ValueError("reasoning_start and reasoning_end must differ")
        return self

    @field_validator(
        "jwt_idp_algorithms", "model_aliases", "extra_body_fields", "oidc_admin_values", mode="before"
    )
    @classmethod
    def _split_list(cls, value: object) -> object:
        return comma_list(value)

    @field_validator("quota_weights", mode="before")
    @classmethod
    def _weights(cls, value: object) -> object:
        """``kind=weight`` pairs, comma-separated; kinds of :class:`QuotaWeights`, weights ≥ 0."""
        if not isinstance(value, str):
            return value
        weights: dict[str, float] = {}
        for pair in filter(None, (part.strip() for part in value.split(","))):
            kind, _, weight = pair.partition("=")
            if kind.strip() not in QUOTA_KINDS:
                raise ValueError(f"quota weight kinds are {', '.join(QUOTA_KINDS)}; got {kind.strip()!r}")
            weights[kind.strip()] = float(weight)
        return weights

    @field_validator("quota_weights")
    @classmethod
    def _weights_known(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = set(value) - set(QUOTA_KINDS)
        if unknown or any(not 0 <= w <= 1e6 for w in value.values()):
            raise ValueError(f"quota weights: kinds among {', '.join(QUOTA_KINDS)}, each from 0 to 1e6")
        return value

    @field_validator("reasoning_fields", mode="before")
    @classmethod
    def _split_fields(cls, value: object) -> object:
        value = comma_list(value)
        if not value:
            raise ValueError("at least one reasoning field name is required")
        return value

    @field_validator("database_url")
    @classmethod
    def _async_url(cls, value: str) -> str:
        return async_database_url(value)

    @field_validator("upstream")
    @classmethod
    def _http_base_urls(cls, value: str | None) -> str | None:
        if not value:
            return None
        upstream_list(value)  # checked now: a bad URL would fail every request
        return value.strip().rstrip("/")

    @property
    def kv_feeds(self) -> dict[str, tuple[str, str | None]]:
        """Each backend's KV event endpoints: ``{name: (events, replay or None)}`` (:func:`endpoint_map`)."""
        names = [name for name, _ in self.upstreams]
        events = endpoint_map(self.kv_events, names)
        replays = endpoint_map(self.kv_events_replay, names)
        return {name: (endpoint, replays.get(name)) for name, endpoint in events.items()}

    @property
    def upstreams(self) -> tuple[tuple[str, str], ...]:
        """``(name, base URL)`` of each backend pair (:func:`upstream_list`); () with no upstream."""
        return upstream_list(self.upstream) if self.upstream else ()
