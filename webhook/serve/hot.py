"""The app class: POSTs to the hot routes (reviews, extender calls) go straight to their endpoint, past the stack."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, FastAPI
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

log = logging.getLogger("vramgate.server")

Endpoint = Callable[[Request], Awaitable[Response]]

# Called once or twice per pod by kube-apiserver and kube-scheduler; each endpoint reads only the Request.
HOT_PATHS = frozenset({"/mutate", "/validate", "/scheduler/filter", "/scheduler/prioritize"})


class App(FastAPI):
    """FastAPI, with the hot routes' POSTs answered without its middleware stack and router.

    Why: per request, FastAPI's stack (error, telemetry, body-limit, exception and exit-stack middleware,
    router matching, the request_response wrapper) cost about as much CPU as the extender's own decision
    (docs/scaling.md, "The request path"). The endpoints are the routes' own: ``include_hot`` takes them from the
    routers it includes, so the table has one source; every other request, a GET to a hot path
    included, goes through FastAPI as before. What the stack did for these routes is done here: an endpoint
    that raises answers 500 and is logged (the endpoints catch their own errors; this is the last line).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hot_routes: dict[str, Endpoint] = {}

    def include_hot(self, router: APIRouter) -> None:
        """Include ``router`` (no prefix), and answer its POST routes on HOT_PATHS directly."""
        self.include_router(router)
        self.hot_routes.update({
            route.path: route.endpoint for route in router.routes
            if isinstance(route, Route) and route.path in HOT_PATHS and route.methods == {"POST"}
        })

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.hot_routes.get(scope["path"])
            if endpoint is not None:
                scope["app"] = self
                try:
                    response = await endpoint(Request(scope, receive, send))
                except Exception:
                    log.exception("%s failed", scope["path"])
                    response = PlainTextResponse("Internal Server Error", status_code=500)
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
