"""The refusals of admission: two 429s with ``Retry-After``, and the 503 of a shared admission whose
store (Redis) can't be reached."""

from __future__ import annotations

from gateway.errors import GatewayError


class QueueFullError(GatewayError):
    """The wait queue (total or this key's) is at capacity: 429 with ``Retry-After``."""

    def __init__(self, retry_after_s: int, per_key: bool = False) -> None:
        what = "this key's queue" if per_key else "its queue"
        super().__init__(
            "queue_full",
            f"The server is at capacity and {what} is full; retry later.",
            headers={"Retry-After": str(retry_after_s)},
        )


class QueueTimeoutError(GatewayError):
    """The request waited its queue timeout without being admitted: 429 with ``Retry-After``."""

    def __init__(self, waited_s: float, retry_after_s: int, waited_for: str = "slot") -> None:
        what = {"kv": "room in the KV cache", "lane": "the long-prompt lane"}.get(waited_for, "a slot")
        super().__init__(
            "queue_timeout",
            f"Waited {waited_s:.0f} s for {what} without being admitted; retry later.",
            headers={"Retry-After": str(retry_after_s)},
        )


class AdmissionUnavailableError(GatewayError):
    """A shared admission's store did not answer, or lost the request's place: 503 with ``Retry-After``."""

    def __init__(self, what: str) -> None:
        super().__init__(
            "admission_unavailable",
            f"The gateway could not reach its admission store ({what}); retry shortly.",
            headers={"Retry-After": "1"},
        )
