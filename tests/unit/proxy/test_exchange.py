"""One request's owner (gateway/proxy/exchange.py), driven by hand over the in-memory pipeline: what a
translator saw is recorded by one method into the record, the backend and the response owners; how
the request ended is kept once; a refused body still leaves what was known of it in its record."""

from __future__ import annotations

import json

import pytest

from gateway.dialects.base import Answer, Step
from gateway.dialects.openai.chat import CHAT
from gateway.errors import GatewayError
from gateway.proxy.asks import Asked
from gateway.proxy.delivery import Delivery
from gateway.proxy.exchange import Exchange
from gateway.proxy.pipeline import Pipeline
from gateway.reasoning.policy import ReasoningShown
from gateway.storage.response_owners import Owner
from gateway.telemetry.observation import Observation
from tests.support.fake_upstream import FakeUpstream
from tests.support.pipeline import KEY, MODEL, Records, build, chat, settled


class Owners:
    """The response owners' table, in memory."""

    def __init__(self) -> None:
        self.claims: dict[str, Owner] = {}

    def claim(self, response_id: str, owner: Owner) -> None:
        self.claims[response_id] = owner

    async def owner(self, response_id: str) -> Owner | None:
        return self.claims.get(response_id)

    async def forget(self, response_id: str) -> None:
        self.claims.pop(response_id, None)


def exchange(telemetry: bool = False) -> tuple[Exchange, Pipeline, Records, Owners]:
    pipeline, records = build(FakeUpstream())
    owners = pipeline.owners = Owners()
    return Exchange(pipeline, CHAT, KEY, "req-1", None, telemetry, {}, Asked()), pipeline, records, owners


async def test_what_a_translator_saw_is_recorded_where_it_belongs() -> None:
    ex, pipeline, records, owners = exchange()
    async with ex:
        await ex.prepare(chat(True), 100)
        backend = ex.placement.decide()
        seen = Observation(output=True, content_chars=2, usage={"completion_tokens": 1})
        ex.saw([Step([], seen), Step([], learnt=ReasoningShown(splits_reasoning=True), claimed="resp_1")])
        ex.streaming()
        ex.stream_ended(delivered=True, error=None, sent=Delivery())
    await settled(pipeline)
    assert backend.traits.splits_reasoning is True
    assert owners.claims == {"resp_1": Owner(KEY.key_id, backend.name)}
    (record,) = records.published
    assert (record.status, record.end_reason, record.completion_tokens) == (200, "complete", 1)
    assert record.ttft_s is not None  # the first output was seen


async def test_a_whole_answer_takes_the_telemetry_object_asked_for_and_is_complete() -> None:
    ex, pipeline, records, _ = exchange(telemetry=True)
    async with ex:
        await ex.prepare(chat(False), 100)
        usage = {"prompt_tokens": 3, "completion_tokens": 2}
        body = ex.answer(Answer({"object": "chat.completion", "usage": usage}, Observation(usage=usage)), 200)
        ex.left()  # a client that hangs up after the whole answer went out: still a 200
    await settled(pipeline)
    sent = json.loads(body)
    assert sent["telemetry"]["completion_tokens"] == 2 and sent["telemetry"]["request_id"] == "req-1"
    (record,) = records.published
    assert (record.status, record.client_disconnected, record.end_reason) == (200, False, "complete")
    plain, *_ = exchange()
    assert plain.answer(Answer(b"as sent", Observation()), 200) == b"as sent"  # bytes go as they are


async def test_a_refused_body_leaves_what_was_known_of_it() -> None:
    ex, pipeline, records, _ = exchange()
    async with ex:
        with pytest.raises(GatewayError) as refused:
            await ex.prepare(chat(True, max_tokens=10**9), 100)
        ex.failed(refused.value.status)
    await settled(pipeline)
    assert refused.value.code == "context_length_exceeded"
    (record,) = records.published
    assert (record.status, record.model, record.stream, record.request_class) == (
        400,
        MODEL,
        True,
        "interactive",
    )
