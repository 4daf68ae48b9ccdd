"""What a storage failure means to a client: a disk that is full (``ENOSPC``, ``EDQUOT``, SQLite's
"database or disk is full", PostgreSQL's ``disk_full``) is 507 ``insufficient_storage``; a database
that refuses or fails a write for any other reason (locked, read-only, unreachable) is 503
``database_unavailable``. The reason given is the driver's first line (it names the condition, never
a row's values).
"""

from __future__ import annotations

import errno

from sqlalchemy.exc import DBAPIError, OperationalError

from gateway.errors import GatewayError

#: ``errno`` values of a disk (or the user's quota on it) that has no room.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
#: What a database's message says when its disk is full (SQLite's "database or disk is full",
#: PostgreSQL's disk_full: "could not extend file ...: No space left on device").
FULL_DISK_WORDS = ("disk is full", "disk full", "no space left")
#: How long a reason may be, characters.
REASON_CHARS = 200


def no_space(error: BaseException) -> bool:
    """True if ``error`` says a disk is full: an ``OSError`` of :data:`NO_SPACE`, or a database's."""
    if isinstance(error, OSError):
        return error.errno in NO_SPACE
    return isinstance(error, DBAPIError) and any(words in reason(error).lower() for words in FULL_DISK_WORDS)


def reason(error: BaseException) -> str:
    """``error``'s cause in one short line: a database error's driver message (no SQL, no values)."""
    cause = error.orig if isinstance(error, DBAPIError) else error
    text = str(cause).strip().splitlines()
    return (text[0] if text else type(cause).__name__)[:REASON_CHARS]


def insufficient_storage(what: str) -> GatewayError:
    """507 ``insufficient_storage``: ``what`` has no room left."""
    return GatewayError("insufficient_storage", f"The gateway's storage is full: {what}.")


def storage_refusal(error: BaseException) -> GatewayError | None:
    """The answer to a request whose write failed with ``error``: 507 when a disk is full, 503
    ``database_unavailable`` for any other operational database failure, None when ``error`` is not
    a storage failure (a bug: its caller answers 500)."""
    if no_space(error):
        return insufficient_storage(reason(error))
    if isinstance(error, OperationalError):
        message = f"The gateway's database refused the write ({reason(error)}); try again later."
        return GatewayError("database_unavailable", message)
    return None
