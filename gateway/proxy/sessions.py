"""Which agent session a request belongs to, scoped to its key: what lets admission hold a session's
prefix in the backend's cache between its turns (:mod:`gateway.admission.scheduler`).

An agent names its session (checked with the CLIs the tests run, their versions in
``tests/agents``): Claude Code sends ``X-Claude-Code-Session-Id`` (and the same id as ``session_id``
in the JSON string of ``metadata.user_id``), Codex CLI ``session-id`` (and ``prompt_cache_key``); any
client may send ``x-session-id`` (or the gateway's ``x-session-affinity``). Without one, the session
is a fingerprint of the conversation's beginning: its instructions and first message, which every
later turn repeats. Whatever the source, the session is a digest of the key's id and that name: a
session id sent by another key is another session, and no client string is kept.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from dspark_common import json_codec

#: Headers naming a session, the first one present winning.
SESSION_HEADERS = ("x-session-id", "x-session-affinity", "x-claude-code-session-id", "session-id")
#: Roles of the messages a conversation opens with before its first question.
INSTRUCTION_ROLES = ("system", "developer")
#: The longest session name taken from a header or a field; a longer one is not a session's name.
MAX_NAME_CHARS = 256


def session_of(key_id: str, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """The request's session, 16 hex digits scoped to ``key_id``; None when nothing names or
    fingerprints one (a body with no conversation)."""
    name = _named(headers, body) or _fingerprint(body)
    if name is None:
        return None
    return hashlib.sha256(f"{key_id}\0{name}".encode()).hexdigest()[:16]


def _named(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    for header in SESSION_HEADERS:
        value = headers.get(header)
        if value and len(value) <= MAX_NAME_CHARS:
            return value
    metadata = body.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user, str) and user.startswith("{") and len(user) <= 4 * MAX_NAME_CHARS:
        try:
            session = json_codec.loads(user).get("session_id")
        except (ValueError, AttributeError):
            session = None
        if isinstance(session, str) and session and len(session) <= MAX_NAME_CHARS:
            return session
    key = body.get("prompt_cache_key")
    return key if isinstance(key, str) and key and len(key) <= MAX_NAME_CHARS else None


def _fingerprint(body: Mapping[str, Any]) -> str | None:
    """The conversation's beginning: its instructions (``system``, ``instructions``, leading system or
    developer messages) and first message after them (``messages``, ``input``), as JSON; None
    without a conversation."""
    turns = body.get("messages")
    if not isinstance(turns, list):
        turns = body.get("input") if isinstance(body.get("input"), list) else None
    if not turns:
        return None
    start = [body.get("system"), body.get("instructions")]
    for turn in turns:
        start.append(turn)
        if not (isinstance(turn, dict) and turn.get("role") in INSTRUCTION_ROLES):
            break
    return "fp:" + hashlib.sha256(json_codec.dumps(start)).hexdigest()
