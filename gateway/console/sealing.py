"""Values the console keeps in the browser instead of on the server, sealed: encrypted and
authenticated with Fernet (AES-128-CBC and HMAC-SHA256 over a timestamp, ``cryptography``), so the
browser can neither read nor make one, and one is good only for ``max_age_s`` from when it was sealed.

Each use has its own key, HMAC-SHA256(``GATEWAY_CONSOLE_SECRET``, purpose): a value sealed for one use
(a pending sign-in) never opens as another (a sign-in form's token). Replicas behind one address must
share the secret (a browser's next request may reach another one); without it each process draws a
random one, good for a single replica (its sealed values do not outlive a restart).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

from gateway.config import Settings


class Sealer:
    """Seals JSON objects for one ``purpose`` with a key derived from ``secret``."""

    def __init__(self, secret: bytes, purpose: str) -> None:
        key = hmac.new(secret, purpose.encode(), hashlib.sha256).digest()  # 32 bytes: Fernet's key size
        self._fernet = Fernet(base64.urlsafe_b64encode(key))

    @classmethod
    def for_console(cls, settings: Settings, purpose: str) -> Sealer:
        """The sealer of ``purpose`` under ``GATEWAY_CONSOLE_SECRET``, or under a random secret of this
        process's when it is unset."""
        secret = settings.console_secret
        return cls(secret.encode() if secret else secrets.token_bytes(32), purpose)

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
