"""HTTP routes of the scheduler extender: read the body (bounded), decide, answer; never a 500."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from ..bodies import BadContentLength, BodyTooLarge, read_limited
from ..limits import container_memory_limit, extender_body_limit, release_memory, too_large_hint
from ..state import AppState
from .decide import Extender
from .wire import BadRequest

log = logging.getLogger("vramgate.extender")
router = APIRouter()

# Bodies above this are decoded in a worker thread so the event loop keeps serving probes.
_OFFLOAD_BYTES = 1024 * 1024
_JSON = "application/json"


def extender_of(request: Request) -> tuple[AppState, Extender]:
    """The instance's state and its Extender."""
    state: AppState = request.app.state.vg
    return state, state.extender


async def read_body(request: Request, limit: int, hint: Callable[[], str] | None = None) -> bytes:
    """The request body, or BadRequest (413 past ``limit`` bytes, with ``hint()`` saying why; 400 for a bad
    Content-Length)."""
    try:
        return await read_limited(request, limit)
    except BodyTooLarge as exc:
        reason = (f"body of {exc.declared} bytes exceeds the limit of {limit}" if exc.declared is not None
                  else f"body exceeds the limit of {limit} bytes") + (hint() if hint else "")
        raise BadRequest(reason, status=413, code="too-large") from None
    except BadContentLength as exc:
        raise BadRequest(str(exc)) from None


# One large body at a time, from reading it to sending its answer: the slot is taken before the body is read,
# so the others wait in their sockets (uvicorn pauses reading), not in memory. Four 56 MB bodies at once peaked
# at 2.9 GiB before; the measured figures are in docs/reliability.md.
_MEMORY_LIMIT = container_memory_limit()


def _large(request: Request) -> bool:
    """Whether the body may be large: declared over the offload size, or not declared (chunked)."""
    declared = request.headers.get("content-length")
    return declared is None or not declared.isdigit() or int(declared) > _OFFLOAD_BYTES


def _large_slot(request: Request) -> anyio.Semaphore:
    """The app's one slot for large bodies (a semaphore, not a lock: the answer's sender releases it)."""
    slot: anyio.Semaphore | None = getattr(request.app.state, "extender_large_slot", None)
    if slot is None:
        slot = request.app.state.extender_large_slot = anyio.Semaphore(1)
    return slot


class _ReleasedWhenSent(Response):
    """An answer that gives the large-body slot back once it has been sent, or failed to be."""

    def __init__(self, answer: Response, slot: anyio.Semaphore) -> None:
        super().__init__(answer.body, status_code=answer.status_code, media_type=answer.media_type)
        self._slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slot.release()


async def _serve(request: Request, verb: str, decide: Callable[[Extender, bytes], bytes], on_error: bytes) -> Response:
    if not _large(request):
        return await _answer(request, verb, decide, on_error)
    slot = _large_slot(request)
    await slot.acquire()
    try:
        answer = await _answer(request, verb, decide, on_error)
    except BaseException:
        slot.release()
        raise
    return _ReleasedWhenSent(answer, slot)


async def _answer(request: Request, verb: str, decide: Callable[[Extender, bytes], bytes], on_error: bytes) -> Response:
    state, ext = extender_of(request)
    metrics = state.metrics
    started = time.perf_counter()
    try:
        configured = state.config.extender.max_body_bytes
        limit = extender_body_limit(configured, _MEMORY_LIMIT)
        body = await read_body(request, limit, lambda: too_large_hint(limit, configured, _MEMORY_LIMIT))
        if len(body) > _OFFLOAD_BYTES:
            out = await anyio.to_thread.run_sync(decide, ext, body)
            del body
            release_memory()
        else:
            out = decide(ext, body)
    except BadRequest as exc:
        metrics.bad_requests.labels(endpoint=request.url.path, reason=exc.code).inc()
        return Response(exc.reason + "\n", status_code=exc.status, media_type="text/plain; charset=utf-8")
    except ClientDisconnect:
        metrics.client_disconnects.labels(request.url.path).inc()
        log.debug("scheduler went away before its %s request arrived", verb)
        return Response("client disconnected\n", status_code=400, media_type="text/plain; charset=utf-8")
    except Exception:
        log.exception("extender %s failed", verb)
        metrics.extender_errors.labels(verb=verb).inc()
        out = on_error
    metrics.extender_requests.labels(verb=verb).inc()
    metrics.extender_duration.labels(verb=verb).observe(time.perf_counter() - started)
    return Response(out, media_type=_JSON)


# An unexpected failure is not the caller's fault: filter says so in Error (the scheduler fails this
# cycle, or skips the extender when it is ignorable); prioritize errors are ignored by the scheduler.
_FILTER_FAILED = (b'{"Nodes":null,"NodeNames":null,"FailedNodes":{},"FailedAndUnresolvableNodes":{},'
                  b'"Error":"vramgate: internal error in filter (see its log)"}')


@router.post("/scheduler/filter")
async def scheduler_filter(request: Request) -> Response:
    return await _serve(request, "filter", Extender.filter, _FILTER_FAILED)


@router.post("/scheduler/prioritize")
async def scheduler_prioritize(request: Request) -> Response:
    return await _serve(request, "prioritize", Extender.prioritize, b"[]")
