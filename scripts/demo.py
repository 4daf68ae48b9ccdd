"""The README's first command: a real round trip through the gateway, then everything stopped.

Starts ``dspark-gateway serve`` (no upstream configured, so it starts the built-in simulator and says
so), creates an API key with ``dspark-gateway keys create``, streams one chat completion through the
gateway with the official OpenAI SDK printing reasoning and answer separately, and stops the server.
Uses a throwaway database; nothing is left behind.
"""

from __future__ import annotations

from local_gateway import local_gateway
from openai import OpenAI


def show_prefix_cache(client: OpenAI) -> None:
    """Two turns of one long conversation: the second finds the first's prompt in the backend's
    prefix cache, as the gateway predicted from its KV events (docs/prefix-cache.md)."""
    print("\nTwo turns of a long conversation (the second re-sends the first):")
    conversation = [{"role": "user", "content": "Review this module line by line. " * 600}]
    for turn in (1, 2):
        answer = client.chat.completions.with_raw_response.create(
            model="deepseek-v4-flash-0731",
            messages=conversation,
            max_tokens=16,
            extra_headers={"x-gateway-telemetry": "1"},
        ).parse()
        seen = (answer.model_extra or {})["telemetry"]
        print(
            f"  turn {turn}: {seen['prompt_tokens']} prompt tokens, {seen['cached_tokens_predicted']} "
            f"predicted cached by the gateway, {seen['cached_tokens']} cached by the backend, "
            f"answered in {seen['e2e_s']:.2f} s"
        )
        conversation += [
            {"role": "assistant", "content": answer.choices[0].message.content or ""},
            {"role": "user", "content": "And the next one?"},
        ]


def main() -> None:
    with local_gateway() as gateway:
        print(f"$ dspark-gateway serve --port {gateway.port}   (no upstream: built-in simulator)")
        print("$ dspark-gateway keys create demo")
        created = gateway.cli("keys", "create", "demo")
        print(created.rstrip().rsplit("\n", 1)[0])
        key = created.strip().splitlines()[-1]
        client = OpenAI(base_url=gateway.url + "/v1", api_key=key)
        print("\nStreaming a chat completion through the gateway with the OpenAI SDK:\n")
        stream = client.chat.completions.create(
            model="deepseek-v4-flash-0731",
            messages=[{"role": "user", "content": "Count from 1 to 10."}],
            stream=True,
        )
        section = None
        for chunk in stream:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            for name, text in (
                ("reasoning", (delta.model_extra or {}).get("reasoning")),
                ("answer", delta.content),
            ):
                if text:
                    if section != name:
                        print(f"\n[{name}] ", end="")
                        section = name
                    print(text, end="", flush=True)
        print("\n\nRound trip OK.")
        show_prefix_cache(client)
        print("\nStopping the gateway.")


if __name__ == "__main__":
    main()
