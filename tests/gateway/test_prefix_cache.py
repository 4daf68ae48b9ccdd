"""Admission that knows what the backend's prefix cache holds, through a real gateway and simulator:
the gateway subscribes to the simulator's KV events on ZMQ (vLLM's wire), predicts the cached prefix of
each prompt from its ``/tokenize`` ids, and sizes the request by what must be computed — the lane and
the KV reserved — with the prediction beside vLLM's reported ``cached_tokens`` in its record. A
gateway started later learns the same from the replay socket; one with no events estimates."""

from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.sim.helpers import load_data
from tests.support.prefix_cache_view import MODEL, endpoints, prefix_cache, status, turn
from tests.support.probes import scrape, wait_until

BLOCK = 16
#: ~4,500 simulated tokens: long (GATEWAY_LONG_PROMPT_TOKENS 3,000 here) when nothing of it is cached.
HISTORY = [{"role": "user", "content": "explain the build in detail " * 640}]
SIZED = {"tokenize_min_bytes": 1, "long_prompt_tokens": 3_000, "kv_block_size": BLOCK}


def follow_up(n: int) -> list[dict]:
    """The conversation after ``n`` more exchanges."""
    more = [m for i in range(n) for m in ({"role": "assistant", "content": f"step {i}"},
                                          {"role": "user", "content": f"and then {i}?"})]  # fmt: skip
    return HISTORY + more


def test_a_follow_up_turn_is_sized_by_what_the_cache_does_not_hold(
    start_sim, start_gateway, make_key, admin
) -> None:
    events, replay = endpoints()
    sim = start_sim(block_size=BLOCK, kv_events_endpoint=events, kv_events_replay_endpoint=replay)
    gateway = start_gateway(sim.url, kv_events=events, kv_events_replay=replay, **SIZED)
    key = make_key("agent")
    first = turn(gateway, key, admin, follow_up(0))
    assert first["cached_tokens"] == 0 and first["cached_tokens_predicted"] == 0
    assert first["lane"] == "long" and first["kv_tokens"] == first["prompt_tokens"] + 8
    wait_until(
        lambda: status(gateway, admin)["backends"][0]["prefix_cache"]["source"] == "events", what="events"
    )

    second = turn(gateway, key, admin, follow_up(1))
    assert second["cache_source"] == "events"
    assert second["cached_tokens_predicted"] == second["cached_tokens"] > first["prompt_tokens"] - 2 * BLOCK
    computed = second["prompt_tokens"] - second["cached_tokens"]
    assert second["lane"] == "short" and second["kv_tokens"] == second["prompt_tokens"] + 8  # long, cached
    metrics = scrape(gateway.url)
    assert metrics["gateway_backend_prefix_cache_source{backend=default,source=events}"] == 1
    # The second turn's prediction from the events, exact: in the first bucket (0 tokens off).
    errors = "gateway_prefix_cache_prediction_error_tokens_{}{{{}source=events}}"
    assert metrics[errors.format("count", "")] >= 1
    assert metrics[errors.format("bucket", "le=0.0,")] == metrics[errors.format("count", "")]
    assert metrics["gateway_prefill_tokens_total"] == first["prompt_tokens"] + computed

    published = prefix_cache(gateway, admin)["events"]["batches"]  # a prefill step's blocks each
    later = start_gateway(sim.url, kv_events=events, kv_events_replay=replay, **SIZED)
    wait_until(  # subscribed, it asked the replay for what came before it: no turn of its own needed
        lambda: status(later, admin)["backends"][0]["prefix_cache"]["events"]["replayed"] == published,
        what="the batches before its subscription",
    )
    third = turn(later, key, admin, follow_up(2))
    wait_until(lambda: prefix_cache(later, admin)["events"]["batches"] > published, what="the third's events")
    feed = prefix_cache(later, admin)["events"]
    assert feed["replayed"] == published and feed["gaps"] == 0, feed
    assert feed["last_seq"] == feed["batches"] - 1 > published - 1, feed  # the third turn's, live
    fourth = turn(later, key, admin, follow_up(3))
    assert (
        fourth["cache_source"] == "events"
        and fourth["cached_tokens_predicted"] == fourth["cached_tokens"] > 0
    )
    assert third["cached_tokens"] > 0


def test_without_events_the_cache_is_estimated_from_what_was_sent(
    start_sim, start_gateway, make_key, admin
) -> None:
    sim = start_sim(block_size=BLOCK)
    gateway = start_gateway(sim.url, **SIZED)
    key = make_key("agent")
    turn(gateway, key, admin, follow_up(0))
    second = turn(gateway, key, admin, follow_up(1))
    assert second["cache_source"] == "estimate"
    assert second["cached_tokens_predicted"] == second["cached_tokens"] > 0
    view = prefix_cache(gateway, admin)
    assert view["source"] == "estimate" and view["estimate_blocks"] > 0 and "events" not in view


def test_a_backend_without_a_prefix_cache_is_sized_whole_and_holds_no_session(
    start_sim, start_gateway, make_key, admin
) -> None:
    events, replay = endpoints()
    sim = start_sim(block_size=BLOCK, prefix_caching=False)
    gateway = start_gateway(sim.url, prefix_caching=False, kv_events=events, kv_events_replay=replay, **SIZED)
    key = make_key("agent")
    turn(gateway, key, admin, follow_up(0))
    second = turn(gateway, key, admin, follow_up(1))
    assert second["cached_tokens"] == 0 and second["cached_tokens_predicted"] is None
    assert second["cache_source"] is None and second["lane"] == "long"
    backend = status(gateway, admin)["backends"][0]
    assert backend["prefix_cache"]["source"] == "off" and "events" not in backend["prefix_cache"]
    assert backend["session_holds"] == []
    assert scrape(gateway.url)["gateway_backend_prefix_cache_source{backend=default,source=off}"] == 1


def test_claude_codes_turns_are_predicted_from_their_converted_conversation(
    start_sim, start_gateway, make_key, admin
) -> None:
    """Claude Code 2.1.328's own bodies (``tests/sim/data/claude_code.json``: a billing header, a
    message with role "system", tools, a tool call and its result): counted by ``/tokenize`` of the
    chat vLLM converts them to, so predicted from their ids, and the next turn finds the first's
    whole prompt cached but for its last block — a new billing hash changes nothing."""
    events, replay = endpoints()
    sim = start_sim(block_size=BLOCK, kv_events_endpoint=events, kv_events_replay_endpoint=replay)
    gateway = start_gateway(sim.url, kv_events=events, kv_events_replay=replay, **SIZED)
    key = make_key("claude-code")
    data = load_data("claude_code.json")
    first_body = {**copy.deepcopy(data["turn1"]), "stream": False, "max_tokens": 8}
    second_body = copy.deepcopy(first_body)
    second_body["messages"] += copy.deepcopy(data["turn2"]["messages"][2:])
    second_body["system"][0]["text"] += " cch=4f2a1;"

    def send(body: dict) -> dict:
        answer = httpx.post(gateway.url + "/v1/messages", json=body, headers={"x-api-key": key}, timeout=30)
        assert answer.status_code == 200, answer.text
        request_id = answer.headers["x-request-id"]

        def row() -> dict | None:
            listed = httpx.get(gateway.url + "/admin/requests", headers={"Authorization": f"Bearer {admin}"})
            return next((r for r in listed.json()["data"] if r["request_id"] == request_id), None)

        wait_until(lambda: row() is not None, what="its row")
        found = row()
        assert found is not None and found["prompt_size_source"] == "tokenize"
        return found

    first = send(first_body)
    assert first["cached_tokens_predicted"] == first["cached_tokens"] == 0
    wait_until(lambda: prefix_cache(gateway, admin)["source"] == "events", what="events")
    second = send(second_body)
    assert second["cache_source"] == "events"
    assert second["cached_tokens_predicted"] == second["cached_tokens"] >= first["prompt_tokens"] - BLOCK
    assert second["prompt_size_tokens"] == second["prompt_tokens"]


def test_a_turn_sized_while_another_runs_allows_for_what_that_one_still_takes(
    start_sim, start_gateway, make_key, admin
) -> None:
    """One slot, a pool of 400 blocks: a follow-up turn sized while a long answer runs waits for it, and
    that answer's blocks still to come evict the first turn's least recently freed ones (its last first).
    The prediction made at sizing allows for them: equal to what the backend reports once the turn runs,
    well short of the whole first turn."""
    events, replay = endpoints()
    pool = 400 * BLOCK
    sim = start_sim(
        block_size=BLOCK, kv_cache_tokens=pool, kv_events_endpoint=events, kv_events_replay_endpoint=replay
    )
    gateway = start_gateway(
        sim.url, kv_events=events, kv_events_replay=replay, slots=1, kv_budget_tokens=pool, **SIZED
    )
    key = make_key("agent")
    first = turn(gateway, key, admin, follow_up(0))
    wait_until(lambda: prefix_cache(gateway, admin)["source"] == "events", what="events")
    answer = {
        "model": MODEL, "stream": True, "max_tokens": 3_000,
        "messages": [{"role": "user", "content": "count from 1 to 9000 #sim:decode_tps=1000"}],
    }  # fmt: skip
    running = threading.Event()

    def long_answer() -> str:
        with httpx.stream(
            "POST", gateway.url + "/v1/chat/completions", json=answer,
            headers={"Authorization": f"Bearer {key}"}, timeout=60,
        ) as response:  # fmt: skip
            lines = response.iter_lines()
            for line in lines:
                if line.startswith("data: {"):
                    running.set()
                    break
            return [line for line in lines if line.startswith("data: ")][-1]

    with ThreadPoolExecutor(1) as pool_:
        done = pool_.submit(long_answer)
        assert running.wait(30)
        second = turn(gateway, key, admin, follow_up(1))
        assert done.result() == "data: [DONE]"
    assert second["cache_source"] == "events"
    assert second["cached_tokens_predicted"] == second["cached_tokens"]
    assert 0 < second["cached_tokens"] < first["prompt_tokens"] - 16 * BLOCK


def test_a_long_prompt_is_predicted_exactly_from_ids_read_in_pieces(
    start_sim, start_gateway, make_key, admin
) -> None:
    """A 120k-token prompt: its /tokenize answer (~0.7 MB of ids) is read in several pieces, its 7,500
    block keys computed in pieces, its events come in 30 batches (a prefill chunk's blocks each); the
    next turn's predicted cached tokens are what the simulator serves, to the token."""
    events, replay = endpoints()
    sim = start_sim(block_size=BLOCK, kv_events_endpoint=events, kv_events_replay_endpoint=replay)
    gateway = start_gateway(sim.url, kv_events=events, kv_events_replay=replay, **SIZED)
    key = make_key("long")
    document = [{"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 10_700}]
    first = turn(gateway, key, admin, document)
    assert first["prompt_tokens"] > 120_000 and first["cached_tokens"] == 0
    wait_until(lambda: prefix_cache(gateway, admin)["events"]["batches"] >= 29, what="the prefill's batches")
    more = document + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "and?"}]
    second = turn(gateway, key, admin, more)
    assert second["cache_source"] == "events"
    assert second["cached_tokens_predicted"] == second["cached_tokens"] > first["prompt_tokens"] - BLOCK
