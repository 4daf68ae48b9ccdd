"""The three benchmark workloads of the DSpark Graph-8 qualification (see ``docs/methodology.md``).

They span the range of draft predictability, which is what speculative decoding's speed depends on:

- ``counting``: exact bounded output, numbers 1 to 300 — almost every draft token is accepted
  (the recipe measured 98.81 % acceptance, 91.89 tok/s median decode);
- ``dataclasses``: twenty Python dataclasses — code with repetitive structure (98.66 %, 84.43 tok/s);
- ``prose``: low-predictability technical prose — drafts often rejected (32.10 %, 40.08 tok/s).

Source of those figures: the recipe README "Initial warm single-request qualification" table
(``/work/shared/seeds/dspark-graph8-recipe.txt``), three warm repetitions, medians.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["WORKLOADS", "Workload", "check_counting", "parse_workloads"]


@dataclass(frozen=True, slots=True)
class Workload:
    """One benchmark prompt; ``check`` (optional) says whether an answer is the exact expected output."""

    name: str
    prompt: str
    description: str
    check: Callable[[str], bool] | None = None


def check_counting(content: str, first: int = 1, last: int = 300) -> bool:
    """True when the integers in ``content`` are exactly ``first..last`` in order (separators ignored)."""
    return [int(n) for n in re.findall(r"-?\d+", content)] == list(range(first, last + 1))


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "counting",
            "Count from 1 to 300. Write the numbers in order, separated by commas, and nothing else.",
            "exact bounded counting 1-300 (highly predictable)",
            check_counting,
        ),
        Workload(
            "dataclasses",
            "Write twenty Python dataclasses for an inventory system (Product, Warehouse, Supplier, and so "
            "on). Each has a docstring and four to six typed fields with defaults. Output only the code.",
            "twenty Python dataclasses (structured, repetitive code)",
        ),
        Workload(
            "prose",
            "Write an original technical essay of about 600 words on how tail latency in distributed "
            "storage interacts with garbage collection pauses, erasure-coded reads and hedged requests. "
            "Use concrete, varied examples; avoid lists and headings.",
            "low-predictability technical prose",
        ),
    )
}


def parse_workloads(spec: str) -> list[Workload]:
    """``"counting,prose"`` -> the workloads, in that order; unknown names raise ``ValueError``."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown or not names:
        raise ValueError(f"unknown workload(s) {unknown or spec!r}; choose from {', '.join(WORKLOADS)}")
    return [WORKLOADS[n] for n in names]
