"""The walk of one streamed ``POST /v1/chat/completions`` through the gateway: how many hand-offs
between its modules it takes, and over how many modules, as a function of the stream's chunks.

``python -m bench.request_walk`` serves the gateway in this process (uvicorn, in front of an
in-memory upstream that streams N chat chunks and ``[DONE]``), sends one streamed request with httpx,
and counts, while that request runs, every Python frame entered in a module of the gateway
(``gateway.*``, ``dspark_common.*``) from a frame of another module — a call or a resumption of a
coroutine (``sys.setprofile`` sees both) across a module boundary: a hand-off. Run at two stream
lengths, the count is ``fixed + per_chunk × N``; it prints both and the modules entered. Counted
alike on any version of the gateway (run it with ``PYTHONPATH`` at another checkout to compare).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from tests.support.fake_upstream import Answer, FakeUpstream
from tests.support.in_loop import gateway_in_loop

OWN = ("gateway.", "dspark_common.")
MODEL = "deepseek-v4-flash-0731"


def chunk(index: int) -> bytes:
    obj = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": f"w{index} "}, "finish_reason": None}],
        "usage": {"prompt_tokens": 3, "completion_tokens": index + 1},
    }
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class Walk:
    """A ``sys.setprofile`` hook counting hand-offs into the gateway's modules."""

    def __init__(self) -> None:
        self.hand_offs = 0
        self.modules: Counter[str] = Counter()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        if not callee.startswith(OWN):
            return
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back is not None else ""
        if caller != callee:
            self.hand_offs += 1
            self.modules[callee] += 1


async def walk(chunks: int, workdir: Path) -> Walk:
    """One streamed request of ``chunks`` chunks, walked (a first one, not walked, warms every path)."""
    answers = [Answer().send(*(chunk(i) for i in range(chunks)), b"data: [DONE]\n\n").end() for _ in range(2)]
    upstream = FakeUpstream(*answers, metrics="")
    database = f"sqlite+aiosqlite:///{workdir / f'walk-{chunks}.db'}"
    factory = lambda settings, url: upstream  # noqa: E731
    async with (
        gateway_in_loop("http://walk", database, factory, ledger_flush_s=3600.0) as served,
        httpx.AsyncClient(base_url=served.url, headers=served.auth, timeout=30) as client,
    ):
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
        seen = Walk()
        for hook in (None, seen):
            sys.setprofile(hook)
            try:
                async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    assert response.status_code == 200, response.status_code
                    text = b"".join([piece async for piece in response.aiter_raw()])
            finally:
                sys.setprofile(None)
            assert text.endswith(b"data: [DONE]\n\n"), text[-200:]
        return seen


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--chunks", type=int, nargs=2, default=(8, 24), help="the two stream lengths")
    parser.add_argument("--by-module", action="store_true", help="the hand-offs per chunk into each module")
    args = parser.parse_args()
    short, long = args.chunks
    with tempfile.TemporaryDirectory() as tmp:
        first, second = (asyncio.run(walk(n, Path(tmp))) for n in (short, long))
    per_chunk = (second.hand_offs - first.hand_offs) / (long - short)
    fixed = first.hand_offs - per_chunk * short
    modules = sorted(set(first.modules) | set(second.modules))
    print(f"hand-offs: {fixed:.0f} + {per_chunk:.1f}·N over {len(modules)} modules")
    print("modules:", " ".join(name.removeprefix("gateway.") for name in modules))
    if args.by_module:
        for name in modules:
            rate = (second.modules[name] - first.modules[name]) / (long - short)
            if rate:
                print(f"  {rate:5.1f}·N  {name}")


if __name__ == "__main__":
    main()
