"""CPU per request through the ASGI app: the hot routes answered directly, beside FastAPI's stack, same run.

The app is called in-process with the request bytes (no socket, no TLS): what is left is routing,
middleware, body reading, the decision and the response, i.e. what differs between the two paths.
The extender calls carry 500 names of a 5,000-node fleet (kube-scheduler's batch at that size); the
reviews are a vLLM Pod. ``.venv/bin/python -m bench.request_path``.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import orjson

from webhook.cluster.snapshot import FixedInventory
from webhook.config import Config
from webhook.serve.app import create_app
from webhook.serve.hot import App
from webhook.serve.state import AppState

from .extender_bench import POD, cluster

ROUNDS, CALLS = 5, 400


def _scope(path: str, body: bytes) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "https", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8443), "state": {}}


async def _call(app: App, path: str, body: bytes) -> None:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(_scope(path, body), receive, send)
    if sent[0]["status"] != 200:
        raise RuntimeError(f"{path}: {sent[0]['status']} {sent[-1].get('body', b'')[:200]!r}")


async def _cpu_us(app: App, path: str, bodies: list[bytes]) -> float:
    """Median over rounds of the CPU µs per call, cycling through ``bodies``."""
    for body in bodies[:50]:
        await _call(app, path, body)
    rounds = []
    for _ in range(ROUNDS):
        start = time.process_time()
        for i in range(CALLS):
            await _call(app, path, bodies[i % len(bodies)])
        rounds.append((time.process_time() - start) / CALLS * 1e6)
    return statistics.median(rounds)


def _reviews(pod: dict[str, Any]) -> list[bytes]:
    """Reviews of pods that differ by name: each is judged (the answer cache keeps only repeats of one object)."""
    return [_review({**pod, "metadata": {**pod["metadata"], "name": f"llama-{i}"}}) for i in range(CALLS)]


def _review(pod: dict[str, Any]) -> bytes:
    obj = {"apiVersion": "v1", "kind": "Pod", **pod, "status": {}}
    req = {"uid": "00000000-0000-0000-0000-000000000001", "kind": {"group": "", "version": "v1", "kind": "Pod"},
           "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "ml", "name": "",
           "operation": "CREATE", "userInfo": {"username": "bench"}, "object": obj, "oldObject": None,
           "dryRun": False}
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})


async def _rows(size: int) -> list[tuple[str, float, float]]:
    nodes, snap = cluster(size)
    names = [n["metadata"]["name"] for n in nodes[: size // 10]]
    app = create_app(AppState(Config(), FixedInventory(snap), role="all"))
    extender = [orjson.dumps({"Pod": POD, "NodeNames": names})]
    calls = [("/scheduler/filter", extender), ("/scheduler/prioritize", extender),
             ("/mutate", _reviews(POD)), ("/validate", _reviews(POD))]
    hot = dict(app.hot_routes)
    out = []
    for path, bodies in calls:
        app.hot_routes = {}
        stack = await _cpu_us(app, path, bodies)
        app.hot_routes = hot
        direct = await _cpu_us(app, path, bodies)
        out.append((path, stack, direct))
    return out


def table(size: int = 5000) -> str:
    lines = [f"| POST ({size:,} nodes) | through FastAPI's stack µs CPU | hot route µs CPU | × |", "|---|---|---|---|"]
    for path, stack, direct in asyncio.run(_rows(size)):
        lines.append(f"| {path} | {stack:.0f} | {direct:.0f} | {direct / stack:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
