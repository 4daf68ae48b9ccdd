"""The gateway's ASGI app: :func:`create_app` builds it (:mod:`gateway.app.factory`) with the route
table of :mod:`gateway.app.routes`."""

from gateway.app.factory import UpstreamFactory, admission_for, aiohttp_upstream, create_app, token_config

__all__ = ["UpstreamFactory", "admission_for", "aiohttp_upstream", "create_app", "token_config"]
