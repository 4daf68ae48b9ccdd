"""The request-field policy: what a client may ask the backend for beyond the OpenAI API.

vLLM accepts request fields that reach past one client's own answer — they change how the engine
schedules everyone's sequences, which template renders the prompt, what the KV cache shares or
transfers, or which code runs in the engine. They are refused (400 ``unsupported_field``, naming
the field) unless the key holds the :data:`BACKEND_FIELDS_SCOPE` scope (a trusted client, e.g. a
benchmark):

==========================  ====================================================================
``chat_template``           a Jinja template of the client's instead of the model's
``priority``                a place ahead of other clients' sequences (``--scheduling-policy``)
``request_id``              vLLM's own id of the sequence (the gateway sends ``x-request-id``)
``kv_transfer_params``      disaggregated prefill: KV blocks sent to or fetched from elsewhere
``cache_salt``              which prefix-cache blocks the request may share
``vllm_xargs``              custom sampling arguments for engine plugins
``logits_processors``       logits processors named by their Python qualified name
``use_beam_search``         beam search: ``n`` beams, each a sequence
``best_of``                 ``best_of`` sequences generated for each answer
``prompt_embeds``           a prompt as embedding tensors, fed to the engine as they are
``prompt_logprobs``         log-probabilities of every prompt token (a 1M-token prompt's worth)
``mm_processor_kwargs``     arguments of the multimodal processor
==========================  ====================================================================

The same names inside ``chat_template_kwargs`` (and ``tokenize`` there), which some vLLM releases let
override the request's own (GHSA-6fvq-23cw-5628), are refused alike; so are the template variables
the request's own fields fill (``messages``, ``tools``, ``documents``): set there, they would render a
prompt the gateway never sized, past admission's KV reservation and the quota's prompt cost.

``n`` (answers per request) is a number of sequences, each taking a slot, and so is each prompt of a
text completion's batch (``prompt`` as a list of strings or of token-id lists): their product is
refused above ``GATEWAY_MAX_N`` (default 1: on the two-slot profile one request may not take both)
and counted as that many sequences by admission. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.auth.principal import Principal
from gateway.errors import GatewayError

#: The scope that lets a key set :data:`BACKEND_FIELDS`.
BACKEND_FIELDS_SCOPE = "backend_fields"
BACKEND_FIELDS = frozenset(
    {
        "chat_template",
        "priority",
        "request_id",
        "kv_transfer_params",
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
#: What may not be passed to the chat template either.
_TEMPLATE_FIELDS = BACKEND_FIELDS | {"tokenize", "messages", "tools", "documents"}


def check_fields(body: Mapping[str, Any], principal: Principal, max_n: int) -> int:
    """Refuse what ``principal`` may not ask for in ``body``; return the sequences it asks for
    (``n`` times the prompts of a batch)."""
    if BACKEND_FIELDS_SCOPE not in principal.scopes:
        kwargs = body.get("chat_template_kwargs")
        inner = _TEMPLATE_FIELDS.intersection(kwargs) if isinstance(kwargs, dict) else set()
        for name in sorted(BACKEND_FIELDS.intersection(body)) + [
            f"chat_template_kwargs.{k}" for k in sorted(inner)
        ]:
            message = f"{name} changes how the backend serves other clients; this key may not set it."
            raise GatewayError("unsupported_field", message, param=name)
    n = body.get("n")
    sequences = (n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1) * _prompts(body)
    if sequences > max_n:
        message = (
            f"n times the prompts may be at most {max_n} here (each answer is a sequence of the backend's)."
        )
        raise GatewayError("unsupported_field", message, param="n" if _prompts(body) == 1 else "prompt")
    return sequences


def _prompts(body: Mapping[str, Any]) -> int:
    """Prompts of a text completion's batch: a list of strings or of token-id lists (a list of numbers
    is one prompt as token ids); 1 otherwise."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        return len(prompt)
    return 1
