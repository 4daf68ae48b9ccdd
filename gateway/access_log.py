"""uvicorn's access log without query strings: a client that puts its key in the URL (``?api_key=``, a
habit of some SDKs) must not have it written to the log. The gateway reads nothing from query strings
that the log needs (``/admin/usage?group_by=…`` is the only route with parameters)."""

from __future__ import annotations

import logging

REDACTED = "?[redacted]"


class QueryStringFilter(logging.Filter):
    """Replaces the query string of uvicorn access records (``args[2]``, the path) with ``?[redacted]``."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], args[2].split("?", 1)[0] + REDACTED, *args[3:])
        return True


_FILTER = QueryStringFilter()


def redact_access_log_queries() -> None:
    """Install the filter on ``uvicorn.access`` (idempotent; call after ``uvicorn.Config`` set up logging)."""
    logging.getLogger("uvicorn.access").addFilter(_FILTER)
