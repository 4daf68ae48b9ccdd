"""OpenID Connect sign-in for admins: the authorization code flow with PKCE (RFC 7636, ``S256``) against
the organisation's identity provider, its ID token checked as OpenID Connect Core 1.0 §3.1.3.7 asks
(signature by the provider's JWKS, ``iss``, ``aud``, ``exp``, ``nonce``, and ``at_hash`` when
present), and a claim mapped to the admin role. No web framework: the console's pages
(:mod:`gateway.console.oidc_pages`) carry the browser to and from it.

The OAuth 2.0 client is Authlib's (``AsyncOAuth2Client``: the authorization URL with the PKCE
challenge, the code exchange); the ID token is read with python-jose, as the gateway's other JWTs.
The provider's metadata (``/.well-known/openid-configuration``) and keys are fetched on first use
and kept; the keys are fetched again once when a token names one they lack (a key rotation).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import AsyncOAuth2Client, OAuthError
from jose import JWTError, jwt

from gateway.auth.principal import Principal


class OidcError(Exception):
    """A sign-in that cannot go on: ``message`` says why, for the admin."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class OidcConfig:
    """The provider (``issuer``), this gateway's client at it (``client_id``; ``client_secret``, None
    for a public client), the ``scopes`` asked for, the claim whose value — a string or a list —
    must hold one of ``admin_values`` to sign in as an admin, and the claim that names the admin in
    the audit trail (``name_claim``; else ``sub``)."""

    issuer: str
    client_id: str
    client_secret: str | None
    scopes: str
    admin_claim: str
    admin_values: tuple[str, ...]
    name_claim: str = "email"


@dataclass(frozen=True, slots=True)
class Pending:
    """What a sign-in keeps between sending the browser to the provider and its answer: the
    ``state`` it must come back with, the ID token's ``nonce``, the PKCE ``code_verifier``, and the
    ``redirect_uri`` the code was issued for (the exchange must name it again)."""

    state: str
    nonce: str
    code_verifier: str
    redirect_uri: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


class OidcClient:
    """One provider's sign-in (``config``); HTTP through ``http`` (an ``httpx.AsyncClient``)."""

    def __init__(self, config: OidcConfig, http: httpx.AsyncClient | None = None) -> None:
        self.config = config
        # one TLS context for every client: loading the CA bundle costs tens of ms of CPU each time
        self._tls = ssl.create_default_context()
        self._http = http or httpx.AsyncClient(timeout=10.0, verify=self._tls)
        self._metadata: dict[str, Any] | None = None
        self._keys: dict[str, Any] | None = None

    async def metadata(self) -> dict[str, Any]:
        """The provider's OpenID configuration (OpenID Connect Discovery 1.0 §4); its ``issuer`` must
        be the configured one (§4.3)."""
        if self._metadata is None:
            found = await self._get(self.config.issuer.rstrip("/") + "/.well-known/openid-configuration")
            if found.get("issuer") != self.config.issuer:
                raise OidcError(
                    f"the provider says it is {found.get('issuer')!r}, not {self.config.issuer!r}"
                )
            self._metadata = found
        return self._metadata

    async def begin(self, redirect_uri: str) -> tuple[str, Pending]:
        """Where to send the browser, and what to keep until it comes back."""
        metadata = await self.metadata()
        pending = Pending(generate_token(32), generate_token(32), generate_token(64), redirect_uri)
        async with self._client(redirect_uri) as client:  # it sends nothing: the URL is built here
            url, _ = client.create_authorization_url(
                metadata["authorization_endpoint"],
                state=pending.state,
                nonce=pending.nonce,
                code_verifier=pending.code_verifier,
            )
        return url, pending

    async def finish(self, pending: Pending, code: str) -> dict[str, Any]:
        """The claims of the ID token that ``code`` is exchanged for (with the PKCE verifier), checked;
        ``exp`` (Unix time, s) and ``sub`` are always there."""
        metadata = await self.metadata()
        client = self._client(pending.redirect_uri)
        try:
            token = await client.fetch_token(
                metadata["token_endpoint"], code=code, code_verifier=pending.code_verifier
            )
        except (OAuthError, httpx.HTTPError) as exc:
            raise OidcError(f"the provider refused the sign-in code: {exc}") from None
        finally:
            await client.aclose()
        id_token = token.get("id_token")
        if not isinstance(id_token, str):
            raise OidcError("the provider sent no ID token (is the openid scope granted?)")
        claims = await self._verified(id_token, token.get("access_token"), metadata)
        if claims.get("nonce") != pending.nonce:
            raise OidcError("the ID token is not for this sign-in (nonce)")
        if not isinstance(claims.get("exp"), int | float) or not isinstance(claims.get("sub"), str):
            raise OidcError("the ID token lacks its expiry or its subject (exp, sub)")
        return claims

    def principal(self, claims: Mapping[str, Any]) -> Principal:
        """The admin ``claims`` name; :class:`OidcError` unless their admin claim holds an admin value."""
        held = claims.get(self.config.admin_claim)
        values = {held} if isinstance(held, str) else set(held) if isinstance(held, list) else set()
        name = claims.get(self.config.name_claim) or claims["sub"]
        if not values & set(self.config.admin_values):
            raise OidcError(
                f"{name} may not administer this gateway: its {self.config.admin_claim!r} claim holds none "
                f"of {', '.join(self.config.admin_values)}"
            )
        return Principal(key_id=f"oidc:{claims['sub']}", name=str(name), kind="oidc", scopes=("admin",))

    async def aclose(self) -> None:
        await self._http.aclose()

    def _client(self, redirect_uri: str) -> AsyncOAuth2Client:
        secret = self.config.client_secret
        return AsyncOAuth2Client(
            client_id=self.config.client_id,
            client_secret=secret,
            scope=self.config.scopes,
            redirect_uri=redirect_uri,
            code_challenge_method="S256",
            token_endpoint_auth_method="client_secret_basic" if secret else "none",
            timeout=10.0,
            verify=self._tls,
        )

    async def _verified(
        self, id_token: str, access_token: Any, metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        try:
            return self._decode(id_token, access_token, metadata, await self._jwks(metadata, fresh=False))
        except JWTError:
            pass  # perhaps signed with a key the provider rotated in: its keys again, once
        try:
            return self._decode(id_token, access_token, metadata, await self._jwks(metadata, fresh=True))
        except JWTError as exc:
            raise OidcError(f"the ID token was refused: {exc}") from None

    def _decode(
        self, id_token: str, access_token: Any, metadata: Mapping[str, Any], keys: dict[str, Any]
    ) -> dict[str, Any]:
        algorithms = metadata.get("id_token_signing_alg_values_supported") or ["RS256"]
        claims: dict[str, Any] = jwt.decode(
            id_token,
            keys,
            algorithms=[a for a in algorithms if a != "none"],
            audience=self.config.client_id,
            issuer=self.config.issuer,
            access_token=access_token if isinstance(access_token, str) else None,
        )
        return claims

    async def _jwks(self, metadata: Mapping[str, Any], fresh: bool) -> dict[str, Any]:
        if self._keys is None or fresh:
            self._keys = await self._get(metadata["jwks_uri"])
        return self._keys

    async def _get(self, url: str) -> dict[str, Any]:
        try:
            answer = await self._http.get(url)
            answer.raise_for_status()
            found: dict[str, Any] = answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise OidcError(f"the identity provider could not be read at {url}: {exc}") from None
        return found
