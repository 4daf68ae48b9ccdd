"""The simulated engine's prefix cache, as vLLM V1 keeps one (``--enable-prefix-caching``).

A prompt's full blocks of ``block_size`` ids are each keyed by a hash chained from the previous
block's (SHA-256 over the parent's hash and the block's ids, vLLM's default algorithm in shape);
a request reuses the longest resident run of its blocks from the start, but computes at least its
last token (vLLM V1 ``KVCacheManager.get_computed_blocks``), so at most ``len - 1`` tokens are hits.
Blocks a prefill computed become resident, the most recently used; the pool holds
``pool_blocks`` blocks in all, and what running sequences hold is not free to cache: past that, the
least recently used resident blocks are evicted (vLLM's free-block queue, evicting from its head).

Only prompt blocks are cached: vLLM caches generated blocks too, but a next turn re-tokenises the
answer's text through the chat template, which seldom gives the generated ids back.

Every change is returned as vLLM's KV events (:mod:`dspark_common.kv_events`) for the publisher.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

from dspark_common.kv_events import AllBlocksCleared, BlockHash, BlockRemoved, BlockStored, KVCacheEvent

#: vLLM's medium for blocks in device memory.
MEDIUM = "GPU"


class PrefixCache:
    """Resident blocks of one pool of ``pool_blocks`` blocks of ``block_size`` tokens."""

    def __init__(self, block_size: int, pool_blocks: int) -> None:
        self.block_size = block_size
        self.pool_blocks = pool_blocks
        self._resident: dict[BlockHash, None] = {}  # block hashes, least recently used first

    def __len__(self) -> int:
        return len(self._resident)

    def _hashes(self, ids: Sequence[int]) -> list[BlockHash]:
        size, hashes, parent = self.block_size, list[BlockHash](), b""
        for start in range(0, len(ids) - size + 1, size):
            parent = hashlib.sha256(parent + array("I", ids[start : start + size]).tobytes()).digest()
            hashes.append(parent)
        return hashes

    def lookup(self, ids: Sequence[int]) -> int:
        """Tokens of a prompt of ``ids`` served from the cache (touched: now the most recently used)."""
        usable = max(0, (len(ids) - 1) // self.block_size)
        hit = 0
        for block_hash in self._hashes(ids)[:usable]:
            if block_hash not in self._resident:
                break
            self._resident.pop(block_hash)
            self._resident[block_hash] = None
            hit += 1
        return hit * self.block_size

    def store(self, ids: Sequence[int], held_tokens: int) -> list[KVCacheEvent]:
        """A prefill of ``ids`` finished: its full blocks are resident; then :meth:`trim` to what
        ``held_tokens`` (running sequences' KV) leave free. The events, in order."""
        hashes = self._hashes(ids)
        events: list[KVCacheEvent] = []
        new = [i for i, block_hash in enumerate(hashes) if block_hash not in self._resident]
        for block_hash in hashes:
            self._resident.pop(block_hash, None)
            self._resident[block_hash] = None
        if new:
            first, size = new[0], self.block_size
            events.append(
                BlockStored(
                    block_hashes=hashes[first:],
                    parent_block_hash=hashes[first - 1] if first else None,
                    token_ids=list(ids[first * size : len(hashes) * size]),
                    block_size=size,
                    lora_id=None,
                    medium=MEDIUM,
                    lora_name=None,
                )
            )
        return events + self.trim(held_tokens)

    def trim(self, held_tokens: int) -> list[KVCacheEvent]:
        """Evict the least recently used blocks past what ``held_tokens`` of running sequences leave
        of the pool; the removal, if any."""
        room = max(0, self.pool_blocks - held_tokens // self.block_size)
        gone: list[BlockHash] = []
        while len(self._resident) > room:
            block_hash = next(iter(self._resident))
            del self._resident[block_hash]
            gone.append(block_hash)
        return [BlockRemoved(block_hashes=gone, medium=MEDIUM)] if gone else []

    def clear(self) -> list[KVCacheEvent]:
        """Forget every block (vLLM's ``/reset_prefix_cache``)."""
        self._resident.clear()
        return [AllBlocksCleared()]
