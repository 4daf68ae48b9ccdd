"""The client APIs the gateway speaks, each behind :class:`~gateway.dialects.base.Dialect`: OpenAI's
chat and text completions (:mod:`.openai`), the Responses API (:mod:`.responses`), Anthropic Messages
(:mod:`.messages`); and the rules they share: thinking (:mod:`.thinking`), the field policy
(:mod:`.fields`), prompt counting (:mod:`.prompt_count`), the wire (:mod:`.wire`, :mod:`.sse`)."""

from gateway.dialects.base import Context, Dialect, Parsed, Prepared, Translator

__all__ = ["Context", "Dialect", "Parsed", "Prepared", "Translator"]
