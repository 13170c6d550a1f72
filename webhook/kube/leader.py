"""Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: one replica acts, the rest wait.

A candidate takes the Lease when it is free or its holder has not renewed it for
``lease_duration`` (measured on the candidate's own monotonic clock from when it last saw the
Lease change, so clock skew between machines does not matter). The leader renews every
``retry_period``; when it cannot renew for ``renew_deadline`` (< ``lease_duration``) it stops
leading, before anyone else may take over. Every write carries the Lease's resourceVersion, so two
candidates can never both win.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .apiserver import ApiError, RawApi

log = logging.getLogger("vramgate.leader")


def default_identity() -> str:
    """The pod name (or hostname) and a random suffix: a restarted pod is a new candidate."""
    base = os.environ.get("POD_NAME") or socket.gethostname() or "vramgate"
    return f"{base}_{uuid.uuid4().hex[:8]}"


def micro_time(now: dt.datetime) -> str:
    """A MicroTime as the API server writes it."""
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseStore(Protocol):
    """Where the Lease lives: get (None when absent), create and replace (ApiError 409 on a conflict)."""

    def get(self) -> dict[str, Any] | None: ...

    def create(self, lease: dict[str, Any]) -> dict[str, Any]: ...

    def replace(self, lease: dict[str, Any]) -> dict[str, Any]: ...


class KubeLeaseStore:
    """A Lease in the API server (blocking calls)."""

    def __init__(self, api: RawApi, namespace: str, name: str) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self._base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    def get(self) -> dict[str, Any] | None:
        try:
            return dict(self.api.get(f"{self._base}/{self.name}"))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        return dict(self.api.request("POST", self._base, lease))

    def replace(self, lease: dict[str, Any]) -> dict[str, Any]:
        return dict(self.api.request("PUT", f"{self._base}/{self.name}", lease))


@dataclass(frozen=True)
class Timings:
    lease_duration: float
    renew_deadline: float
    retry_period: float


class LeaderElector:
    """Campaigns for the Lease and holds it; ``is_leader`` is true only while a renewal is fresh.

    ``try_acquire_or_renew`` is one blocking round (run it in a thread); ``run`` loops forever,
    in the event loop, with the blocking rounds in threads, until ``stop``.
    """

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        timings: Timings,
        namespace: str = "",
        name: str = "",
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.store, self.identity, self.timings = store, identity, timings
        self.namespace, self.name = namespace, name
        self.clock, self.wall = clock, wall
        self.on_change = on_change
        self.observed: dict[str, Any] | None = None  # the Lease spec last seen
        self.observed_version: str | None = None
        self.observed_at = 0.0  # our clock when the Lease last changed
        self.renewed_at: float | None = None  # our clock when we last wrote the Lease as holder
        self._leading = False
        self._stop: asyncio.Event | None = None
        self._release_on_stop = True
        self._halted = False  # abdicated: no more rounds, the Lease is left to expire

    # ------------------------------------------------------------------ state

    @property
    def is_leader(self) -> bool:
        """True while we hold the Lease and renewed it within ``renew_deadline`` (checked on every call)."""
        if not self._leading or self.renewed_at is None:
            return False
        if self.clock() - self.renewed_at > self.timings.renew_deadline:
            self._set_leading(False)
            return False
        return True

    @property
    def holder(self) -> str:
        return str((self.observed or {}).get("holderIdentity") or "")

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        log.info("%s %s leadership of lease %s/%s", self.identity, "acquired" if leading else "lost",
                 self.namespace, self.name)
        if self.on_change is not None:
            self.on_change(leading)

    # ------------------------------------------------------------------ one round (blocking)

    def _spec(self, old: dict[str, Any] | None, now: dt.datetime) -> dict[str, Any]:
        stamp = micro_time(now)
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.timings.lease_duration),
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        }
        if old is not None:
            transitions = int(old.get("leaseTransitions") or 0)
            if old.get("holderIdentity") == self.identity and old.get("acquireTime"):
                spec["acquireTime"] = old["acquireTime"]
                spec["leaseTransitions"] = transitions
            else:
                spec["leaseTransitions"] = transitions + 1
        return spec

    def _observe(self, lease: dict[str, Any]) -> None:
        version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        if version != self.observed_version:
            self.observed = dict(lease.get("spec") or {})
            self.observed_version = version
            self.observed_at = self.clock()

    def _expired(self) -> bool:
        spec = self.observed or {}
        duration = spec.get("leaseDurationSeconds") or self.timings.lease_duration
        return self.observed_at + float(duration) <= self.clock()

    def try_acquire_or_renew(self) -> bool:
        """One round: create the Lease, renew it, or take it over if it expired. True when we hold it."""
        if self._halted:
            return False
        now = self.wall()
        try:
            lease = self.store.get()
            if lease is None:
                created = self.store.create({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(None, now),
                })
                self._observe(created)
                self.renewed_at = self.clock()
                return True
            self._observe(lease)
            holder = self.holder
            if holder and holder != self.identity and not self._expired():
                return False
            updated = dict(lease)
            updated["spec"] = self._spec(self.observed, now)
            replaced = self.store.replace(updated)  # metadata.resourceVersion from the read: optimistic lock
            self._observe(replaced)
            self.renewed_at = self.clock()
            return True
        except ApiError as exc:
            if exc.status == 409:
                log.debug("lease %s/%s: lost a race (%s)", self.namespace, self.name, exc.message)
            else:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False

    def release(self) -> bool:
        """Give the Lease up (blocking): the next candidate takes it at once instead of waiting it out."""
        if self.renewed_at is None:
            return False
        try:
            lease = self.store.get()
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            stamp = micro_time(self.wall())
            updated = dict(lease)
            spec = dict(lease.get("spec") or {})
            spec.update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": stamp, "acquireTime": stamp})
            updated["spec"] = spec
            self._observe(self.store.replace(updated))
            return True
        except ApiError as exc:
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, exc)
            return False
        finally:
            self._set_leading(False)
            self.renewed_at = None

    # ------------------------------------------------------------------ the loop

    async def _round(self) -> bool:
        """One round in a thread, bounded by the renew deadline (a hung call is a failed round)."""
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(self.try_acquire_or_renew), timeout=self.timings.renew_deadline
            )
        except TimeoutError:
            log.warning("lease %s/%s: round timed out", self.namespace, self.name)
            return False

    async def run(self) -> None:
        """Campaign, lead, and campaign again after losing the Lease, until :meth:`stop`."""
        self._stop = stop = asyncio.Event()
        try:
            while not stop.is_set():
                ok = await self._round()
                if stop.is_set():
                    break
                if ok and not self._halted:
                    self._set_leading(True)
                    delay = self.timings.retry_period
                else:
                    self.is_leader  # noqa: B018 - drops leadership once the renew deadline passed
                    delay = self.timings.retry_period * random.uniform(1.0, 1.2)  # jitter, as client-go
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
        finally:
            if self._release_on_stop and self._leading:
                await asyncio.to_thread(self.release)
            self._set_leading(False)

    def abdicate(self) -> None:
        """Stop leading at once (safe from any thread); the Lease is left to expire, as if the process died."""
        self._release_on_stop = False
        self._halted = True
        self._set_leading(False)

    def stop(self, release: bool = True) -> None:
        """End :meth:`run` (call it on the loop's thread); with ``release`` False the Lease is left to expire."""
        if not release:
            self.abdicate()
        else:
            self._release_on_stop = True
        if self._stop is not None:
            self._stop.set()
