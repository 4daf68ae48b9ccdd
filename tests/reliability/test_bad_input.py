"""Bad input, table-driven, through a real gateway in front of the simulator: every malformed, mistyped,
absurd or odd-Unicode body gets either a correct answer or a 400 — never a 5xx — and every error is in
OpenAI shape ``{"error": {"message", "type", "param", "code"}}``. Afterwards no slot or queue place is
left taken. (Oversized bodies -> 413 are covered by ``tests/gateway/test_routes_and_auth.py``.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support.probes import wait_until

MODEL = "deepseek-v4-flash-0731"
CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
#: Short answers: thinking off, a few tokens.
FAST = {"max_tokens": 8, "reasoning_effort": "none"}

OK = (200,)
BAD = (400,)
EITHER = (200, 400)


def chat(content: Any = "hi", **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **FAST, **fields}


def text(prompt: Any = "Say hi", **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": prompt, "max_tokens": 8, **fields}


def raw_chat(content_json: str) -> bytes:
    """A chat body whose user content is ``content_json`` spliced in verbatim (escapes kept as sent)."""
    return (
        f'{{"model": "{MODEL}", "max_tokens": 8, "reasoning_effort": "none", '
        f'"messages": [{{"role": "user", "content": {content_json}}}]}}'
    ).encode()


@dataclass(frozen=True)
class Case:
    id: str
    body: Any  # bytes are sent as they are; anything else as JSON in UTF-8 (not \u-escaped)
    expect: tuple[int, ...]
    route: str = CHAT
    param: str | None = None  # the error's ``param`` when it must be reported
    answer: str | None = None  # a 200's answer must contain this


CASES = [
    # not JSON, or JSON that isn't an object
    Case("empty-body", b"", BAD),
    Case("invalid-json", b"{not json", BAD),
    Case("truncated-json", b'{"model": "deepseek-v4-flash-0731", "messages": [', BAD),
    Case("trailing-garbage", json.dumps(chat()).encode() + b"}", BAD),
    Case("json-array", b"[]", BAD),
    Case("json-string", b'"hello"', BAD),
    Case("json-number", b"42", BAD),
    Case("json-null", b"null", BAD),
    Case("json-true", b"true", BAD, route=TEXT),
    Case("deeply-nested", raw_chat("[" * 5000 + "]" * 5000), BAD),
    # wrong types
    Case("messages-string", {**chat(), "messages": "hi"}, BAD, param="messages"),
    Case("messages-of-strings", {**chat(), "messages": ["hi"]}, BAD, param="messages.0"),
    Case("messages-object", {**chat(), "messages": {"role": "user", "content": "hi"}}, BAD, param="messages"),
    Case("message-without-role", {**chat(), "messages": [{"content": "hi"}]}, BAD, param="messages.0.role"),
    Case("content-number", chat(42), BAD, param="messages.0.content"),
    Case("model-number", {**chat(), "model": 7}, BAD, param="model"),
    Case("model-missing", {"messages": [{"role": "user", "content": "hi"}]}, BAD, param="model"),
    Case("max-tokens-string", chat(max_tokens="ten"), BAD, param="max_tokens"),
    Case("max-tokens-float", chat(max_tokens=8.5), BAD, param="max_tokens"),
    Case("stream-yes", chat(stream="yes"), BAD, param="stream"),
    Case("stream-one", chat(stream=1), BAD, param="stream"),
    Case("stream-options-string", chat(stream=True, stream_options="yes"), BAD, param="stream_options"),
    Case("prompt-missing", {"model": MODEL}, BAD, route=TEXT, param="prompt"),
    Case("prompt-object", text({"a": 1}), BAD, route=TEXT, param="prompt"),
    Case("include-reasoning-string", chat(include_reasoning="yes"), BAD, param="include_reasoning"),
    Case("thinking-string", chat(thinking="maybe"), BAD, param="thinking"),
    Case("reasoning-effort-number", {**chat(), "reasoning_effort": 5}, BAD, param="reasoning_effort"),
    Case("template-kwargs-list", chat(chat_template_kwargs=[1]), BAD, param="chat_template_kwargs"),
    # content as a list of parts: forwarded as is (vLLM accepts it)
    Case(
        "content-parts",
        chat([{"type": "text", "text": "count from 1 to 5"}], max_tokens=64),
        OK,
        answer="1, 2, 3, 4, 5",
    ),
    Case(
        "content-parts-stream",
        chat([{"type": "text", "text": "count from 3 to 6"}], max_tokens=64, stream=True),
        OK,
        answer="3, 4, 5, 6",
    ),
    Case("content-null", chat(None), EITHER),
    Case("content-parts-of-strings", chat(["hi"]), EITHER),
    # absurd sizes
    Case("max-tokens-1e12", chat(max_tokens=10**12), BAD, param="max_tokens"),
    Case("max-tokens-2^63", chat(max_tokens=2**63), BAD, param="max_tokens"),
    Case("max-tokens-1e40", chat(max_tokens=10**40), BAD, param="max_tokens"),
    Case(
        "max-tokens-1e400",
        raw_chat('"hi"').replace(b'"max_tokens": 8', b'"max_tokens": 1e400'),
        BAD,
        param="max_tokens",
    ),
    Case("max-completion-tokens-2^63", chat(max_completion_tokens=2**63), BAD, param="max_completion_tokens"),
    Case("text-max-tokens-2^63", text(max_tokens=2**63), BAD, route=TEXT, param="max_tokens"),
    # negative and zero
    Case("max-tokens-negative", chat(max_tokens=-1), BAD, param="max_tokens"),
    Case("max-tokens-zero", chat(max_tokens=0), BAD, param="max_tokens"),
    Case(
        "max-completion-tokens-negative", chat(max_completion_tokens=-1), BAD, param="max_completion_tokens"
    ),
    Case("temperature-negative", chat(temperature=-5), BAD, param="temperature"),
    Case("text-temperature-negative", text(temperature=-5), BAD, route=TEXT, param="temperature"),
    Case("n-zero", chat(n=0), BAD, param="n"),
    Case("n-negative", text(n=-1), BAD, route=TEXT, param="n"),
    # non-finite numbers (not JSON, but Python-style parsers accept them): never forwarded
    Case("temperature-nan", raw_chat('"hi"').replace(b"{", b'{"temperature": NaN, ', 1), BAD),
    Case("extra-infinity", raw_chat('"hi"').replace(b"{", b'{"top_p": Infinity, ', 1), BAD),
    Case("nested-minus-infinity", raw_chat('"hi"').replace(b"{", b'{"x": {"y": [-Infinity]}, ', 1), BAD),
    # a field the route does not serve: refused, as OpenAI refuses an unrecognized argument
    Case("unknown-fields", chat(foo="bar", top_k=5, nested={"a": [1, None, {"b": True}]}), BAD),
    Case(
        "unknown-message-fields",
        {**chat(), "messages": [{"role": "user", "content": "hi", "name": "bob", "weird": {"x": [1]}}]},
        OK,
    ),
    Case(
        "vllm-extensions",
        chat(ignore_eos=False, repetition_penalty=1.1, chat_template_kwargs={"thinking": False}),
        OK,
    ),
    Case("include-metrics-string", chat(include_metrics="yes"), OK),
    Case("stream-options-without-stream", chat(stream_options={"include_usage": True}), EITHER),
    Case(
        "assistant-reasoning-number",
        {
            **chat(),
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "x", "reasoning_content": 5},
                {"role": "user", "content": "again"},
            ],
        },
        EITHER,
    ),
    Case("prompt-token-ids", text([1, 2, 3]), EITHER, route=TEXT),
    # Unicode
    Case("emoji", chat("count from 1 to 3 🚀🔥"), OK, answer="1, 2, 3"),
    Case("emoji-stream", chat("count from 4 to 6 👍🏽", stream=True), OK, answer="4, 5, 6"),
    Case("rtl", chat("مرحبا بالعالم \u202eabc\u202c שלום"), OK),
    Case("zero-width-joiners", chat("👨\u200d👩\u200d👧\u200d👦 a\u200bb\u200cc\u2060d"), OK),
    Case("combining-marks", chat("e\u0301" * 50 + "\ufeff in the middle"), OK),
    Case("nul-char", chat("a\u0000b"), OK),
    Case("nul-char-prompt", text("a\u0000b"), OK, route=TEXT),
    Case("nul-in-model", {**chat(), "model": "deepseek\u0000"}, (404,)),
    Case("unicode-model", {**chat(), "model": "模型-🚀"}, (404,)),
    Case("escaped-surrogate-pair", raw_chat('"\\ud83d\\ude00 count from 1 to 3"'), OK, answer="1, 2, 3"),
    Case("lone-high-surrogate", raw_chat('"a\\ud800"'), EITHER),
    Case("lone-high-surrogate-mid", raw_chat('"a\\ud800b"'), EITHER),
    Case("lone-low-surrogate", raw_chat('"\\udc00"'), EITHER),
    Case("lone-surrogate-in-key", raw_chat('"hi"').replace(b"{", b'{"\\ud800": 1, ', 1), EITHER),
    Case(
        "lone-surrogate-prompt",
        b'{"model": "%s", "prompt": "\\udfff", "max_tokens": 4}' % MODEL.encode(),
        EITHER,
        route=TEXT,
    ),
    Case("invalid-utf8", raw_chat('"a"').replace(b'"a"', b'"a\xff\xfe b"'), BAD),
    Case("invalid-utf8-continuation", raw_chat('"a"').replace(b'"a"', b'"a\x80"'), BAD),
    Case("overlong-utf8", raw_chat('"a"').replace(b'"a"', b'"\xc0\xaf"'), BAD),
    Case("utf8-surrogate-bytes", raw_chat('"a"').replace(b'"a"', b'"\xed\xa0\x80"'), BAD),
    Case("bom", b"\xef\xbb\xbf" + raw_chat('"hi"'), EITHER),
    Case("utf16", raw_chat('"hi"').decode().encode("utf-16"), EITHER),
]


def assert_openai_error(response: httpx.Response) -> dict[str, Any]:
    """An error body in OpenAI shape (and JSON, whatever went wrong)."""
    assert response.headers["content-type"].startswith("application/json"), response.headers
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    assert error["param"] is None or isinstance(error["param"], str)
    assert error["code"] is None or isinstance(error["code"], str)
    assert "Traceback" not in response.text
    return error


def _members(param: str, reported: str | None) -> tuple[str, ...]:
    """``reported`` if it is ``param`` plus one union-member segment (``messages.0.content.str``)."""
    if reported and reported.startswith(param + ".") and "." not in reported[len(param) + 1 :]:
        return (reported,)
    return ()


def answer_of(response: httpx.Response, stream: bool) -> str:
    """A 200's generated text (chat content or completion text), checking the response's shape."""
    if not stream:
        choice = response.json()["choices"][0]
        return choice["message"]["content"] or "" if "message" in choice else choice["text"]
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert events and events[-1] == "[DONE]", response.text[-500:]
    parts = []
    for event in events[:-1]:
        chunk = json.loads(event)
        assert "error" not in chunk, chunk
        for choice in chunk["choices"]:
            parts.append(choice["delta"].get("content") or "" if "delta" in choice else choice["text"])
    return "".join(parts)


@pytest.fixture
def stack(start_sim, start_gateway, make_key):
    sim = start_sim()
    gateway = start_gateway(sim.url)
    return gateway, make_key("fuzz-client"), make_key("ops", scopes=["admin"])


def test_bad_input_table(stack, subtests) -> None:
    gateway, key, admin = stack
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=30) as client:
        for case in CASES:
            with subtests.test(case.id):
                body = case.body
                if not isinstance(body, bytes):
                    body = json.dumps(body, ensure_ascii=False).encode()
                response = client.post(case.route, content=body)
                assert response.status_code < 500, response.text
                assert response.status_code in case.expect, (response.status_code, response.text)
                if response.status_code >= 400:
                    error = assert_openai_error(response)
                    if case.param is not None:  # pydantic may add the union member: "prompt.str"
                        assert error["param"] in (case.param, *_members(case.param, error["param"])), error
                    continue
                stream = response.headers["content-type"].startswith("text/event-stream")
                answer = answer_of(response, stream)
                if case.answer is not None:
                    assert case.answer in answer, answer

    def idle() -> bool:
        status = httpx.get(gateway.url + "/admin/status", headers={"Authorization": f"Bearer {admin}"}).json()
        return status["slots_in_use"] == 0 and status["queue_depth"] == 0

    wait_until(idle, what="no slot in use and an empty queue")
