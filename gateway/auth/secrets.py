"""API key material: generation, hashing, and the display prefix.

A key is ``dsk-`` followed by 43 URL-safe base64 characters (32 random bytes from :mod:`secrets`).
Only ``sha256(key)`` (hex) is stored, plus a short display prefix so admins can tell keys apart; the
plaintext is shown once, at creation. This follows the TensorZero / OpenAI pattern of a public prefix
and a secret whose hash alone is kept.
"""

from __future__ import annotations

import hashlib
import re
import secrets

KEY_PREFIX = "dsk-"
_KEY_RE = re.compile(r"^dsk-[A-Za-z0-9_-]{43}$")
DISPLAY_CHARS = 8


def generate_key() -> str:
    """Return a new random API key (``dsk-`` + 43 chars, 256 bits of entropy)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def is_well_formed(key: str) -> bool:
    """True if ``key`` has the shape of a gateway API key (says nothing about validity)."""
    return _KEY_RE.fullmatch(key) is not None


def hash_key(key: str) -> str:
    """SHA-256 of the key, hex encoded (64 chars): the only form stored at rest."""
    return hashlib.sha256(key.encode()).hexdigest()


def display_prefix(key: str) -> str:
    """The first characters of a key, safe to show in listings (e.g. ``dsk-Ab3x…``)."""
    return key[:DISPLAY_CHARS] + "…"
