"""What a stream's client was sent of its output, as the relay's reader puts and its writer sends."""

from __future__ import annotations

from gateway.dialects.base import Step
from gateway.proxy.delivery import Delivery
from gateway.telemetry.observation import Observation


def delta(chars: int) -> Step:
    return Step([b"x" * 10], Observation(output=True, content_chars=chars))


def test_what_was_read_ahead_of_the_client_is_not_what_it_was_sent() -> None:
    sent = Delivery()
    sent.saw([delta(3), Step([b"ping"]), delta(5)])  # two output events, one without output
    sent.put(24)
    sent.saw([delta(8)])
    sent.put(10)
    sent.saw([delta(40)])  # read, still in the buffer: never sent
    sent.put(10)
    assert (sent.events, sent.chars) == (0, 0)
    sent.sent(24)
    assert (sent.events, sent.chars) == (2, 8)
    sent.sent(10)  # the writer takes whole puts: these 10 bytes are the second put
    assert (sent.events, sent.chars) == (3, 16)


def test_steps_seen_before_their_put_count_with_it() -> None:
    """The relay reports the steps before the last event (the sequence's end) with no data: their
    events go out in the next put."""
    sent = Delivery()
    sent.saw([delta(2)])
    sent.saw([delta(2)])
    sent.put(20)
    sent.sent(20)
    assert (sent.events, sent.chars) == (2, 4)
