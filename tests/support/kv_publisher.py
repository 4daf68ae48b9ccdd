"""vLLM's KV event publisher (``ZmqEventPublisher``) on real pyzmq sockets, for tests: batches on a
PUB socket with whatever number the test gives (a forger's too), and a ROUTER replay socket served by
a thread from what was published — as vLLM's answers: every buffered batch from the asked number on,
then the end marker."""

from __future__ import annotations

import threading

import zmq

from dspark_common import kv_events
from dspark_common.kv_events import BlockStored, KVCacheEvent, KVEventBatch


def stored(first: int, block_size: int, blocks: int = 1, parent: int | None = None) -> BlockStored:
    """``blocks`` blocks of ``block_size`` tokens, named (and filled) from ``first``, after ``parent``."""
    return BlockStored(
        block_hashes=list(range(first, first + blocks)), parent_block_hash=parent,
        token_ids=[first] * (block_size * blocks), block_size=block_size, lora_id=None, medium="GPU",
        lora_name=None,
    )  # fmt: skip


def payload(*events: KVCacheEvent) -> bytes:
    return kv_events.encode(KVEventBatch(ts=0.0, events=list(events)))


class Publisher:
    """PUB on ``events`` (bound; ``connect``: connected to a subscriber that binds, as vLLM does with
    a tcp endpoint without a wildcard) and, with ``replay``, a ROUTER bound there. Use as a context
    manager."""

    def __init__(self, events: str, replay: str | None = None, connect: bool = False) -> None:
        self._context = zmq.Context.instance()
        self.pub = self._context.socket(zmq.PUB)
        (self.pub.connect if connect else self.pub.bind)(events)
        self._buffer: list[tuple[int, bytes]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if replay is not None:
            router = self._context.socket(zmq.ROUTER)
            router.bind(replay)
            self._thread = threading.Thread(target=self._serve, args=(router,), daemon=True)
            self._thread.start()

    def publish(self, seq: int, data: bytes, buffered: bool = True, sent: bool = True) -> None:
        """Send ``data`` as batch ``seq``; kept for the replay unless not ``buffered`` (a forger's);
        not ``sent``: kept for the replay only (as a batch vLLM published before a subscription
        reached its PUB socket, which the subscriber never receives)."""
        if buffered:
            with self._lock:
                self._buffer.append((seq, data))
        if sent:
            self.pub.send_multipart((b"", kv_events.seq_frame(seq), data))

    def restart(self) -> None:
        """A publisher started anew: its replay buffer is empty (its numbers start again at 0)."""
        with self._lock:
            self._buffer.clear()

    def _serve(self, router: zmq.Socket) -> None:
        try:
            while not self._stop.is_set():
                if not router.poll(50):
                    continue
                identity, _, start = router.recv_multipart()
                first = kv_events.frame_seq(start) or 0
                with self._lock:
                    kept = [(seq, data) for seq, data in self._buffer if seq >= first]
                for seq, data in kept:
                    router.send_multipart((identity, b"", b"", kv_events.seq_frame(seq), data))
                router.send_multipart((identity, b"", b"", kv_events.END_SEQ, b""))
        finally:
            router.close(linger=0)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.pub.close(linger=0)
