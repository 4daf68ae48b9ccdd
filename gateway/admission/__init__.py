"""Admission: slots, the KV pool and the long-prompt lane, shared fairly between keys.

- :mod:`~gateway.admission.capacity`: what a request needs and whether it fits (pure arithmetic);
- :mod:`~gateway.admission.scheduler`: the fair per-key queues, passing and the starvation guard;
- :mod:`~gateway.admission.errors`: the 429s.
"""

from gateway.admission.capacity import Capacity, Need, Reason
from gateway.admission.errors import QueueFullError, QueueTimeoutError
from gateway.admission.scheduler import Admission, Lease, Waiter

__all__ = [
    "Admission", "Capacity", "Lease", "Need", "QueueFullError", "QueueTimeoutError", "Reason", "Waiter",
]  # fmt: skip
