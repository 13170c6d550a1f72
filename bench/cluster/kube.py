"""Talking to the bench's API server fast: keep-alive HTTPS per thread, paced creates, and a pod watch
that timestamps each pod's binding as the scheduler writes it.

The e2e harness opens one TLS connection per request, which is right for tests and far too slow
to create thousands of objects on a 2-core machine; these helpers reuse its credentials.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any


class Api:
    """Keep-alive HTTPS calls to one API server, one connection per calling thread."""

    def __init__(self, port: int, ssl_context: ssl.SSLContext) -> None:
        self.port, self.ctx = port, ssl_context
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=60, context=self.ctx)
            self._local.conn = conn
        return conn

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
             query: dict[str, str] | None = None) -> tuple[int, Any, float]:
        """(status, decoded body, seconds from sending to the whole answer read)."""
        if query:
            path = f"{path}?{urllib.parse.urlencode(query)}"
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (0, 1):
            conn = self._conn()
            try:
                t0 = time.perf_counter()
                conn.request(method, path, body=data, headers=headers)
                r = conn.getresponse()
                raw = r.read()
                took = time.perf_counter() - t0
                break
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        try:
            decoded: Any = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode("utf-8", "replace")
        return r.status, decoded, took

    def create_many(self, objects: Sequence[dict[str, Any]], path_of: Callable[[dict[str, Any]], str],
                    threads: int = 4) -> float:
        """POST every object (409 Already Exists counts as done); returns the seconds it took."""
        t0 = time.perf_counter()

        def one(obj: dict[str, Any]) -> None:
            status, body, _ = self.call("POST", path_of(obj), obj)
            if status not in (200, 201, 409):
                raise RuntimeError(f"create {obj['kind']} {obj['metadata']['name']}: {status} {body}")

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, objects))
        return time.perf_counter() - t0


def paced(api: Api, objects: Iterable[tuple[str, dict[str, Any]]], rate: float,
          threads: int = 4) -> list[tuple[str, str, float, float]]:
    """POST ``(path, object)`` pairs at ``rate`` a second (open loop while a thread is free); returns
    ``(path, name, send time, latency seconds)`` for each."""
    out: list[tuple[str, str, float, float]] = []
    lock = threading.Lock()

    def one(path: str, obj: dict[str, Any], due: float) -> None:
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sent = time.perf_counter()
        status, body, took = api.call("POST", path, obj)
        if status not in (200, 201):
            raise RuntimeError(f"create {obj['metadata']['name']}: {status} {body}")
        with lock:
            out.append((path, obj["metadata"]["name"], sent, took))

    start = time.perf_counter() + 0.2
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(one, path, obj, start + i / rate) for i, (path, obj) in enumerate(objects)]
        for f in futures:
            f.result()
    return out


@dataclass
class PodWatch:
    """Watches the pods of one label selector and stamps (``time.perf_counter``) when each is first
    seen bound (``spec.nodeName``) or reported Unschedulable."""

    api_port: int
    ctx: ssl.SSLContext
    namespace: str
    selector: str
    bound: dict[str, float] = field(default_factory=dict)
    node: dict[str, str] = field(default_factory=dict)
    unschedulable: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _conn: http.client.HTTPSConnection | None = None
    _ready: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    restarts: int = 0

    def start(self) -> PodWatch:
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-pod-watch")
        self._thread.start()
        if not self._ready.wait(30):
            raise TimeoutError("pod watch did not start")
        return self

    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                rv = self._stream(rv)
            except Exception as exc:  # a dropped stream: resume from the last resourceVersion
                if self._stop.is_set():
                    return
                self.restarts += 1
                if self.restarts > 20:
                    self.error = f"{type(exc).__name__}: {exc}"
                    self._ready.set()
                    return
                time.sleep(0.2)

    def _stream(self, rv: str) -> str:
        params = {"watch": "1", "labelSelector": self.selector, "allowWatchBookmarks": "true"}
        if rv:
            params["resourceVersion"] = rv
        self._conn = http.client.HTTPSConnection("127.0.0.1", self.api_port, timeout=None, context=self.ctx)
        self._conn.request("GET", f"/api/v1/namespaces/{self.namespace}/pods?{urllib.parse.urlencode(params)}",
                           headers={"Accept": "application/json"})
        r = self._conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"watch answered {r.status}")
        self._ready.set()
        while not self._stop.is_set():
            line = r.readline()
            if not line:
                raise EOFError("watch ended by the server")
            now = time.perf_counter()
            ev = json.loads(line)
            pod = ev.get("object") or {}
            rv = pod.get("metadata", {}).get("resourceVersion") or rv
            if ev.get("type") == "ERROR":
                raise RuntimeError(f"watch error {pod}")
            name = pod.get("metadata", {}).get("name")
            if not name or ev.get("type") in ("DELETED", "BOOKMARK"):
                continue
            node = pod.get("spec", {}).get("nodeName")
            if node and name not in self.bound:
                self.bound[name] = now
                self.node[name] = node
            elif not node and name not in self.unschedulable:
                for c in pod.get("status", {}).get("conditions") or []:
                    if c.get("type") == "PodScheduled" and c.get("status") == "False":
                        self.unschedulable[name] = now
        return rv

    def settled(self, names: Iterable[str]) -> bool:
        if self.error:
            raise RuntimeError(f"pod watch failed: {self.error}")
        return all(n in self.bound or n in self.unschedulable for n in names)

    def stop(self) -> None:
        self._stop.set()
        if self._conn is not None:
            with contextlib.suppress(Exception):
                if self._conn.sock is not None:
                    self._conn.sock.shutdown(2)
                self._conn.close()


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0–100); NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]
