"""JWT bearer tokens (python-jose): short-lived gateway-minted tokens and an external identity provider.

Two trust roots, each with its algorithms fixed by configuration — a token never chooses how it is
verified:

- **gateway-minted** (``dspark-gateway token``): HS256 with ``GATEWAY_JWT_SECRET``, issuer
  ``GATEWAY_JWT_ISSUER``, audience ``GATEWAY_JWT_AUDIENCE``;
- **identity provider**: public keys from a JWKS file (``GATEWAY_JWT_JWKS_FILE``), algorithms
  ``GATEWAY_JWT_IDP_ALGORITHMS`` (default RS256), issuer and audience required.

A token's header ``alg`` only picks which of the two roots to try; ``none`` and any algorithm outside the
chosen root's list are rejected, so an RS256 public key is never used as an HMAC secret (the HS/RS
confusion attack, CVE-2016-10555 class). An identity provider's token is checked against the one JWKS
key its ``kid`` names whose type (``kty``) fits its algorithm (or the only such key, when it names
none): python-jose, given the whole set, would try to build every key with the token's algorithm
and fail on one of another type. Every JOSE failure is a 401; so is an ``iat`` in the future (beyond
:data:`LEEWAY_S`). Claims map to a :class:`Principal`: ``iss`` and ``sub`` -> id and name
(:func:`principal_ids`), ``scope`` (space-separated)
or ``scopes`` (list), ``models``, ``rpm``, ``tpm``, ``max_concurrency``, ``priority``.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jose import jwt
from jose.exceptions import JOSEError

from gateway.auth.principal import Principal
from gateway.errors import GatewayError

HMAC_ALGORITHMS = ("HS256",)
#: Claims every token must carry: python-jose skips the audience check when ``aud`` is absent (a token
#: minted for another service would pass) and accepts a token without ``exp`` forever.
REQUIRED_CLAIMS = {"require_aud": True, "require_exp": True, "require_iss": True}
#: Clock skew allowed between the gateway and a token's issuer, seconds (an ``iat`` this far ahead).
LEEWAY_S = 60
#: JWK key type (RFC 7518 section 6.1) of each algorithm family.
KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC"}


def _invalid(reason: str) -> GatewayError:
    return GatewayError(
        "invalid_api_key", f"Invalid bearer token: {reason}.",
        headers={"WWW-Authenticate": 'Bearer realm="dspark-gateway", error="invalid_token"'},
    )  # fmt: skip


def looks_like_jwt(token: str) -> bool:
    """Three base64url segments separated by dots."""
    return token.count(".") == 2 and not token.startswith("dsk-")


@dataclass(frozen=True, slots=True)
class TokenConfig:
    """Trust settings. ``secret`` None disables gateway tokens; ``jwks`` None disables the IdP."""

    secret: str | None
    issuer: str
    audience: str
    jwks: dict[str, Any] | None = None
    idp_issuer: str | None = None
    idp_audience: str | None = None
    idp_algorithms: tuple[str, ...] = ("RS256",)

    @classmethod
    def load(
        cls,
        secret: str | None,
        issuer: str,
        audience: str,
        jwks_file: str | None,
        idp_issuer: str | None,
        idp_audience: str | None,
        idp_algorithms: tuple[str, ...],
    ) -> TokenConfig:
        """Read the JWKS file (if any). Raises ``ValueError`` on an unusable configuration."""
        jwks = json.loads(Path(jwks_file).read_text()) if jwks_file else None
        if jwks is not None and not (idp_issuer and idp_audience):
            raise ValueError(
                "GATEWAY_JWT_JWKS_FILE needs GATEWAY_JWT_IDP_ISSUER and GATEWAY_JWT_IDP_AUDIENCE"
            )
        if any(a.upper().startswith("HS") or a.lower() == "none" for a in idp_algorithms):
            raise ValueError("identity-provider algorithms must be asymmetric (RS*/ES*/PS*)")
        return cls(secret, issuer, audience, jwks, idp_issuer, idp_audience, idp_algorithms)


def mint(config: TokenConfig, subject: str, scopes: list[str], ttl_s: float, **claims: Any) -> str:
    """A gateway token (HS256) for ``subject`` with ``scopes``, valid ``ttl_s`` seconds.

    Raises ``ValueError`` if no secret is configured.
    """
    if not config.secret:
        raise ValueError("GATEWAY_JWT_SECRET is not set")
    now = int(time.time())
    payload = {
        "iss": config.issuer, "aud": config.audience, "sub": subject, "iat": now, "nbf": now,
        "exp": now + int(ttl_s), "scope": " ".join(scopes), **claims,
    }  # fmt: skip
    return str(jwt.encode(payload, config.secret, algorithm="HS256"))


def verify(config: TokenConfig, token: str) -> Principal:
    """Verify ``token`` against the root its header names; raise 401 ``GatewayError`` otherwise."""
    try:
        header = jwt.get_unverified_header(token)
    except JOSEError:
        raise _invalid("malformed") from None
    alg = str(header.get("alg", ""))
    try:
        if alg in HMAC_ALGORITHMS and config.secret:
            claims = jwt.decode(
                token,
                config.secret,
                algorithms=list(HMAC_ALGORITHMS),
                audience=config.audience,
                issuer=config.issuer,
                options=REQUIRED_CLAIMS,
            )
        elif config.jwks is not None and alg in config.idp_algorithms:
            claims = jwt.decode(
                token, idp_key(config.jwks, header.get("kid"), alg), algorithms=[alg],
                audience=config.idp_audience, issuer=config.idp_issuer, options=REQUIRED_CLAIMS,
            )  # fmt: skip
        else:
            raise _invalid(f"algorithm {alg or 'none'!r} is not accepted")
    except JOSEError as exc:
        raise _invalid(str(exc).rstrip(".").lower() or "verification failed") from None
    issued = claims.get("iat")
    if isinstance(issued, int | float) and issued > time.time() + LEEWAY_S:
        raise _invalid("issued in the future")
    return _principal(claims)


def expires_at(token: str) -> float | None:
    """The ``exp`` claim (Unix time, s) of a token :func:`verify` accepted; None if it has none."""
    value = jwt.get_unverified_claims(token).get("exp")
    return float(value) if isinstance(value, int | float) else None


def idp_key(jwks: dict[str, Any], kid: Any, alg: str) -> dict[str, Any]:
    """The JWK of ``jwks`` that verifies a token signed with ``alg`` naming ``kid``: the key with that
    ``kid`` whose ``kty`` fits ``alg`` (and whose own ``alg``, if it has one, is ``alg``), or, for a
    token naming no key, the only key that fits. 401 when there is none, or more than one to choose."""
    kty = KEY_TYPES.get(alg[:2])
    fitting = [
        key
        for key in jwks.get("keys", ())
        if isinstance(key, dict)
        and key.get("kty") == kty
        and key.get("alg", alg) == alg
        and key.get("use", "sig") == "sig"
        and (kid is None or key.get("kid") == kid)
    ]
    if len(fitting) == 1:
        return fitting[0]
    if not fitting:
        raise _invalid(f"no {kty or alg} key {kid!r} in the identity provider's key set")
    raise _invalid("the token names no key (kid) and the key set has several")


def principal_ids(issuer: str, subject: str) -> tuple[str, str]:
    """The id and name of the principal ``subject`` of ``issuer`` is. A subject is unique only within
    its issuer (OpenID Connect Core §2), so both carry the issuer: the name
    ``jwt:<SHA-256 of iss, 12 hex>:<sub>`` (what the audit trail and the ledger show), the id
    ``jwt:<SHA-256 of iss and sub, 32 hex>`` (what owns files, stored responses, batches and queue
    places: 36 characters whatever the subject's length, as the tables' 40-character ``key_id`` hold)."""
    name = f"jwt:{hashlib.sha256(issuer.encode()).hexdigest()[:12]}:{subject}"
    key_id = "jwt:" + hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()[:32]
    return key_id, name


def _principal(claims: dict[str, Any]) -> Principal:
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise _invalid("no subject")
    scope = claims.get("scopes", claims.get("scope", ""))
    if isinstance(scope, str):
        scopes = tuple(scope.split())
    elif isinstance(scope, list) and all(isinstance(s, str) for s in scope):
        scopes = tuple(scope)
    else:
        raise _invalid("scope claim is neither a string nor a list of strings")
    models = claims.get("models")
    if models is not None and not (isinstance(models, list) and all(isinstance(m, str) for m in models)):
        raise _invalid("models claim is not a list of strings")  # never widen access on a bad claim

    def limit(name: str) -> int | None:
        value = claims.get(name)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _invalid(f"{name} claim is not a positive integer")
        return value

    key_id, name = principal_ids(str(claims["iss"]), subject)  # decode checked it: the configured one
    return Principal(
        key_id=key_id,
        name=name,
        kind="jwt",
        models=tuple(models) if models is not None else None,
        scopes=scopes,
        rpm=limit("rpm"),
        tpm=limit("tpm"),
        max_concurrency=limit("max_concurrency"),
        priority=limit("priority") or 1,
    )
