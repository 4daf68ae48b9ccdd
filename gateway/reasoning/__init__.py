"""Reasoning split for DeepSeek-V4: reasoning markers and DSML tool-call markup out of the answer."""

from gateway.reasoning.dsml import ToolCall
from gateway.reasoning.splitter import THINK, Markers, ReasoningSplitter, SplitDelta, State

__all__ = ["THINK", "Markers", "ReasoningSplitter", "SplitDelta", "State", "ToolCall"]
