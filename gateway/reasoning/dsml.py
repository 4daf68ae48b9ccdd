"""DeepSeek DSML tool-call markup: the markers, and one complete ``invoke`` block -> an OpenAI tool call.

Format (vLLM ``vllm/parser/deepseek_v4.py``; DeepSeek-V4 ``encoding_dsv4.py``)::

    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>

DeepSeek-V4.1 (vLLM ``vllm/parser/deepseek_v41.py``) writes the same block spaced, its opening as
``calls``: ``<｜DSML｜ calls>``, ``<｜DSML｜ invoke name="…">``, ``<｜DSML｜ parameter …>``; both
generations' spellings are markers here, so one gateway splits either model's output.
The bars are full-width (U+FF5C) in the tokenizer; ASCII ``|`` is seen too, so every marker exists in
both spellings. ``string="true"`` values are strings; others are JSON when they parse (vLLM falls back
to the literal text, and so do we). Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_BARS = ("｜", "|")


def _both(template: str) -> tuple[str, ...]:
    return tuple(template.format(bar=bar) for bar in _BARS)


#: Opening a tool-call block (vLLM also saw ``toolcalls`` and ``tool`` spellings in production).
TOOL_START = (
    _both("<{bar}DSML{bar}tool_calls>")
    + _both("<{bar}DSML{bar}toolcalls>")
    + _both("<{bar}DSML{bar}tool>")
    + _both("<{bar}DSML{bar} calls>")
)
TOOL_END = (
    _both("</{bar}DSML{bar}tool_calls>")
    + _both("</{bar}DSML{bar}toolcalls>")
    + _both("</{bar}DSML{bar}tool>")
    + _both("</{bar}DSML{bar} calls>")
)
INVOKE_START = _both('<{bar}DSML{bar}invoke name="') + _both('<{bar}DSML{bar} invoke name="')
INVOKE_END = _both("</{bar}DSML{bar}invoke>") + _both("</{bar}DSML{bar} invoke>")

_BAR = "[｜|]"
_DSML = r"DSML" + _BAR + r" ?"  # V4.1 spaces its names: ``<｜DSML｜ parameter``
_NAME = re.compile(r"^\s*(?:<" + _BAR + _DSML + r'invoke name=")?([^"]+)">', re.DOTALL)
_PARAM = re.compile(
    r"<" + _BAR + _DSML + r'parameter\s+name="([^"]+)"(?:\s+string="([^"]*)")?\s*>(.*?)'
    r"(?:</" + _BAR + _DSML + r"parameter>|(?=<" + _BAR + _DSML + r"parameter\s+name=)|$)",
    re.DOTALL,
)


def _not_json(constant: str) -> Any:
    raise ValueError(constant)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A parsed call: function ``name`` and ``arguments`` as a JSON object string (OpenAI's shape)."""

    name: str
    arguments: str


def parse_invoke(body: str) -> ToolCall | None:
    """Parse the text after ``<｜DSML｜invoke name="`` up to (not including) ``</｜DSML｜invoke>``.

    Returns None if no function name can be read (the block is malformed).
    """
    match = _NAME.match(body)
    if match is None:
        return None
    params: dict[str, Any] = {}
    for name, is_string, value in _PARAM.findall(body, match.end()):
        if is_string == "true":
            params[name] = value
            continue
        try:  # NaN / Infinity are not JSON: keep such values as their text
            params[name] = json.loads(value, parse_constant=_not_json)
        except ValueError:
            params[name] = value
    return ToolCall(name=match.group(1).strip(), arguments=json.dumps(params, ensure_ascii=False))
