"""The simulator's KV event publisher: vLLM's ``ZmqEventPublisher`` wire (``vllm/distributed/kv_events.py``)
over pyzmq, so the gateway subscribes to the simulator exactly as to vLLM.

Each batch goes out on a PUB socket as ``(topic, seq, payload)`` (:mod:`dspark_common.kv_events`) and is
kept, the last ``buffer_steps`` of them, for the ROUTER replay socket: a request of ``(identity, "",
start seq)`` is answered with every kept batch from ``start`` on, then ``("", -1, "")``. A PUB socket
drops what a slow subscriber can't take (its high-water mark), as vLLM's does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque

import zmq
import zmq.asyncio

from dspark_common import kv_events

log = logging.getLogger("dspark_sim")


class KVEventPublisher:
    """Publishes on ``endpoint`` (bound), replays on ``replay_endpoint`` (bound; None: no replay)."""

    def __init__(self, endpoint: str, replay_endpoint: str | None = None, buffer_steps: int = 10_000) -> None:
        self._context = zmq.asyncio.Context.instance()
        self._pub = self._context.socket(zmq.PUB)
        self._pub.bind(endpoint)
        self._replay = None
        if replay_endpoint is not None:
            self._replay = self._context.socket(zmq.ROUTER)
            self._replay.bind(replay_endpoint)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._seq = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Serve replay requests (in the running loop) until :meth:`close`."""
        if self._replay is not None:
            self._task = asyncio.get_running_loop().create_task(self._serve_replay(self._replay))

    def publish(self, events: list[kv_events.KVCacheEvent]) -> None:
        """Send ``events`` as one batch (nothing for none)."""
        if not events:
            return
        payload = kv_events.encode(
            kv_events.KVEventBatch(ts=time.time(), events=events, data_parallel_rank=0)
        )
        seq, self._seq = self._seq, self._seq + 1
        self._buffer.append((seq, payload))
        with contextlib.suppress(zmq.Again):
            self._pub.send_multipart((b"", kv_events.seq_frame(seq), payload), flags=zmq.NOBLOCK)

    async def _serve_replay(self, socket: zmq.asyncio.Socket) -> None:
        while True:
            frames = await socket.recv_multipart()
            start = kv_events.frame_seq(frames[2]) if len(frames) == 3 else None
            if start is None:
                log.warning("dspark-sim: a KV event replay request of %d frames, ignored", len(frames))
                continue
            for seq, payload in list(self._buffer):
                if seq >= start:
                    await socket.send_multipart((frames[0], b"", b"", kv_events.seq_frame(seq), payload))
            await socket.send_multipart((frames[0], b"", b"", kv_events.END_SEQ, b""))

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)
