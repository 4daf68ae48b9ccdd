"""OpenAI chat completions: ``POST /v1/chat/completions`` (API reference, "Create chat completion").

Normalisation for vLLM serving DeepSeek-V4: thinking controls (``reasoning_effort``, ``thinking``,
``chat_template_kwargs``; the key's default, then ``GATEWAY_DEFAULT_THINKING``) become
``chat_template_kwargs``, and assistant messages' reasoning goes under the field the backend reads
(:func:`~gateway.dialects.openai.normalize.normalize_chat`). The output budget is
``max_completion_tokens``, else the older ``max_tokens`` (the one vLLM uses when both are sent).
"""

from __future__ import annotations

from gateway.dialects.base import Context, Parsed, Prepared
from gateway.dialects.fields import check_fields
from gateway.dialects.openai.dialect import OpenAIDialect, finish
from gateway.dialects.openai.models import ChatCompletionRequest
from gateway.dialects.openai.normalize import normalize_chat
from gateway.dialects.prompt_count import chat_count
from gateway.dialects.thinking import as_level


class ChatCompletions(OpenAIDialect):
    """The chat completions dialect."""

    route = "/v1/chat/completions"
    upstream_path = "/v1/chat/completions"
    api = "chat"
    request_model = ChatCompletionRequest

    def prepare(self, parsed: Parsed, context: Context) -> Prepared:
        request: ChatCompletionRequest = parsed.request
        settings = context.settings
        check_fields(parsed.body, context.principal, settings, self.api)
        payload = request.payload(parsed.body)
        default = as_level(context.principal.default_thinking or settings.default_thinking)
        normalized = normalize_chat(payload, default, settings.backend_reasoning_field)
        output: tuple[int | None, str]
        if request.max_completion_tokens:
            output = (request.max_completion_tokens, "max_completion_tokens")
        else:
            output = (request.max_tokens, "max_tokens")
        count = chat_count(payload)
        return finish(request, payload, normalized, settings.reasoning_split, context, output, count)


CHAT = ChatCompletions()
