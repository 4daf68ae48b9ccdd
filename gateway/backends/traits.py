"""What the gateway learns about a backend while serving (read by the reasoning split — as
:class:`~gateway.reasoning.policy.ReasoningShown` —, telemetry and the prompt count; one per backend:
:class:`~gateway.backends.pool.Backend`, whose :meth:`~gateway.backends.pool.Backend.learn` alone
changes it)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gateway.reasoning.policy import ReasoningShown


@dataclass(frozen=True, slots=True)
class UpstreamTraits:
    """What the gateway has learnt about one backend (None: not seen yet).

    ``splits_reasoning``: it sends reasoning fields (vLLM ``--reasoning-parser``);
    ``reasoning_markers``: its raw text, with thinking on, shows reasoning markers (True: one did;
    False: a whole answer had none, :class:`~gateway.reasoning.policy.ChoiceSplit`);
    ``per_request_metrics``: it sends a per-request ``metrics`` object (vLLM >= 0.32,
    ``--enable-per-request-metrics``); ``counts_prompts``: it answers the prompt counts admission
    asks for (False once one answered 404: no tokenizer route, e.g. ``--skip-tokenizer-init``).
    """

    splits_reasoning: bool | None = None
    reasoning_markers: bool | None = None
    per_request_metrics: bool | None = None
    counts_prompts: bool | None = None

    @property
    def reasoning(self) -> ReasoningShown:
        """What its answers showed of its reasoning output, for a new answer's split."""
        return ReasoningShown(self.splits_reasoning, self.reasoning_markers)

    def with_learnt(
        self,
        reasoning: ReasoningShown | None = None,
        per_request_metrics: bool | None = None,
        counts_prompts: bool | None = None,
    ) -> UpstreamTraits:
        """These traits and what one answer showed (None: nothing of that): the reasoning merged
        (:meth:`~gateway.reasoning.policy.ReasoningShown.merged`), the others as shown last."""
        shown = self.reasoning.merged(reasoning) if reasoning is not None else self.reasoning
        metrics = self.per_request_metrics if per_request_metrics is None else per_request_metrics
        return replace(
            self,
            splits_reasoning=shown.splits_reasoning,
            reasoning_markers=shown.reasoning_markers,
            per_request_metrics=metrics,
            counts_prompts=self.counts_prompts if counts_prompts is None else counts_prompts,
        )

    def status(self) -> dict[str, bool | None]:
        """``/admin/status``'s ``upstream`` object: the traits an operator acts on."""
        return {
            "splits_reasoning": self.splits_reasoning,
            "per_request_metrics": self.per_request_metrics,
            "counts_prompts": self.counts_prompts,
        }
