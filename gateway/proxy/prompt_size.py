"""A request's prompt size in tokens before admission: counted by the backend when it matters,
estimated when it doesn't or can't be.

The backend's count (:mod:`gateway.dialects.prompt_count`) is exact but costs a loopback round trip
and a tokenization (seconds for a 1M-token prompt), so it is asked only for bodies of at least
``GATEWAY_TOKENIZE_MIN_BYTES``: a smaller body holds at most as many tokens as bytes, too few to be a
long prompt or to matter to the KV pool. Otherwise, and whenever the backend can't answer (no
tokenizer route, an error, ``GATEWAY_TOKENIZE_TIMEOUT_S`` passed), the size is estimated at 4 bytes
of JSON a token, and the record says so. Nothing is cached: a count's request holds prompt text.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from dspark_common import json_codec
from dspark_common.turns import Turns
from gateway.backends.counting import CountBusy, CountGate
from gateway.backends.token_ids import PIECE_BYTES, parse_ids, split_answer
from gateway.backends.upstream import Upstream
from gateway.config import Settings
from gateway.dialects.prompt_count import EitherCount, TokenCount
from gateway.errors import GatewayError

log = logging.getLogger("gateway.admission")

#: Bytes of request JSON per token of the estimate.
BYTES_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class PromptSize:
    """``tokens`` of prompt, and where the figure comes from: ``tokenize`` (the backend counted it)
    or ``estimate`` (:data:`BYTES_PER_TOKEN`); ``counts_prompts``: what the backend showed of its
    prompt counts (True: it answered one; False: it has no count route; None: it was not asked);
    ``token_ids``: the prompt's ids when the count gave them (vLLM's ``/tokenize`` ``tokens``, as
    ``uint32``: :mod:`gateway.backends.token_ids`), else
    ``unmatched``, why not: ``prompt_estimated`` (not counted), ``image`` / ``unconverted``
    (:attr:`~gateway.dialects.prompt_count.TokenCount.unmatched`) or ``no_ids`` (the backend's answer
    held none)."""

    tokens: int
    source: Literal["tokenize", "estimate"]
    counts_prompts: bool | None = None
    token_ids: NDArray[np.uint32] | None = None
    unmatched: str | None = None


def estimate(size: int) -> PromptSize:
    """The estimate for a body of ``size`` bytes (at least 1 token)."""
    return PromptSize(max(1, size // BYTES_PER_TOKEN), "estimate", unmatched="prompt_estimated")


async def prompt_size(
    counts: CountGate,
    key: str,
    counts_prompts: bool | None,
    settings: Settings,
    count: TokenCount | EitherCount | None,
    size: int,
    headers: dict[str, str],
) -> PromptSize:
    """The prompt's size: the backend's count of ``count`` for a body of ``size`` bytes at least
    ``settings.tokenize_min_bytes``, sent within ``counts``' bound as ``key``'s (waiting in line for
    it within the timeout), else (or if it can't be had, or ``key`` has its share of counts in
    flight) the estimate; never when the backend showed it has no count route
    (``counts_prompts`` False). An :class:`EitherCount` asks its check, then its forms in turn
    until one counts the same. Never raises a :class:`GatewayError`: the request itself will meet
    whatever the backend has to say."""
    if count is None or size < settings.tokenize_min_bytes or counts_prompts is False:
        return estimate(size)
    asked = count.check if isinstance(count, EitherCount) else count
    # a count that fails for a prompt the gateway could not have matched anyway keeps that reason
    fallback = estimate(size)
    if isinstance(count, TokenCount) and count.unmatched is not None:
        fallback = replace(fallback, unmatched=count.unmatched)
    try:
        async with asyncio.timeout(settings.tokenize_timeout_s), counts.hold(key) as upstream:
            tokens, ids = await _ask(upstream, asked, headers)
            if isinstance(count, EitherCount):
                ids = await _matching_form(upstream, count.forms, tokens, headers)
    except CountBusy:
        return fallback
    except GatewayError as error:
        if error.status == 404:
            log.warning("the backend has no %s route: prompt sizes are estimated", asked.path)
            return replace(fallback, counts_prompts=False)
        return fallback
    except (TimeoutError, ValueError):
        return fallback
    if ids is None:
        return PromptSize(tokens, "tokenize", counts_prompts=True, unmatched=asked.unmatched or "no_ids")
    return PromptSize(tokens, "tokenize", counts_prompts=True, token_ids=ids)


async def _ask(
    upstream: Upstream, count: TokenCount, headers: dict[str, str]
) -> tuple[int, NDArray[np.uint32] | None]:
    """The backend's count of ``count``, and the ids when its answer holds them (``/tokenize``'s
    ``tokens``, parsed in pieces: :mod:`gateway.backends.token_ids`); raises ``ValueError`` for an
    answer with no count."""
    response = await upstream.open("POST", count.path, json_codec.dumps(count.body), headers)
    try:
        body = await response.read()
    finally:
        response.close()
    if len(body) > PIECE_BYTES:
        await asyncio.sleep(0)  # its last bytes were joined in this turn: a 1M-token answer is 7 MB
    answer, ids_at = split_answer(body)
    tokens = answer.get(count.field) if isinstance(answer, dict) else None
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        raise ValueError(f"no {count.field} in the answer")
    if ids_at is None:
        return tokens, None
    return tokens, await Turns().run(parse_ids(body, ids_at, tokens))


async def _matching_form(
    upstream: Upstream, forms: tuple[TokenCount, ...], tokens: int, headers: dict[str, str]
) -> NDArray[np.uint32] | None:
    """The ids of the first of ``forms`` the backend counts as ``tokens``, None if none."""
    for form in forms:
        counted, ids = await _ask(upstream, form, headers)
        if counted == tokens and ids is not None:
            return ids
    return None
