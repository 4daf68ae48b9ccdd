"""vLLM's KV cache events on the wire: what ``--kv-events-config`` publishes, decoded and encoded with
msgspec as vLLM itself does (``vllm/distributed/kv_events.py``, vLLM 0.25.1, 0.32 and 0.33).

The publisher (``ZmqEventPublisher``) sends each batch on a ZMQ PUB socket as three frames:
``(topic, seq, payload)``, ``seq`` an 8-byte big-endian counter from 0, ``payload`` the msgpack of a
:class:`KVEventBatch` — an array ``[ts, events, data_parallel_rank]`` whose events are maps tagged
``{"type": "BlockStored" | "BlockRemoved" | "AllBlocksCleared", ...}`` (vLLM PR #42892 took
``array_like=True`` off ``KVCacheEvent``: so in 0.25.1, 0.32 and 0.33), or, from a vLLM before it,
positional arrays tagged by their first item, ``["BlockStored", block_hashes, parent_block_hash, ...]``
in field order.
:func:`decode` takes both, one event at a time (msgspec's unions cannot mix the two). Its ROUTER replay socket
answers a request of one frame, the first ``seq`` wanted (8 bytes big-endian), with every buffered
batch from there as ``(topic, seq, payload)`` and ends with ``("", -1, "")`` (:data:`END_SEQ`).

A block hash (:data:`BlockHash`) is bytes, or an int with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``;
it chains a block's tokens to its parent's, so ``token_ids`` of a ``BlockStored`` hold
``block_size`` tokens per hash of ``block_hashes``, the first one's parent ``parent_block_hash``.
The structs keep the fields a consumer needs and those vLLM's decoder requires; msgspec skips the
others.
"""

from __future__ import annotations

from typing import Any

import msgspec

BlockHash = bytes | int
#: The replay's end marker, as its ``seq`` frame.
END_SEQ = (-1).to_bytes(8, "big", signed=True)


class BlockStored(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """Blocks computed and cached: ``block_hashes``, each holding ``block_size`` of ``token_ids``;
    ``extra_keys`` (one per block, or None) are what else the hash covers (LoRA, media, a
    ``cache_salt``): such a block is no plain request's prefix."""

    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    """The group's kind (vLLM PR #40984; ``KVCacheManager.take_events`` annotates stores only, from
    ``get_kv_cache_spec_kind``): ``full_attention``, ``mla_attention``, ``sliding_window_mla``, ..."""
    kv_cache_spec_sliding_window: int | None = None
    """The group's window in tokens, for a sliding-window kind."""


class BlockRemoved(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """Blocks evicted from ``medium``."""

    block_hashes: list[BlockHash]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """Every block gone (a reset of the prefix cache, or an engine start)."""


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared


class _LegacyBlockStored(msgspec.Struct, tag="BlockStored", array_like=True, omit_defaults=True, gc=False):
    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class _LegacyBlockRemoved(msgspec.Struct, tag="BlockRemoved", array_like=True, omit_defaults=True, gc=False):
    block_hashes: list[BlockHash]
    medium: str | None = None
    group_idx: int | None = None


class _LegacyAllBlocksCleared(
    msgspec.Struct, tag="AllBlocksCleared", array_like=True, omit_defaults=True, gc=False
):
    pass


#: Each positional struct and the tagged-map struct of the same event.
_LEGACY: dict[type, type] = {
    _LegacyBlockStored: BlockStored,
    _LegacyBlockRemoved: BlockRemoved,
    _LegacyAllBlocksCleared: AllBlocksCleared,
}
_LEGACY_OF = {new: old for old, new in _LEGACY.items()}


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """One published batch: its time (Unix s) and events, in order."""

    ts: float
    events: list[KVCacheEvent]
    data_parallel_rank: int | None = None


class _RawBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[msgspec.Raw]
    data_parallel_rank: int | None = None


_BATCH_DECODER = msgspec.msgpack.Decoder(_RawBatch)
_MAP_DECODER: msgspec.msgpack.Decoder[KVCacheEvent] = msgspec.msgpack.Decoder(KVCacheEvent)  # type: ignore[arg-type]
_ARRAY_DECODER: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(
    _LegacyBlockStored | _LegacyBlockRemoved | _LegacyAllBlocksCleared
)
_ENCODER = msgspec.msgpack.Encoder()


def _is_array(raw: msgspec.Raw) -> bool:
    """Whether the msgpack value in ``raw`` is an array (fixarray 0x90-0x9f, array16 0xdc, array32 0xdd)."""
    first = bytes(memoryview(raw)[:1])
    return bool(first) and (0x90 <= first[0] <= 0x9F or first[0] in (0xDC, 0xDD))


def _event(raw: msgspec.Raw) -> KVCacheEvent:
    if not _is_array(raw):
        return _MAP_DECODER.decode(raw)
    legacy = _ARRAY_DECODER.decode(raw)
    event: KVCacheEvent = _LEGACY[type(legacy)](**msgspec.structs.asdict(legacy))
    return event


def decode(payload: bytes) -> KVEventBatch:
    """The batch in ``payload``, its events maps or positional arrays (see the module doc); raises
    :class:`msgspec.DecodeError` (a ``ValueError``) for anything that is not one."""
    raw = _BATCH_DECODER.decode(payload)
    events = [_event(event) for event in raw.events]
    return KVEventBatch(ts=raw.ts, events=events, data_parallel_rank=raw.data_parallel_rank)


def encode(batch: KVEventBatch, arrays: bool = False) -> bytes:
    """``batch`` as vLLM's publisher sends it: events as tagged maps, or with ``arrays`` as the
    positional arrays of a vLLM before PR #42892."""
    if not arrays:
        return _ENCODER.encode(batch)
    events = [_LEGACY_OF[type(event)](**msgspec.structs.asdict(event)) for event in batch.events]
    rank = [] if batch.data_parallel_rank is None else [batch.data_parallel_rank]
    return _ENCODER.encode([batch.ts, events, *rank])


def seq_frame(seq: int) -> bytes:
    """A sequence number as its frame: 8 bytes, big-endian, signed (the replay's end is -1)."""
    return seq.to_bytes(8, "big", signed=True)


def frame_seq(frame: bytes) -> int | None:
    """The sequence number in ``frame``, or None if it is not 8 bytes."""
    return int.from_bytes(frame, "big", signed=True) if len(frame) == 8 else None
