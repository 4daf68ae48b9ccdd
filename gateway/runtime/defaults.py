"""Gateway settings that follow from the runtime profile, so the two cannot drift apart.

``GATEWAY_SLOTS`` must equal vLLM's ``--max-num-seqs`` (a third request would wait inside vLLM, outside
the gateway's fair queue and its timeouts), and the KV pool observed at startup (``KV_CAPACITY_TOKENS``,
1,372,579 tokens for the balanced profile per the recipe) is shared by every running request. Wiring
into ``gateway.config.Settings`` is a later step (issue "Backend runtime").
"""

from __future__ import annotations

from typing import TypedDict

from gateway.runtime.profile import RuntimeProfile


class GatewayDefaults(TypedDict):
    """``slots``: default ``GATEWAY_SLOTS``; ``kv_budget_tokens``: shared KV pool, ``None`` if unmeasured."""

    slots: int
    kv_budget_tokens: int | None


def gateway_defaults(profile: RuntimeProfile) -> GatewayDefaults:
    """Defaults for the gateway from ``profile``: ``slots = MAX_NUM_SEQS`` and the observed KV capacity.

    ``kv_budget_tokens`` is the whole shared pool (all running requests' prompt + output tokens together),
    not a per-request limit: with the balanced profile one full 1M-token request fits, two do not.
    """
    return GatewayDefaults(slots=profile.max_num_seqs, kv_budget_tokens=profile.kv_capacity_tokens)
