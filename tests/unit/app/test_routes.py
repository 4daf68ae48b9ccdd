"""The route table (gateway/app/routes.py) as installed on an app: deny by default — every route but
the public ones authenticates in its own dialect, admin routes need the admin scope, public ones
only have the per-address limit — and a route's errors speak its dialect."""

from __future__ import annotations

from types import SimpleNamespace

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Match, Route

from gateway.app.routes import LIVENESS, PUBLIC_ROUTES, ROUTES, dialect_for, install
from gateway.dialects.messages import MESSAGES
from gateway.dialects.openai.dialect import OPENAI
from gateway.http.auth import admin_for, principal_for, public_limit
from gateway.http.inference import InferenceRoute


def app_with_routes() -> FastAPI:
    app = FastAPI()
    app.state.settings = SimpleNamespace(console=False)
    install(app)
    return app


def installed() -> dict[tuple[str, str], APIRoute]:
    app = app_with_routes()
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
        if spec.path == LIVENESS:
            assert calls == [], "the liveness probe depends on nothing"
            continue
        if spec.path in PUBLIC_ROUTES:
            expected = public_limit
        else:
            expected = (admin_for if spec.admin else principal_for)(spec.dialect)
        assert calls[0] is expected, (spec.method, spec.path)  # the route's own, before the handler's
    assert all(spec.admin for spec in ROUTES if spec.path.startswith("/admin/"))


def test_errors_speak_the_dialect_of_the_route_else_openais() -> None:
    assert dialect_for("/v1/messages") is MESSAGES
    assert dialect_for("/tokenize") is OPENAI and dialect_for("/v1/models") is OPENAI


def test_each_inference_route_is_served_by_its_dialects_asgi_route_before_the_documenting_one() -> None:
    app = app_with_routes()
    served = [spec for spec in ROUTES if isinstance(spec.endpoint, InferenceRoute)]
    assert {spec.path for spec in served} == {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
    }
    for spec in served:
        scope = {"type": "http", "method": "POST", "path": spec.path, "root_path": ""}
        first = next(route for route in app.routes if route.matches(scope)[0] is Match.FULL)
        assert isinstance(first, Route) and not isinstance(first, APIRoute), spec.path
        assert first.app is spec.endpoint and spec.endpoint.dialect is spec.dialect
