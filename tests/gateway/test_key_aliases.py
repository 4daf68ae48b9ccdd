"""A key's own model aliases (``api_keys.aliases``): stored and changed by the key store, and, through a
real gateway in front of the simulator with the OpenAI SDK as the client, resolved before the gateway's
own (``GATEWAY_MODEL_ALIASES``) and listed by ``/v1/models``."""

from __future__ import annotations

import openai
import pytest

from gateway.auth import KeyStore

MODEL = "deepseek-v4-flash-0731"
ASK = [{"role": "user", "content": "Count to 2."}]


async def test_the_store_round_trips_a_keys_aliases(database_url: str) -> None:
    store = await KeyStore.open(database_url)
    try:
        record, _ = await store.create("team", aliases={"team-model": MODEL})
        assert record.aliases == {"team-model": MODEL}
        assert (await store.get("team")).aliases == {"team-model": MODEL}
        assert [r.public(record.created_at)["aliases"] for r in await store.list()] == [{"team-model": MODEL}]
        changed = await store.update("team", {"aliases": {"mine": MODEL, "other": "m2"}})
        assert changed.aliases == (await store.get(record.id)).aliases == {"mine": MODEL, "other": "m2"}
        assert (await store.update("team", {"aliases": None})).aliases is None
        assert (await store.get("team")).aliases is None
        for bad in ({"": MODEL}, {"x": ""}, {"x": 1}, {str(n): MODEL for n in range(65)}, ["x"]):
            with pytest.raises(ValueError, match="alias"):
                await store.update("team", {"aliases": bad})
            with pytest.raises(ValueError, match="alias"):
                await store.create(f"bad-{len(bad)}", aliases=bad)
        assert [r.name for r in await store.list()] == ["team"]
    finally:
        await store.close()


def test_a_keys_aliases_win_over_the_gateways_and_are_listed(start_sim, start_gateway, make_key) -> None:
    gateway = start_gateway(start_sim().url, model_aliases="claude-*,gpt-5-codex")
    own = make_key("own", aliases={"team-model": MODEL, "claude-opus-4": "elsewhere", "gpt-5-codex": "x"})
    plain = make_key("plain")
    mine = openai.OpenAI(base_url=gateway.url + "/v1", api_key=own, max_retries=0)
    theirs = openai.OpenAI(base_url=gateway.url + "/v1", api_key=plain, max_retries=0)

    answer = mine.chat.completions.create(model="team-model", messages=ASK, max_tokens=20)
    assert answer.model == MODEL and answer.choices[0].finish_reason == "length"
    with pytest.raises(openai.NotFoundError, match="`elsewhere` does not exist"):  # not the gateway's glob
        mine.chat.completions.create(model="claude-opus-4", messages=ASK)
    assert theirs.chat.completions.create(model="claude-opus-4", messages=ASK, max_tokens=20).model == MODEL
    with pytest.raises(openai.NotFoundError, match="`team-model` does not exist"):  # another key's alias
        theirs.chat.completions.create(model="team-model", messages=ASK)

    assert [m.id for m in mine.models.list()] == [MODEL, "team-model"]  # gpt-5-codex: redirected
    assert mine.models.retrieve("team-model").id == "team-model"
    assert [m.id for m in theirs.models.list()] == [MODEL, "gpt-5-codex"]
