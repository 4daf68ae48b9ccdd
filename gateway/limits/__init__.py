"""Per-key limits counted over time windows: requests and tokens per minute (:mod:`~gateway.limits.rate`)."""
