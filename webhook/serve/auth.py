"""The metrics port's guard: a bearer token, kube-apiserver's word on who it is, and on whether they may GET the path.

As controller-runtime's ``filters.WithAuthenticationAndAuthorization`` guards a manager's metrics: no token or
one kube-apiserver does not accept is 401, a user without RBAC for the path (``nonResourceURLs``) is 403. The
reviews (``kube/access.py``) block, so they run in threads, at most ``MAX_REVIEWS`` at once: a flood of made-up
tokens waits here instead of taking the threads everything else shares. Could not ask in time: 503.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from ..kube.access import AccessReviewer, Decision, User
from ..kube.apiserver import ApiError
from ..metrics import Metrics

log = logging.getLogger("vramgate.auth")

# The routes the metrics port serves; on a single port (server.metrics_port unset) only these are guarded.
GUARDED_PATHS = frozenset({"/metrics", "/inventory", "/", "/status"})
MAX_REVIEWS = 4
T = TypeVar("T")


def bearer_token(scope: Scope) -> str | None:
    """The token of an ``Authorization: Bearer …`` header, or None."""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


def review_verb(method: str) -> str:
    """The RBAC verb of a request to a non-resource URL, as kube-apiserver names it (HEAD is a get)."""
    method = method.lower()
    return "get" if method == "head" else method


class AccessGuard:
    """ASGI middleware: requests to ``paths`` (all when None) pass only when a SubjectAccessReview allows them."""

    def __init__(self, app: ASGIApp, reviewer: AccessReviewer, metrics: Metrics,
                 paths: frozenset[str] | None = None) -> None:
        self.app = app
        self.reviewer = reviewer
        self.metrics = metrics
        self.paths = paths
        self._slots = asyncio.Semaphore(MAX_REVIEWS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.paths is not None and scope["path"] not in self.paths):
            await self.app(scope, receive, send)
            return
        path, verb = scope["path"], review_verb(scope["method"])
        token = bearer_token(scope)
        if token is None:
            await self._refuse(send, 401, "unauthorized: send a bearer token (a ServiceAccount token)", "no_token")
            return
        try:
            user = await self._ask(self.reviewer.authenticate, token)
            if user is None:
                await self._refuse(send, 401, "unauthorized: kube-apiserver did not accept the token", "bad_token")
                return
            decision = await self._ask(self.reviewer.authorize, user, path, verb)
        except (ApiError, TimeoutError) as exc:
            log.warning("could not review access", extra={"fields": {"path": path, "error": str(exc)[:300]}})
            await self._refuse(send, 503, "could not ask kube-apiserver who is asking; try again", "error",
                               retry_after=True)
            return
        if not decision.allowed:
            log.info("access denied", extra={"fields": {"user": user.name, "path": path, "verb": verb,
                                                        "reason": decision.reason}})
            await self._refuse(send, 403, _forbidden(user, verb, path, decision), "forbidden")
            return
        self.metrics.access_requests.labels("allowed").inc()
        # Who is asking, for routes that show less to fewer (the status page's rejections, per namespace).
        scope["vg_viewer"] = Viewer(user, self)
        await self.app(scope, receive, send)

    async def may(self, user: User, verb: str, resource: str, namespace: str) -> bool:
        """Whether ``user`` may ``verb`` ``resource`` in ``namespace``; False when kube-apiserver cannot say."""
        try:
            return (await self._ask(self.reviewer.authorize, user, resource, verb, namespace)).allowed
        except (ApiError, TimeoutError):
            return False

    async def _ask(self, call: Callable[..., T], *args: Any) -> T:
        # Waiting for a slot and the review itself share one deadline: the caller hears within it either way.
        deadline = self.reviewer.timeout * 2
        async with asyncio.timeout(deadline):
            async with self._slots:
                return await asyncio.to_thread(call, *args)

    async def _refuse(self, send: Send, status: int, message: str, result: str, retry_after: bool = False) -> None:
        self.metrics.access_requests.labels(result).inc()
        headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="vramgate"'))
        if retry_after:
            headers.append((b"retry-after", b"1"))
        body = orjson.dumps({"status": status, "message": message})
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class Viewer:
    """The user the guard let in, and the guard to ask what else they may see."""

    def __init__(self, user: User, guard: AccessGuard) -> None:
        self.user, self.guard = user, guard

    async def namespaces(self, names: set[str], verb: str = "list", resource: str = "pods") -> set[str]:
        """Those of ``names`` where the user may ``verb`` ``resource`` (cluster-scoped objects: ``""``, kept
        when they may do it in every namespace)."""
        out = set()
        for ns in names:
            if await self.guard.may(self.user, verb, resource, ns):
                out.add(ns)
        return out


def _forbidden(user: User, verb: str, path: str, decision: Decision) -> str:
    why = f": {decision.reason}" if decision.reason else ""
    return (f"forbidden: user {user.name!r} may not {verb} {path} (grant nonResourceURLs [{path!r}] "
            f"verbs [{verb!r}] in a ClusterRole){why}")
