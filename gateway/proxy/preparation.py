"""Preparing one inference request for the backend, as a pure function: the request's dialect, its
caller, the settings and the model aliases, with the parsed body and the headers' asks, in; what to
send, or the client's error, out — with what was learnt on the way (its class, its model label,
whether it streams), which its record keeps either way.

In order (the first refusal wins): the headers' asks (400, :mod:`~gateway.proxy.asks`); a model alias
resolved (the key's own aliases first, then the gateway's); the body validated by the dialect (400);
the headers it forwards (400); the model (404 ``model_not_found``, 403 ``model_not_allowed``); the
body normalised for vLLM by the dialect (400 for what it can't honour); a batch request's vLLM
``priority`` spliced in; the output budget against the KV pool (400 ``context_length_exceeded``).

No I/O, no clock; the one thing it changes is ``body["model"]`` (an alias, resolved in place in the
request's own body). What a request refers to that is stored (the Responses API's ids) is checked by
its owner afterwards: that asks the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.auth.principal import Principal
from gateway.config import Settings
from gateway.dialects.base import Context, Dialect, Prepared
from gateway.errors import GatewayError
from gateway.proxy.aliases import ModelAliases
from gateway.proxy.asks import BATCH_PRIORITY, PRIORITY_ROUTES, Asked, resolved, with_priority


@dataclass(slots=True)
class Preparation:
    """What :func:`prepare` made of a request: ``prepared`` (what to send) or ``error`` (the client's
    error), and what it learnt before either — ``request_class`` (``interactive`` | ``batch``, None
    when the asks were refused), ``max_wait_s`` (the longest queue wait it accepts, s; None: any),
    ``model`` (the served model, or ``unknown``: a bounded label), ``stream``, ``forwarded`` (the
    request headers that go on to vLLM)."""

    prepared: Prepared | None = None
    error: GatewayError | None = None
    request_class: str | None = None
    max_wait_s: float | None = None
    model: str = "unknown"
    stream: bool = False
    forwarded: dict[str, str] = field(default_factory=dict)


def prepare(
    dialect: Dialect,
    principal: Principal,
    settings: Settings,
    aliases: ModelAliases,
    body: dict[str, Any],
    headers: Mapping[str, str],
    asked: Asked,
    telemetry: bool = False,
) -> Preparation:
    """``body`` (parsed JSON) with its request ``headers`` and their ``asked`` handling, from
    ``principal`` in ``dialect``, prepared for the backend (see the module doc); ``telemetry``: the
    client asked for the gateway's telemetry object."""
    out = Preparation()
    try:
        out.max_wait_s, batch = resolved(asked, principal)
        out.request_class = "batch" if batch else "interactive"
        requested = resolve_model(aliases, principal, body)
        parsed = dialect.parse(body)
        out.forwarded = dialect.forwarded(headers)
        out.model = parsed.model if parsed.model == settings.served_model else "unknown"
        out.stream = parsed.stream
        check_model(settings, principal, parsed.model, requested)
        prepared = dialect.prepare(parsed, Context(principal, settings, telemetry))
        if batch and settings.upstream_priority and dialect.upstream_path in PRIORITY_ROUTES:
            prepared = replace(prepared, body=with_priority(prepared.body, BATCH_PRIORITY))
        check_budget(settings, prepared.output_budget, prepared.output_param)
    except GatewayError as error:
        out.error = error
        return out
    out.prepared = prepared
    return out


def resolve_model(aliases: ModelAliases, principal: Principal, body: dict[str, Any]) -> Any:
    """Write the model an alias means over ``body["model"]`` (in place): the key's own aliases first,
    then the gateway's; the model the client named."""
    model = body.get("model")
    if isinstance(model, str):
        body["model"] = aliases.resolve(model, principal.aliases)
    return model


def check_model(settings: Settings, principal: Principal, model: str, requested: Any = None) -> None:
    """404 ``model_not_found`` for a model not served (named as the alias resolved it: a key's own
    alias names what it was set to), 403 ``model_not_allowed`` for one the key may not use. An alias
    (``requested``, the name the client sent, when it is not ``model``) of the served model the key
    may not use is answered as an unknown model under the alias's name: what stands behind it is not
    told."""
    if model != settings.served_model:
        raise GatewayError("model_not_found", f"The model `{model}` does not exist.", param="model")
    if not principal.may_use(model):
        if isinstance(requested, str) and requested != model:
            raise GatewayError("model_not_found", f"The model `{requested}` does not exist.", param="model")
        message = f"This API key may not use the model `{model}`."
        raise GatewayError("model_not_allowed", message, param="model")


def check_budget(settings: Settings, budget: int | None, param: str) -> None:
    """400 ``context_length_exceeded`` for an output budget no KV pool of this backend could hold
    (before the prompt is counted)."""
    kv = settings.kv_budget_tokens
    if budget is not None and budget > kv:
        message = f"{param} {budget} exceeds the backend's KV cache ({kv} tokens)."
        raise GatewayError("context_length_exceeded", message, param=param)
