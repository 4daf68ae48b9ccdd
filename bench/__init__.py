"""Benchmarks and the long soak, run by hand (``python -m bench.<name>``), not collected by pytest:
their figures go to JSON and to docs/performance.md, never into the test suite's pass or fail."""
