"""Where ``dspark-gateway keys`` and ``groups`` act: the database (``GATEWAY_DATABASE_URL``) or a
running gateway's admin API (``--url`` + an admin key). Both take the admin API's bodies and answer
with its JSON objects; both validate with :mod:`gateway.admin.key_fields` and audit through
:class:`~gateway.admin.key_admin.KeyAdmin` (locally as ``cli:<user>`` from ``local``)."""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.admin.key_admin import KeyAdmin
from gateway.admin.key_fields import GroupCreate, GroupLimits, KeyCreate, KeyLimits
from gateway.auth import KeyExistsError, KeyNotFoundError, KeyRevokedError, KeyStore
from gateway.auth.audit import AuditLog
from gateway.auth.groups import GroupExistsError, GroupInUseError, GroupNotFoundError, GroupStore
from gateway.cli.actor import local_actor
from gateway.cli.failures import CliError, validation_message
from gateway.cli.local import on_database
from gateway.cli.remote import AdminClient
from gateway.config import Settings

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class KeysBackend(Protocol):
    def create(self, body: dict[str, Any]) -> dict[str, Any]: ...
    def list(self) -> list[dict[str, Any]]: ...
    def get(self, ref: str) -> dict[str, Any]: ...
    def update(self, ref: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def rotate(self, ref: str, grace_s: float | None) -> dict[str, Any]: ...
    def revoke(self, ref: str) -> tuple[dict[str, Any], bool]: ...
    def delete(self, ref: str) -> None: ...
    def create_group(self, body: dict[str, Any]) -> dict[str, Any]: ...
    def list_groups(self) -> builtins.list[dict[str, Any]]: ...
    def get_group(self, ref: str) -> dict[str, Any]: ...
    def update_group(self, ref: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def delete_group(self, ref: str) -> None: ...


def _valid(model: type[M], body: dict[str, Any]) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise CliError(validation_message(exc)) from None


class LocalKeys:
    """Acts on the database directly, audited as the admin API's actions are."""

    def __init__(self, config: Settings) -> None:
        self._config = config
        self._actor = local_actor()

    def _run(self, action: Callable[[KeyAdmin, KeyStore], Awaitable[T]], create: bool = False) -> T:
        async def work(engine: AsyncEngine) -> T:
            store = KeyStore(engine)
            try:
                return await action(KeyAdmin(store, AuditLog(engine)), store)
            except KeyNotFoundError as exc:
                raise CliError(f"no key {exc.args[0]!r}") from None
            except KeyRevokedError as exc:
                raise CliError(f"key {exc.args[0]!r} is revoked: it gets no new secret") from None
            except KeyExistsError as exc:
                raise CliError(f"a key named {exc.args[0]!r} already exists") from None
            except GroupNotFoundError as exc:
                raise CliError(f"no group {exc.args[0]!r}") from None
            except GroupExistsError as exc:
                raise CliError(f"a group named {exc.args[0]!r} already exists") from None
            except GroupInUseError as exc:
                raise CliError(f"group {exc.args[0]!r} still has keys: move or delete them first") from None

        return on_database(self._config, work, create)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        valid = _valid(KeyCreate, body)
        record, secret = self._run(lambda admin, _: admin.create(self._actor, valid), create=True)
        return {**record.public(datetime.now(UTC)), "key": secret}

    def list(self) -> list[dict[str, Any]]:
        now = datetime.now(UTC)
        return [r.public(now) for r in self._run(lambda _, store: store.list())]

    def get(self, ref: str) -> dict[str, Any]:
        return self._run(lambda _, store: store.get(ref)).public(datetime.now(UTC))

    def update(self, ref: str, body: dict[str, Any]) -> dict[str, Any]:
        valid = _valid(KeyLimits, body)
        return self._run(lambda admin, _: admin.update(self._actor, ref, valid)).public(datetime.now(UTC))

    def rotate(self, ref: str, grace_s: float | None) -> dict[str, Any]:
        grace = self._config.rotate_grace_s if grace_s is None else grace_s
        record, secret = self._run(lambda admin, _: admin.rotate(self._actor, ref, grace))
        return {**record.public(datetime.now(UTC)), "key": secret}

    def revoke(self, ref: str) -> tuple[dict[str, Any], bool]:
        record, revoked = self._run(lambda admin, _: admin.revoke(self._actor, ref))
        return record.public(datetime.now(UTC)), revoked

    def delete(self, ref: str) -> None:
        self._run(lambda admin, _: admin.delete(self._actor, ref))

    def create_group(self, body: dict[str, Any]) -> dict[str, Any]:
        valid = _valid(GroupCreate, body)
        return self._run(lambda admin, _: admin.create_group(self._actor, valid), create=True).public(keys=0)

    def list_groups(self) -> builtins.list[dict[str, Any]]:
        groups = self._run(lambda _, store: GroupStore(store.engine).list())
        return [record.public(keys) for record, keys in groups]

    def get_group(self, ref: str) -> dict[str, Any]:
        return self._run(lambda _, store: GroupStore(store.engine).get(ref)).public()

    def update_group(self, ref: str, body: dict[str, Any]) -> dict[str, Any]:
        valid = _valid(GroupLimits, body)
        return self._run(lambda admin, _: admin.update_group(self._actor, ref, valid)).public()

    def delete_group(self, ref: str) -> None:
        self._run(lambda admin, _: admin.delete_group(self._actor, ref))


class RemoteKeys:
    """Acts through a running gateway's ``/admin/keys`` API (a key's id or name in the path)."""

    def __init__(self, client: AdminClient) -> None:
        self._client = client

    def _key(self, method: str, ref: str, action: str = "", body: dict[str, Any] | None = None) -> Any:
        return self._client.call(method, f"/keys/{quote(ref, safe='')}{action}", body)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self._client.call("POST", "/keys", body)
        return created

    def list(self) -> list[dict[str, Any]]:
        keys: list[dict[str, Any]] = self._client.call("GET", "/keys")["data"]
        return keys

    def get(self, ref: str) -> dict[str, Any]:
        key: dict[str, Any] = self._key("GET", ref)
        return key

    def update(self, ref: str, body: dict[str, Any]) -> dict[str, Any]:
        key: dict[str, Any] = self._key("PATCH", ref, body=body)
        return key

    def rotate(self, ref: str, grace_s: float | None) -> dict[str, Any]:
        key: dict[str, Any] = self._key("POST", ref, "/rotate", {"grace_s": grace_s})
        return key

    def revoke(self, ref: str) -> tuple[dict[str, Any], bool]:
        known = self.get(ref)  # the API answers a second revoke as the first (200, the key)
        if known["revoked_at"]:
            return known, False
        key: dict[str, Any] = self._key("POST", ref, "/revoke")
        return key, True

    def delete(self, ref: str) -> None:
        self._key("DELETE", ref)

    def create_group(self, body: dict[str, Any]) -> dict[str, Any]:
        group: dict[str, Any] = self._client.call("POST", "/groups", body)
        return group

    def list_groups(self) -> builtins.list[dict[str, Any]]:
        groups: builtins.list[dict[str, Any]] = self._client.call("GET", "/groups")["data"]
        return groups

    def get_group(self, ref: str) -> dict[str, Any]:
        group: dict[str, Any] = self._client.call("GET", f"/groups/{quote(ref, safe='')}")
        return group

    def update_group(self, ref: str, body: dict[str, Any]) -> dict[str, Any]:
        group: dict[str, Any] = self._client.call("PATCH", f"/groups/{quote(ref, safe='')}", body)
        return group

    def delete_group(self, ref: str) -> None:
        self._client.call("DELETE", f"/groups/{quote(ref, safe='')}")
