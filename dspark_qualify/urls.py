"""Base-URL handling: what may be written into a report, and where the API routes are.

A base URL may carry credentials (``https://user:secret@host/v1`` or ``?api_key=…``); reports keep only
scheme, host, port and path, so a JSON file can be shared without leaking a key.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["api_url", "public_url"]


def public_url(base_url: str) -> str:
    """``base_url`` without user info, query or fragment (``http://u:p@h:8080/v1?k=x`` -> ``http://h:8080/v1``)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def api_url(base_url: str, route: str) -> str:
    """``route`` (e.g. ``/models``) under an OpenAI-style base URL that already ends in ``/v1``."""
    return base_url.rstrip("/") + "/" + route.lstrip("/")
