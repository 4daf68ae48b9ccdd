"""What the gateway learns about a backend while serving (read by the reasoning split — as
:class:`~gateway.reasoning.policy.LearntReasoning` —, telemetry and the prompt count; one per backend:
:class:`~gateway.backends.pool.Backend`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
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

    def status(self) -> dict[str, bool | None]:
        """``/admin/status``'s ``upstream`` object: the traits an operator acts on."""
        return {
            "splits_reasoning": self.splits_reasoning,
            "per_request_metrics": self.per_request_metrics,
            "counts_prompts": self.counts_prompts,
        }
