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

KV cache groups (vLLM's hybrid allocator; docs/prefix-cache.md has the facts with their sources): a
model of several attention kinds keeps one group per kind and layout, and vLLM publishes each group's
stores and removals apart (``group_idx``; a store also names the group's ``kv_cache_spec_kind``, the
removals only the index). Groups are told apart by kind, never by index. A prompt's hit is decided as
vLLM's ``HybridKVCacheCoordinator.find_longest_cache_hit`` decides it: every group must hit, and the
hit is the fixed point of each group cutting the candidate length — a full-attention kind
(``full_attention``, ``mla_attention``, ``sink_full_attention``) to its run of resident blocks from
the start, a sliding-window kind (``sliding_window``, ``sliding_window_mla``) to the end of the last
run of ``ceil((window - 1) / block_size)`` resident blocks below it
(``SlidingWindowManager.find_longest_cache_hit``); every length a multiple of the configured block
size (the scheduler's). So a removal in a sliding-window group changes the hit only where it takes a
block of the window a hit ends on, and never evicts another group's block of the same tokens. A group
of a kind the index does not know (``mamba``, ``unknown``, or none named beyond group 0), or a
sliding-window group whose stores name fewer blocks than their tokens span (vLLM's
``reachable_block_mask`` keeps only the blocks a hit can end on, at positions that depend on the
prompt's length), is counted (:attr:`ResidentBlocks.unknown_groups`) and
:meth:`ResidentBlocks.match` answers None: the caller falls back to the estimate rather than guess.
A full-attention group's blocks are of the configured block size (vLLM ``--block-size``); a
sliding-window group's are its own, learnt from its first store.
A ``BlockStored`` of another size, or not of the shape vLLM sends, changes nothing and is counted
(:meth:`ResidentBlocks.apply` returns the counts). Memory is bounded by ``max_blocks`` per group (the
pool's blocks, plus slack for missed removals): past it, the block least recently stored goes first.

Evictions still to come: vLLM evicts a cached block only when an allocation needs it, so what the
index holds now is not what a request sized now will find once it runs, if requests admitted before it
will still fill the pool. :meth:`ResidentBlocks.match` takes what they will hold in all and which
prompts they run, and predicts the hit with the least recently freed blocks no request uses taken away
(:meth:`ResidentBlocks.evicting`); the order of freed blocks is kept by :meth:`ResidentBlocks.touch`
when a request ends.

The estimate (:meth:`ResidentBlocks.remember`): the prompt blocks of every request sent, least
recently used evicted past the pool's size in blocks — what vLLM's free-block LRU does when nothing
else holds blocks. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Literal

import msgspec
import numpy as np
from numpy.typing import NDArray

from dspark_common.kv_events import AllBlocksCleared, BlockHash, BlockRemoved, BlockStored, KVEventBatch
from dspark_common.turns import Work, run_now

#: The digest of no parent (the first block of a prompt).
ROOT = b""
#: Mediums whose blocks a request can be served from at once.
DEVICE_MEDIUMS = (None, "GPU")

_EXTRA = msgspec.msgpack.Encoder()
#: Blocks keyed per piece of work (:mod:`dspark_common.turns`): well under a millisecond of hashing.
PIECE_BLOCKS = 256


def _digest(parent: bytes, tokens: memoryview, extra: object = None) -> bytes:
    """A block's content key: BLAKE2b-128 of its parent's key, its token ids (``tokens``: their uint32
    bytes, native order) and any extra key (as msgpack: an event's decoded list and a tuple of the
    same items are the same key)."""
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(tokens)
    if extra is not None:
        h.update(_EXTRA.encode(extra))
    return h.digest()


def _chained(
    parent: bytes, ids: memoryview, block_size: int, extras: Sequence[object] = ()
) -> Work[list[bytes]]:
    """The keys of the full blocks of ``block_size`` of ``ids`` (uint32 bytes), chained from
    ``parent``, block ``i`` with ``extras[i]`` if there is one; :data:`PIECE_BLOCKS` a piece."""
    keys: list[bytes] = []
    step = 4 * block_size
    for i, start in enumerate(range(0, len(ids) - step + 1, step)):
        parent = _digest(parent, ids[start : start + step], extras[i] if i < len(extras) else None)
        keys.append(parent)
        if i % PIECE_BLOCKS == PIECE_BLOCKS - 1:
            yield
    return keys


class PromptBlocks:
    """A prompt's ``token_ids`` (``uint32``: 4 bytes a token) and the content keys of its full blocks,
    computed once per block size: admission matches them and the estimate remembers them once sent.
    A long prompt's keys take milliseconds of hashing: the request computes them in pieces
    (:meth:`keying`) before they are used, and may then :meth:`forget_ids`: a request that
    waits in the queue keeps 16 bytes a block, not 4 a token. ``cache_salt``: the salt the request is
    sent with (None: unsalted), an extra key of its first block as vLLM's (see the module doc)."""

    __slots__ = ("token_ids", "_length", "_first_extra", "_keys")

    def __init__(self, token_ids: NDArray[np.uint32] | Sequence[int], cache_salt: str | None = None) -> None:
        self.token_ids: NDArray[np.uint32] | None = np.ascontiguousarray(token_ids, dtype=np.uint32)
        self._length = len(self.token_ids)
        self._first_extra = ((cache_salt,),) if cache_salt else ()
        self._keys: dict[int, list[bytes]] = {}

    def __len__(self) -> int:
        return self._length

    def keys(self, block_size: int) -> list[bytes]:
        """The content keys of the full blocks of ``block_size`` tokens, in order (computed now if
        :meth:`keying` did not; none of a size not keyed before :meth:`forget_ids`)."""
        keys = self._keys.get(block_size)
        return run_now(self.keying(block_size)) if keys is None else keys

    def forget_ids(self) -> None:
        """Keep the keys computed so far, not the ids: a block size keyed later has no blocks (so no
        hit, nothing held or freed of it)."""
        self.token_ids = None

    def keying(self, block_size: int) -> Work[list[bytes]]:
        """:meth:`keys` of ``block_size``, computed a piece at a time and kept."""
        keys = self._keys.get(block_size)
        if keys is None:
            if self.token_ids is None:
                return []
            ids = self.token_ids.data.cast("B")
            keys = self._keys[block_size] = yield from _chained(ROOT, ids, block_size, self._first_extra)
        return keys


@dataclass(frozen=True, slots=True)
class Match:
    """What the index holds of a prompt: ``cached_tokens`` of it, ``blocks`` of ``block_size``."""

    cached_tokens: int
    blocks: int
    block_size: int


#: Kinds whose hit is a run of resident blocks from the prompt's start (vLLM ``FullAttentionManager``;
#: ``MLAAttentionSpec`` and ``SinkFullAttentionSpec`` are ``FullAttentionSpec`` subclasses).
FULL_KINDS = frozenset({"full_attention", "mla_attention", "sink_full_attention"})
#: Kinds whose hit needs only the blocks of the window before it (vLLM ``SlidingWindowManager``).
WINDOW_KINDS = frozenset({"sliding_window", "sliding_window_mla"})


class _Group:
    """One KV cache group's resident blocks: content keys, least recently stored or freed first, and
    vLLM's hash of each (``names`` outlive a removal, as a later store may chain from a removed
    parent: a sliding window frees the blocks behind it while their children are still computed)."""

    __slots__ = ("kind", "block_size", "window", "blocks", "names", "hash_of")

    def __init__(self, kind: str | None, block_size: int | None, window: int | None) -> None:
        self.kind = kind
        self.block_size = block_size
        self.window = window
        self.blocks: dict[bytes, None] = {}
        self.names: dict[BlockHash, bytes] = {}  # vLLM's hash -> content key
        self.hash_of: dict[bytes, BlockHash] = {}  # a resident key -> the hash vLLM names it by

    def hit(
        self,
        prompt: PromptBlocks,
        length: int,
        align: int,
        gone: AbstractSet[bytes] = frozenset(),
        coming: AbstractSet[bytes] = frozenset(),
    ) -> int:
        """The longest hit of at most ``length`` tokens (a multiple of ``align``) this group allows,
        the blocks of ``gone`` taken as evicted and those of ``coming`` as resident (a full-attention
        group's only: a sliding window frees a running request's blocks behind it)."""
        size = self.block_size or align
        keys = prompt.keys(size)[: length // size]
        if self.kind in WINDOW_KINDS and self.window is not None:
            return self._window_hit(keys, size, align, gone)
        run = 0
        for key in keys:
            if (key not in self.blocks or key in gone) and key not in coming:
                break
            run += 1
        return run * size // align * align

    def _window_hit(self, keys: list[bytes], size: int, align: int, gone: AbstractSet[bytes]) -> int:
        """vLLM ``SlidingWindowManager.find_longest_cache_hit``: from the right, the first aligned
        resident block with ``ceil((window - 1) / size)`` contiguous resident blocks ending at it; else
        the resident run from the start."""
        need = -(-((self.window or 1) - 1) // size)  # vLLM _contiguous_blocks_for_hit, without EAGLE
        run = 0
        for i in range(len(keys) - 1, -1, -1):
            if keys[i] not in self.blocks or keys[i] in gone:
                run = 0
                continue
            if run == 0 and (i + 1) * size % align:
                continue
            run += 1
            if run >= need:
                return (i + run) * size
        return run * size // align * align


class ResidentBlocks:
    """The resident blocks of one backend's KV pool, per KV cache group.

    Args:
        block_size: tokens per block (vLLM ``--block-size``), the full-attention groups'; a hit is a
            multiple of the lcm of every group's (vLLM's scheduler block size,
            ``vllm/v1/core/kv_cache_utils.py``); full-attention events of another size are ignored.
        max_blocks: most blocks kept per group; the least recently stored (or freed,
            :meth:`touch`) go first past it.
        source: ``events`` (fed :meth:`apply`) or ``estimate`` (fed :meth:`remember`).
        pool_tokens: the backend's KV pool, tokens (None: ``max_blocks`` blocks), which
            :meth:`evicting` divides between the admitted requests and cached blocks.
    """

    def __init__(
        self,
        block_size: int,
        max_blocks: int,
        source: Literal["events", "estimate"],
        pool_tokens: int | None = None,
    ) -> None:
        self.block_size = block_size
        self.max_blocks = max_blocks
        self.pool_tokens = max_blocks * block_size if pool_tokens is None else pool_tokens
        self.source = source
        self._groups: dict[int, _Group] = {}
        self.orphans = 0
        """Stored blocks whose parent the index did not know (events missed): not indexed."""
        self.unknown_groups: dict[int, str] = {}
        """Groups (``group_idx``) the index cannot predict, and their kind (``none``: a group past the
        first that named none; ``<kind> (masked stores)``: a window group's sparse stores): while any
        is known, :meth:`match` answers None."""
        self.unknown_events = 0
        """Events of those groups."""

    def __len__(self) -> int:
        return sum(len(group.blocks) for group in self._groups.values())

    @property
    def resident_tokens(self) -> int:
        return sum(len(g.blocks) * (g.block_size or self.block_size) for g in self._groups.values())

    @property
    def groups_seen(self) -> bool:
        """Whether a store named a group (vLLM's first step names every group it stores blocks of)."""
        return bool(self._groups) or bool(self.unknown_groups)

    def block_sizes(self) -> set[int]:
        """The block sizes a prompt is keyed by to be matched here: the configured one and each
        group's."""
        return {self.block_size} | {g.block_size for g in self._groups.values() if g.block_size}

    def groups(self) -> list[dict[str, object]]:
        """``/admin/status``: each group's index, kind, block size, window and resident blocks."""
        return [
            {"group_idx": idx, "kind": g.kind, "block_size": g.block_size, "window": g.window,
             "blocks": len(g.blocks)}
            for idx, g in sorted(self._groups.items())
        ]  # fmt: skip

    def apply(self, batch: KVEventBatch) -> Counter[str]:
        """:meth:`applying` at once."""
        return run_now(self.applying(batch))

    def applying(self, batch: KVEventBatch) -> Work[Counter[str]]:
        """Take in one batch of events, in order, a piece at a time (:mod:`dspark_common.turns`); the
        events ignored, by reason: ``block_size`` (a ``BlockStored`` of another block size than its
        group's), ``malformed`` (one not of vLLM's shape)."""
        ignored: Counter[str] = Counter()
        for event in batch.events:
            if isinstance(event, BlockStored):
                reason = yield from self._stored(event)
                if reason is not None:
                    ignored[reason] += 1
            elif isinstance(event, BlockRemoved):
                group = self._groups.get(event.group_idx or 0)
                if event.group_idx in self.unknown_groups:
                    self.unknown_events += 1
                elif event.medium in DEVICE_MEDIUMS and group is not None:
                    for block_hash in event.block_hashes:
                        key = group.names.get(block_hash)
                        if key is not None and group.hash_of.get(key) == block_hash:
                            group.blocks.pop(key, None)
                            del group.hash_of[key]
            elif isinstance(event, AllBlocksCleared):
                self.clear()
            yield
        return ignored

    def clear(self) -> None:
        """Forget every block (the groups' kinds stay: they are the model's)."""
        for group in self._groups.values():
            group.blocks.clear()
            group.names.clear()
            group.hash_of.clear()

    def _group(self, event: BlockStored) -> _Group | None:
        """``event``'s group, learnt from its first store; None for one of a kind not known."""
        idx, kind = event.group_idx or 0, event.kv_cache_spec_kind
        group = self._groups.get(idx)
        if group is None and idx not in self.unknown_groups:
            if kind in FULL_KINDS or (kind is None and idx == 0):
                group = _Group(kind, self.block_size, None)
            elif kind in WINDOW_KINDS and event.kv_cache_spec_sliding_window:
                group = _Group(kind, event.block_size, event.kv_cache_spec_sliding_window)
            else:
                self.unknown_groups[idx] = kind or "none"
                return None
            self._groups[idx] = group
        return group

    def _stored(self, event: BlockStored) -> Work[str | None]:
        """Index ``event``'s blocks, a piece at a time; the reason it is ignored, if it is."""
        if event.medium not in DEVICE_MEDIUMS:
            return None
        group = self._group(event)
        if group is None:
            self.unknown_events += 1
            return None
        size = group.block_size or self.block_size
        if event.block_size != size:
            return "block_size"  # not this group's blocks: a prefix of them would be no hit of vLLM's
        spanned = len(event.token_ids)
        if group.window is not None and spanned % size == 0 and spanned > size * len(event.block_hashes):
            # vLLM stores only the window's blocks a hit can end on (SlidingWindowManager.
            # reachable_block_mask) but sends every computed block's tokens: which blocks the hashes
            # name depends on the prompt's length, unknown here, so the group cannot be predicted
            self.unknown_groups[event.group_idx or 0] = f"{group.kind} (masked stores)"
            del self._groups[event.group_idx or 0]
            self.unknown_events += 1
            return None
        if not event.block_hashes or spanned != size * len(event.block_hashes):
            return "malformed"  # not the shape vLLM sends: nothing of it can be trusted
        try:
            ids = array("I", event.token_ids)  # a C loop over the list: ~8 ns an id
        except OverflowError:
            return "malformed"  # not token ids: one below 0 or of 2**32 and more
        parent = ROOT if event.parent_block_hash is None else group.names.get(event.parent_block_hash)
        if parent is None:
            self.orphans += len(event.block_hashes)
            return None
        keys = yield from _chained(parent, memoryview(ids).cast("B"), size, event.extra_keys or ())
        # the last block first: vLLM frees them so (touch)
        self._add(group, reversed(keys), reversed(event.block_hashes))
        return None

    def _add(self, group: _Group, keys: Iterable[bytes], block_hashes: Iterable[BlockHash]) -> None:
        """Each of ``keys`` resident under vLLM's hash of the same place in ``block_hashes`` (the newer
        name of the same content wins); the least recently stored go past :attr:`max_blocks`."""
        names, hash_of, blocks = group.names, group.hash_of, group.blocks
        for key, block_hash in zip(keys, block_hashes, strict=True):
            names.pop(block_hash, None)
            names[block_hash] = key
            hash_of[key] = block_hash
            blocks.pop(key, None)
            blocks[key] = None
        if len(blocks) > self.max_blocks:
            for key in list(itertools.islice(blocks, len(blocks) - self.max_blocks)):
                del blocks[key]
                hash_of.pop(key, None)
        if len(names) > 2 * self.max_blocks:
            for block_hash in list(itertools.islice(names, len(names) - 2 * self.max_blocks)):
                del names[block_hash]

    def match(
        self, prompt: PromptBlocks, reserved_tokens: int = 0, in_use: Iterable[PromptBlocks] = ()
    ) -> Match | None:
        """What of ``prompt`` the pool will hold when it runs, as vLLM's hybrid coordinator decides it
        (see the module doc): at most ``len - 1`` tokens, a multiple of the block size; None while a
        group of an unknown kind is seen (the caller uses the estimate). ``in_use``: the prompts of
        the requests already admitted, whose blocks will be resident (vLLM caches a block once
        allocated, ``KVCacheManager.allocate_slots``), and ``reserved_tokens``: the KV they will hold
        in all (each its prompt, cached prefix included, and output cap), whose blocks still to come
        evict cached blocks no request uses (:meth:`evicting`)."""
        if self.unknown_groups:
            return None
        running = list(in_use)
        gone = self.evicting(reserved_tokens, running) if reserved_tokens > 0 else {}
        groups = list(self._groups.items()) or [(0, _Group(None, self.block_size, None))]
        align = math.lcm(self.block_size, *(g.block_size or self.block_size for _, g in groups))
        coming = {
            idx: {key for p in running for key in p.keys(g.block_size or self.block_size)}
            for idx, g in groups
            if running and g.window is None
        }
        hit = max(0, (len(prompt) - 1) // align * align)
        while True:  # each group only cuts: the fixed point is reached in a few rounds
            length = hit
            for idx, group in groups:
                cut = group.hit(
                    prompt, length, align, gone.get(idx, frozenset()), coming.get(idx, frozenset())
                )
                length = min(length, cut)
            if length >= hit:
                break
            hit = length
        return Match(hit, hit // self.block_size, self.block_size)

    def evicting(self, reserved_tokens: int, in_use: Iterable[PromptBlocks]) -> dict[int, set[bytes]]:
        """Per group (``group_idx``), the cached blocks the admitted requests will evict before they
        end: a pool of ``pool_tokens`` keeps room for ``reserved_tokens`` of theirs (what they hold and
        will still take: vLLM gives each sequence the blocks of its computed tokens as it goes), and
        what is left for cached blocks no request uses is taken from the least recently freed of those
        (vLLM ``FreeKVCacheBlockQueue``: a freed block goes to the end, an allocation takes from the
        front, evicting its cached content). A block ``in_use`` (a prompt an admitted request runs)
        can't be evicted (vLLM frees a block at reference count 0 only). The blocks of the admitted
        requests' outputs are not known by their ids, so they count as unused: the figure errs towards
        evicting more, never fewer. In vLLM's hybrid allocator the groups share one pool and one
        queue; here each group keeps ``pool_tokens`` of its own blocks (an approximation)."""
        prompts = list(in_use)
        gone: dict[int, set[bytes]] = {}
        for idx, group in self._groups.items():
            size = group.block_size or self.block_size
            held = {key for p in prompts for key in p.keys(size) if key in group.blocks}
            room = max(0, (self.pool_tokens - reserved_tokens) // size)
            count = len(group.blocks) - len(held) - room
            if count > 0:
                evicted = (key for key in group.blocks if key not in held)
                gone[idx] = set(itertools.islice(evicted, count))
        return gone

    def touch(self, prompt: PromptBlocks) -> None:
        """A request of ``prompt`` ended: its resident blocks are the most recently freed, its last
        block before its first (vLLM ``KVCacheManager.free`` frees a request's blocks in reverse
        order, so an eviction cuts a prefix short)."""
        for group in self._groups.values():
            for key in reversed(prompt.keys(group.block_size or self.block_size)):
                if key in group.blocks:
                    del group.blocks[key]
                    group.blocks[key] = None

    def remember(self, prompt: PromptBlocks) -> None:
        """The estimate: ``prompt`` was computed, so its full blocks are resident (the most recently
        used, its last block before its first, as vLLM frees them: an eviction cuts the prefix
        short); the least recently used go past ``max_blocks``."""
        group = self._groups.setdefault(0, _Group(None, self.block_size, None))
        keys = prompt.keys(self.block_size)
        self._add(group, reversed(keys), reversed(keys))
