"""The ASGI application: operational routes here, admission and extender routes from their modules."""

from __future__ import annotations

from typing import Any, Literal

import orjson
from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from ..cluster.dra_extended import extended_record
from ..cluster.inventory import node_record
from .hot import App
from .state import AppState

# Which routes an app serves: "webhook" the webhook and extender port's (reviews, extender calls, probes), "ops" the
# metrics port's (/metrics, /inventory, the status page), "all" both on one port (server.metrics_port unset).
Surface = Literal["all", "webhook", "ops"]


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def create_app(state: AppState, surface: Surface = "all") -> App:
    """Build the app for one instance; routes read ``request.app.state.vg``."""
    app = App(title="vramgate", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.vg = state
    if surface != "webhook":
        _ops_routes(app, state)
    if surface == "ops":
        return app

    @app.get("/healthz")
    async def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        if state.shutting_down:
            return _json({"status": "shutting down"}, 503)
        if not state.inventory.snapshot().synced:
            return _json({"status": "inventory not synced"}, 503)
        frozen = state.inventory.unanswered()
        if frozen is not None:
            # Still ready: every replica watches the same API server, so a 503 here would take them all out of
            # the Service at once and turn the freeze into failed webhook calls; the last snapshot still answers.
            return _json({"status": "ok", "inventory": "stale",
                          "reason": f"the API server has not answered for {frozen:.0f} s; judging from the nodes "
                                    f"as last seen {state.inventory.staleness() or 0:.0f} s ago"})
        return _json({"status": "ok"})

    if state.serves("webhook"):
        from .admission.routes import router as admission_router

        app.include_hot(admission_router)
    if state.serves("extender"):
        from .extender.routes import router as extender_router

        app.include_hot(extender_router)
    return app


def _ops_routes(app: App, state: AppState) -> None:
    """What people and Prometheus read: guarded by serve/auth.py under server.metrics_auth."""

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/inventory")
    async def inventory(request: Request) -> Response:
        snap = state.inventory.snapshot()
        nodes = [{**node_record(n, snap.free_gpus(n.name)), **extended_record(n, snap.dra)}
                 for n in sorted(snap.gpu_nodes(), key=lambda n: n.name)]
        stale = state.inventory.staleness()
        frozen = state.inventory.unanswered()
        return _json({"synced": snap.synced, "revision": snap.revision,
                      "staleness_seconds": None if stale is None else round(stale, 1),
                      "api_unanswered_seconds": None if frozen is None else round(frozen, 1), "nodes": nodes})

    @app.get("/")
    @app.get("/status")
    async def status_page(request: Request) -> Response:
        """The read-only status page (``server.status_page``); ``?model=…`` adds the fit planner's table."""
        from . import status

        if not state.config.server.status_page:
            return Response("status page disabled (server.status_page: false)\n", status_code=404,
                            media_type="text/plain; charset=utf-8")
        q = request.query_params
        form = {k: q.get(k, "")[: status.MAX_MODEL_CHARS] for k in ("model", "context", "engine")}
        fit_html = ""
        if form["model"].strip():
            # Seconds of engine-model arithmetic: off the event loop, so reviews keep being answered.
            fit_html = await run_in_threadpool(status.render_fit, state, form["model"].strip(),
                                               form["context"].strip(), form["engine"] or "vllm")
        visible: set[str] | None = None
        viewer = request.scope.get("vg_viewer")
        if viewer is not None:  # server.metrics_auth: rejections only from namespaces the viewer may list pods in
            visible = await viewer.namespaces({r.namespace for r in state.rejections})
        page = status.render(state, fit_html, form, visible)
        return HTMLResponse(page, headers={"Cache-Control": "no-store",
                                           "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                           "form-action 'self'"})
