"""ConfigMaps a workload refers to, read for admission the way `vramgate check -f` reads them from files.

A Deployment whose vLLM flags come from ``env: valueFrom: configMapKeyRef`` or ``envFrom: configMapRef``, a
trainer whose YAML config is a mounted ``configMap`` volume, or a KAITO preset's inference ConfigMap is only
judged on what it really runs when those values are known. Admission reads the referenced ConfigMaps of the
object's own namespace (never Secrets) through one ``get`` each, off the event loop, within a budget; a
ConfigMap is remembered for ``ttl`` seconds, a missing one too. Without the RBAC to read ConfigMaps (403) the
reader stops asking and the "value not known here" warning stays, as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from ..kinds.kaito import config_ref as kaito_config_ref
from .apiserver import ApiError, RawApi

log = logging.getLogger("vramgate.configmaps")
# The most references one object may make us read, and how deep its pod specs may sit.
MAX_REFS = 16
MAX_DEPTH = 14


def configmap_refs(obj: Any) -> list[str]:
    """Names of the ConfigMaps an object's containers take env from (``configMapKeyRef``, ``envFrom``) or read a
    config file from (a ``configMap`` volume mounted where a command names a file)."""
    found: list[str] = []

    def add(name: str) -> None:
        if name not in found and len(found) < MAX_REFS:
            found.append(name)

    def walk(node: Any, depth: int) -> None:
        if depth > MAX_DEPTH or len(found) >= MAX_REFS:
            return
        if isinstance(node, dict):
            for key in ("configMapKeyRef", "configMapRef"):
                ref = node.get(key)
                if isinstance(ref, dict) and isinstance(ref.get("name"), str):
                    add(ref["name"])
            if isinstance(node.get("containers"), list):  # a pod spec
                for name in _mounted_in_commands(node):
                    add(name)
            for value in node.values():
                if isinstance(value, dict | list):
                    walk(value, depth + 1)
        elif isinstance(node, list):
            for item in node:
                walk(item, depth + 1)

    walk(obj.get("spec") if isinstance(obj, dict) else None, 0)
    kaito = kaito_config_ref(obj)  # KAITO's inference ConfigMap: engine arguments, not env
    if kaito is not None:
        add(kaito)
    return found


def _mounted_in_commands(pod: dict[str, Any]) -> list[str]:
    """ConfigMap volumes mounted where a container's command line names a file (a trainer's YAML config).

    Only those: a ConfigMap mounted for anything else (a chat template, a script) is not read, so the answer
    to such a pod stays cacheable and admission makes no API call for it.
    """
    volumes = {v.get("name"): v["configMap"]["name"] for v in pod.get("volumes") or []
               if isinstance(v, dict) and isinstance(v.get("configMap"), dict)
               and isinstance(v["configMap"].get("name"), str)}
    if not volumes:
        return []
    names: list[str] = []
    for c in pod.get("containers") or []:
        if not isinstance(c, dict):
            continue
        text = " ".join(str(w) for w in [*(c.get("command") or []), *(c.get("args") or [])]
                        if isinstance(w, str | int | float))
        for m in c.get("volumeMounts") or []:
            if not isinstance(m, dict) or m.get("name") not in volumes or not isinstance(m.get("mountPath"), str):
                continue
            mount = m["mountPath"].rstrip("/")
            if f"{mount}/" in text or (m.get("subPath") and mount in text):
                names.append(volumes[m["name"]])
    return names


# The shortest time left worth a read: below it the read is left to the background at once.
_MIN_READ_SECONDS = 0.05
# ConfigMaps waiting to be read in the background, at most (more are dropped: the next review asks again).
MAX_PENDING = 64


class ConfigMapReader:
    """A bounded, time-limited cache of ConfigMaps read with ``get`` (thread-safe; calls block: use a thread).

    A review's reads keep to its deadline: each ``get`` is one attempt (the client makes no retries, see
    ``serve/server.py``) with what is left of the deadline as its timeout. A ConfigMap not read in time is read
    again in the background, by one thread, with the client's own timeout, so the next review finds it.
    """

    def __init__(self, api: Callable[[], RawApi], ttl: float = 30.0, max_entries: int = 1024) -> None:
        self._api_factory = api
        self._api: RawApi | None = None
        self.ttl = ttl
        self.max_entries = max_entries
        self._cache: OrderedDict[tuple[str, str], tuple[float, dict[str, Any] | None]] = OrderedDict()
        self._lock = threading.Lock()
        self.forbidden = False
        self.reads = 0
        self._pending: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._wake = threading.Condition(self._lock)
        self._worker: threading.Thread | None = None

    def _cached(self, key: tuple[str, str]) -> tuple[bool, dict[str, Any] | None]:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > time.monotonic():
                return True, hit[1]
        return False, None

    def _remember(self, key: tuple[str, str], obj: dict[str, Any] | None) -> None:
        with self._lock:
            self._cache[key] = (time.monotonic() + self.ttl, obj)
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)

    def read(self, namespace: str, names: list[str], deadline: float) -> list[dict[str, Any]]:
        """The ConfigMaps among ``names`` that exist (cached, or read now until ``deadline`` on the monotonic clock)."""
        return self.read_timed(namespace, names, deadline)[0]

    def read_timed(self, namespace: str, names: list[str], deadline: float) -> tuple[list[dict[str, Any]], list[str]]:
        """The ConfigMaps among ``names`` that exist, and the names not read by ``deadline`` (the API server was
        slow, or the time ran out first): those are read in the background for the next review."""
        out: list[dict[str, Any]] = []
        late: list[str] = []
        self.connect()
        for name in names:
            key = (namespace, name)
            known, obj = self._cached(key)
            if not known and not self.forbidden:
                left = deadline - time.monotonic()
                obj = None
                if left >= _MIN_READ_SECONDS:
                    try:
                        obj = self._get(namespace, name, timeout=left)
                    except _Unreachable:
                        left = 0
                if left < _MIN_READ_SECONDS and not self.forbidden:
                    late.append(name)
                    self._later(key)
            if obj is not None:
                out.append(obj)
        return out, late

    def _later(self, key: tuple[str, str]) -> None:
        with self._wake:
            if key in self._pending or len(self._pending) >= MAX_PENDING:
                return
            self._pending[key] = None
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._drain, name="vramgate-configmaps", daemon=True)
                self._worker.start()
            self._wake.notify()

    def _drain(self) -> None:
        """The background reader: one ConfigMap at a time, with the client's own timeout; exits when idle."""
        while True:
            with self._wake:
                if not self._pending:
                    self._wake.wait(timeout=30)
                    if not self._pending:
                        self._worker = None
                        return
                key = next(iter(self._pending))
            try:
                known, _ = self._cached(key)
                if not known and not self.forbidden:
                    self._get(*key)
            except _Unreachable:
                pass  # still unreachable: the next review that needs it asks again
            except Exception:  # never let the background reader die on one bad answer
                log.debug("background ConfigMap read failed", exc_info=True)
            finally:
                with self._wake:
                    self._pending.pop(key, None)

    def pending(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._pending)

    def connect(self) -> RawApi:
        """The API client, made on first use (reading the kubeconfig or service account takes a moment)."""
        if self._api is None:
            self._api = self._api_factory()
        return self._api

    def _get(self, namespace: str, name: str, timeout: float | None = None) -> dict[str, Any] | None:
        """The ConfigMap (None when missing or not allowed); raises _Unreachable when the call did not finish."""
        api = self.connect()
        self.reads += 1
        try:
            obj = api.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}", timeout=timeout)
        except ApiError as exc:
            if exc.status == 0:
                raise _Unreachable from exc
            if exc.status == 404:
                self._remember((namespace, name), None)
            elif exc.status in (401, 403):
                self.forbidden = True
                log.warning("cannot read ConfigMaps (%s): env from ConfigMaps stays unknown at admission "
                            "(grant get on configmaps, see docs/admission.md)", exc.status)
            return None
        if not isinstance(obj, dict):
            return None
        obj = {**obj, "kind": "ConfigMap"}
        self._remember((namespace, name), obj)
        return obj

    def entries(self) -> Iterator[tuple[tuple[str, str], dict[str, Any] | None]]:
        with self._lock:
            for key, (_, obj) in list(self._cache.items()):
                yield key, obj


class _Unreachable(Exception):
    """A ConfigMap read that timed out or could not connect."""
