"""Authentication: API keys (hashed at rest) resolved to a :class:`Principal`."""

from gateway.auth.authenticator import Authenticator
from gateway.auth.principal import Principal
from gateway.auth.store import KeyExistsError, KeyNotFoundError, KeyRecord, KeyRevokedError, KeyStore

__all__ = [
    "Authenticator",
    "KeyExistsError",
    "KeyNotFoundError",
    "KeyRevokedError",
    "KeyRecord",
    "KeyStore",
    "Principal",
]
