"""Gateway settings that follow from the runtime profile, so the two cannot drift apart.

``GATEWAY_SLOTS`` must equal vLLM's ``--max-num-seqs`` (a third request would wait inside vLLM, outside
the gateway's fair queue and its timeouts), and the KV pool observed at startup (``KV_CAPACITY_TOKENS``,
1,372,579 tokens for the balanced profile per the recipe) is shared by every running request. Wiring
into ``gateway.config.Settings`` is a later step (issue "Backend runtime").
"""

from __future__ import annotations

from typing import TypedDict

from dspark_runtime.profile import RuntimeProfile


class GatewayDefaults(TypedDict):
    """``slots``: default ``GATEWAY_SLOTS``; ``served_model``: the model name vLLM serves (its
    generation's unless set: ``DSPARK_MODEL_GENERATION``); ``kv_budget_tokens``: shared KV pool,
    ``None`` if unmeasured;
    ``max_model_len``: the context window; ``long_prompt_tokens``: where the express lane starts;
    ``express_slots``: slots kept for short prompts while long ones run; ``upstream_priority``: whether
    vLLM schedules by ``priority`` (``SCHEDULING_POLICY=priority``), so batch requests may say so;
    ``kv_events``, ``kv_events_replay``, ``kv_events_bind``, ``kv_block_size``: where vLLM's KV cache
    events come from (Unix sockets in ``KV_EVENTS_DIR``, which vLLM binds and the gateway connects
    to) and its block size."""

    slots: int
    served_model: str
    kv_budget_tokens: int | None
    max_model_len: int
    long_prompt_tokens: int
    express_slots: int
    upstream_priority: bool
    kv_events: str
    kv_events_replay: str
    kv_events_bind: bool
    kv_block_size: int


def gateway_defaults(profile: RuntimeProfile) -> GatewayDefaults:
    """Defaults for the gateway from ``profile``: ``slots = MAX_NUM_SEQS`` and the observed KV capacity.

    ``kv_budget_tokens`` is the whole shared pool (all running requests' prompt + output tokens together),
    not a per-request limit: with the balanced profile one full 1M-token request fits, two do not.

    A prompt is *long* from 8 prefill chunks on (``8 * MAX_NUM_BATCHED_TOKENS``, 32,768 tokens with
    4,096): about 20 s of prefill at the recipe's 159,979 tokens in 97.5 s, long enough that a short
    request should not queue behind it. One slot is kept for short requests when there are two or more.
    """
    return GatewayDefaults(
        slots=profile.max_num_seqs,
        served_model=profile.served_model_name,
        kv_budget_tokens=profile.kv_capacity_tokens,
        max_model_len=profile.max_model_len,
        long_prompt_tokens=8 * profile.max_num_batched_tokens,
        express_slots=1 if profile.max_num_seqs >= 2 else 0,
        upstream_priority=profile.scheduling_policy == "priority",
        kv_events=profile.kv_events_endpoints[0],
        kv_events_replay=profile.kv_events_endpoints[1],
        kv_events_bind=False,
        kv_block_size=profile.block_size,
    )
