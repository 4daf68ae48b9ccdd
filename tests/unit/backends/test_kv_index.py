"""The index of a backend's resident blocks (gateway/backends/kv_index.py), fed vLLM's KV events as the
simulator's prefix cache (dspark_sim/prefix_cache.py) makes them: what it predicts of a prompt is what
the cache serves, through stores, evictions, a reset, missed events and foreign extra keys."""

from __future__ import annotations

import random

from dspark_common import kv_events
from dspark_common.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch
from dspark_sim.prefix_cache import PrefixCache
from gateway.backends.kv_index import PromptBlocks, ResidentBlocks

BLOCK = 16


def cached(index: ResidentBlocks, prompt: list[int]) -> int:
    """The tokens of ``prompt`` the index predicts are cached."""
    return index.match(PromptBlocks(prompt)).cached_tokens


def batch(*events) -> KVEventBatch:
    return KVEventBatch(ts=0.0, events=list(events))


def test_the_prediction_is_what_the_cache_serves_through_stores_and_evictions() -> None:
    rng = random.Random(7)
    cache, index = PrefixCache(BLOCK, pool_blocks=40), ResidentBlocks(BLOCK, 1000, "events")
    stems = [[rng.randrange(1000, 2000) for _ in range(BLOCK * 6)] for _ in range(4)]
    for _ in range(200):
        prompt = rng.choice(stems)[: rng.randrange(1, BLOCK * 6)] + [rng.randrange(5)] * rng.randrange(40)
        predicted = cached(index, prompt)
        assert predicted == cache.lookup(prompt), prompt
        index.apply(batch(*cache.store(prompt, held_tokens=rng.randrange(0, BLOCK * 30))))
    assert index.block_size == BLOCK and len(index) == len(cache) and index.orphans == 0


def test_a_reset_a_removal_and_a_missed_parent() -> None:
    cache, index = PrefixCache(BLOCK, pool_blocks=100), ResidentBlocks(BLOCK, 1000, "events")
    prompt = list(range(1000, 1000 + 4 * BLOCK)) + [1]
    [stored] = cache.store(prompt, 0)
    index.apply(batch(stored))
    assert cached(index, prompt) == 4 * BLOCK
    index.apply(batch(BlockRemoved(block_hashes=[stored.block_hashes[2]], medium="GPU")))
    assert cached(index, prompt) == 2 * BLOCK
    index.apply(batch(AllBlocksCleared()))
    assert len(index) == 0 and cached(index, prompt) == 0
    orphan = BlockStored(
        block_hashes=[b"child"], parent_block_hash=b"unknown", token_ids=[1] * BLOCK,
        block_size=BLOCK, lora_id=None, medium="GPU", lora_name=None,
    )  # fmt: skip
    index.apply(batch(orphan))
    assert index.orphans == 1 and len(index) == 0


def test_blocks_of_a_salt_another_medium_or_a_wrong_shape_match_no_plain_prompt() -> None:
    index = ResidentBlocks(BLOCK, 1000, "events")
    tokens = list(range(2 * BLOCK))

    def stored(name: bytes, **fields) -> BlockStored:
        base = {"block_hashes": [name + b"1", name + b"2"], "parent_block_hash": None, "token_ids": tokens,
                "block_size": BLOCK, "lora_id": None, "medium": "GPU", "lora_name": None}  # fmt: skip
        return BlockStored(**{**base, **fields})

    index.apply(
        batch(
            stored(b"salted", extra_keys=[("s",), ("s",)]),
            stored(b"cpu", medium="CPU"),
            stored(b"short", token_ids=tokens[:-1]),
        )
    )
    assert cached(index, tokens + [0]) == 0 and len(index) == 2  # the salted blocks only


def test_memory_is_bounded_and_the_estimate_remembers_least_recently_used_first() -> None:
    index = ResidentBlocks(BLOCK, max_blocks=3, source="estimate")
    old, new = [5] * (2 * BLOCK) + [0], [6] * (2 * BLOCK) + [0]
    index.remember(PromptBlocks(old))
    index.remember(PromptBlocks(new))
    assert len(index) == 3 and cached(index, new) == 2 * BLOCK
    assert cached(index, old) == BLOCK  # its last block went first, as vLLM frees them: its first serves


def test_events_that_are_not_vllms_change_nothing() -> None:
    index = ResidentBlocks(BLOCK, 10, "events")
    tokens = [1] * BLOCK

    def stored(name: object, ids: list[int], size: int = BLOCK, hashes: list | None = None) -> BlockStored:
        return BlockStored(
            block_hashes=[name] if hashes is None else hashes, parent_block_hash=None, token_ids=ids,
            block_size=size, lora_id=None, medium="GPU", lora_name=None,
        )  # fmt: skip

    assert index.apply(batch(stored(b"a", tokens))) == {}
    ignored = index.apply(
        batch(
            stored(b"x", [], size=10**9, hashes=[]),
            stored(b"y", [-1] + tokens[1:]),
            stored(b"w", tokens[1:] + [2**32]),
            stored(b"z", [], hashes=[]),
        )
    )
    assert ignored == {"block_size": 1, "malformed": 3}
    assert index.block_size == BLOCK and len(index) == 1 and cached(index, tokens + [0]) == BLOCK
    # a block of one token (another size than the configured one) changes nothing, the size included
    assert index.apply(batch(stored(b"one", [1], size=1), stored(b"two", [1, 1], size=2))) == {
        "block_size": 2
    }
    assert index.block_size == BLOCK and len(index) == 1 and cached(index, [1, 1, 1]) == 0
    for n in range(100):  # the same content under ever new hashes: the newest names it, nothing piles up
        index.apply(batch(stored(n, tokens)))
    index.apply(batch(BlockRemoved(block_hashes=[98], medium="GPU")))  # an older name: still resident
    assert cached(index, tokens + [0]) == BLOCK and len(index) == 1
    index.apply(batch(BlockRemoved(block_hashes=[99], medium="GPU")))
    assert cached(index, tokens + [0]) == 0


def test_a_prompts_blocks_are_computed_once_per_block_size() -> None:
    prompt = PromptBlocks(list(range(5 * BLOCK + 3)))
    keys = prompt.keys(BLOCK)
    assert len(keys) == 5 and prompt.keys(BLOCK) is keys  # match, then remember: one computation
    assert len(prompt.keys(2 * BLOCK)) == 2 and prompt.keys(2 * BLOCK)[0] != keys[1]
    index = ResidentBlocks(BLOCK, 100, "estimate")
    index.remember(prompt)
    assert index.match(prompt).cached_tokens == 5 * BLOCK


def test_salted_prompts_are_predicted_as_the_cache_serves_them_and_share_only_with_their_salt() -> None:
    """vLLM salts a prompt's first block only (its extra keys, ``(salt,)`` in its KV event); the index
    keys a salted prompt's first block the same, through the events' msgpack wire (a list, not a tuple)."""
    rng = random.Random(11)
    cache, index = PrefixCache(BLOCK, pool_blocks=60), ResidentBlocks(BLOCK, 1000, "events")
    stems = [[rng.randrange(1000, 2000) for _ in range(BLOCK * 5)] for _ in range(3)]
    salts = ["a" * 64, "b" * 64, None]
    for _ in range(200):
        salt = rng.choice(salts)
        prompt = rng.choice(stems)[: rng.randrange(1, BLOCK * 5)] + [rng.randrange(5)] * rng.randrange(30)
        predicted = index.match(PromptBlocks(prompt, salt)).cached_tokens
        assert predicted == cache.lookup(prompt, salt=salt), (prompt, salt)
        events = cache.store(prompt, held_tokens=rng.randrange(0, BLOCK * 20), salt=salt)
        index.apply(kv_events.decode(kv_events.encode(batch(*events))))
    assert len(index) == len(cache) and index.orphans == 0

    prompt = stems[0] + [1]
    [stored, *_] = PrefixCache(BLOCK, 100).store(prompt, 0, salt="a" * 64)
    assert isinstance(stored, BlockStored) and stored.extra_keys == [("a" * 64,)] + [None] * 4
    fresh = ResidentBlocks(BLOCK, 100, "events")
    fresh.apply(kv_events.decode(kv_events.encode(batch(stored))))
    assert fresh.match(PromptBlocks(prompt, "a" * 64)).cached_tokens == 5 * BLOCK
    assert fresh.match(PromptBlocks(prompt, "b" * 64)).cached_tokens == 0
    assert fresh.match(PromptBlocks(prompt)).cached_tokens == 0


def test_a_prediction_allows_for_the_blocks_admitted_requests_will_still_take() -> None:
    """A request sized while another runs: what that one still takes of the pool (its whole reservation
    less what it holds) evicts the least recently freed blocks no request uses, and its prompt's blocks
    will be resident: the prediction made at sizing is what the cache serves once it has ended."""
    rng = random.Random(11)
    pool = 40
    cache = PrefixCache(BLOCK, pool_blocks=pool)
    index = ResidentBlocks(BLOCK, 2 * pool, "events", pool * BLOCK)
    stems = [[rng.randrange(1000, 2000) for _ in range(BLOCK * 12)] for _ in range(4)]

    def prompt() -> list[int]:
        return rng.choice(stems)[: rng.randrange(1, BLOCK * 12)] + [rng.randrange(5)] * rng.randrange(40)

    def run(ids: list[int], owner: int, held_tokens: int) -> None:
        cache.lookup(ids, owner=owner)
        index.apply(batch(*cache.store(ids, held_tokens, owner=owner)))

    reservation_mattered = 0
    for _ in range(300):
        running, sized = prompt(), prompt()
        reserved = (-(-len(running) // BLOCK) + rng.randrange(0, 20)) * BLOCK  # prompt + output cap
        prefilled = rng.random() < 0.5
        if prefilled:
            run(running, 1, len(running))
        in_use = [PromptBlocks(running)]
        predicted = index.match(PromptBlocks(sized), reserved, in_use).cached_tokens
        reservation_mattered += index.match(PromptBlocks(sized), 0, in_use).cached_tokens != predicted
        if not prefilled:
            run(running, 1, len(running))
        index.apply(batch(*cache.trim(reserved)))  # its decode takes the rest of its reservation
        cache.release(1)
        index.touch(PromptBlocks(running))
        assert cache.lookup(sized) == predicted, (len(running), reserved, len(sized))
        run(sized, 2, len(sized))
        cache.release(2)
        index.touch(PromptBlocks(sized))
    assert reservation_mattered > 30


def test_a_prompt_that_forgot_its_ids_keeps_its_keys_and_length() -> None:
    prompt = PromptBlocks(list(range(5 * BLOCK + 3)))
    keys = list(prompt.keys(BLOCK))
    prompt.forget_ids()
    assert prompt.token_ids is None and len(prompt) == 5 * BLOCK + 3
    assert prompt.keys(BLOCK) == keys and len(keys) == 5
    assert prompt.keys(2 * BLOCK) == []  # a size keyed after: no blocks known, so no hit
    index = ResidentBlocks(BLOCK, 100, "estimate")
    index.remember(prompt)
    assert cached(index, list(range(5 * BLOCK + 3))) == 5 * BLOCK
