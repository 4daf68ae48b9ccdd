"""Which prompt prefixes a backend's KV pool holds: an index of its resident blocks, kept from its KV
cache events (:mod:`dspark_common.kv_events`) or, where it publishes none, estimated from what the
gateway sent it.

vLLM's prefix cache (``--enable-prefix-caching``) keeps full blocks of ``block_size`` tokens, each
keyed by a hash chained from its parent's; a request reuses the longest run of its prompt's full
blocks that is resident, except that at least its last token is computed (vLLM V1
``KVCacheManager.get_computed_blocks``: at most ``prompt - 1`` tokens are hits). The index keys each
block by its own chained digest of the token ids (BLAKE2b-128 over the parent's digest and the
block's ids), not by vLLM's hash, whose function and seed are the backend's (``--prefix-caching-hash-algo``,
``PYTHONHASHSEED``): a ``BlockStored`` names vLLM's hashes and carries the tokens, so both are learnt,
and a ``BlockRemoved`` is translated back. A block stored with ``extra_keys`` (LoRA, media,
``cache_salt``) gets a digest no plain prompt has, and so do its children.

Salted prompts (:mod:`gateway.auth.cache_salt`): vLLM adds a request's ``cache_salt`` to the extra
keys of its prompt's *first* block only (vLLM 0.32 ``vllm/v1/core/kv_cache_utils.py``,
``generate_block_hash_extra_keys``: ``[("cache_salt", request.cache_salt)] if (start_token_idx == 0
and request.cache_salt) else []``); every later block differs through its chained parent. Its KV
events carry the extra keys untagged, one entry per stored block (``to_event_extra_keys``: ``(salt,)``
for that first block, None for the rest, a msgpack array decoded as a list). A
:class:`PromptBlocks` of a salted prompt keys its first block with that same extra key, so what the
index predicts of it is what vLLM reports; extra keys are digested as msgpack, where a tuple and a
list are one array.

Only the first KV cache group (``group_idx`` 0 or none) on the GPU medium is indexed: a prefix is a
hit only where every group holds it, and the first group stands for them. The block size is the
configured one (vLLM ``--block-size``): a ``BlockStored`` of another size, or not of the shape vLLM
sends, changes nothing and is counted (:meth:`ResidentBlocks.apply` returns the counts). Memory is bounded by
``max_blocks`` (the pool's blocks, plus slack for missed removals): past it, the block least
recently stored goes first.

The estimate (:meth:`ResidentBlocks.remember`): the prompt blocks of every request sent, least
recently used evicted past the pool's size in blocks — what vLLM's free-block LRU does when nothing
else holds blocks. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec

from dspark_common.kv_events import AllBlocksCleared, BlockHash, BlockRemoved, BlockStored, KVEventBatch

#: The digest of no parent (the first block of a prompt).
ROOT = b""
#: Mediums whose blocks a request can be served from at once.
DEVICE_MEDIUMS = (None, "GPU")

_EXTRA = msgspec.msgpack.Encoder()


def _digest(parent: bytes, tokens: Sequence[int], extra: object = None) -> bytes:
    """A block's content key: BLAKE2b-128 of its parent's key, its token ids (uint32) and any extra key
    (as msgpack: an event's decoded list and a tuple of the same items are the same key)."""
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(array("I", tokens).tobytes())
    if extra is not None:
        h.update(_EXTRA.encode(extra))
    return h.digest()


class PromptBlocks:
    """A prompt's ``token_ids`` and the content keys of its full blocks, computed once per block size:
    admission matches them and the estimate remembers them once sent (a 1M-token prompt's keys take
    tens of ms to compute, on the event loop). ``cache_salt``: the salt the request is sent with (None:
    unsalted), an extra key of its first block as vLLM's (see the module doc)."""

    __slots__ = ("token_ids", "_first_extra", "_keys")

    def __init__(self, token_ids: Sequence[int], cache_salt: str | None = None) -> None:
        self.token_ids = token_ids
        self._first_extra = (cache_salt,) if cache_salt else None
        self._keys: dict[int, list[bytes]] = {}

    def __len__(self) -> int:
        return len(self.token_ids)

    def keys(self, block_size: int) -> list[bytes]:
        """The content keys of the full blocks of ``block_size`` tokens, in order."""
        keys = self._keys.get(block_size)
        if keys is None:
            keys, parent, ids, extra = [], ROOT, self.token_ids, self._first_extra
            for start in range(0, len(ids) - block_size + 1, block_size):
                parent = _digest(parent, ids[start : start + block_size], extra)
                extra = None
                keys.append(parent)
            self._keys[block_size] = keys
        return keys


@dataclass(frozen=True, slots=True)
class Match:
    """What the index holds of a prompt: ``cached_tokens`` of it, ``blocks`` of ``block_size``."""

    cached_tokens: int
    blocks: int
    block_size: int


class ResidentBlocks:
    """The resident blocks of one backend's KV pool.

    Args:
        block_size: tokens per block (vLLM ``--block-size``); events of another size are ignored.
        max_blocks: most blocks kept; the least recently stored go first past it.
        source: ``events`` (fed :meth:`apply`) or ``estimate`` (fed :meth:`remember`).
    """

    def __init__(self, block_size: int, max_blocks: int, source: Literal["events", "estimate"]) -> None:
        self.block_size = block_size
        self.max_blocks = max_blocks
        self.source = source
        self._blocks: dict[bytes, None] = {}  # content keys, least recently stored first
        self._by_hash: dict[BlockHash, bytes] = {}  # vLLM's hash -> content key
        self._hash_of: dict[bytes, BlockHash] = {}
        self.orphans = 0
        """Stored blocks whose parent the index did not know (events missed): not indexed."""

    def __len__(self) -> int:
        return len(self._blocks)

    @property
    def resident_tokens(self) -> int:
        return len(self._blocks) * self.block_size

    def apply(self, batch: KVEventBatch) -> Counter[str]:
        """Take in one batch of events, in order; the events ignored, by reason: ``block_size`` (a
        ``BlockStored`` of another block size), ``malformed`` (one not of vLLM's shape)."""
        ignored: Counter[str] = Counter()
        for event in batch.events:
            if isinstance(event, BlockStored):
                reason = self._stored(event)
                if reason is not None:
                    ignored[reason] += 1
            elif isinstance(event, BlockRemoved):
                if event.medium in DEVICE_MEDIUMS and event.group_idx in (None, 0):
                    for block_hash in event.block_hashes:
                        self._forget(self._by_hash.get(block_hash))
            elif isinstance(event, AllBlocksCleared):
                self.clear()
        return ignored

    def clear(self) -> None:
        """Forget every block."""
        self._blocks.clear()
        self._by_hash.clear()
        self._hash_of.clear()

    def _stored(self, event: BlockStored) -> str | None:
        """Index ``event``'s blocks; the reason it is ignored, if it is."""
        if event.medium not in DEVICE_MEDIUMS or event.group_idx not in (None, 0):
            return None
        size = self.block_size
        if event.block_size != size:
            return "block_size"  # not this backend's blocks: a prefix of them would be no hit of vLLM's
        if not event.block_hashes or len(event.token_ids) != size * len(event.block_hashes):
            return "malformed"  # not the shape vLLM sends: nothing of it can be trusted
        if any(not 0 <= token < 2**32 for token in event.token_ids):
            return "malformed"  # not token ids
        parent = ROOT if event.parent_block_hash is None else self._by_hash.get(event.parent_block_hash)
        if parent is None:
            self.orphans += len(event.block_hashes)
            return None
        extras = event.extra_keys or ()
        for i, block_hash in enumerate(event.block_hashes):
            extra = extras[i] if i < len(extras) else None
            key = _digest(parent, event.token_ids[i * size : (i + 1) * size], extra)
            self._forget(self._by_hash.get(block_hash))
            previous = self._hash_of.get(key)
            if previous is not None:  # the same content under another hash of vLLM's: the newer names it
                self._by_hash.pop(previous, None)
            self._by_hash[block_hash] = key
            self._hash_of[key] = block_hash
            self._add(key)
            parent = key
        return None

    def _add(self, key: bytes) -> None:
        self._blocks.pop(key, None)
        self._blocks[key] = None
        while len(self._blocks) > self.max_blocks:
            self._forget(next(iter(self._blocks)))

    def _forget(self, key: bytes | None) -> None:
        if key is None:
            return
        self._blocks.pop(key, None)
        block_hash = self._hash_of.pop(key, None)
        if block_hash is not None:
            self._by_hash.pop(block_hash, None)

    def match(self, prompt: PromptBlocks) -> Match:
        """What of ``prompt`` the pool holds: its longest resident run of full blocks from the start,
        at most ``len - 1`` tokens of it."""
        blocks = 0
        for key in prompt.keys(self.block_size):
            if key not in self._blocks:
                break
            blocks += 1
        usable = max(0, (len(prompt) - 1) // self.block_size)
        blocks = min(blocks, usable)
        return Match(blocks * self.block_size, blocks, self.block_size)

    def remember(self, prompt: PromptBlocks) -> None:
        """The estimate: ``prompt`` was computed, so its full blocks are resident (the most recently
        used, its last block before its first, as vLLM frees them: an eviction cuts the prefix
        short); the least recently used go past ``max_blocks``."""
        for key in reversed(prompt.keys(self.block_size)):
            self._add(key)
