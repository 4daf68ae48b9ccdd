"""Routes that need no API key: process health, readiness."""
