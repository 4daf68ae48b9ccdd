"""The simulated engine's prefix cache, as vLLM V1 keeps one (``--enable-prefix-caching``).

A prompt's full blocks of ``block_size`` ids are each keyed by a hash chained from the previous block's
(SHA-256 over the parent's hash and the block's ids, vLLM's default algorithm in shape); a request
reuses the longest resident run of its blocks from the start, but computes at least its last token (vLLM
V1 ``KVCacheManager.get_computed_blocks``), so at most ``len - 1`` tokens are hits. Blocks a prefill
computed become resident, the most recently used, a prompt's last block before its first: vLLM frees a
request's blocks in reverse order (``SingleTypeKVCacheManager.free``) "so that the tail blocks are
evicted first", and an eviction cuts a cached prefix short rather than losing all of it from its first
block. The pool holds ``pool_blocks`` blocks in all. A running sequence's cached blocks are pinned to it
(its ``owner`` id): they are its KV, counted once however many sequences share them, and never evicted
while it runs (vLLM frees a block to the free-block queue only when no request references it). What
running sequences hold beyond their pinned blocks (partial blocks, generated tokens, a prefill under
way) is not free to cache either: past the pool, the least recently used unpinned blocks are evicted
(vLLM's free-block queue, evicting from its head).

A request's ``cache_salt`` is an extra key of its prompt's first block only, as vLLM's
(``generate_block_hash_extra_keys`` in ``vllm/v1/core/kv_cache_utils.py``): the later blocks differ
through their chained parent, so prompts of different salts share no block. Its ``BlockStored``
carries the salt as vLLM's does (``to_event_extra_keys``: ``(salt,)`` for that block, None for the
rest).

Only prompt blocks are cached: vLLM caches generated blocks too, but a next turn re-tokenises the
answer's text through the chat template, which seldom gives the generated ids back.

Every change is returned as vLLM's KV events (:mod:`dspark_common.kv_events`) for the publisher.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from dspark_common.kv_events import AllBlocksCleared, BlockHash, BlockRemoved, BlockStored, KVCacheEvent

from .tokens import PromptIds

#: vLLM's medium for blocks in device memory.
MEDIUM = "GPU"


def stored(
    hashes: Sequence[BlockHash], first: int, ids: PromptIds, size: int, salt: str | None, **group: Any
) -> BlockStored:
    """The ``BlockStored`` vLLM publishes for a prompt's full blocks ``hashes`` (of ``size`` tokens of
    ``ids``) from the first one not resident, ``first``: the salt is the extra key of the prompt's first
    block only (vLLM ``generate_block_hash_extra_keys``); ``group``: the KV cache group's fields
    (``group_idx``, ``kv_cache_spec_kind``, ``kv_cache_spec_sliding_window``)."""
    return BlockStored(
        block_hashes=list(hashes[first:]),
        parent_block_hash=hashes[first - 1] if first else None,
        token_ids=np.asarray(ids[first * size : len(hashes) * size], dtype=np.uint32).tolist(),
        block_size=size,
        lora_id=None,
        medium=MEDIUM,
        lora_name=None,
        extra_keys=[(salt,)] + [None] * (len(hashes) - 1) if salt and not first else None,
        **group,
    )


def chained_hashes(ids: PromptIds, size: int, salt: str | None) -> list[BlockHash]:
    """The hashes of the full blocks of ``size`` of ``ids``: SHA-256 of the parent's hash, the block's
    ids (uint32) and, for the first block of a salted prompt, the salt."""
    data = np.ascontiguousarray(ids, dtype=np.uint32).data.cast("B")
    hashes, parent, step = list[BlockHash](), b"", 4 * size
    for start in range(0, len(data) - step + 1, step):
        h = hashlib.sha256(parent)
        h.update(data[start : start + step])
        if start == 0 and salt:
            h.update(b"\0salt\0" + salt.encode())
        parent = h.digest()
        hashes.append(parent)
    return hashes


def in_steps(events: list[KVCacheEvent], step_tokens: int) -> list[list[KVCacheEvent]]:
    """``events`` in batches as vLLM publishes a chunked prefill's, a step's at a time: a
    ``BlockStored`` of more than ``step_tokens`` tokens cut into stores of that many (whole blocks, one
    at least), each in a batch of its own; the other events in the batch of the store before them."""
    batches: list[list[KVCacheEvent]] = [[]]
    for event in events:
        if not isinstance(event, BlockStored) or len(event.token_ids) <= step_tokens:
            batches[-1].append(event)
            continue
        per = max(1, step_tokens // event.block_size)
        parent, extras = event.parent_block_hash, event.extra_keys
        for i in range(0, len(event.block_hashes), per):
            piece = event.block_hashes[i : i + per]
            batches.append([
                msgspec.structs.replace(
                    event,
                    block_hashes=piece,
                    parent_block_hash=parent,
                    token_ids=event.token_ids[i * event.block_size : (i + len(piece)) * event.block_size],
                    extra_keys=None if extras is None else extras[i : i + per],
                )
            ])  # fmt: skip
            parent = piece[-1]
    return [batch for batch in batches if batch]


class PrefixCache:
    """Resident blocks of one pool of ``pool_blocks`` blocks of ``block_size`` tokens."""

    def __init__(self, block_size: int, pool_blocks: int) -> None:
        self.block_size = block_size
        self.pool_blocks = pool_blocks
        self._resident: dict[BlockHash, None] = {}  # block hashes, least recently used first
        self._pins: Counter[BlockHash] = Counter()  # running sequences using each block
        self._owned: dict[int, list[BlockHash]] = {}  # owner -> the blocks it pins
        self._pinned_tokens = 0  # sum over owners of their pinned blocks' tokens

    def __len__(self) -> int:
        return len(self._resident)

    def _hashes(self, ids: PromptIds, salt: str | None) -> list[BlockHash]:
        return chained_hashes(ids, self.block_size, salt)

    def lookup(self, ids: PromptIds, owner: int | None = None, salt: str | None = None) -> int:
        """Tokens of a prompt of ``ids`` (sent with ``cache_salt`` ``salt``) served from the cache
        (touched: now the most recently used; pinned to ``owner``, a sequence about to run on them)."""
        usable = max(0, (len(ids) - 1) // self.block_size)
        hits: list[BlockHash] = []
        for block_hash in self._hashes(ids, salt)[:usable]:
            if block_hash not in self._resident:
                break
            hits.append(block_hash)
        self._touch(hits)
        if owner is not None:
            self._pin(owner, hits)
        return len(hits) * self.block_size

    def _touch(self, hashes: list[BlockHash]) -> None:
        """Make ``hashes``, a prompt's blocks in order, the most recently used, tail first."""
        for block_hash in reversed(hashes):
            self._resident.pop(block_hash, None)
            self._resident[block_hash] = None

    def _pin(self, owner: int, hashes: list[BlockHash]) -> None:
        self.release(owner)
        self._owned[owner] = hashes
        self._pins.update(hashes)
        self._pinned_tokens += len(hashes) * self.block_size

    def release(self, owner: int) -> None:
        """``owner`` stopped running (finished, aborted or preempted): its blocks are free to evict."""
        hashes = self._owned.pop(owner, [])
        self._pins.subtract(hashes)
        self._pinned_tokens -= len(hashes) * self.block_size
        for block_hash in hashes:
            if self._pins[block_hash] <= 0:
                del self._pins[block_hash]

    def store(
        self, ids: PromptIds, held_tokens: int, owner: int | None = None, salt: str | None = None
    ) -> list[KVCacheEvent]:
        """A prefill of ``ids`` (sent with ``cache_salt`` ``salt``) finished: its full blocks are
        resident (pinned to ``owner``, the sequence now decoding on them); then :meth:`trim` to what
        running sequences' KV, ``held_tokens`` in all, leave free. The events, in order."""
        hashes = self._hashes(ids, salt)
        events: list[KVCacheEvent] = []
        new = [i for i, block_hash in enumerate(hashes) if block_hash not in self._resident]
        self._touch(hashes)
        if new:
            events.append(stored(hashes, new[0], ids, self.block_size, salt))
        if owner is not None:
            self._pin(owner, hashes)
        return events + self.trim(held_tokens)

    def trim(self, held_tokens: int) -> list[KVCacheEvent]:
        """Evict the least recently used unpinned blocks past what ``held_tokens`` of running
        sequences (their pinned blocks among them, the rest in whole blocks: vLLM allocates no less)
        leave of the pool; the removal, if any."""
        outside = -(-max(0, held_tokens - self._pinned_tokens) // self.block_size)  # a part block is one
        excess = len(self._resident) - max(0, self.pool_blocks - outside)
        if excess <= 0:
            return []
        free = (block_hash for block_hash in self._resident if block_hash not in self._pins)
        gone = list(itertools.islice(free, excess))
        for block_hash in gone:
            del self._resident[block_hash]
        return [BlockRemoved(block_hashes=gone, medium=MEDIUM)] if gone else []

    def clear(self) -> list[KVCacheEvent]:
        """Forget every block (vLLM's ``/reset_prefix_cache``)."""
        self._resident.clear()
        return [AllBlocksCleared()]
