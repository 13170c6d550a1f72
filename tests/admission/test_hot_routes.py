"""The hot routes over real TLS: answered past FastAPI's stack, byte for byte as through it; the rest untouched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from starlette.requests import Request
from starlette.responses import Response

from webhook.cluster.snapshot import FixedInventory
from webhook.config import Config
from webhook.serve.admission import routes as admission_routes
from webhook.serve.app import create_app
from webhook.serve.extender import routes as extender_routes
from webhook.serve.hot import HOT_PATHS, App
from webhook.serve.state import AppState

from ..extender.cluster import fixed_snapshot, gpu_pod, names
from ..harness import Running, serve_app
from .helpers import review


@pytest.fixture(scope="module")
def app() -> App:
    return create_app(AppState(Config(), FixedInventory(fixed_snapshot()), role="all"))


@pytest.fixture(scope="module")
def server(app: App) -> Iterator[Running]:
    with serve_app(app) as running:
        yield running


def test_the_hot_table_is_the_routers_post_endpoints(app: App) -> None:
    assert app.hot_routes == {
        "/validate": admission_routes.validate, "/mutate": admission_routes.mutate,
        "/scheduler/filter": extender_routes.scheduler_filter,
        "/scheduler/prioritize": extender_routes.scheduler_prioritize,
    }
    webhook_only = create_app(AppState(Config(), FixedInventory(fixed_snapshot()), role="webhook"))
    assert set(webhook_only.hot_routes) == {"/validate", "/mutate"}
    extender_only = create_app(AppState(Config(), FixedInventory(fixed_snapshot()), role="extender"))
    assert set(extender_only.hot_routes) == {"/scheduler/filter", "/scheduler/prioritize"}
    assert set(app.hot_routes) == HOT_PATHS


def _post(server: Running, path: str, body: Any) -> tuple[int, bytes]:
    with server.client() as c:
        raw = body if isinstance(body, bytes) else orjson.dumps(body)
        r = c.post(path, content=raw, headers={"Content-Type": "application/json"})
    return r.status_code, r.content


def test_hot_answers_equal_what_fastapi_answers(app: App, server: Running) -> None:
    pod = gpu_pod(uid="u-hot")
    calls = [
        ("/scheduler/filter", {"Pod": gpu_pod(uid="u-hot"), "NodeNames": [*names(), "ghost"]}),
        ("/scheduler/prioritize", {"Pod": gpu_pod(uid="u-hot"), "NodeNames": names()}),
        ("/validate", review({**pod, "kind": "Pod", "apiVersion": "v1"}, uid="11111111-2222-3333-4444-555555555555")),
        ("/mutate", review({**pod, "kind": "Pod", "apiVersion": "v1"}, uid="11111111-2222-3333-4444-555555555556")),
        ("/scheduler/filter", b"{not json"),
    ]
    hot = [_post(server, path, body) for path, body in calls]
    routes, app.hot_routes = app.hot_routes, {}
    try:
        through_fastapi = [_post(server, path, body) for path, body in calls]
    finally:
        app.hot_routes = routes
    assert hot == through_fastapi
    assert [status for status, _ in hot] == [200, 200, 200, 200, 400]
    assert orjson.loads(hot[2][1])["response"]["uid"] == "11111111-2222-3333-4444-555555555555"
    assert orjson.loads(hot[3][1])["response"]["patchType"] == "JSONPatch"
    assert orjson.loads(hot[0][1])["NodeNames"]


def test_other_methods_and_paths_go_through_fastapi(server: Running) -> None:
    with server.client() as c:
        assert c.get("/mutate").status_code == 405
        assert c.get("/scheduler/filter").status_code == 405
        assert c.post("/mutate/").status_code in (307, 404)  # not a hot path: FastAPI's own answer
        assert c.get("/healthz").json() == {"status": "ok"}


def test_an_endpoint_that_raises_answers_500_and_the_server_keeps_serving(app: App, server: Running,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    async def broken(request: Request) -> Response:
        raise RuntimeError("boom")

    routes = dict(app.hot_routes)
    app.hot_routes = {**routes, "/validate": broken}
    try:
        status, body = _post(server, "/validate", review(None))
    finally:
        app.hot_routes = routes
    assert (status, body) == (500, b"Internal Server Error")
    assert any("/validate failed" in r.getMessage() for r in caplog.records)
    status, _ = _post(server, "/scheduler/filter", {"Pod": gpu_pod(), "NodeNames": names()})
    assert status == 200
