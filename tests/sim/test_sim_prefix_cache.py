"""The simulator's prefix cache and its KV events: a conversation's next turn is served from the blocks
its last turn left (``cached_tokens`` in usage, a shorter prefill), the least recently used blocks go
when the pool needs room, and every change is published on ZMQ in vLLM's wire format, with a replay
socket — read here by a real ZMQ subscriber."""

from __future__ import annotations

import time

import httpx
import zmq

from dspark_common import kv_events
from dspark_common.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from dspark_sim.prefix_cache import PrefixCache, in_steps
from dspark_sim.tokens import chat_ids
from tests.sim.helpers import MODEL
from tests.support.servers import free_port
from tests.support.sim_process import SimProcess

BLOCK = 16


def test_a_longer_prompt_is_served_from_the_blocks_of_its_prefix() -> None:
    cache = PrefixCache(BLOCK, pool_blocks=100)
    first = list(range(1000, 1000 + 5 * BLOCK))
    assert cache.lookup(first) == 0
    [stored] = cache.store(first, held_tokens=0)
    assert isinstance(stored, BlockStored) and stored.parent_block_hash is None
    assert len(stored.block_hashes) == 5
    assert stored.token_ids == first and stored.block_size == BLOCK
    assert cache.lookup(first) == 4 * BLOCK  # its last token is always computed: not its last block
    second = first + [7] * (3 * BLOCK + 2)
    assert cache.lookup(second) == 5 * BLOCK
    [more] = cache.store(second, held_tokens=0)
    assert isinstance(more, BlockStored) and more.parent_block_hash == stored.block_hashes[-1]
    assert len(more.block_hashes) == 3 and more.token_ids == second[5 * BLOCK : 8 * BLOCK]
    assert cache.lookup([1] + first[1:]) == 0  # another first token: another chain


def test_the_least_recently_used_blocks_go_when_running_sequences_need_the_pool() -> None:
    cache = PrefixCache(BLOCK, pool_blocks=10)
    old, recent = [1] * (4 * BLOCK), [2] * (4 * BLOCK)
    cache.store(old, 0)
    cache.store(recent, 0)
    cache.lookup(old + [0])  # old is used again: recent is now the least recently used
    events = cache.trim(held_tokens=6 * BLOCK)  # 4 blocks left free
    assert [type(e) for e in events] == [BlockRemoved] and len(events[0].block_hashes) == 4
    assert cache.lookup(old + [0]) == 4 * BLOCK and cache.lookup(recent + [0]) == 0
    assert cache.trim(held_tokens=0) == [] and isinstance(cache.clear()[0], AllBlocksCleared)


def test_an_eviction_takes_a_prefix_from_its_last_block() -> None:
    """vLLM frees a request's blocks last block first: an eviction shortens a cached prefix, it does not
    lose it from its first block."""
    cache = PrefixCache(BLOCK, pool_blocks=10)
    prompt = list(range(100, 100 + 6 * BLOCK))
    cache.store(prompt, 0)
    [removed] = cache.trim(held_tokens=6 * BLOCK)  # 4 blocks left free: 2 of the 6 go
    assert isinstance(removed, BlockRemoved) and len(removed.block_hashes) == 2
    assert cache.lookup(prompt + [0]) == 4 * BLOCK


def test_a_running_sequences_blocks_count_once_and_stay_until_it_ends() -> None:
    cache = PrefixCache(BLOCK, pool_blocks=10)
    other, mine = [5] * (4 * BLOCK), [6] * (5 * BLOCK) + [0]
    cache.store(other, 0)
    assert cache.lookup(mine, owner=1) == 0
    # its KV is its blocks: no eviction
    assert cache.store(mine, held_tokens=5 * BLOCK + 3, owner=1)[1:] == []
    assert len(cache) == 9
    [removed] = cache.trim(held_tokens=5 * BLOCK + 9 * BLOCK)  # another sequence needs 9 blocks
    assert isinstance(removed, BlockRemoved) and len(removed.block_hashes) == 4  # the unpinned ones only
    assert cache.lookup(mine + [1]) == 5 * BLOCK
    cache.release(1)
    [removed] = cache.trim(held_tokens=9 * BLOCK)
    assert len(removed.block_hashes) == 4 and len(cache) == 1


def test_a_long_store_is_published_a_prefill_step_at_a_time() -> None:
    """vLLM publishes a chunked prefill's blocks step by step: the store of a 10-block prompt, with
    steps of 4 blocks, goes out as stores of 4, 4 and 2 blocks chained to each other, the salt on the
    first, the eviction it caused after the last."""
    cache = PrefixCache(BLOCK, pool_blocks=10)
    cache.store(list(range(10_000, 10_000 + 3 * BLOCK)), held_tokens=0)
    prompt = list(range(20_000, 20_000 + 10 * BLOCK)) + [1]
    events = cache.store(prompt, held_tokens=0, salt="tenant")
    assert [type(event) for event in events] == [BlockStored, BlockRemoved]
    batches = in_steps(events, 4 * BLOCK + 3)
    assert [[type(event) for event in batch] for batch in batches] == [
        [BlockStored], [BlockStored], [BlockStored, BlockRemoved]
    ]  # fmt: skip
    stores = [batch[0] for batch in batches]
    assert [len(store.block_hashes) for store in stores] == [4, 4, 2]
    assert sum((store.block_hashes for store in stores), []) == events[0].block_hashes
    assert sum((store.token_ids for store in stores), []) == prompt[: 10 * BLOCK]
    assert [store.parent_block_hash for store in stores] == [None, *(s.block_hashes[-1] for s in stores[:2])]
    assert [store.extra_keys for store in stores] == [[("tenant",), None, None, None], [None] * 4, [None] * 2]
    assert batches[-1][1] == events[1]
    assert in_steps(events, 10 * BLOCK) == [events]


def test_chat_ids_are_prefix_stable() -> None:
    turn = [("system", "Be brief."), ("user", "x" * 5000)]
    later = chat_ids([*turn, ("assistant", "ok"), ("user", "more")])
    first = chat_ids(turn)
    assert later[: len(first) - 2].tolist() == first[:-2].tolist()  # all but the assistant's opening ids


def _subscriber(endpoint: str) -> zmq.Socket:
    socket = zmq.Context.instance().socket(zmq.SUB)
    socket.setsockopt(zmq.SUBSCRIBE, b"")
    socket.setsockopt(zmq.RCVTIMEO, 10_000)
    socket.connect(endpoint)
    return socket


def test_a_second_turn_hits_the_cache_and_the_events_say_so(new_sim) -> None:
    port, replay_port = free_port(), free_port()
    endpoint, replay = f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{replay_port}"
    sim = new_sim(
        block_size=BLOCK, kv_events_endpoint=endpoint, kv_events_replay_endpoint=replay, prefill_tps=20_000
    )
    subscriber = _subscriber(endpoint)
    time.sleep(0.3)  # a PUB socket drops what it sends before the subscription has arrived
    messages = [{"role": "user", "content": "word " * 2000}]

    def turn(extra: list[dict[str, str]]) -> dict[str, int]:
        body = {"model": MODEL, "messages": messages + extra, "max_tokens": 4}
        answer = httpx.post(f"{sim.base_url}/v1/chat/completions", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.json()["usage"]

    first = turn([])
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    topic, seq, payload = subscriber.recv_multipart()
    batch = kv_events.decode(payload)
    assert (topic, kv_events.frame_seq(seq)) == (b"", 0)
    [stored] = batch.events
    assert isinstance(stored, BlockStored) and len(stored.block_hashes) == first["prompt_tokens"] // BLOCK
    ids = httpx.post(f"{sim.base_url}/tokenize", json={"model": MODEL, "messages": messages}).json()["tokens"]
    assert stored.token_ids == ids[: len(stored.token_ids)]  # the ids /tokenize answers

    second = turn([{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go on"}])
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert cached == (first["prompt_tokens"] - 2) // BLOCK * BLOCK  # all but the assistant opening's block
    _, seq, payload = subscriber.recv_multipart()
    [more] = kv_events.decode(payload).events
    assert kv_events.frame_seq(seq) == 1 and isinstance(more, BlockStored)
    assert more.parent_block_hash == stored.block_hashes[cached // BLOCK - 1]

    asked = zmq.Context.instance().socket(zmq.DEALER)
    asked.setsockopt(zmq.RCVTIMEO, 10_000)
    asked.connect(replay)
    asked.send_multipart((b"", kv_events.seq_frame(0)))
    replayed = []
    while (frames := asked.recv_multipart())[2] != kv_events.END_SEQ:
        replayed.append((kv_events.frame_seq(frames[2]), kv_events.decode(frames[3]).events))
    assert replayed == [(0, [stored]), (1, [more])]
    subscriber.close(linger=0)
    asked.close(linger=0)


def test_the_command_line_takes_the_event_endpoints(tmp_path) -> None:
    """``python -m dspark_sim`` turns every SimConfig field into a flag, those defaulting to None too."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    flags = ("--block-size", str(BLOCK), "--kv-events-endpoint", endpoint, "--tokenize-tps", "1e6")
    sim = SimProcess(tmp_path / "sim.log", *flags).start()
    try:
        subscriber = _subscriber(endpoint)
        time.sleep(0.3)
        body = {"model": MODEL, "messages": [{"role": "user", "content": "word " * 200}], "max_tokens": 2}
        assert httpx.post(f"{sim.url}/v1/chat/completions", json=body, timeout=30).status_code == 200
        [stored] = kv_events.decode(subscriber.recv_multipart()[2]).events
        assert isinstance(stored, BlockStored) and stored.block_size == BLOCK
        subscriber.close(linger=0)
    finally:
        sim.kill()


def test_a_cache_salt_keeps_a_prompt_from_every_other_salt_on_every_route(new_sim) -> None:
    """As vLLM's: ``cache_salt`` goes into the first block's hash, so a prompt is served from the cache
    only to requests of its own salt; a salt vLLM would refuse is refused."""
    sim = new_sim(block_size=BLOCK)
    text = "word " * 600
    routes = {
        "/v1/chat/completions": ({"messages": [{"role": "user", "content": text}], "max_tokens": 2}, "chat"),
        "/v1/completions": ({"prompt": "c " + text, "max_tokens": 2}, "chat"),
        "/v1/responses": ({"input": "r " + text, "max_output_tokens": 2}, "responses"),
        "/v1/messages": (
            {"messages": [{"role": "user", "content": "m " + text}], "max_tokens": 2},
            "messages",
        ),
    }

    def cached(path: str, salt: str | None) -> int:
        body, shape = routes[path]
        answer = httpx.post(
            f"{sim.base_url}{path}", json={"model": MODEL, **body, "cache_salt": salt}, timeout=30
        )
        assert answer.status_code == 200, answer.text
        usage = answer.json()["usage"]
        if shape == "chat":
            return usage["prompt_tokens_details"]["cached_tokens"]
        if shape == "responses":
            return usage["input_tokens_details"]["cached_tokens"]
        return usage.get("cache_read_input_tokens", 0)

    for path in routes:
        assert cached(path, "a" * 64) == 0
        assert cached(path, "b" * 64) == 0 and cached(path, None) == 0
        assert cached(path, "a" * 64) > 0, path
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "cache_salt": "x" * 129}
    refused = httpx.post(f"{sim.base_url}/v1/chat/completions", json=body, timeout=30)
    assert refused.status_code == 400 and "cache_salt" in refused.text
