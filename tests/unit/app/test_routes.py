"""The route table (gateway/app/routes.py) as installed on an app: deny by default — every route but
the public ones authenticates in its own dialect, admin routes need the admin scope, public ones
only have the per-address limit — and a route's errors speak its dialect."""

from __future__ import annotations

from types import SimpleNamespace

from fastapi import FastAPI
from fastapi.routing import APIRoute

from gateway.app.routes import PUBLIC_ROUTES, ROUTES, dialect_for, install
from gateway.dialects.messages import MESSAGES
from gateway.dialects.openai.dialect import OPENAI
from gateway.http.auth import admin_for, principal_for, public_limit


def installed() -> dict[tuple[str, str], APIRoute]:
    app = FastAPI()
    app.state.settings = SimpleNamespace(console=False)
    install(app)
    return {
        (method, route.path): route
        for route in app.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    }


def test_every_route_outside_the_public_list_authenticates_in_its_dialect() -> None:
    routes = installed()
    assert len(routes) == len(ROUTES)
    for spec in ROUTES:
        calls = [dependency.call for dependency in routes[spec.method, spec.path].dependant.dependencies]
        if spec.path in PUBLIC_ROUTES:
            expected = public_limit
        else:
            expected = (admin_for if spec.admin else principal_for)(spec.dialect)
        assert calls[0] is expected, (spec.method, spec.path)  # the route's own, before the handler's
    assert all(spec.admin for spec in ROUTES if spec.path.startswith("/admin/"))


def test_errors_speak_the_dialect_of_the_route_else_openais() -> None:
    assert dialect_for("/v1/messages") is MESSAGES
    assert dialect_for("/tokenize") is OPENAI and dialect_for("/v1/models") is OPENAI
