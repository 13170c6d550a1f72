"""Models the catalog does not know, resolved from the hub in the background and added to the catalog.

Admission never waits for the hub: the first review naming an unknown hub id queues it and says so in a
warning; a worker thread reads its config.json (models/hub.py) and the entry joins the catalog
(``AppState.add_models``), which also retires every remembered answer. A repository the hub cannot answer
for is asked again after ``hub.retry_after_seconds``.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..config import Hub
from ..kube.hub_store import HubModelStore
from ..metrics import Metrics
from ..models.hub import HubError, fetch_entry, repo_id

log = logging.getLogger("vramgate.hub")
# What shutdown waits for a lookup in flight: well inside the chart's 30 s grace period, after uvicorn's drain.
STOP_WAIT_SECONDS = 2.0


@dataclass
class _Lookup:
    state: str  # "resolving", "resolved" or "failed"
    at: float
    reason: str = ""


class HubResolver:
    """One worker thread asking the hub for models, one at a time, each once (or again after a failure)."""

    def __init__(self, config: Hub, add: Callable[[dict[str, Any]], None],
                 store: HubModelStore | None = None, metrics: Metrics | None = None) -> None:
        self.config = config
        self._add = add
        self.store = store
        self.metrics = metrics
        self._lookups: dict[str, _Lookup] = {}
        self._lock = threading.Lock()
        # Every queued name is a "resolving" lookup, and those are never forgotten while queued: the queue holds
        # at most max_models names, each once.
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        endpoint = config.endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
        self.endpoint = endpoint.rstrip("/")
        self.host = urlsplit(self.endpoint).netloc or self.endpoint

    def start(self) -> None:
        """Start the worker (the first lookup does; idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="vramgate-hub", daemon=True)
            self._thread.start()

    def stop(self, wait: float = STOP_WAIT_SECONDS) -> None:
        """Ask the worker to end and wait at most ``wait`` seconds: a lookup in flight against a hub that never
        answers is left to its daemon thread (the process exits without it), so shutdown stays inside the pod's
        grace period whatever the hub does."""
        if self._thread is not None:
            self._stopping.set()
            self._queue.put(None)
            self._thread.join(timeout=wait)
            if self._thread.is_alive():
                log.info("hub lookup still in flight at shutdown; not waited for")
            self._thread = None

    def load(self) -> int:
        """Add what the store kept (a previous pod's lookups) to the catalog; how many entries. Blocking."""
        if self.store is None:
            return 0
        loaded = 0
        for entry in self.store.load():
            repos = [r for a in (entry.get("aliases") or []) if (r := repo_id(str(a)))]
            if not repos:
                continue
            try:
                self._add(entry)
            except (TypeError, ValueError, KeyError) as exc:  # a hand-edited entry: skip it, ask the hub again
                log.warning("ConfigMap entry for %s unusable (%s); asking the hub again when named", repos[0], exc)
                continue
            self._finish(repos[0], "resolved", metric="loaded")
            loaded += 1
        if loaded:
            log.info("%d hub-resolved model(s) loaded from ConfigMap %s", loaded, self.store.name)
        return loaded

    def note(self, model: str) -> str | None:
        """What to tell the submitter about ``model``, asking the hub for it if nobody has yet; None: nothing."""
        repo = repo_id(model)
        if repo is None:
            return None
        now = time.monotonic()
        with self._lock:
            seen = self._lookups.get(repo)
            if seen is None or (seen.state == "failed" and now - seen.at >= self.config.retry_after_seconds):
                if seen is None and not self._forget_oldest():
                    if self.metrics is not None:
                        self.metrics.hub_lookups.labels(result="not-queued").inc()
                    return (f"model {repo}: not asked of {self.host} yet ({self.config.max_models} lookups "
                            "already waiting); judged without it")
                self._lookups[repo] = seen = _Lookup("resolving", now)
                self._queue.put(repo)
                self.start()
        if seen.state == "resolving":
            return f"model {repo}: asking {self.host} for its config.json; judged with it from the next apply"
        if seen.state == "failed":
            return f"model {repo}: {self.host} could not say ({seen.reason[:60]})"
        return None

    def status(self, model: str) -> str | None:
        """``resolving``, ``resolved``, ``failed`` or None (never asked): for tests and the log."""
        repo = repo_id(model)
        with self._lock:
            seen = self._lookups.get(repo) if repo else None
        return seen.state if seen else None

    def _forget_oldest(self) -> bool:
        """Make room for one more lookup among ``max_models``: the oldest failure goes first, then the oldest
        resolved name; a queued one never (forgetting it would queue it again when next named: 100,000 names
        made a queue of 100,899). False when every lookup is still queued."""
        while len(self._lookups) >= self.config.max_models:
            failed = [k for k, v in self._lookups.items() if v.state == "failed"]
            done = failed or [k for k, v in self._lookups.items() if v.state == "resolved"]
            if not done:
                return False
            del self._lookups[min(done, key=lambda k: self._lookups[k].at)]
        return True

    def _token(self) -> str | bool | None:
        if not self.config.token_file:
            return None  # huggingface_hub's own: HF_TOKEN, else anonymous
        try:
            return Path(self.config.token_file).read_text().strip() or False
        except OSError as exc:
            log.warning("hub token file %s unreadable (%s); asking anonymously", self.config.token_file, exc)
            return False

    def _run(self) -> None:
        while (repo := self._queue.get()) is not None and not self._stopping.is_set():
            started = time.monotonic()
            try:
                entry = fetch_entry(repo, endpoint=self.endpoint, token=self._token(),
                                    timeout=self.config.timeout_seconds)
                entry["source"] = f"{self.endpoint}/{repo} (config.json, read by vramgate)"
                self._add(entry)
            except HubError as exc:
                log.warning("hub lookup of %s failed: %s", repo, exc)
                self._finish(repo, "failed", str(exc))
                continue
            except Exception:
                log.exception("hub lookup of %s failed unexpectedly", repo)
                self._finish(repo, "failed", "internal error")
                continue
            log.info("model %s resolved from %s in %.2fs: %s parameters", repo, self.host,
                     time.monotonic() - started, entry.get("params"))
            self._finish(repo, "resolved")
            if self.store is not None:
                self.store.save(entry)

    def _finish(self, repo: str, state: str, reason: str = "", metric: str | None = None) -> None:
        with self._lock:
            self._lookups[repo] = _Lookup(state, time.monotonic(), reason)
        if self.metrics is not None:  # resolved, failed, or loaded (from the ConfigMap, not asked)
            self.metrics.hub_lookups.labels(result=metric or state).inc()
