"""Where a request runs (gateway/proxy/placement.py) over two in-memory backends: the backend is
decided once and serves the request's sizing, queue room and admission alike; only a fail-over
decides again."""

from __future__ import annotations

from gateway.admission import Lease
from tests.support.fake_upstream import FakeUpstream
from tests.support.pipeline import DONE, assert_nothing_held, build, call, chat, chunk, settled, steps_until

#: A prompt large enough to be counted by the backend (``GATEWAY_TOKENIZE_MIN_BYTES``).
LARGE = "word " * 5000


async def test_sizing_queue_room_and_admission_happen_on_the_backend_decided_once() -> None:
    """Two idle backends: the request is placed on ``a`` (least loaded, then by name) and counted
    there. While the count runs ``a`` fills up, so ``b`` is now the least loaded: the request still
    queues on ``a``, and runs there once ``a``'s slot frees; ``b`` never hears of it."""
    a_upstream, b_upstream = FakeUpstream(), FakeUpstream()
    pipeline, records = build(a_upstream, b_upstream, slots=1, plain=True)
    a, b = pipeline.backends.by_name["a"], pipeline.backends.by_name["b"]
    count, answer = a_upstream.script(), a_upstream.script()
    running = call(pipeline, chat(True, messages=[{"role": "user", "content": LARGE}])).start()
    await a_upstream.arrived.wait()
    assert [sent.path for sent in a_upstream.sent] == ["/tokenize"]
    holder = a.admission.enqueue("another key")  # a's one slot, taken while the prompt is counted
    assert isinstance(holder, Lease)
    assert pipeline.backends.route().backend is b  # a fresh decision would now go to b
    count.send(b'{"count": 5001, "max_model_len": 1048576, "tokens": []}').end()
    await steps_until(lambda: a.admission.queue_depth == 1)
    holder.release()
    await steps_until(lambda: len(a_upstream.sent) == 2)
    answer.send(chunk(1, content="Hi", finish="stop"), DONE).end()
    await running.done()
    await settled(pipeline)
    assert running.status == 200 and b_upstream.sent == []
    assert [sent.path for sent in a_upstream.sent] == ["/tokenize", "/v1/chat/completions"]
    (record,) = records.published
    assert (record.prompt_size_source, record.prompt_size_tokens) == ("tokenize", 5001)
    assert "slot" in record.waited_for
    assert_nothing_held(pipeline)
    assert a.routed == 0 and b.routed == 0  # counted where placed only until admission answered
