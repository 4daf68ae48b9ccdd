"""The index on DeepSeek-V4's KV cache groups (gateway/backends/kv_index.py), fed the events of the
simulator's hybrid prefix cache (dspark_sim/hybrid_cache.py) through vLLM's wire in both encodings:
what it predicts of each prompt is what the cache serves, through a conversation, evictions and the
sliding-window groups' removals; a group of a kind it does not know makes it answer nothing."""

from __future__ import annotations

import random

from dspark_common import kv_events
from dspark_common.kv_events import BlockRemoved, BlockStored, KVEventBatch
from dspark_sim.hybrid_cache import HybridPrefixCache, deepseek_v4_groups
from gateway.backends.kv_index import PromptBlocks, ResidentBlocks

BLOCK = 256
GROUPS = deepseek_v4_groups(BLOCK)
WINDOWED = {i for i, group in enumerate(GROUPS) if group.window is not None}


def feed(index: ResidentBlocks, events: list, arrays: bool = False) -> None:
    """``events`` to ``index`` as vLLM sends them: encoded, then decoded as the gateway does."""
    if events:
        payload = kv_events.encode(KVEventBatch(ts=0.0, events=events), arrays=arrays)
        assert not index.apply(kv_events.decode(payload))


def predicted(index: ResidentBlocks, prompt: list[int]) -> int:
    match = index.match(PromptBlocks(prompt))
    assert match is not None
    return match.cached_tokens


def test_a_conversation_with_an_eviction_is_predicted_exactly_in_both_encodings() -> None:
    rng = random.Random(3)
    for arrays in (False, True):
        cache = HybridPrefixCache(BLOCK, pool_blocks=40, groups=GROUPS)
        index = ResidentBlocks(BLOCK, 10_000, "events")
        conversation = [rng.randrange(1000, 2000) for _ in range(3 * BLOCK + 17)]
        removed_windowed = removed_full = hits = 0
        for turn in range(8):
            expected = cache.lookup(conversation, owner=1)  # the request about to run on its hit
            assert predicted(index, conversation) == expected, turn
            hits += expected > 0
            events = cache.store(conversation, held_tokens=0, owner=1)
            cache.release(1)
            if turn == 4:  # another long prompt runs: the pool evicts
                other = [rng.randrange(3000, 4000) for _ in range(30 * BLOCK)]
                assert predicted(index, other) == cache.lookup(other) == 0
                events += cache.store(other, held_tokens=6 * BLOCK)
            for event in events:
                if isinstance(event, BlockRemoved):
                    windowed = event.group_idx in WINDOWED
                    removed_windowed += windowed
                    removed_full += not windowed
            feed(index, events, arrays)
            conversation += [rng.randrange(5) for _ in range(rng.randrange(40, 500))]
        assert hits >= 4 and removed_windowed and removed_full, (
            "hits, and an eviction in groups of both kinds"
        )
        assert index.orphans == 0 and not index.unknown_groups
        assert sorted({g["kind"] for g in index.groups()}) == ["mla_attention", "sliding_window_mla"]


def test_no_removal_in_a_sliding_window_group_turns_a_hit_into_a_miss_or_a_miss_into_a_hit() -> None:
    rng = random.Random(11)
    cache, index = (
        HybridPrefixCache(BLOCK, pool_blocks=60, groups=GROUPS),
        ResidentBlocks(BLOCK, 10_000, "events"),
    )
    stems = [[rng.randrange(1000, 2000) for _ in range(BLOCK * 6)] for _ in range(4)]
    windowed_removals = 0
    for _ in range(120):
        prompt = rng.choice(stems)[: rng.randrange(1, BLOCK * 6)] + [rng.randrange(5)] * rng.randrange(300)
        assert predicted(index, prompt) == cache.lookup(prompt, owner=1), len(prompt)
        events = cache.store(prompt, held_tokens=rng.randrange(0, BLOCK * 50), owner=1)
        cache.release(1)
        feed(index, events)
        if any(isinstance(e, BlockRemoved) and e.group_idx in WINDOWED for e in events):
            windowed_removals += 1
            for stem in stems:  # after the windows' removals, every stem still as the cache serves it
                probe = stem[: rng.randrange(BLOCK, len(stem))] + [9]
                assert predicted(index, probe) == cache.lookup(probe)
    assert windowed_removals > 10


def test_a_windowed_groups_removal_of_a_block_behind_the_window_changes_no_hit() -> None:
    cache, index = (
        HybridPrefixCache(BLOCK, pool_blocks=100, groups=GROUPS),
        ResidentBlocks(BLOCK, 10_000, "events"),
    )
    prompt = list(range(1000, 1000 + 8 * BLOCK)) + [1]
    stored = cache.store(prompt, held_tokens=0)
    feed(index, stored)
    assert predicted(index, prompt) == 8 * BLOCK
    swa = next(e for e in stored if isinstance(e, BlockStored) and e.block_size == 64)
    first_blocks = BlockRemoved(block_hashes=swa.block_hashes[:4], medium="GPU", group_idx=swa.group_idx)
    feed(index, [first_blocks])  # the window of 128 ends at the hit: the first 256 tokens' are not needed
    assert predicted(index, prompt) == 8 * BLOCK
    last = BlockRemoved(block_hashes=swa.block_hashes[-1:], medium="GPU", group_idx=swa.group_idx)
    feed(index, [last])  # a block the hit's window needs: the hit ends a block of 256 earlier
    assert predicted(index, prompt) == 7 * BLOCK
    assert predicted(index, prompt[: 4 * BLOCK] + [2]) == 4 * BLOCK  # the full groups still hold it


def test_a_group_of_a_kind_the_index_does_not_know_makes_it_answer_nothing() -> None:
    index = ResidentBlocks(BLOCK, 1000, "events")
    tokens = list(range(2 * BLOCK))

    def stored(group_idx: int, kind: str | None) -> BlockStored:
        return BlockStored(
            block_hashes=[group_idx * 10 + 1, group_idx * 10 + 2], parent_block_hash=None, token_ids=tokens,
            block_size=BLOCK, lora_id=None, medium="GPU", lora_name=None, group_idx=group_idx,
            kv_cache_spec_kind=kind,
        )  # fmt: skip

    feed(index, [stored(0, "mla_attention")])
    assert predicted(index, tokens + [0]) == 2 * BLOCK
    feed(
        index,
        [stored(1, "mamba"), stored(2, None), BlockRemoved(block_hashes=[11], medium="GPU", group_idx=1)],
    )
    assert index.match(PromptBlocks(tokens + [0])) is None
    assert index.unknown_groups == {1: "mamba", 2: "none"} and index.unknown_events == 3


def test_a_windowed_groups_masked_store_makes_it_answer_nothing() -> None:
    """vLLM stores only the window's blocks a hit can end on (``reachable_block_mask``) but sends the
    tokens of every block computed: which blocks its hashes name is not in the event."""
    index = ResidentBlocks(BLOCK, 1000, "events")
    tokens = list(range(4 * 64))
    masked = BlockStored(
        block_hashes=[3, 4], parent_block_hash=None, token_ids=tokens, block_size=64, lora_id=None,
        medium="GPU", lora_name=None, group_idx=3, kv_cache_spec_kind="sliding_window_mla",
        kv_cache_spec_sliding_window=128,
    )  # fmt: skip
    feed(index, [masked])
    assert index.match(PromptBlocks(tokens + [0])) is None
    assert index.unknown_groups == {3: "sliding_window_mla (masked stores)"} and index.unknown_events == 1
