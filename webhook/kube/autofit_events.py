"""The Event autofit leaves on the workload it changed, written once the API server has stored the object.

A mutating webhook answers before the object exists, so it has no UID yet; ``kubectl describe`` finds Events
by the object's UID. The writer therefore waits (in a worker thread, off the review's path) until the object
can be read, then posts a Normal Event naming the change. Dry-run reviews never reach it.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .apiserver import ApiError, RawApi
from .events import event_body as new_event

COMPONENT = "vramgate-webhook"
REASON = "VRAMGateAutofit"

log = logging.getLogger("vramgate.autofit")


@dataclass(frozen=True)
class Target:
    """The object a review created or updated, as the admission request names it."""

    namespace: str
    group: str
    version: str
    resource: str
    kind: str
    name: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{base}/namespaces/{self.namespace}/{self.resource}/{self.name}"


def event_body(target: Target, uid: str | None, message: str, instance: str, timestamp: str) -> dict[str, Any]:
    """A Normal Event on ``target`` saying what autofit changed."""
    involved = {"apiVersion": target.api_version, "kind": target.kind, "name": target.name,
                "namespace": target.namespace}
    if uid:
        involved["uid"] = uid
    return new_event(involved, target.namespace, reason=REASON, message=message, type="Normal",
                     component=COMPONENT, instance=instance, action="Autofit", timestamp=timestamp)


class AutofitEvents:
    """Posts autofit's Events from daemon threads; at most ``max_pending`` wait for their objects at once."""

    def __init__(self, api: Callable[[], RawApi], instance: str, *, wait_seconds: float = 15.0,
                 interval: float = 0.5, max_pending: int = 64) -> None:
        self._api = api
        self.instance = instance
        self.wait_seconds = wait_seconds
        self.interval = interval
        self._slots = threading.BoundedSemaphore(max_pending)

    def record(self, target: Target, message: str) -> bool:
        """Start writing the Event; False when too many are already waiting (the change is still annotated)."""
        if not self._slots.acquire(blocking=False):
            log.warning("autofit: too many Events pending; %s/%s gets none", target.namespace, target.name)
            return False
        threading.Thread(target=self._write, args=(target, message), name="autofit-event", daemon=True).start()
        return True

    def _write(self, target: Target, message: str) -> None:
        try:
            api = self._api()
            uid = self._uid(api, target)
            stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            api.request("POST", f"/api/v1/namespaces/{target.namespace}/events",
                        event_body(target, uid, message, self.instance, stamp))
        except Exception as exc:  # an Event is a courtesy: the annotation carries the trail
            log.warning("autofit: cannot record the Event on %s/%s: %s", target.namespace, target.name, exc)
        finally:
            self._slots.release()

    def _uid(self, api: RawApi, target: Target) -> str | None:
        deadline = time.monotonic() + self.wait_seconds
        while True:
            try:
                obj = api.get(target.path)
            except ApiError as exc:
                if exc.status not in (404, 0):
                    return None  # not allowed to read it: an Event without the UID still names it
                obj = None
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            if isinstance(meta, dict) and meta.get("uid"):
                return str(meta["uid"])
            if time.monotonic() >= deadline:
                return None
            time.sleep(self.interval)
