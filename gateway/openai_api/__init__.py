"""OpenAI request models, parsed at the edge so no untyped dict travels inward."""

from gateway.openai_api.models import ChatCompletionRequest, CompletionRequest, InferenceRequest

__all__ = ["ChatCompletionRequest", "CompletionRequest", "InferenceRequest"]
