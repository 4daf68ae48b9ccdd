"""What the gateway learns of a backend (gateway/backends/traits.py): one writer, and what two
answers showed merged."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.backends.traits import UpstreamTraits
from gateway.reasoning.policy import ReasoningShown


def test_traits_change_only_by_learning() -> None:
    traits = UpstreamTraits()
    with pytest.raises(dataclasses.FrozenInstanceError):
        traits.splits_reasoning = True  # type: ignore[misc]
    learnt = traits.with_learnt(ReasoningShown(reasoning_markers=False), per_request_metrics=True)
    assert learnt.reasoning == ReasoningShown(None, False) and learnt.per_request_metrics is True
    assert learnt.with_learnt(counts_prompts=False).counts_prompts is False
    assert traits == UpstreamTraits()  # a new value each time: a request holding the old one is not changed


def test_what_answers_showed_merges_whatever_order_they_end_in() -> None:
    """Two streams of one backend, begun with the same knowledge, end in either order: a backend that
    split once splits, and a marker seen once outweighs an answer that showed none."""
    plain, marked, split = (
        ReasoningShown(reasoning_markers=False),
        ReasoningShown(reasoning_markers=True),
        ReasoningShown(splits_reasoning=True),
    )
    for first, second in ((plain, marked), (marked, plain)):
        assert UpstreamTraits().with_learnt(first).with_learnt(second).reasoning_markers is True
    both = UpstreamTraits().with_learnt(split).with_learnt(plain)
    assert both.reasoning == ReasoningShown(True, False)
    assert split.merged(ReasoningShown()) is split  # nothing new: the same value
