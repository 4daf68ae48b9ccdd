"""Performance scripts (run by hand, not collected by pytest)."""
