"""The access log: uvicorn's line, written when the response has ended rather than when it starts, and
without the query string.

- When: uvicorn writes its line inside the ``http.response.start`` send, before the status line goes
  out — on a stream, on the way to the first token. Written at the end, like nginx and Envoy do, the
  line costs the same and delays nothing a client waits for.
- What: ``<client> - "<method> <path> HTTP/<version>" <status>``, uvicorn's format (its
  ``AccessFormatter`` renders it, status phrase included), so log configurations and parsers written
  for uvicorn keep working; :data:`ACCESS_FORMAT` follows it with the request's id and the one its
  client sent (``-`` for none: :mod:`gateway.http.request_id`), also on the record as ``request_id``
  and ``client_request_id`` for a structured handler. The query string is left out: a client that
  puts its key in the URL (``?api_key=``, a habit of some SDKs) must not have it written to the log.

``gateway.cli.serve`` runs every server with uvicorn's own access line off and this logger on uvicorn's
access handler (:func:`gateway.cli.serve.log_config`).
"""

from __future__ import annotations

import logging
import urllib.parse

from starlette.types import Scope

#: The access log's logger, and the format of its lines (uvicorn's access format, then the ids).
ACCESS_LOGGER = "gateway.http.access"
ACCESS_FORMAT = (
    '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'
    " request_id=%(request_id)s client_request_id=%(client_request_id)s"
)
access_logger = logging.getLogger(ACCESS_LOGGER)


def log_access(scope: Scope, status: int) -> None:
    """One access line for ``scope``'s request, answered with ``status``."""
    if access_logger.isEnabledFor(logging.INFO):
        client = scope.get("client")
        state = scope.get("state", {})
        access_logger.info(
            '%s - "%s %s HTTP/%s" %d',
            f"{client[0]}:{client[1]}" if client else "",
            scope["method"],
            urllib.parse.quote(scope["path"]),
            scope["http_version"],
            status,
            extra={
                "request_id": state.get("request_id", "-"),
                "client_request_id": state.get("client_request_id") or "-",
            },
        )
