"""Fault-injection directives read from the last user message (chat) or the prompt (completions).

Syntax: ``#sim:<name>=<value>``, several allowed in one message. See the package docstring for what
each one does. An unknown name or a bad value is a 400, so a typo never silently passes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import SimError

_DIRECTIVE = re.compile(r"#sim:([A-Za-z_]+)=([^\s#]+)")


@dataclass(frozen=True, slots=True)
class Faults:
    """Faults to inject into one request (all off by default)."""

    status: int | None = None
    """Answer with this HTTP status (400..599) and an error body instead of generating."""
    die_after: int | None = None
    """Streams only: cut the connection after this many SSE data events, with no ``[DONE]``."""
    stall_s: float = 0.0
    """Sleep this long, seconds, before anything is sent (before admission to a slot)."""
    decode_tps: float | None = None
    """This sequence's decode speed, tokens/s, instead of the server's ``--decode-tps``."""
    ignore_max_tokens: bool = False
    """Generate as if the request set no output cap (an upstream that ignores the one it was given)."""


def parse_faults(text: str) -> Faults:
    """Read every ``#sim:`` directive in ``text``; raise a 400 ``SimError`` for a malformed one."""
    values: dict[str, object] = {}
    for name, raw in _DIRECTIVE.findall(text):
        try:
            if name == "status":
                status = int(raw)
                if not 400 <= status <= 599:
                    raise ValueError(raw)
                values["status"] = status
            elif name == "die_after":
                count = int(raw)
                if count < 0:
                    raise ValueError(raw)
                values["die_after"] = count
            elif name == "stall":
                seconds = float(raw)
                if not 0 <= seconds <= 3600:
                    raise ValueError(raw)
                values["stall_s"] = seconds
            elif name == "decode_tps":
                speed = float(raw)
                if not 0 < speed <= 1e6:
                    raise ValueError(raw)
                values["decode_tps"] = speed
            elif name == "ignore_max_tokens":
                if raw not in ("0", "1"):
                    raise ValueError(raw)
                values["ignore_max_tokens"] = raw == "1"
            else:
                raise SimError(400, f"unknown simulator directive #sim:{name}", param="messages")
        except ValueError:
            raise SimError(400, f"bad value for #sim:{name}: {raw!r}", param="messages") from None
    return Faults(**values)  # type: ignore[arg-type]
