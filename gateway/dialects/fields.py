"""The request-field policy: which body fields each route forwards, and how far.

Each inference route forwards an allow-list of top-level fields (:data:`SERVED`): the public API's
own (OpenAI's chat completions, completions and Responses, Anthropic's Messages with its beta fields;
their SDKs' request types, which a unit test holds these lists to), plus the vLLM extensions the
gateway means to serve — sampling (``top_k``, ``min_p``, ``repetition_penalty``, ...), stopping
(``stop_token_ids``, ``ignore_eos``, ``min_tokens``), structured outputs, and the template controls
the gateway sizes a prompt with (``chat_template_kwargs``, ``add_generation_prompt``, ...). Any other
field is refused (400 ``unsupported_field``, naming it), as OpenAI's and Anthropic's APIs refuse an
unknown argument: a field vLLM ignores today may mean something to its next release. The operator
adds names with ``GATEWAY_EXTRA_BODY_FIELDS`` (a new client release's field, without a gateway
release).

A key holding the :data:`BACKEND_FIELDS_SCOPE` scope (a trusted client, e.g. a benchmark) may send
any field. Without it, these are named as reaching past the client's own answer:

==========================  ====================================================================
``chat_template``           a Jinja template of the client's instead of the model's
``priority``                a place ahead of other clients' sequences (``--scheduling-policy``)
``request_id``              vLLM's own id of the sequence (the gateway sends ``x-request-id``)
``kv_transfer_params``      disaggregated prefill: KV blocks sent to or fetched from elsewhere
``ec_transfer_params``      the same for the encoder cache
``cache_salt``              which prefix-cache blocks the request may share
``vllm_xargs``              custom sampling arguments for engine plugins
``logits_processors``       logits processors named by their Python qualified name
``use_beam_search``         beam search: ``n`` beams, each a sequence
``best_of``                 ``best_of`` sequences generated for each answer
``prompt_embeds``           a prompt as embedding tensors, fed to the engine as they are
``prompt_logprobs``         log-probabilities of every prompt token (a 1M-token prompt's worth);
                            so is a text completion's ``echo`` with ``logprobs`` (vLLM 0.32
                            ``CompletionRequest.to_sampling_params``)
``mm_processor_kwargs``     arguments of the multimodal processor
==========================  ====================================================================

``chat_template_kwargs`` holds only the thinking controls the model's chat encoding reads
(:data:`TEMPLATE_KWARGS`; ``vllm/tokenizers/deepseek_v4.py``): that encoding also takes
``conversation`` in place of the request's messages, and a Jinja template any variable, so anything
else could render a prompt the gateway never sized, past admission's KV reservation and the quota's
prompt cost.

Bounds for every key: what vLLM's output processor checks on every generated token of a sequence
(``stop``, ``stop_sequences``, ``bad_words``, ``stop_token_ids``) has at most :data:`MAX_STOP_ITEMS`
entries; a structured-output constraint (``structured_outputs``, ``response_format``, ``text``,
vLLM's older ``guided_*``), compiled into a grammar before the sequence runs, at most
:data:`MAX_CONSTRAINT_BYTES` as JSON; ``n`` (answers per request) times the prompts of a text
completion's batch (``prompt`` as a list of strings or of token-id lists) at most ``GATEWAY_MAX_N``
(default 1: on the two-slot profile one request may not take both), counted as that many sequences
by admission. ``ignore_eos`` and ``min_tokens`` ask for a long answer; it is bounded as any answer
is, by the context and the key's quota. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dspark_common import json_codec
from gateway.auth.principal import Principal
from gateway.config import Settings
from gateway.errors import GatewayError

#: The scope that lets a key send any field.
BACKEND_FIELDS_SCOPE = "backend_fields"
BACKEND_FIELDS = frozenset(
    {
        "chat_template",
        "priority",
        "request_id",
        "kv_transfer_params",
        "ec_transfer_params",
        "cache_salt",
        "vllm_xargs",
        "logits_processors",
        "use_beam_search",
        "best_of",
        "prompt_embeds",
        "prompt_logprobs",
        "mm_processor_kwargs",
    }
)
#: What ``chat_template_kwargs`` may hold: DeepSeek-V4's thinking controls (and the common
#: ``enable_thinking``), and whether earlier turns' reasoning is dropped from the prompt.
TEMPLATE_KWARGS = frozenset({"thinking", "enable_thinking", "reasoning_effort", "drop_thinking"})
#: vLLM's structured-output fields (``structured_outputs``; ``guided_*`` before vLLM 0.12).
STRUCTURED_FIELDS = ("structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar")
#: Lists checked against each generated token, and how long they may be.
STOP_LISTS = ("stop", "stop_sequences", "bad_words", "stop_token_ids")
MAX_STOP_ITEMS = 64
#: Constraints compiled into a grammar, and their largest JSON size, bytes.
CONSTRAINTS = (*STRUCTURED_FIELDS, "response_format", "text")
MAX_CONSTRAINT_BYTES = 65_536

#: vLLM sampling and stopping extensions (vLLM 0.32 ``SamplingParams``), served on every OpenAI route.
_SAMPLING = frozenset(
    {
        "top_k",
        "min_p",
        "repetition_penalty",
        "stop_token_ids",
        "include_stop_str_in_output",
        "ignore_eos",
        "min_tokens",
        "skip_special_tokens",
        "thinking_token_budget",
        *STRUCTURED_FIELDS,
    }
)
#: Shared by chat and text completions: OpenAI's fields and vLLM's extensions of both.
_COMPLETING = _SAMPLING | {
    "model",
    "stream",
    "stream_options",
    "max_tokens",
    "n",
    "temperature",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "logprobs",
    "seed",
    "stop",
    "user",
    "length_penalty",
    "spaces_between_special_tokens",
    "bad_words",
    "allowed_token_ids",
    "add_special_tokens",
    "response_format",
    "include_metrics",  # the gateway's own: vLLM's per-request metrics shown to the client
}
#: The top-level fields each route forwards, by dialect ``api``.
SERVED: Mapping[str, frozenset[str]] = {
    "chat": _COMPLETING
    | {
        # OpenAI, "Create chat completion"
        "messages",
        "max_completion_tokens",
        "audio",
        "function_call",
        "functions",
        "metadata",
        "modalities",
        "moderation",
        "parallel_tool_calls",
        "prediction",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning_effort",
        "safety_identifier",
        "service_tier",
        "store",
        "tool_choice",
        "tools",
        "top_logprobs",
        "verbosity",
        "web_search_options",
        # thinking as DeepSeek's API and the gateway take it; the template controls it sizes with
        "thinking",
        "include_reasoning",
        "chat_template_kwargs",
        "add_generation_prompt",
        "continue_final_message",
        "documents",
    },
    # OpenAI, "Create completion"
    "completions": _COMPLETING | {"prompt", "suffix", "echo"},
    "responses": _SAMPLING
    | {
        # OpenAI, "Create a model response"
        "model",
        "input",
        "instructions",
        "stream",
        "stream_options",
        "max_output_tokens",
        "max_tool_calls",
        "temperature",
        "top_p",
        "top_logprobs",
        "reasoning",
        "text",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "previous_response_id",
        "conversation",
        "store",
        "background",
        "background_options",
        "include",
        "metadata",
        "prompt",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "safety_identifier",
        "service_tier",
        "truncation",
        "user",
        "context_management",
        "moderation",
        "image",
        "access_programs",
        # sent by Codex CLI (its own metadata of the session; vLLM ignores it)
        "client_metadata",
        # vLLM's Responses extensions
        "stop",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "seed",
        "include_reasoning",
        "chat_template_kwargs",
    },
    # Anthropic, "Messages" and "Count tokens in a message", with the beta fields of both
    "messages": frozenset(
        {
            "model",
            "messages",
            "system",
            "max_tokens",
            "stream",
            "temperature",
            "top_k",
            "top_p",
            "stop_sequences",
            "thinking",
            "tools",
            "tool_choice",
            "metadata",
            "output_config",
            "output_format",
            "service_tier",
            "cache_control",
            "container",
            "context_management",
            "mcp_servers",
            "diagnostics",
            "inference_geo",
            "speed",
            "user_profile_id",
            "workspace_id",
            "billing_policy",
            "compaction",
            "fallback_credit_token",
            "fallbacks",
            "thread",
            "chat_template_kwargs",
        }
    ),
}


def check_fields(body: Mapping[str, Any], principal: Principal, settings: Settings, api: str) -> None:
    """Refuse what ``principal`` may not send to route ``api`` (a key of :data:`SERVED`) in ``body``,
    the object as the client sent it: 400 ``unsupported_field`` naming the field."""
    if BACKEND_FIELDS_SCOPE not in principal.scopes:
        _check_served(body, SERVED[api] | settings.extra_body_fields)
    for name in STOP_LISTS:
        value = body.get(name)
        if isinstance(value, list) and len(value) > MAX_STOP_ITEMS:
            message = f"{name} may have at most {MAX_STOP_ITEMS} entries (each is checked on every token)."
            raise GatewayError("unsupported_field", message, param=name)
    for name in CONSTRAINTS:
        value = body.get(name)
        if isinstance(value, dict | list | str) and len(json_codec.dumps(value)) > MAX_CONSTRAINT_BYTES:
            message = f"{name} may be at most {MAX_CONSTRAINT_BYTES} bytes as JSON."
            raise GatewayError("unsupported_field", message, param=name)


def _check_served(body: Mapping[str, Any], served: frozenset[str]) -> None:
    for name in body:
        if name not in served:
            if name in BACKEND_FIELDS:
                message = f"{name} changes how the backend serves other clients; this key may not set it."
            else:
                message = f"Unrecognized request argument supplied: {name} (not a field this route serves)."
            raise GatewayError("unsupported_field", message, param=name)
    kwargs = body.get("chat_template_kwargs")
    for name in sorted(kwargs) if isinstance(kwargs, dict) else ():
        if name not in TEMPLATE_KWARGS:
            message = f"chat_template_kwargs may hold {', '.join(sorted(TEMPLATE_KWARGS))} only."
            raise GatewayError("unsupported_field", message, param=f"chat_template_kwargs.{name}")
    if body.get("echo") is True and body.get("logprobs") is not None:
        message = "echo with logprobs asks for the prompt's log-probabilities; this key may not."
        raise GatewayError("unsupported_field", message, param="echo")


def sequences(body: Mapping[str, Any], max_n: int) -> int:
    """The sequences ``body`` asks for: ``n`` times the prompts of a batch; 400 above ``max_n``."""
    n = body.get("n")
    count = (n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1) * _prompts(body)
    if count > max_n:
        message = (
            f"n times the prompts may be at most {max_n} here (each answer is a sequence of the backend's)."
        )
        raise GatewayError("unsupported_field", message, param="n" if _prompts(body) == 1 else "prompt")
    return count


def _prompts(body: Mapping[str, Any]) -> int:
    """Prompts of a text completion's batch: a list of strings or of token-id lists (a list of numbers
    is one prompt as token ids); 1 otherwise."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        return len(prompt)
    return 1
