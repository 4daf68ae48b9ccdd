"""The dialect seam: what differs between the client APIs the gateway speaks, behind one interface.

A dialect (OpenAI chat completions, text completions, the OpenAI Responses API, Anthropic
Messages) is one small module implementing :class:`Dialect`. The pipeline (:mod:`gateway.proxy`) —
admission, limits, relay, disconnect handling, telemetry — is written once against it and knows no
dialect. The shape follows Envoy AI Gateway's translators: a request body in, the upstream body
out; each response chunk in, the client's chunks out with what it saw (:class:`Step`: the
:class:`~gateway.telemetry.observation.Observation` telemetry needs, what it learnt of the backend, a
response id to claim); a whole body in, the client's out likewise (:class:`Answer`). A translator
returns what it saw and holds nothing of its caller: no dialect records metrics or changes what the
gateway knows of a backend itself; the request's owner does, from these values.

Pure: no web framework, no HTTP client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.auth.principal import Principal
from gateway.config import Settings
from gateway.dialects.prompt_count import EitherCount, TokenCount
from gateway.errors import GatewayError
from gateway.reasoning.policy import ReasoningShown
from gateway.telemetry.observation import Observation


@dataclass(frozen=True, slots=True)
class Parsed:
    """A request body validated by the dialect's request model: the model it names, whether it
    streams, the validated ``request`` (the dialect's own type) and the parsed ``body`` it came from
    (what is forwarded, every field the client sent)."""

    model: str
    stream: bool
    request: Any
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Context:
    """What a dialect may read to prepare one request (data only): the caller, the settings, and
    whether the client asked for the gateway's ``telemetry`` object (header ``x-gateway-telemetry: 1``)."""

    principal: Principal
    settings: Settings
    telemetry: bool = False


@dataclass(slots=True)
class Step:
    """What a translator made of one upstream event: ``events``, the SSE events to send the client
    (unchanged ones byte for byte, none while text is held back); ``seen``, the event's facts for
    telemetry (None: none); ``learnt``, what the backend's answer showed of its reasoning so far when
    that is news (None: nothing new); ``claimed``, the id the backend stores the response under, to be
    the caller's (the Responses API's ``store``; :class:`~gateway.storage.response_owners.ResponseOwners`)."""

    events: list[bytes]
    seen: Observation | None = None
    learnt: ReasoningShown | None = None
    claimed: str | None = None


@dataclass(slots=True)
class Answer:
    """What a translator made of a whole non-stream body: ``body``, the client's — bytes to send as
    they are, or a JSON object that takes the gateway's ``telemetry`` when the client asked for it
    before it is encoded —; ``seen``, its facts for telemetry; ``learnt`` and ``claimed`` as
    :class:`Step`'s."""

    body: bytes | dict[str, Any]
    seen: Observation
    learnt: ReasoningShown | None = None
    claimed: str | None = None


class Translator(Protocol):
    """One request's response rewriting (reasoning split, field names, what the client asked to see).

    - ``knowing(shown)``: what the gateway knows of the reasoning output of the backend that answers,
      told once the backend is known and before the first step or the answer (a fail-over tells
      again; :class:`~gateway.reasoning.policy.ReasoningShown`).
    - ``step(event, data, telemetry)``: one whole upstream SSE event (bytes with its blank-line
      terminator) and its ``data`` payload (None if it has none) → :class:`Step`. ``telemetry``: the
      client's telemetry object (asked for, and handed to the stream's last event only: it is as of
      the backend's end).
    - ``answer(body)``: a whole non-stream body → :class:`Answer`.
    - Both raise :class:`MalformedResponseError` for a chunk or body that is not the API's shape.
    - ``ends(event, data)``: whether the event is the stream's last (OpenAI's ``[DONE]``, Anthropic's
      ``message_stop``, the Responses API's ``response.completed``): a stream that stops before it
      broke.
    - ``error_event(error, telemetry)``: the error as this API's SSE events ending a stream that broke
      after it started (what the translator still held first, with the client's ``telemetry`` object
      when it asked for one), as a :class:`Step`.
    """

    def knowing(self, shown: ReasoningShown) -> None: ...

    def ends(self, event: bytes, data: bytes | None) -> bool: ...

    def step(self, event: bytes, data: bytes | None, telemetry: dict[str, Any] | None = None) -> Step: ...

    def answer(self, body: bytes) -> Answer: ...

    def error_event(self, error: GatewayError, telemetry: dict[str, Any] | None = None) -> Step: ...


@dataclass(slots=True)
class Prepared:
    """A request ready for the backend.

    ``body``: the JSON to send (bytes, made before the request queues: a waiting request holds one
    bytes object, not a tree the cyclic GC walks); ``output_budget``: the most tokens it may generate
    per sequence (None: the backend's default), named ``output_param`` in the client's API, checked
    against the KV pool; ``sequences``: how many the backend runs for it (OpenAI's ``n``), each
    taking a slot; ``stored``: what it refers to that the backend stores, ``(param, id)`` — the
    Responses API's ``previous_response_id``, ``conversation`` and ``item_reference`` inputs —,
    each of which must be the caller's, the first one deciding the backend; ``count``: how the
    backend counts its prompt's tokens (:mod:`~gateway.dialects.prompt_count`; None: it can't be
    asked, the size is estimated), dropped once used.
    """

    body: bytes
    stream: bool
    output_budget: int | None
    output_param: str
    sequences: int
    translator: Translator
    stored: tuple[tuple[str, str], ...] = ()
    count: TokenCount | EitherCount | None = None

    def capped(self, tokens: int) -> None:
        """Generate at most ``tokens`` per sequence: ``output_param`` spliced last into :attr:`body`
        (:func:`splice_last`)."""
        self.body = splice_last(self.body, self.output_param, b"%d" % tokens)
        self.output_budget = tokens

    def salted(self, cache_salt: str) -> None:
        """Share the backend's prefix cache only with requests of the same ``cache_salt``
        (:mod:`gateway.auth.cache_salt`; hex, so no JSON escaping), spliced last (:func:`splice_last`)."""
        self.body = splice_last(self.body, "cache_salt", b'"%s"' % cache_salt.encode())


def splice_last(body: bytes, name: str, value: bytes) -> bytes:
    """``body`` (a JSON object) with ``"name": value`` (``value`` JSON already) as its last member, so it
    wins over one the client sent (vLLM parses a body with ``json.loads``, where the last of a repeated
    key counts); not re-serialised, as a 1M-token prompt would be."""
    assert body.endswith(b"}"), "a dialect's upstream body is a JSON object"
    rest = body[:-1].rstrip()
    separator = b"" if rest.endswith(b"{") else b","
    return rest + b'%s"%s":%s}' % (separator, name.encode(), value)


def text_length(value: Any) -> int:
    """Characters of a text field of a response (0 when it is no string)."""
    return len(value) if isinstance(value, str) else 0


class Dialect(Protocol):
    """One client API.

    - ``route``: its path at the gateway (the telemetry record's ``route``); ``upstream_path``: where
      vLLM serves it; ``api``: its short name (the ``api`` label of metrics and ledger rows);
      ``keep_alive``: what an idle stream is sent to keep proxies from cutting it (an SSE comment,
      or Anthropic's ``ping`` event).
    - ``credentials(headers)``: the caller's secret (key or JWT) from the request headers; raises 401
      ``invalid_api_key`` when there is none or it is malformed.
    - ``parse(body)``: the parsed JSON body (:mod:`gateway.body.json_limits`) validated into
      :class:`Parsed`; raises 400 for a body that isn't valid.
    - ``prepare(parsed, context)``: normalised for vLLM serving DeepSeek-V4 (thinking controls, field
      names, usage always asked for) under the field policy; raises 400 for values it can't honour
      or fields the key may not set.
    - ``forwarded(headers)``: the request headers that go on to vLLM (Anthropic's API version).
    - ``error_body(error)``: the error as this API shows it, as a JSON body (before the response
      started; after, the translator's ``error_event``).
    """

    route: str
    upstream_path: str
    api: str
    keep_alive: bytes

    def __hash__(self) -> int: ...

    def credentials(self, headers: Mapping[str, str]) -> str: ...

    def parse(self, body: dict[str, Any]) -> Parsed: ...

    def prepare(self, parsed: Parsed, context: Context) -> Prepared: ...

    def forwarded(self, headers: Mapping[str, str]) -> dict[str, str]: ...

    def error_body(self, error: GatewayError) -> dict[str, Any]: ...
