"""The production proof: every gate in order, each isolated (an exception is that gate's FAIL).

Gate order and what PASS means (details in each gate's docstring):

=================== ================================================================================
``model_listed``    ``GET /models`` lists the model
``stream_done_usage`` raw SSE ends with ``[DONE]``, exactly one ``usage`` block
``tool_call``       tools=[get_weather], tool_choice=auto -> a call with JSON arguments
``tool_result``     the tool result sent back -> a content answer that uses it
``json_schema``     strict ``json_schema`` response_format -> JSON matching the schema
``reasoning_on``    ``reasoning_effort: low`` -> non-empty reasoning
``reasoning_off``   ``reasoning_effort: none`` -> no reasoning, content present
``retrieval``       key hidden in ~N tokens of filler -> the key in the answer
``restart``         ``--restart-cmd`` exits 0, ``/models`` lists the model again, one chat answers
=================== ================================================================================

Every request is sent with ``temperature: 0`` (greedy), so exact answers (retrieval key, JSON, tool
arguments) do not depend on sampling luck. If ``model_listed`` fails, the later gates still run and
report their own errors.

Against the simulator (:class:`dspark_qualify.target.Target`), a gate it cannot pass
(:data:`SIMULATOR_CANNOT`) that answers FAIL becomes NOT-APPLICABLE, reason ``n/a (simulator): …``;
one that raised (no answer at all) stays a FAIL, so a broken gateway still shows.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import Any

from dspark_qualify.feature_gates import gate_json_schema, gate_retrieval, gate_tool_call, gate_tool_result
from dspark_qualify.protocol_gates import (
    gate_model_listed,
    gate_reasoning_off,
    gate_reasoning_on,
    gate_stream_done_usage,
    list_models,
)
from dspark_qualify.result import GateResult, ProofContext, Status
from dspark_qualify.stream import reasoning_of
from dspark_qualify.urls import public_url

__all__ = ["GATES", "SIMULATOR_CANNOT", "gate_restart", "on_simulator", "proof_report", "run_proof"]

Gate = Callable[[ProofContext], GateResult]


def gate_restart(ctx: ProofContext) -> GateResult:
    """Run ``--restart-cmd`` (shell), wait for ``/models`` to list the model again, then one chat."""
    if not ctx.restart_cmd:
        return GateResult("restart", Status.NOT_APPLICABLE, "no --restart-cmd given")
    deadline = time.monotonic() + ctx.restart_timeout_s
    done = subprocess.run(  # noqa: S602 - the operator's own command
        ctx.restart_cmd, shell=True, capture_output=True, text=True, timeout=ctx.restart_timeout_s
    )
    if done.returncode != 0:
        return GateResult(
            "restart", Status.FAIL, f"restart command exited {done.returncode}: {done.stderr[-300:]}"
        )
    waited_for = ""
    while True:
        try:
            if ctx.model in list_models(ctx):
                break
            waited_for = f"{ctx.model!r} not listed"
        except Exception as exc:
            waited_for = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            return GateResult(
                "restart", Status.FAIL, f"not back within {ctx.restart_timeout_s:g} s ({waited_for})"
            )
        time.sleep(1.0)
    back_s = ctx.restart_timeout_s - (deadline - time.monotonic())
    assert ctx.model is not None
    reply = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=[{"role": "user", "content": "Reply with OK."}],
        max_tokens=min(ctx.max_tokens, 64),
        temperature=0,
    )
    message = reply.choices[0].message
    if (message.content or "").strip() or reasoning_of(message.model_extra).strip():
        return GateResult(
            "restart", Status.PASS, f"back after {back_s:.1f} s, chat answered", {"back_s": back_s}
        )
    return GateResult("restart", Status.FAIL, "back, but the chat answer is empty", {"back_s": back_s})


GATES: tuple[Gate, ...] = (
    gate_model_listed,
    gate_stream_done_usage,
    gate_tool_call,
    gate_tool_result,
    gate_json_schema,
    gate_reasoning_on,
    gate_reasoning_off,
    gate_retrieval,
    gate_restart,
)


#: Gates the simulator cannot pass, and why (``dspark_sim``'s module doc describes its behaviour).
SIMULATOR_CANNOT: dict[str, str] = {
    "tool_call": "it calls a tool only when the prompt says #sim:call",
    "json_schema": "it ignores response_format",
    "retrieval": "it does not read the prompt",
}


def on_simulator(result: GateResult) -> GateResult:
    """``result`` as it counts against the simulator: a FAIL of a gate it cannot pass is n/a."""
    why = SIMULATOR_CANNOT.get(result.gate)
    if why is None or result.status is not Status.FAIL:
        return result
    return replace(result, status=Status.NOT_APPLICABLE, reason=f"n/a (simulator): {why}; {result.reason}")


def _gate_name(gate: Gate) -> str:
    return gate.__name__.removeprefix("gate_")


def run_proof(ctx: ProofContext, on_gate: Callable[[GateResult], None] | None = None) -> list[GateResult]:
    """Run every gate; an exception becomes that gate's FAIL with the error as reason."""
    results: list[GateResult] = []
    for gate in GATES:
        start = time.perf_counter()
        try:
            result = gate(ctx)
            if ctx.simulator:
                result = on_simulator(result)
        except Exception as exc:
            result = GateResult(_gate_name(gate), Status.FAIL, f"{type(exc).__name__}: {str(exc)[:300]}")
        result.seconds = round(time.perf_counter() - start, 3)
        results.append(result)
        if on_gate is not None:
            on_gate(result)
    return results


def proof_report(ctx: ProofContext, results: list[GateResult]) -> dict[str, Any]:
    """JSON-ready report: environment (no credentials), gates, and the overall verdict."""
    failed = [r.gate for r in results if r.status is Status.FAIL]
    return {
        "environment": {
            "model": ctx.model,
            "base_url": public_url(ctx.base_url),
            "target": ctx.target.as_json() if ctx.target else None,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "context_tokens": ctx.context_tokens,
            "max_tokens": ctx.max_tokens,
            "restart_cmd_given": bool(ctx.restart_cmd),
        },
        "gates": [{**asdict(r), "status": str(r.status)} for r in results],
        "passed": not failed,
        "failed": failed,
    }
