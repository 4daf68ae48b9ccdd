"""What a storage failure is answered with (gateway/storage/failures.py): a full disk 507, whether
the operating system or the database says so; any other database failure 503; anything else is not
a storage failure (its caller answers 500)."""

from __future__ import annotations

import errno
import sqlite3

from sqlalchemy.exc import IntegrityError, OperationalError

from gateway.storage.failures import storage_refusal


def database(error: Exception, kind: type[Exception] = OperationalError) -> Exception:
    return kind("INSERT INTO usage_ledger ...", {"key_name": "secret-ish"}, error)  # type: ignore[call-arg]


def test_a_full_disk_is_507_whoever_says_so() -> None:
    for error in (OSError(errno.ENOSPC, "No space left on device"),
                  database(sqlite3.OperationalError("database or disk is full")),
                  database(OSError('could not extend file "base/1": No space left on device'))):  # fmt: skip
        refused = storage_refusal(error)
        assert refused is not None and refused.status == 507 and refused.code == "insufficient_storage"


def test_a_database_that_refuses_a_write_is_503_naming_only_the_drivers_reason() -> None:
    refused = storage_refusal(database(sqlite3.OperationalError("attempt to write a readonly database")))
    assert refused is not None and refused.status == 503 and refused.code == "database_unavailable"
    assert refused.message == (
        "The gateway's database refused the write (attempt to write a readonly database); try again later."
    )  # no statement, no values


def test_other_failures_are_not_storage_failures() -> None:
    assert storage_refusal(OSError(errno.EACCES, "Permission denied")) is None
    assert storage_refusal(database(sqlite3.IntegrityError("NOT NULL"), IntegrityError)) is None
    assert storage_refusal(ValueError("bug")) is None
