"""Prompt-cache prediction on DeepSeek-V4's KV cache groups, through a real gateway and a simulator
started with that layout (``kv_cache_layout="deepseek_v4"``): every group publishes its own events on
ZMQ, the sliding-window groups remove blocks the compressed-MLA groups still hold, and the gateway's
prediction equals the cached tokens the backend reports on every turn of a conversation, an eviction
by other conversations' long prompts included (there the sliding windows decide: the compressed
groups still hold a long prefix). ``/admin/status`` lists the groups it learnt, and those of a kind it
does not know, which leave the prediction to the estimate."""

from __future__ import annotations

import msgspec

from tests.support.kv_publisher import Publisher, payload, stored
from tests.support.prefix_cache_view import endpoints, feed, prefix_cache, publish_until_taken, status, turn
from tests.support.probes import wait_until

BLOCK = 16
SIZED = {"tokenize_min_bytes": 1, "long_prompt_tokens": 3_000, "kv_block_size": BLOCK}


def conversation(topic: str, exchanges: int) -> list[dict]:
    """A ~4,500-token conversation about ``topic`` after ``exchanges`` more exchanges."""
    first = [{"role": "user", "content": f"explain the {topic} in detail " * 640}]
    more = [m for i in range(exchanges) for m in ({"role": "assistant", "content": f"step {i} of {topic}"},
                                                  {"role": "user", "content": f"and then {i}?"})]  # fmt: skip
    return first + more


def test_a_conversation_with_an_eviction_is_predicted_exactly_on_deepseek_v4s_groups(
    start_sim, start_gateway, make_key, admin
) -> None:
    events, replay = endpoints()
    sim = start_sim(
        block_size=BLOCK,
        kv_cache_layout="deepseek_v4",
        kv_cache_tokens=12_000,
        kv_events_endpoint=events,
        kv_events_replay_endpoint=replay,
    )
    gateway = start_gateway(sim.url, kv_events=events, kv_events_replay=replay, **SIZED)
    key = make_key("agent")
    assert turn(gateway, key, admin, conversation("build", 0))["cached_tokens_predicted"] == 0
    wait_until(lambda: prefix_cache(gateway, admin)["source"] == "events", what="events")

    rows = [turn(gateway, key, admin, conversation("build", 1))]
    turn(gateway, key, admin, conversation("deploy", 0))  # another long prompt: the pool evicts
    turn(gateway, key, admin, conversation("tests", 0))
    rows += [turn(gateway, key, admin, conversation("build", n)) for n in (2, 3)]
    for repeats in (200, 500):  # a new conversation on a part of its first message
        branch = [{"role": "user", "content": "explain the build in detail " * repeats + "briefly"}]
        rows.append(turn(gateway, key, admin, branch))
    for row in rows:
        assert row["cache_source"] == "events"
        assert row["cached_tokens_predicted"] == row["cached_tokens"], row
    assert rows[0]["cached_tokens"] > rows[0]["prompt_tokens"] - 4 * BLOCK  # held before the eviction
    assert rows[1]["cached_tokens"] < rows[0]["prompt_tokens"] - 4 * BLOCK  # cut short by it: the
    # sliding windows lost the blocks before the compressed groups' run ends
    assert rows[2]["cached_tokens"] > rows[1]["prompt_tokens"] - 4 * BLOCK  # and held again

    view = prefix_cache(gateway, admin)
    kinds = [(g["kind"], g["block_size"], g["window"]) for g in view["kv_cache_groups"]]
    assert kinds == [("mla_attention", BLOCK, None)] * 3 + [
        ("sliding_window_mla", 64, 128),
        ("sliding_window_mla", 4, 8),
        ("sliding_window_mla", 8, 128),
    ]
    assert view["unknown_kv_cache_groups"] == {"groups": {}, "events": 0}
    assert status(gateway, admin)["backends"][0]["prefix_cache"]["events"]["orphans"] == 0


def test_a_group_of_a_kind_the_gateway_does_not_know_is_shown_and_the_estimate_predicts(
    start_sim, start_gateway, make_key, admin
) -> None:
    """A backend whose events name a ``mamba`` group (a kind the index cannot predict): the feed stays
    the source, ``/admin/status`` shows the group, and every prompt is predicted by the estimate."""
    events, replay = endpoints()
    sim = start_sim(block_size=BLOCK)
    gateway = start_gateway(sim.url, kv_events=events, kv_events_replay=replay, kv_events_bind=True, **SIZED)
    key = make_key("agent")
    with Publisher(events, replay, connect=True) as vllm:
        last = publish_until_taken(vllm, gateway, admin)
        mamba = msgspec.structs.replace(stored(7000, BLOCK), group_idx=1, kv_cache_spec_kind="mamba")
        vllm.publish(last + 1, payload(mamba))
        wait_until(lambda: feed(gateway, admin)["last_seq"] == last + 1, 60, "the batch")
        view = prefix_cache(gateway, admin)
        assert view["unknown_kv_cache_groups"] == {"groups": {"1": "mamba"}, "events": 1}
        assert view["kv_cache_groups"][0]["kind"] is None  # group 0 named no kind: full attention

        turn(gateway, key, admin, conversation("build", 0))
        second = turn(gateway, key, admin, conversation("build", 1))
        assert prefix_cache(gateway, admin)["source"] == "events"
        assert second["cache_source"] == "estimate"  # the events hold nothing of it: no guess from them
        assert second["cached_tokens_predicted"] == second["cached_tokens"] > 0
