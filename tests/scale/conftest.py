"""The ``replicas`` fixture of the shared admission's tests (tests/support/shared_replicas.py)."""

from tests.support.shared_replicas import replicas  # noqa: F401
