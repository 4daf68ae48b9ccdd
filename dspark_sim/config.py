"""Simulator settings: one frozen dataclass, validated on construction.

Nothing here reads the environment; callers (``run_sim``, ``python -m dspark_sim``, tests) build a
``SimConfig`` explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SimConfig:
    """How the simulated vLLM server behaves.

    Defaults mirror the production backend: DeepSeek-V4-Flash on vLLM with TP=2, ``--max-num-seqs 2``,
    DSpark speculative decoding with k=5 draft tokens, 1M context and the seed's KV pool.
    """

    served_model_name: str = "deepseek-v4-flash-0731"
    """Name clients must send as ``model`` (``--served-model-name``)."""
    model_root: str = "deepseek-ai/DeepSeek-V4-Flash"
    """``root`` reported by ``GET /v1/models`` (the model path in real vLLM)."""
    slots: int = 2
    """Sequences decoded at once (``--max-num-seqs``); the rest wait in FIFO order."""
    decode_tps: float = 90.0
    """Decode speed per running sequence, tokens/s. An engine step of n tokens takes n / decode_tps s."""
    k: int = 5
    """Draft tokens proposed per speculative step (``num_speculative_tokens``)."""
    acceptance: float = 0.7
    """Probability (0..1) that each draft position is accepted, given all earlier ones were."""
    seed: int = 0
    """Mixed into every request's RNGs; same seed + same request -> same text and same chunking."""
    prefill_tps: float = 1641.0
    """Prefill speed, prompt tokens/s, shared by the sequences prefilling at once. The default is the
    DSpark Graph-8 recipe's production uncached-retrieval qualification: 159,979 prompt tokens to the
    first token in 97.50 s. Alone, TTFT after admission = ttft_base_s + prompt_tokens / prefill_tps."""
    prefill_chunk_tokens: int = 4096
    """Tokens prefilled per chunk (vLLM's chunked prefill, ``--max-num-batched-tokens 4096``): the KV a
    prefill takes grows by a chunk at a time, and a waiting sequence needs room for its first one."""
    ttft_base_s: float = 0.02
    """Fixed part of the time to first token after admission, seconds."""
    max_model_len: int = 1_048_576
    """Context window, tokens: prompt (+ max_tokens when given) beyond it -> 400."""
    kv_cache_tokens: int = 1_372_579
    """KV pool size, tokens (the balanced profile's at startup); running sequences that outgrow it are
    preempted (``dspark_sim.scheduler``); ``vllm:kv_cache_usage_perc`` = tokens held / this."""
    scheduling_policy: str = "fcfs"
    """vLLM's ``--scheduling-policy``: ``fcfs``, or ``priority`` (waiting sequences by the request's
    ``priority``, lower first, then arrival). Under ``fcfs`` a ``priority`` other than 0 is a 400, as
    vLLM documents ("will raise an error if the served model does not use priority scheduling")."""
    responses_store: bool = False
    """Keep the Responses API's ``store: true`` answers (non-stream) for ``GET /v1/responses/{id}``,
    ``.../cancel`` and ``previous_response_id``, as vLLM does with ``VLLM_ENABLE_RESPONSES_API_STORE=1``;
    False (vLLM's default): every stored id is unknown (404)."""
    prefix_caching: bool = True
    """Keep a prefix cache (vLLM's ``--enable-prefix-caching``, :mod:`dspark_sim.prefix_cache`): a
    prompt's resident prefix is not prefilled again, and ``cached_tokens`` in usage says how much."""
    block_size: int = 256
    """Tokens per KV block (``--block-size``), the prefix cache's unit."""
    kv_cache_layout: str = "single"
    """The KV cache groups: ``single`` (one full-attention group, as a standard-attention model), or
    ``deepseek_v4`` (DeepSeek-V4's compressed MLA, sliding-window and compressor-state groups, each
    publishing its own events: :mod:`dspark_sim.hybrid_cache`)."""
    kv_events_endpoint: str | None = None
    """Publish KV cache events here (a ZMQ endpoint bound, e.g. ``tcp://127.0.0.1:5557``), as vLLM's
    ``--kv-events-config`` ``endpoint`` does; None: none published."""
    kv_events_replay_endpoint: str | None = None
    """The replay socket of those events (``replay_endpoint``); None: no replay."""
    tokenize_tps: float | None = None
    """Tokenizer speed of a prompt count (``/tokenize``, ``count_tokens``), tokens/s: a count of n tokens
    answers after n / tokenize_tps s (None: at once). ``dspark_sim_token_counts_total`` and
    ``_peak`` (most in flight at once) show them on ``/metrics``."""
    tokenize_route: bool = True
    """Serve ``POST /tokenize`` (vLLM does unless ``--skip-tokenizer-init``); False: 404, as a backend
    without a tokenizer route."""
    reasoning_parser: bool = True
    """True: split reasoning into the ``reasoning`` field (``--reasoning-parser deepseek_v4``).
    False: raw ``...reasoning...</think>answer`` in ``content``."""
    reasoning_end: str = "</think>"
    """The marker the model writes between its reasoning and its answer (one token): DeepSeek-V4's
    and V4.1's ``</think>``, or what a ``--reasoning-config`` names (the seed's `` response``); what
    a gateway splitting the raw text must be told (``GATEWAY_REASONING_END``)."""
    per_request_metrics: bool = False
    """Add a vLLM 0.32 style per-request ``metrics`` object to every response (on the final usage chunk
    of a stream), as ``--enable-per-request-metrics`` does; the request cannot turn it off."""
    reasoning_tokens: int = 48
    """Typical length of a generic reasoning part, tokens (each request varies it by +-25%)."""
    content_tokens: int = 96
    """Typical length of a generic answer, tokens (each request varies it by +-25%)."""
    version: str = "0.32.0-sim"
    """What ``GET /version`` reports."""
    trace_file: str = ""
    """Simulator only (``--trace-file PATH``): append one JSON line per sequence leaving the engine
    (arrival, scheduled, finish, tokens, reason; see ``dspark_sim.trace``). Empty: no trace."""

    def __post_init__(self) -> None:
        checks = {
            "served_model_name must be non-empty": bool(self.served_model_name),
            "reasoning_end must be non-empty": bool(self.reasoning_end),
            "slots must be >= 1": self.slots >= 1,
            "decode_tps must be > 0": self.decode_tps > 0,
            "prefill_tps must be > 0": self.prefill_tps > 0,
            "prefill_chunk_tokens must be >= 1": self.prefill_chunk_tokens >= 1,
            "ttft_base_s must be >= 0": self.ttft_base_s >= 0,
            "k must be >= 0": self.k >= 0,
            "acceptance must be within 0..1": 0.0 <= self.acceptance <= 1.0,
            "max_model_len must be >= 1": self.max_model_len >= 1,
            "kv_cache_tokens must be >= 1": self.kv_cache_tokens >= 1,
            "block_size must be >= 1": self.block_size >= 1,
            "kv_cache_layout must be single or deepseek_v4": self.kv_cache_layout
            in ("single", "deepseek_v4"),
            "reasoning_tokens must be >= 1": self.reasoning_tokens >= 1,
            "content_tokens must be >= 1": self.content_tokens >= 1,
        }
        failed = [message for message, ok in checks.items() if not ok]
        if failed:
            raise ValueError("invalid SimConfig: " + "; ".join(failed))
