"""The authenticated caller, as every route sees it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: A quota's periods (UTC calendar) and modes (:mod:`gateway.limits.quota`).
PERIODS = ("day", "week", "month")
MODES = ("enforce", "warn")


#: Name prefixes of identities that are not keys (a JWT's ``jwt:<issuer>:<sub>``, the bootstrap admin
#: key): a key named so would pass for them in the audit trail, the queue and the usage ledger.
RESERVED_NAME_PREFIXES = ("jwt:", "bootstrap-")


@dataclass(frozen=True, slots=True)
class Quota:
    """``tokens`` of cost per ``period`` (``day`` | ``week`` | ``month``), ``mode`` ``enforce`` | ``warn``,
    held by ``holder`` (``key:<id>`` or ``group:<id>``: whose counter it is). Counted by
    :mod:`gateway.limits.quota`."""

    holder: str
    tokens: int
    period: str = "month"
    mode: str = "enforce"


@dataclass(frozen=True, slots=True)
class Group:
    """The group (team) a key belongs to and what its keys share: requests and tokens per minute
    (None: unlimited), a token quota, and vLLM's prefix cache: ``prefix_cache`` ``group`` (with each
    other only) or ``shared`` (with every ``shared`` group; :mod:`gateway.auth.cache_salt`)."""

    id: str
    name: str
    rpm: int | None = None
    tpm: int | None = None
    quota: Quota | None = None
    prefix_cache: str = "group"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling and what they may do.

    ``models`` is the model allow-list; ``None`` means every served model. ``name`` is what metrics and
    logs carry — never the key itself. ``kind`` is what authenticated it: ``key`` (an API key), ``jwt``
    (a bearer token) or ``bootstrap`` (``GATEWAY_ADMIN_KEY_SHA256``). ``default_thinking``
    (off|low|high|max) overrides the gateway's default for this key's requests that don't choose.
    Limits (``rpm`` requests/min, ``tpm`` tokens/min, ``max_concurrency`` requests in flight) are None
    when unlimited; ``priority`` >= 1 is the key's weight in the fair queue. ``aliases`` are the key's
    own model names, ``{alias: served model name}``: they win over the gateway's
    (``GATEWAY_MODEL_ALIASES``, :mod:`gateway.proxy.aliases`). ``max_wait_s``: the longest queue wait its
    requests accept when they name none (None: as long as the queue allows); ``request_class``
    (``interactive`` | ``batch``): its requests' class by default, and the highest they may ask for.
    ``quota``: its token quota (:mod:`gateway.limits.quota`), None for none; ``group``: the group it
    belongs to, whose limits and quota its requests count against too.
    """

    key_id: str
    name: str
    kind: str = "key"
    models: tuple[str, ...] | None = None
    scopes: tuple[str, ...] = ()
    default_thinking: str | None = None
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None
    priority: int = 1
    aliases: Mapping[str, str] | None = None
    max_wait_s: float | None = None
    request_class: str = "interactive"
    quota: Quota | None = None
    group: Group | None = None

    def quotas(self) -> tuple[Quota, ...]:
        """The quotas its requests count against: its key's, then its group's."""
        group = self.group.quota if self.group is not None else None
        return tuple(quota for quota in (self.quota, group) if quota is not None)

    def may_use(self, model: str) -> bool:
        """True if the allow-list admits ``model``."""
        return self.models is None or model in self.models
