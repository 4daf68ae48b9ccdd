"""``python -m bench.report``: the figures of docs/performance.md, written from the benchmarks' JSON.

Each ``<!-- bench:NAME -->`` … ``<!-- /bench -->`` block of the page is replaced by what its JSON
(``docs/performance-NAME.json``, as ``--json`` wrote it) gives: the figures live in the JSON and in
that page only. ``--check`` writes nothing and exits 1 when the page is not what the JSON gives (the
test suite runs it: tests/gateway/test_docs.py).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGE = DOCS / "performance.md"
_BLOCK = re.compile(r"(<!-- bench:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /bench -->)", re.DOTALL)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _targets(run: dict[str, Any]) -> str:
    """A run's targets: each with the figure that decides it, and whether it is met."""
    met = {True: "**yes**", False: "no", None: "—"}
    rows = [[t["target"], t["figure"], met[t["met"]]] for t in run["targets"]]
    return _table(["target (or figure)", "latest run", "met"], rows)


def latest(run: dict[str, Any]) -> str:
    """The gateway benchmark's targets (``python -m bench.bench_gateway``)."""
    machine = run["machine"]
    head = (
        f"One run on {run['started'][:10]} ({machine['nproc']} vCPUs, Python {machine['python']}; "
        f"{run['duration_s']:.0f} s; every figure: [performance-latest.json](performance-latest.json)).\n\n"
    )
    return head + _targets(run)


def large_prompts(run: dict[str, Any]) -> str:
    """What 150k- and 1M-token prompts cost the gateway (``python -m bench.large_prompts``)."""
    before = f"; before: {run['before_commit']}" if "before_commit" in run else ""
    return f"{run['prompts']} prompts of each size per phase, one at a time{before}.\n\n" + _targets(run)


def kv_mix(run: dict[str, Any]) -> str:
    """KV-aware admission against a two-slot FIFO (``python -m bench.kv_mix``)."""
    kv, fifo, ratio = run["kv"], run["fifo"], run["fifo_over_kv"]
    rows = [
        ["short TTFT p50", f"{kv['short_ttft_s']['p50']:.3f} s", f"{fifo['short_ttft_s']['p50']:.1f} s",
         f"×{ratio['short_ttft_p50']:,.0f}"],
        ["short TTFT p99", f"{kv['short_ttft_s']['p99']:.3f} s", f"{fifo['short_ttft_s']['p99']:.1f} s",
         f"×{ratio['short_ttft_p99']:,.0f}"],
        ["long completion, mean", f"{kv['long_completion_s']['mean']:.1f} s",
         f"{fifo['long_completion_s']['mean']:.1f} s", f"×{ratio['long_completion_mean']:.2f}"],
        ["long completion, max", f"{kv['long_completion_s']['max']:.1f} s",
         f"{fifo['long_completion_s']['max']:.1f} s", f"×{ratio['long_completion_max']:.2f}"],
        ["backend preemptions", f"{kv['preemptions']:.0f}", f"{fifo['preemptions']:.0f}", ""],
    ]  # fmt: skip
    return _table(["", "kv", "fifo", "fifo / kv"], rows)


def scale_out(run: dict[str, Any]) -> str:
    """Shared admission's cost and replicas' requests/s (``python -m bench.scale_out``)."""
    inp, shared = run["admission"]["in_process"], run["admission"]["shared"]
    ratio = run["shared_over_in_process"]
    admission = _table(
        ["", "in-process", "shared (Redis)", "shared / in-process"],
        [
            [f"{label}, p50 / p99", f"{inp[key]['p50']:.0f} / {inp[key]['p99']:.0f} µs",
             f"{shared[key]['p50']:.0f} / {shared[key]['p99']:.0f} µs",
             f"×{ratio[key + '_p50']:.0f} / ×{ratio[key + '_p99']:.0f}"]
            for label, key in (
                ("admit, uncontended", "admit_us"), ("hand-off (release → the waiter runs)", "handoff_us")
            )
        ],
    )  # fmt: skip
    names = list(run["replicas"])
    label = {name: "1 (in-process admission)" if name == "1 in-process" else name for name in names}
    replicas = _table(
        ["replicas", *(label[n] for n in names)],
        [
            ["requests/s", *(f"{run['replicas'][n]['requests_per_s']:.0f}" for n in names)],
            ["of one shared replica's", *(f"×{run['scaling'][n]:.2f}" for n in names)],
        ],
    )
    return admission + "\n" + replicas


def slow_readers(run: dict[str, Any]) -> str:
    """Another key's chats beside clients that stop reading (``python -m bench.slow_readers``)."""
    alone, beside = run["ttft_alone_s"], run["ttft_beside_two_stalled_s"]
    held = run["slot_held_backend_idle_s_per_slot"]
    table = _table(
        ["", "alone", "beside two stalled readers"],
        [
            ["another key's TTFT p50 / max", f"{_ms(alone['p50'])} / {_ms(alone['max'])}",
             f"{_ms(beside['p50'])} / {_ms(beside['max'])} (×{run['ttft_ratio_p50']:.2f} at p50)"],
            ["slot held while the backend idled, per slot", f"{held['alone']:.3f} s",
             f"{held['beside']:.3f} s"],
        ],
    )  # fmt: skip
    rss = run["rss_mb"]
    return table + (
        f"\nGateway RSS {rss['before']:.0f} MB before, {rss['with_200_stalled']:.0f} MB with 200 stalled "
        f"readers ({run['rss_mb_per_stalled_reader']:.2f} MB each).\n"
    )


#: Each block of the page: the JSON it is written from (``docs/performance-NAME.json``) and how.
BLOCKS: dict[str, Callable[[dict[str, Any]], str]] = {
    "latest": latest,
    "kv-mix": kv_mix,
    "scale-out": scale_out,
    "slow-readers": slow_readers,
    "large-prompts": large_prompts,
}


def rewrite(page: str, docs: Path = DOCS) -> str:
    """``page`` with every ``bench:NAME`` block written from ``docs/performance-NAME.json``."""

    def block(match: re.Match[str]) -> str:
        name = match["name"]
        run = json.loads((docs / f"performance-{name}.json").read_text())
        return match.group(1) + BLOCKS[name](run) + match.group(4)

    return _BLOCK.sub(block, page)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is not up to date")
    args = parser.parse_args(argv)
    page = PAGE.read_text()
    written = rewrite(page)
    if args.check:
        if written != page:
            print(f"{PAGE} is not what its JSON gives: run python -m bench.report", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(written)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
