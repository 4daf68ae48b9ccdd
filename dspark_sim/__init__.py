"""dspark-sim: a simulator of vLLM 0.25-0.32 serving DeepSeek-V4-Flash, for demos, tests and
benchmarks on machines without a GPU. It is labelled as such everywhere: ``owned_by: "dspark-sim"``,
response header ``x-dspark-simulator: 1``, a startup log line, ``/version`` = ``0.32.0-sim``.

Endpoints: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (stream and non-stream),
``POST /v1/responses`` (OpenAI Responses API; ``GET /v1/responses/{id}`` and ``POST .../cancel``
answer 404, as vLLM does with its response store off, unless ``SimConfig.responses_store``),
``POST /v1/messages`` (Anthropic Messages, any query string, e.g. ``?beta=true``) and
``POST /v1/messages/count_tokens``, ``POST /tokenize``
(vLLM's ``{"count", "max_model_len", "tokens"}``, the count ``usage.prompt_tokens`` reports; off with
``SimConfig.tokenize_route``), ``GET /v1/models``, ``GET /health``, ``GET /version``, ``GET /metrics``
(vLLM metric names). The Responses and Messages routes serve what vLLM 0.32 builds from a chat
completion (see ``render_responses`` and ``render_messages``): the same engine, scripts, metrics and
trace as chat.

Behaviour (see ``SimConfig`` for the knobs and their units):
- Output is deterministic for (config seed, request content, request ``seed``, ``max_tokens``):
  reasoning, ``</think>``, answer. "count from A to B" in the last user message makes the answer
  ``A, A+1, ..., B``. ``chat_template_kwargs.thinking`` (or ``enable_thinking``) false, or
  ``reasoning_effort: "none"``, drops the reasoning part. ``max_tokens`` cuts the output
  (``finish_reason: "length"``; cut inside the reasoning, everything is reasoning).
- Scheduling (``dspark_sim.scheduler``): at most ``slots`` sequences run, over one KV pool of
  ``kv_cache_tokens``; the rest wait FIFO (vLLM's FCFS: the head blocks the queue). A prompt is
  prefilled in chunks of ``prefill_chunk_tokens``, the sequences prefilling at once sharing
  ``prefill_tps`` (alone, TTFT after admission is ``ttft_base_s + prompt_tokens / prefill_tps``);
  then each engine step emits 1 + accepted draft tokens (each of ``k`` positions accepted in turn
  with probability ``acceptance``), n tokens taking n / ``decode_tps`` seconds. The first step
  (prefill) emits 1 token. Running sequences that outgrow the pool are preempted newest first, as
  vLLM's recompute preemption: back to the front of the queue, then prefilled again with what they
  had generated (``vllm:num_preemptions_total`` counts them; the output is unchanged). A client
  disconnect, while waiting or mid-stream, aborts the request and frees its slot and KV.
- Streams: role chunk, one chunk per engine step (a step crossing ``</think>`` carries both
  ``reasoning`` and ``content``), usage chunk with ``choices: []`` when
  ``stream_options.include_usage``, cumulative usage on every chunk with ``continuous_usage_stats``,
  then ``data: [DONE]``. With ``SimConfig.per_request_metrics`` (vLLM's ``--enable-per-request-metrics``), a
  top-level ``metrics`` object rides on the final usage chunk (or on the response).
- Prompt tokens are estimated (ceil(len/4) per message + 4, + 3; each tool definition counts as a
  message); completion tokens are exact. ``count_tokens`` and ``/tokenize`` report the estimate
  the generation routes use.
- Tool calls, in every dialect: ``#sim:call NAME {JSON object}`` in the last user message (the JSON
  runs to the end of its line) makes the model call the declared function tool NAME with those
  arguments instead of answering (after its reasoning, when thinking is on); a conversation that ends
  with a tool's result is answered ``Tool result: <its first 200 characters>``. See
  ``dspark_sim.tools``.

Fault directives, written anywhere in the last user message (chat, Responses, Messages) or the prompt
(completions); several may be combined; an unknown directive or a bad value is a 400:
- ``#sim:status=N`` (400..599): answer HTTP N with a vLLM-shaped error body (Anthropic-shaped on
  ``/v1/messages``), nothing generated.
- ``#sim:die_after=N``: streams only; after N SSE data events (``[DONE]`` counts), the server cuts the
  connection (incomplete chunked body, no ``[DONE]``). N >= events in the stream: no effect.
- ``#sim:stall=S``: sleep S seconds before anything is sent (before status/headers and before the
  request joins the queue), e.g. to trip client or gateway timeouts.
- ``#sim:decode_tps=R`` (0 < R <= 1e6): decode this sequence at R tokens/s instead of ``decode_tps``
  (a benchmark holds the offered load constant across concurrency levels with it).
- ``#sim:ignore_max_tokens=1``: generate as if the request set no output cap (``max_tokens``,
  ``max_completion_tokens``, ``max_output_tokens`` checked, then ignored): an upstream that overruns
  the cap it was given.
Order: validation (model, length) -> stall -> status -> queue -> generate.

Serving: ``run_sim(config, host, port)`` blocks; ``SimServer(config)`` runs one in a thread on a free
loopback port (context manager, ``.base_url``); ``python -m dspark_sim --help`` for a CLI.
``--trace-file PATH`` (``SimConfig.trace_file``, off by default) appends one JSON line per sequence
leaving the engine (arrival, scheduled, finish...), for benchmarks; see ``dspark_sim.trace``.
"""

from .app import create_sim_app
from .config import SimConfig
from .handlers import SIMULATOR_OWNED_BY
from .server import SimServer, run_sim

__all__ = ["SIMULATOR_OWNED_BY", "SimConfig", "SimServer", "create_sim_app", "run_sim"]
