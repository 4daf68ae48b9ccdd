"""Admission: slots, the KV pool and the long-prompt lane, shared fairly between keys.

- :mod:`~gateway.admission.capacity`: what a request needs and whether it fits (pure arithmetic);
- :mod:`~gateway.admission.scheduler`: the fair per-key queues, passing and the starvation guard;
- :mod:`~gateway.admission.shared`: the same in Redis, for several replicas (its Lua in
  :mod:`~gateway.admission.shared_scripts`);
- :mod:`~gateway.admission.lease`, :mod:`~gateway.admission.gate`: what the pipeline holds and calls;
- :mod:`~gateway.admission.errors`: the 429s, and the 503 of an unreachable shared store.
"""

from gateway.admission.capacity import Capacity, Need, Reason
from gateway.admission.errors import AdmissionUnavailableError, QueueFullError, QueueTimeoutError
from gateway.admission.gate import Gate, Load
from gateway.admission.lease import Lease, Waiter
from gateway.admission.scheduler import Admission
from gateway.admission.shared import SharedAdmission

__all__ = [
    "Admission", "AdmissionUnavailableError", "Capacity", "Gate", "Lease", "Load", "Need", "QueueFullError",
    "QueueTimeoutError", "Reason", "SharedAdmission", "Waiter",
]  # fmt: skip
