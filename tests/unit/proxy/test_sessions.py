"""Which session a request is a turn of (gateway/proxy/sessions.py), from what the agents send — the
headers and body fields below are those Claude Code 2.1 and Codex CLI 0.169 sent through the gateway
in tests/agents — or a fingerprint of the conversation; scoped to the key."""

from __future__ import annotations

import json

from gateway.proxy.sessions import session_of

CLAUDE_ID = "fc17c8fe-64c1-4f33-b208-43bcace90410"
CLAUDE_USER = json.dumps({"device_id": "cfbb96", "account_uuid": "", "session_id": CLAUDE_ID})
CODEX_ID = "01a24b69-2e67-74a1-bb4b-937ef8aebf74"
HI = [{"role": "user", "content": "hi"}]


def test_each_agents_own_name_is_its_session() -> None:
    by_header = session_of("k1", {"x-claude-code-session-id": CLAUDE_ID}, {"messages": HI})
    by_metadata = session_of("k1", {}, {"messages": HI, "metadata": {"user_id": CLAUDE_USER}})
    assert by_header == by_metadata == session_of("k1", {"x-session-id": CLAUDE_ID}, {})
    codex = session_of("k1", {"session-id": CODEX_ID}, {"input": HI, "prompt_cache_key": CODEX_ID})
    assert codex == session_of("k1", {}, {"input": [], "prompt_cache_key": CODEX_ID})
    assert session_of("k2", {"x-claude-code-session-id": CLAUDE_ID}, {}) != by_header  # another key's


def test_without_a_name_the_conversations_beginning_is_its_session() -> None:
    system = [{"role": "system", "content": "be brief"}]
    first = session_of("k1", {}, {"messages": system + HI})
    later = session_of("k1", {}, {"messages": system + HI + [{"role": "assistant", "content": "hello"}] + HI})
    assert first == later != session_of("k1", {}, {"messages": system + [{"role": "user", "content": "bye"}]})
    assert session_of("k1", {}, {"model": "m", "prompt": "text"}) is None


def test_what_is_not_a_name_is_not_taken_as_one() -> None:
    long = "x" * 300
    assert session_of("k1", {"x-session-id": long}, {}) is None
    odd = {"messages": HI, "metadata": {"user_id": "{not json"}}
    assert session_of("k1", {}, odd) == session_of("k1", {}, {"messages": HI})
