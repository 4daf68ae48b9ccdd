"""Authentication of a caller's secret, with a short-lived lookup cache.

An API key (``dsk-…``), a JWT (:mod:`gateway.auth.tokens`), or the bootstrap admin key whose SHA-256
is in ``GATEWAY_ADMIN_KEY_SHA256`` -> :class:`Principal`. Where the secret comes from (``Authorization:
Bearer``, ``x-api-key``) is the client API's business (:mod:`gateway.dialects`). For API keys,
lookups by SHA-256 are cached for ``ttl_s`` seconds (hits and misses alike), so a revoke or expiry
written by another process (the CLI, another replica) lands within ``ttl_s``; expiry is re-checked
on every request against the clock. A change made in this process (the admin API) calls
:meth:`Authenticator.invalidate`, after which no request sees the old state: a lookup that read the
database before the change and finishes after it is used for its own request only, never cached. The
secret is compared only as its hash, through an indexed equality lookup, so no timing signal depends on
how many leading characters of a guess are right.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from gateway.auth.principal import Principal
from gateway.auth.secrets import hash_key, is_well_formed
from gateway.auth.store import KeyRecord, KeyStore
from gateway.auth.tokens import TokenConfig, looks_like_jwt, verify
from gateway.errors import GatewayError

#: Who the ``GATEWAY_ADMIN_KEY_SHA256`` key authenticates as.
BOOTSTRAP_ADMIN = Principal(
    key_id="bootstrap-admin", name="bootstrap-admin", kind="bootstrap", scopes=("admin",)
)

#: How many secrets that authenticated are remembered (:meth:`Authenticator.vouched`).
_VOUCHED = 10_000

#: ``last_used_at`` is written at most this often per key (it is for humans, not billing).
TOUCH_INTERVAL = timedelta(seconds=60)


#: ``WWW-Authenticate`` of a 401 (RFC 6750 section 3).
BEARER_CHALLENGE = 'Bearer realm="dspark-gateway"'


def unauthorized(message: str) -> GatewayError:
    """401 ``invalid_api_key`` with the Bearer challenge."""
    return GatewayError("invalid_api_key", message, headers={"WWW-Authenticate": BEARER_CHALLENGE})


def _retrieve(future: asyncio.Future[KeyRecord | None]) -> None:
    if not future.cancelled():
        future.exception()


class Authenticator:
    """Resolves bearer tokens to principals through a :class:`KeyStore`, with a TTL cache."""

    def __init__(
        self,
        store: KeyStore,
        ttl_s: float,
        tokens: TokenConfig | None = None,
        admin_key_sha256: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock``: the cache's time in seconds (monotonic)."""
        self._store = store
        self._ttl_s = ttl_s
        self._clock = clock
        self._tokens = tokens
        self._admin_hash = admin_key_sha256.lower() if admin_key_sha256 else None
        self._cache: dict[str, tuple[float, KeyRecord | None]] = {}
        self._generation = 0  # bumped by invalidate(): lookups begun before it are not cached
        self._in_flight: dict[str, asyncio.Future[KeyRecord | None]] = {}
        self._touched: dict[str, datetime] = {}
        self._vouched: dict[str, None] = {}  # hashes of secrets that authenticated, oldest first
        self._background: set[asyncio.Task[None]] = set()

    async def authenticate(self, token: str) -> Principal:
        """Return the principal of a secret (an API key or a JWT).

        Raises :class:`GatewayError` 401 (``invalid_api_key``) for a malformed, unknown, revoked or
        expired key or an invalid token.
        """
        principal = await self._authenticate(token)
        self._vouched[hash_key(token)] = None
        if len(self._vouched) > _VOUCHED:
            del self._vouched[next(iter(self._vouched))]  # the oldest
        return principal

    def vouched(self, token: str) -> bool:
        """True if ``token`` has authenticated here before (it may have been revoked since): such a
        caller is no guesser, and an address throttled for others' failures still lets it through."""
        return hash_key(token) in self._vouched

    async def _authenticate(self, token: str) -> Principal:
        if self._tokens is not None and looks_like_jwt(token):
            return verify(self._tokens, token)
        if not is_well_formed(token):
            raise unauthorized("Invalid API key.")
        key_hash = hash_key(token)
        if self._admin_hash is not None and hmac.compare_digest(key_hash, self._admin_hash):
            return BOOTSTRAP_ADMIN
        record = await self._lookup(key_hash)
        now = datetime.now(UTC)
        if record is None:
            raise unauthorized("Invalid API key.")
        status = record.status(now)
        if status != "active":
            raise unauthorized(f"API key is {status}.")
        self._touch(record, now)
        return record.principal()

    async def _lookup(self, key_hash: str) -> KeyRecord | None:
        now = self._clock()
        hit = self._cache.get(key_hash)
        if hit is not None and now - hit[0] < self._ttl_s:
            return hit[1]
        pending = self._in_flight.get(key_hash)
        if pending is None:  # one store query per key at a time: 32 requests as the entry expires make 1
            pending = self._in_flight[key_hash] = asyncio.ensure_future(self._fetch(key_hash, now))
            pending.add_done_callback(_retrieve)  # a failure nobody is left to await is not logged as lost
        # shielded: a requester that is cancelled (client gone) does not cancel the others' lookup
        return await asyncio.shield(pending)

    async def _fetch(self, key_hash: str, now: float) -> KeyRecord | None:
        generation = self._generation
        try:
            record = await self._store.find_by_hash(key_hash)
        finally:
            if generation == self._generation:
                self._in_flight.pop(key_hash, None)
        if generation != self._generation:
            return record  # read before an invalidation: good for this request, stale for later ones
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[key_hash] = (now, record)
        return record

    def _touch(self, record: KeyRecord, now: datetime) -> None:
        last = self._touched.get(record.id) or record.last_used_at
        if last is not None and now - last < TOUCH_INTERVAL:
            return
        self._touched[record.id] = now
        task = asyncio.create_task(self._store.touch(record.id, now))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def invalidate(self) -> None:
        """Forget cached lookups (after a key changed in this process), including those in flight."""
        self._generation += 1
        self._cache.clear()
        self._in_flight.clear()  # requests from now on query again

    async def aclose(self) -> None:
        """Wait for pending ``last_used_at`` writes."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
