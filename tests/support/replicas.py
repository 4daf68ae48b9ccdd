"""Several ``dspark-gateway serve`` processes in front of one backend, sharing one database and one
Redis (admission, rate limits), as a deployment behind a load balancer runs them."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

from tests.support.gateway_process import GatewayProcess, clean_env

#: The admin key of every replica (its SHA-256 is what the replicas are given).
ADMIN_KEY = "dsk-" + ("replicas-admin-" * 3)[:43]


class Replicas:
    """``start(count)`` replicas of one gateway: ``upstream``, ``database_url``, ``redis_url``, a
    namespace of their own in the shared admission store, and ``settings`` (``GATEWAY_*``, which win)."""

    def __init__(
        self, upstream: str, database_url: str, redis_url: str, logs: Path, **settings: object
    ) -> None:
        shared = {
            "upstream": upstream,
            "database_url": database_url,
            "limits_storage": redis_url,
            "admission_store": redis_url,
            "admission_namespace": f"replicas-{uuid.uuid4().hex[:10]}",
            "admin_key_sha256": hashlib.sha256(ADMIN_KEY.encode()).hexdigest(),
        }
        self.env = clean_env(**{**shared, **settings})
        self.logs = logs
        self.running: list[GatewayProcess] = []

    def start(self, count: int) -> list[GatewayProcess]:
        """``count`` more replicas, each ready (``/ready`` 200)."""
        new = [
            GatewayProcess(self.env, self.logs / f"replica-{len(self.running) + i}.log") for i in range(count)
        ]
        for replica in new:
            replica.start()
        self.running += new
        return new

    def stop(self) -> None:
        for replica in self.running:
            replica.stop()
