"""The simulated engine's prefix cache with several KV cache groups, as vLLM's hybrid KV cache manager
keeps one for DeepSeek-V4 (``SimConfig.kv_cache_layout = "deepseek_v4"``; docs/prefix-cache.md has
the vLLM sources).

Each group (:class:`GroupSpec`) keys its own blocks of its own ``block_size`` (SHA-256 chained as in
:mod:`dspark_sim.prefix_cache`), and publishes its own events: ``group_idx`` on every event, the
group's ``kv_cache_spec_kind`` and ``kv_cache_spec_sliding_window`` on its stores (vLLM 0.32
``KVCacheManager.take_events``). A prompt's hit is vLLM's ``HybridKVCacheCoordinator.
find_longest_cache_hit``: starting from ``len - 1`` tokens rounded down to the scheduler block size
(the lcm of the groups' block sizes), each group cuts the candidate until none does — a full-attention
group to its resident run from the start, a sliding-window group to the end of the rightmost aligned
run of ``ceil((window - 1) / block_size)`` resident blocks below the candidate
(``SlidingWindowManager.find_longest_cache_hit``), else its resident run from the start.

Residency: a sliding-window group frees the blocks that fall out of the window while a prompt is
computed (``SlidingWindowManager.remove_skipped_blocks``), so of a stored prompt only the blocks of
its last window stay pinned; the freed ones are evictable at once. Every group keeps at most the
pool's tokens, less what running sequences hold (the simulator's simplification of vLLM's one pool
of pages shared by all groups); past that each evicts its least recently used unpinned blocks — a
removal in one group of the tokens another still holds. Unlike vLLM, a sliding-window group stores
every block it computes: vLLM's ``SlidingWindowManager.reachable_block_mask`` keeps only those a hit
can end on (docs/prefix-cache.md).
Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from dspark_common.kv_events import AllBlocksCleared, BlockHash, BlockRemoved, KVCacheEvent

from .prefix_cache import MEDIUM, chained_hashes, stored
from .tokens import PromptIds


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """One KV cache group: vLLM's ``get_kv_cache_spec_kind`` value, tokens per block, and its sliding
    window in tokens (None: full attention)."""

    kind: str
    block_size: int
    window: int | None = None


def deepseek_v4_groups(block_size: int) -> tuple[GroupSpec, ...]:
    """DeepSeek-V4's groups in vLLM 0.32 (``vllm/models/deepseek_v4``): the compressed MLA caches of
    the ratio-4 and ratio-128 layers and the indexer's cache (``MLAAttentionSpec`` of ``--block-size``
    tokens, ``get_kv_cache_spec`` of ``DeepseekV4MLAAttention`` and ``DeepseekV4IndexerCache``), the
    sliding-window cache every layer keeps (``DeepseekV4SWACache``: ``SlidingWindowMLASpec``, blocks
    of 64, the model's window of 128), and the compressors' state (``CompressorStateCache``: blocks of
    4 with a window of 8 for ratio 4, blocks of 8 with a window of 128 for ratio 128)."""
    mla = GroupSpec("mla_attention", block_size)
    return (
        mla,
        mla,
        mla,
        GroupSpec("sliding_window_mla", 64, 128),
        GroupSpec("sliding_window_mla", 4, 8),
        GroupSpec("sliding_window_mla", 8, 128),
    )


class _Blocks:
    """One group's resident block hashes, least recently used first, and their pins."""

    def __init__(self, spec: GroupSpec) -> None:
        self.spec = spec
        self.resident: dict[BlockHash, None] = {}
        self.pins: Counter[BlockHash] = Counter()
        self.owned: dict[int, list[BlockHash]] = {}

    def hashes(self, ids: PromptIds, salt: str | None) -> list[BlockHash]:
        return chained_hashes(ids, self.spec.block_size, salt)

    def cut(self, hashes: list[BlockHash], length: int, align: int) -> int:
        """The longest hit of at most ``length`` tokens this group allows."""
        size = self.spec.block_size
        top = length // size
        if self.spec.window is None:
            run = next((i for i, h in enumerate(hashes[:top]) if h not in self.resident), top)
            return run * size // align * align
        need = math.ceil((self.spec.window - 1) / size)
        run = 0
        for i in reversed(range(top)):
            if hashes[i] not in self.resident:
                run = 0
            elif run or (i + 1) * size % align == 0:
                run += 1
                if run >= need:
                    return (i + run) * size
        return run * size // align * align

    def pin(self, owner: int, hashes: list[BlockHash]) -> None:
        self.unpin(owner)
        self.owned[owner] = hashes
        self.pins.update(hashes)

    def unpin(self, owner: int) -> None:
        for block_hash in self.owned.pop(owner, []):
            self.pins[block_hash] -= 1
            if self.pins[block_hash] <= 0:
                del self.pins[block_hash]

    def touch(self, hashes: list[BlockHash]) -> None:
        for block_hash in reversed(hashes):
            self.resident.pop(block_hash, None)
            self.resident[block_hash] = None

    def pinned_tokens(self) -> int:
        return len(self.pins) * self.spec.block_size


class HybridPrefixCache:
    """Resident blocks of ``groups``, each holding at most ``pool_blocks`` blocks of ``block_size``
    tokens' worth; the interface of :class:`dspark_sim.prefix_cache.PrefixCache`."""

    def __init__(self, block_size: int, pool_blocks: int, groups: tuple[GroupSpec, ...]) -> None:
        self.block_size = math.lcm(*(group.block_size for group in groups))
        self.pool_tokens = pool_blocks * block_size
        self._groups = [_Blocks(spec) for spec in groups]
        self._hits: dict[int, int] = {}  # owner -> its prompt's hit, from its lookup

    def __len__(self) -> int:
        return sum(len(group.resident) for group in self._groups)

    def lookup(self, ids: PromptIds, owner: int | None = None, salt: str | None = None) -> int:
        """Tokens of a prompt of ``ids`` served from the cache, as vLLM's hybrid coordinator decides
        (the hit blocks touched, and pinned to ``owner``)."""
        align = self.block_size
        hashes = [group.hashes(ids, salt) for group in self._groups]
        hit = max(0, (len(ids) - 1) // align * align)
        while True:
            length = hit
            for group, group_hashes in zip(self._groups, hashes, strict=True):
                length = min(length, group.cut(group_hashes, length, align))
            if length >= hit:
                break
            hit = length
        for group, group_hashes in zip(self._groups, hashes, strict=True):
            used = self._kept(group, group_hashes[: hit // group.spec.block_size], hit)
            group.touch(used)
            if owner is not None:
                group.pin(owner, used)
        if owner is not None:
            self._hits[owner] = hit
        return hit

    @staticmethod
    def _kept(group: _Blocks, hashes: list[BlockHash], computed: int) -> list[BlockHash]:
        """Of a prompt's blocks, those a running sequence keeps after ``computed`` tokens: all for
        full attention, the window's for a sliding window (vLLM ``get_num_skipped_tokens``)."""
        if group.spec.window is None:
            return hashes
        skipped = max(0, computed - group.spec.window + 1) // group.spec.block_size
        return hashes[skipped:]

    def release(self, owner: int) -> None:
        """``owner`` stopped running: its blocks are free to evict."""
        for group in self._groups:
            group.unpin(owner)

    def store(
        self, ids: PromptIds, held_tokens: int, owner: int | None = None, salt: str | None = None
    ) -> list[KVCacheEvent]:
        """A prefill of ``ids`` finished: each group's full blocks are resident (a sliding window's
        skipped ones unpinned, used before the rest), then :meth:`trim`. The events, in order."""
        events: list[KVCacheEvent] = []
        hit = self._hits.pop(owner, 0) if owner is not None else 0
        for idx, group in enumerate(self._groups):
            hashes, size = group.hashes(ids, salt), group.spec.block_size
            # a window's blocks behind the hit were never computed (vLLM hands the request null blocks
            # there, and cache_full_blocks skips them): only the full groups hold the hit's whole run
            null = hit // size - len(self._kept(group, hashes[: hit // size], hit))
            new = [i for i, h in enumerate(hashes) if h not in group.resident and i >= null]
            kept = self._kept(group, hashes, len(ids))
            skipped = hashes[: len(hashes) - len(kept)]
            group.touch(skipped[null:])  # freed as the window passed them, before the rest
            group.touch(kept)
            if new:
                events.append(
                    stored(
                        hashes,
                        new[0],
                        ids,
                        size,
                        salt,
                        group_idx=idx,
                        kv_cache_spec_kind=group.spec.kind,
                        kv_cache_spec_sliding_window=group.spec.window,
                    )
                )
            if owner is not None:
                group.pin(owner, kept)
        return events + self.trim(held_tokens)

    def trim(self, held_tokens: int) -> list[KVCacheEvent]:
        """Each group evicts its least recently used unpinned blocks past the pool's tokens less what
        running sequences hold beyond their pinned blocks; one removal per group that evicted."""
        events: list[KVCacheEvent] = []
        for idx, group in enumerate(self._groups):
            size = group.spec.block_size
            room = self.pool_tokens - max(0, held_tokens - group.pinned_tokens())
            excess = len(group.resident) - max(0, room) // size
            if excess <= 0:
                continue
            gone = [h for h in group.resident if h not in group.pins][:excess]
            for block_hash in gone:
                del group.resident[block_hash]
            if gone:
                events.append(BlockRemoved(block_hashes=gone, medium=MEDIUM, group_idx=idx))
        return events

    def clear(self) -> list[KVCacheEvent]:
        """Forget every block (vLLM's ``/reset_prefix_cache``)."""
        for group in self._groups:
            group.resident.clear()
        return [AllBlocksCleared()]
