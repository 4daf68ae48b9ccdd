"""Values the console keeps in the browser instead of on the server, sealed: encrypted and
authenticated with Fernet (AES-128-CBC and HMAC-SHA256 over a timestamp, ``cryptography``), so the
browser can neither read nor make one, and one is good only for ``max_age_s`` from when it was sealed.

Each use has its own key, HMAC-SHA256(the console's secret, purpose): a value sealed for one use (a
pending sign-in) never opens as another (a sign-in form's token). The secret
(:func:`console_secret`) is ``GATEWAY_CONSOLE_SECRET``, else one generated once and kept in the
database (:func:`gateway.storage.secrets.shared_secret`): every replica on it seals alike, so a
browser's next request may reach any of them, and a restart keeps what browsers hold.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.config import Settings
from gateway.storage.secrets import shared_secret

#: The name of the console's generated secret in the database.
SECRET_NAME = "console"


async def console_secret(settings: Settings, engine: AsyncEngine) -> bytes:
    """What the console's sealers' keys are derived from: ``GATEWAY_CONSOLE_SECRET``, else the
    database's (generated once, the same for every replica)."""
    if settings.console_secret:
        return settings.console_secret.encode()
    return await shared_secret(engine, SECRET_NAME)


class Sealer:
    """Seals JSON objects for one ``purpose`` with a key derived from ``secret``."""

    def __init__(self, secret: bytes, purpose: str) -> None:
        key = hmac.new(secret, purpose.encode(), hashlib.sha256).digest()  # 32 bytes: Fernet's key size
        self._fernet = Fernet(base64.urlsafe_b64encode(key))

    def seal(self, value: dict[str, Any]) -> str:
        """``value`` sealed, as URL-safe base64 text (a cookie's or a form field's value)."""
        return self._fernet.encrypt(json.dumps(value).encode()).decode()

    def open(self, sealed: str | None, max_age_s: int) -> dict[str, Any] | None:
        """What ``sealed`` holds when this sealer sealed it less than ``max_age_s`` seconds ago; None
        for anything else (missing, altered, made up, sealed for another purpose, too old)."""
        if not sealed:
            return None
        try:
            opened: dict[str, Any] = json.loads(self._fernet.decrypt(sealed, ttl=max_age_s))
        except (InvalidToken, ValueError):  # ValueError: text that is not even ASCII
            return None
        return opened
