"""Reasoning split for DeepSeek-V4: ``<think>…</think>`` and DSML tool-call markup out of the answer."""

from gateway.reasoning.dsml import ToolCall
from gateway.reasoning.splitter import ReasoningSplitter, SplitDelta, State

__all__ = ["ReasoningSplitter", "SplitDelta", "State", "ToolCall"]
