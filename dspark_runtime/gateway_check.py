"""Check the gateway's env file (``deploy/.env``) against the profile vLLM runs: the settings that must
agree between them, each disagreement a :class:`~dspark_runtime.check.Problem` (``where`` =
``gateway``).

The gateway reads these settings as ``gateway.config.Settings`` does: a variable set in the file wins;
one left out comes from ``GATEWAY_RUNTIME_PROFILE``'s profile (:func:`gateway_defaults`); with
neither, the gateway's own default, which knows nothing of this profile — refused here for the KV
cache events (the gateway would subscribe to none and size every request by an estimate of vLLM's
prefix cache: docs/prefix-cache.md) and for the rest alike, as the profile is the one place they come
from. Pure: values in, problems out.
"""

from __future__ import annotations

from collections.abc import Mapping

from dspark_runtime.check import Problem
from dspark_runtime.defaults import gateway_defaults
from dspark_runtime.profile import ProfileError, RuntimeProfile, load_profile

#: ``(GatewayDefaults key, gateway env variable, what a disagreement does)``.
_AGREED = (
    (
        "kv_events",
        "GATEWAY_KV_EVENTS",
        "the gateway would not read vLLM's KV cache events and would size requests by an estimate of "
        "its prefix cache",
    ),
    ("kv_events_replay", "GATEWAY_KV_EVENTS_REPLAY", "a gateway started late could not catch up"),
    ("slots", "GATEWAY_SLOTS", "requests would wait inside vLLM, outside the gateway's queue (or idle)"),
    ("served_model", "GATEWAY_SERVED_MODEL", "requests would name a model vLLM does not serve"),
    ("kv_block_size", "GATEWAY_KV_BLOCK_SIZE", "every KV event would be ignored (another block size)"),
)
_FALSE = {"0", "false", "no", "off"}


def _endpoints(value: str) -> list[str]:
    """The endpoints of a ``GATEWAY_KV_EVENTS``-style list: ``name=endpoint`` or bare, comma-separated."""
    entries = (part.strip() for part in value.split(","))
    return [entry.partition("=")[2] if "=" in entry.split("://")[0] else entry for entry in entries if entry]


def check_gateway(profile: RuntimeProfile, env: Mapping[str, str]) -> list[Problem]:
    """Problems of the gateway env ``env`` (its ``GATEWAY_*`` variables) with vLLM run by ``profile``."""
    problems: list[Problem] = []
    named = env.get("GATEWAY_RUNTIME_PROFILE", "")
    from_profile: Mapping[str, object] = {}
    if named:
        try:
            from_profile = gateway_defaults(load_profile(named))
        except ProfileError as exc:
            problems.append(
                Problem("gateway", "GATEWAY_RUNTIME_PROFILE", f"the gateway cannot load it: {exc}")
            )
    expected = gateway_defaults(profile)
    for key, variable, consequence in _AGREED:
        want = str(expected[key])  # type: ignore[literal-required]
        if variable in env:
            have, origin = env[variable], variable
        elif key in from_profile:
            have, origin = str(from_profile[key]), f"GATEWAY_RUNTIME_PROFILE={named}'s"
        else:
            problems.append(
                Problem(
                    "gateway",
                    variable,
                    f"unset, and no GATEWAY_RUNTIME_PROFILE: {consequence}; set "
                    f"GATEWAY_RUNTIME_PROFILE={profile.name} (or {variable}={want})",
                )
            )
            continue
        agrees = want in _endpoints(have) if key.startswith("kv_events") else have == want
        if not agrees:
            problems.append(
                Problem(
                    "gateway",
                    variable,
                    f"{origin} {have!r}, vLLM's (profile {profile.name}) {want!r}: {consequence}",
                )
            )
    if env.get("GATEWAY_KV_EVENTS_BIND", "").lower() not in {"", *_FALSE}:
        problems.append(
            Problem(
                "gateway",
                "GATEWAY_KV_EVENTS_BIND",
                "vLLM binds its ipc:// KV event sockets itself: the gateway must connect (unset it)",
            )
        )
    if env.get("GATEWAY_PREFIX_CACHING", "").lower() in _FALSE:
        problems.append(
            Problem(
                "gateway",
                "GATEWAY_PREFIX_CACHING",
                "false, but vLLM keeps a prefix cache (--enable-prefix-caching): every prompt would be "
                "sized whole and no event read",
            )
        )
    return problems
