"""What the gateway and the simulator share, and nothing of either: JSON on the hot path
(:mod:`~dspark_common.json_codec`), Prometheus series bound once (:mod:`~dspark_common.metric_series`),
and the race of a handler against its client's disconnect (:mod:`~dspark_common.asgi`)."""
