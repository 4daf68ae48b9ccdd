"""Property-based fuzzing of the gateway's public routes from its own OpenAPI schema (schemathesis 4).

A real gateway in front of the simulator, both on loopback; the schema is loaded from the running
gateway's ``/openapi.json`` (the ``/v1`` request bodies there are generated from the pydantic models
in :mod:`gateway.dialects.openai.models`). Every public operation is fuzzed with schema-valid data
(positive) and schema-violating data (negative) under a client key as bearer auth, the admin routes
likewise under an admin key. Checks: no 5xx, a response whose content type and body conform to the
schema where it documents them, and every 4xx body in OpenAI error shape.

Deterministic (Hypothesis derandomized, no example database) and small: CI has two cores.

Cases come from ``APIOperation.as_strategy`` under Hypothesis' ``@given`` (schemathesis' API for
tests it does not drive itself), not from ``schemathesis.pytest.from_fixture``: the latter needs the
schema at collection time or, lazily, sets ``Node._nodeid``, which pytest 9.2 no longer has.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

#: Hypothesis examples per operation and mode: OpenAI routes, admin routes.
MAX_EXAMPLES = 25
ADMIN_EXAMPLES = 10
#: Generated ``max_tokens`` above this (but within the KV budget; beyond it the gateway answers 400)
#: are cut down so that the simulator answers in milliseconds.
FAST_TOKENS = 16
#: Every operation a client key may call: the OpenAI routes and the public probes. The admin routes are
#: fuzzed with an admin key.
PUBLIC = ["POST /v1/chat/completions", "POST /v1/completions", "GET /v1/models", "GET /health", "GET /ready"]


def openai_error_shape(ctx: Any, response: schemathesis.Response, case: schemathesis.Case) -> bool | None:
    """Every error body is ``{"error": {"message", "type", "param", "code"}}`` (a schemathesis check)."""
    if response.status_code < 400:
        return None
    try:
        body = response.json()
    except ValueError:
        raise AssertionError(f"error body is not JSON: {response.text[:200]!r}") from None
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error
    assert error["param"] is None or isinstance(error["param"], str), error
    assert error["code"] is None or isinstance(error["code"], str), error
    return None


CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance, openai_error_shape]
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


class Live(NamedTuple):
    """A running gateway in front of the simulator, its keys and the settings the fuzzing steers by."""

    url: str
    client_key: str
    admin_key: str
    served_model: str
    kv_budget_tokens: int


@pytest.fixture
def gateway(start_sim, start_gateway, make_key) -> Live:
    sim = start_sim()
    server = start_gateway(sim.url)
    settings = server.app.state.settings
    client, admin = make_key("fuzz"), make_key("ops", scopes=["admin"])
    return Live(server.url, client, admin, settings.served_model, settings.kv_budget_tokens)


def steer(case: schemathesis.Case, live: Live) -> None:
    """Point a valid body at the served model and keep its output small, so that it reaches the
    simulator and is answered fast (a generated model name is a random string: 404)."""
    if not isinstance(case.body, dict):
        return
    case.body["model"] = live.served_model
    for field in ("max_tokens", "max_completion_tokens"):
        value = case.body.get(field)
        if isinstance(value, int) and FAST_TOKENS < value <= live.kv_budget_tokens:
            case.body[field] = FAST_TOKENS


def live_schema(url: str, key: str) -> schemathesis.BaseSchema:
    """The running gateway's own schema, with ``key`` as bearer auth on every call."""
    config = schemathesis.Config.from_dict(
        {"headers": {"Authorization": f"Bearer {key}"}, "request-timeout": 20}
    )
    return schemathesis.openapi.from_url(url + "/openapi.json", config=config)


def fuzz_operation(operation: Any, mode: GenerationMode, max_examples: int, live: Live) -> None:
    """Run ``max_examples`` generated cases of ``operation`` in ``mode`` against the live gateway."""

    @settings(FUZZ, max_examples=max_examples)
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case: schemathesis.Case) -> None:
        if mode is GenerationMode.POSITIVE:
            steer(case, live)
        case.call_and_validate(checks=CHECKS)

    fuzz()


def test_schema_documents_the_request_bodies(gateway) -> None:
    schema = live_schema(gateway.url, gateway.client_key)
    chat = schema["/v1/chat/completions"]["POST"].definition.raw
    body = chat["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["model", "messages"]
    assert body["properties"]["messages"]["items"]["required"] == ["role"]  # pydantic's $defs inlined
    assert "$ref" not in str(body)
    assert set(chat["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    text = schema["/v1/completions"]["POST"].definition.raw["requestBody"]
    assert text["content"]["application/json"]["schema"]["required"] == ["model", "prompt"]


def negatable(operation: Any) -> bool:
    """Whether invalid data can be made for ``operation`` (a body or a typed query parameter; any
    string is a valid ``{key_id}``)."""
    return bool(operation.body) or bool(operation.query)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_public_routes_never_fail_and_answer_in_openai_shape(gateway, subtests, mode) -> None:
    schema = live_schema(gateway.url, gateway.client_key)
    for label in PUBLIC:
        operation = schema.find_operation_by_label(label)
        assert operation is not None, label
        if mode is GenerationMode.NEGATIVE and not negatable(operation):
            continue
        with subtests.test(label):
            fuzz_operation(operation, mode, MAX_EXAMPLES, gateway)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_admin_routes_never_fail_and_answer_in_openai_shape(gateway, subtests, mode) -> None:
    schema = live_schema(gateway.url, gateway.admin_key)
    operations = [result.ok() for result in schema.include(path_regex="^/admin/").get_all_operations()]
    assert len(operations) >= 10
    for operation in operations:
        if mode is GenerationMode.NEGATIVE and not negatable(operation):
            continue
        with subtests.test(operation.label):
            fuzz_operation(operation, mode, ADMIN_EXAMPLES, gateway)
