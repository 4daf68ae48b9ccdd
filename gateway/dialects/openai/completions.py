"""OpenAI text completions: ``POST /v1/completions`` (API reference, "Completions", legacy).

vLLM's reasoning parser never touches this route, so the gateway splits reasoning itself whenever
thinking is on — when the raw prompt ends with the start marker (``<think>``)
(:func:`~gateway.dialects.openai.normalize.normalize_completion`) — unless the split is off.
"""

from __future__ import annotations

from gateway.dialects.base import Context, Parsed, Prepared
from gateway.dialects.fields import check_fields
from gateway.dialects.openai.dialect import OpenAIDialect, finish
from gateway.dialects.openai.models import CompletionRequest
from gateway.dialects.openai.normalize import normalize_completion
from gateway.dialects.prompt_count import completion_count
from gateway.reasoning.policy import SplitMode

#: The output budget of a completion that sets no ``max_tokens``: vLLM's default, as OpenAI's.
DEFAULT_MAX_TOKENS = 16


class TextCompletions(OpenAIDialect):
    """The text completions dialect."""

    route = "/v1/completions"
    upstream_path = "/v1/completions"
    api = "completions"
    request_model = CompletionRequest

    def prepare(self, parsed: Parsed, context: Context) -> Prepared:
        request: CompletionRequest = parsed.request
        check_fields(parsed.body, context.principal, context.settings, self.api)
        payload = request.payload(parsed.body)
        normalized = normalize_completion(payload, context.settings.reasoning_start)
        mode: SplitMode = "off" if context.settings.reasoning_split == "off" else "gateway"
        output = (request.max_tokens or DEFAULT_MAX_TOKENS, "max_tokens")
        return finish(request, payload, normalized, mode, context, output, completion_count(payload))


COMPLETIONS = TextCompletions()
