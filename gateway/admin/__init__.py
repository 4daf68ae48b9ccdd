"""Admin API (keys with the ``admin`` scope only)."""
