"""Where ``dspark-gateway keys`` acts: the local key store (``GATEWAY_DATABASE_URL``) or a running
gateway's admin API (``--url`` + ``--admin-key``). Both speak in the admin API's JSON key objects."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

import httpx2

from gateway.auth import KeyExistsError, KeyNotFoundError, KeyStore
from gateway.db import open_engine

T = TypeVar("T")


class KeysError(Exception):
    """A keys action failed; the message is for the user."""


class KeysBackend(Protocol):
    def create(self, name: str, fields: dict[str, Any]) -> dict[str, Any]: ...
    def list(self) -> list[dict[str, Any]]: ...
    def get(self, ref: str) -> dict[str, Any]: ...
    def update(self, ref: str, changes: dict[str, Any]) -> dict[str, Any]: ...
    def rotate(self, ref: str, grace_s: float | None) -> dict[str, Any]: ...
    def revoke(self, ref: str) -> dict[str, Any]: ...
    def delete(self, ref: str) -> None: ...


class LocalKeys:
    """Acts on the database directly (no audit entry: the database's owner is the actor)."""

    def __init__(self, database_url: str, rotate_grace_s: float) -> None:
        self._url = database_url
        self._grace_s = rotate_grace_s

    def _run(self, action: Callable[[KeyStore], Awaitable[T]]) -> T:
        async def run() -> T:
            engine = await open_engine(self._url)
            try:
                return await action(KeyStore(engine))
            except KeyNotFoundError as exc:
                raise KeysError(f"no key {exc.args[0]!r}") from None
            except KeyExistsError as exc:
                raise KeysError(f"a key named {exc.args[0]!r} already exists") from None
            finally:
                await engine.dispose()

        return asyncio.run(run())

    def create(self, name: str, fields: dict[str, Any]) -> dict[str, Any]:
        record, secret = self._run(lambda s: s.create(name, **fields))
        return {**record.public(datetime.now(UTC)), "key": secret}

    def list(self) -> list[dict[str, Any]]:
        now = datetime.now(UTC)
        return [r.public(now) for r in self._run(lambda s: s.list())]

    def get(self, ref: str) -> dict[str, Any]:
        return self._run(lambda s: s.get(ref)).public(datetime.now(UTC))

    def update(self, ref: str, changes: dict[str, Any]) -> dict[str, Any]:
        return self._run(lambda s: s.update(ref, changes)).public(datetime.now(UTC))

    def rotate(self, ref: str, grace_s: float | None) -> dict[str, Any]:
        grace = timedelta(seconds=self._grace_s if grace_s is None else grace_s)
        record, secret = self._run(lambda s: s.rotate(ref, grace))
        return {**record.public(datetime.now(UTC)), "key": secret}

    def revoke(self, ref: str) -> dict[str, Any]:
        return self._run(lambda s: s.revoke(ref)).public(datetime.now(UTC))

    def delete(self, ref: str) -> None:
        self._run(lambda s: s.delete(ref))


class RemoteKeys:
    """Acts through a running gateway's ``/admin/keys`` API (audited there)."""

    def __init__(self, url: str, admin_key: str) -> None:
        self._client = httpx2.Client(
            base_url=url.rstrip("/") + "/admin",
            headers={"Authorization": f"Bearer {admin_key}"},
            timeout=30,
        )

    def _call(self, method: str, path: str = "", body: dict[str, Any] | None = None) -> Any:
        try:
            response = self._client.request(method, "/keys" + path, json=body)
        except httpx2.HTTPError as exc:
            raise KeysError(f"cannot reach the gateway: {exc}") from None
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:200]
            raise KeysError(f"HTTP {response.status_code}: {message}")
        try:
            return response.json()
        except ValueError:
            raise KeysError(f"HTTP {response.status_code}: not a gateway admin API answer") from None

    def _id(self, ref: str) -> str:
        if ref.startswith("key_"):
            return ref
        for key in self.list():
            if key["name"] == ref:
                return str(key["id"])
        raise KeysError(f"no key {ref!r}")

    def create(self, name: str, fields: dict[str, Any]) -> dict[str, Any]:
        body = {
            "name": name,
            **{k: v.isoformat() if isinstance(v, datetime) else v for k, v in fields.items()},
        }
        result: dict[str, Any] = self._call("POST", "", body)
        return result

    def list(self) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = self._call("GET")["data"]
        return data

    def get(self, ref: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/{self._id(ref)}")
        return result

    def update(self, ref: str, changes: dict[str, Any]) -> dict[str, Any]:
        body = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in changes.items()}
        result: dict[str, Any] = self._call("PATCH", f"/{self._id(ref)}", body)
        return result

    def rotate(self, ref: str, grace_s: float | None) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/{self._id(ref)}/rotate", {"grace_s": grace_s})
        return result

    def revoke(self, ref: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/{self._id(ref)}/revoke")
        return result

    def delete(self, ref: str) -> None:
        self._call("DELETE", f"/{self._id(ref)}")
