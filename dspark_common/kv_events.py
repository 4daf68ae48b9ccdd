"""vLLM's KV cache events on the wire: what ``--kv-events-config`` publishes, decoded and encoded with
msgspec as vLLM itself does (``vllm/distributed/kv_events.py``, vLLM 0.32).

The publisher (``ZmqEventPublisher``) sends each batch on a ZMQ PUB socket as three frames:
``(topic, seq, payload)``, ``seq`` an 8-byte big-endian counter from 0, ``payload`` the msgpack of a
:class:`KVEventBatch` — an array ``[ts, events, data_parallel_rank]`` whose events are maps tagged
``{"type": "BlockStored" | "BlockRemoved" | "AllBlocksCleared", ...}``. Its ROUTER replay socket
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


class BlockRemoved(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """Blocks evicted from ``medium``."""

    block_hashes: list[BlockHash]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """Every block gone (a reset of the prefix cache, or an engine start)."""


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """One published batch: its time (Unix s) and events, in order."""

    ts: float
    events: list[KVCacheEvent]
    data_parallel_rank: int | None = None


_DECODER = msgspec.msgpack.Decoder(KVEventBatch)
_ENCODER = msgspec.msgpack.Encoder()


def decode(payload: bytes) -> KVEventBatch:
    """The batch in ``payload``; raises :class:`msgspec.DecodeError` (a ``ValueError``) for anything
    that is not one."""
    return _DECODER.decode(payload)


def encode(batch: KVEventBatch) -> bytes:
    """``batch`` as vLLM's publisher sends it."""
    return _ENCODER.encode(batch)


def seq_frame(seq: int) -> bytes:
    """A sequence number as its frame: 8 bytes, big-endian, signed (the replay's end is -1)."""
    return seq.to_bytes(8, "big", signed=True)


def frame_seq(frame: bytes) -> int | None:
    """The sequence number in ``frame``, or None if it is not 8 bytes."""
    return int.from_bytes(frame, "big", signed=True) if len(frame) == 8 else None
