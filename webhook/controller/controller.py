"""The GPU health controller's I/O: leader election, then a reconcile loop that publishes each node's GPU
health as labels, a taint and Events, and (opt-in) evicts GPU pods from failed GPUs.

Decisions come from :mod:`webhook.controller.health` (hysteresis) and :mod:`webhook.controller.remediation` (which pods,
how fast); this module reads the inventory snapshot, talks to the API server in threads, and writes
only while it holds the Lease. The leader also runs the background audit (:mod:`webhook.audit.auditor`) in
its own task, so a long pass never delays node health.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from ..audit.auditor import Auditor
from ..cluster.dra import device_taint_rules
from ..cluster.inventory import NodeGPUs
from ..cluster.snapshot import InventorySource
from ..config import Config
from ..kube.apiserver import ApiError, RawApi
from ..kube.leader import KubeLeaseStore, LeaderElector, Timings, default_identity
from ..metrics import Metrics
from ..models.catalog import Catalog, builtin_catalog
from .health import Decision, HealthTracker, NodeDecision, Transition, event_body, has_own_taint, node_patch
from .remediation import Candidate, TokenBucket, eviction_body, select_evictions

log = logging.getLogger("vramgate.controller")

COMPONENT = "vramgate-controller"
MERGE_PATCH = "application/merge-patch+json"
CONFLICT_RETRIES = 5
POD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
EVICTED_RECHECK_SECONDS = 60.0  # an evicted pod is terminating: do not ask again before this
DRY_RUN_REPEAT_SECONDS = 600.0  # dry run reports the same pod again after this
DEVICE_TAINT_RULES = "/apis/resource.k8s.io/v1/devicetaintrules"


def _snapshot_node(node: NodeGPUs) -> dict[str, Any]:
    """The parts of a Node that node_patch reads, as the inventory last saw them."""
    return {"metadata": {"labels": node.labels}, "spec": {"taints": list(node.taints)}}


class Controller:
    """One controller replica. ``run()`` campaigns for the Lease and, while leading, reconciles every
    ``controller.reconcile_interval_seconds``; ``stop()`` ends it (releasing the Lease unless told not to)."""

    def __init__(
        self,
        config: Config,
        api_client: Any,
        inventory: InventorySource,
        metrics: Metrics | None = None,
        *,
        identity: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        request_timeout: float = 10.0,
        catalog: Catalog | None = None,
    ) -> None:
        self.config = config
        self.inventory = inventory
        self.metrics = metrics or Metrics()
        self.identity = identity or default_identity()
        self.clock = clock
        self.api = RawApi(api_client, timeout=request_timeout)
        ctrl = config.controller
        lease_api = RawApi(api_client, timeout=max(1.0, ctrl.renew_deadline_seconds / 2))
        self.elector = LeaderElector(
            KubeLeaseStore(lease_api, config.namespace, ctrl.lease_name),
            self.identity,
            Timings(ctrl.lease_duration_seconds, ctrl.renew_deadline_seconds, ctrl.retry_period_seconds),
            namespace=config.namespace,
            name=ctrl.lease_name,
            clock=clock,
            on_change=self._on_leader_change,
        )
        self.tracker = HealthTracker(config)
        self.bucket = TokenBucket(ctrl.remediation.max_evictions_per_minute, clock())
        self.reconciles = 0  # reconcile passes run while leading (tests and logs)
        self.last_decision: Decision | None = None
        self._acting = False
        self._events: dict[str, Transition] = {}  # transitions whose Event is not recorded yet
        self._backoff: dict[str, tuple[int, float]] = {}  # node → (failures, next attempt)
        self._api_backoff: tuple[int, float] = (0, 0.0)  # API unreachable: (failures, next attempt)
        self._retry_at: dict[str, float] = {}  # pod key → when remediation may try it again
        self._next_remediation = 0.0
        self._metric_nodes: dict[str, NodeGPUs] = {}  # node → the object its gauges were set from
        self._clean: dict[str, tuple[NodeGPUs, NodeDecision]] = {}  # nodes found as decided
        # Snapshot.nodes_revision of the last pass that found every node as decided (None: act again).
        self._settled_revision: int | None = None
        self.auditor: Auditor | None = None
        if config.audit.enabled:
            cat = catalog or builtin_catalog()
            if catalog is None and config.models:
                cat = cat.with_entries(config.models)
            self.auditor = Auditor(config, RawApi(api_client, timeout=max(request_timeout, 30.0)), cat,
                                   self.metrics, identity=self.identity, clock=clock,
                                   can_write=lambda: self.elector.is_leader)
        self._audit_task: asyncio.Task[None] | None = None
        self._device_rules: dict[str, tuple[str, ...]] = {}  # node → DeviceTaintRules written for it
        self._device_rules_adopted = False
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release = True

    # ------------------------------------------------------------------ lifecycle

    @property
    def is_leader(self) -> bool:
        return self.elector.is_leader

    def _on_leader_change(self, leading: bool) -> None:
        self.metrics.is_leader.set(1 if leading else 0)

    async def run(self) -> None:
        """Campaign and reconcile until :meth:`stop` (or cancellation, which releases the Lease)."""
        self._loop = asyncio.get_running_loop()
        self._stop = stop = asyncio.Event()
        self.metrics.is_leader.set(0)
        elector = asyncio.create_task(self.elector.run(), name="vramgate-leader-election")
        interval = self.config.controller.reconcile_interval_seconds
        try:
            while not stop.is_set():
                if elector.done():
                    elector.result()  # raises what ended it
                    raise RuntimeError("leader election ended")
                if self.elector.is_leader:
                    if not self._acting:
                        self._begin_term()
                    try:
                        await self.reconcile()
                    except Exception:
                        log.exception("reconcile failed")
                    if self._audit_task is None or self._audit_task.done():
                        # Its own task: a long pass over a big cluster never delays node health.
                        self._audit_task = asyncio.create_task(self.audit(), name="vramgate-audit")
                elif self._acting:
                    self._end_term()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=interval)
        finally:
            if self._audit_task is not None:
                await asyncio.wait({self._audit_task}, timeout=30.0)  # a pass in a thread cannot be cancelled
            self.elector.stop(release=self._release)
            await asyncio.wait({elector}, timeout=5.0)  # it releases the Lease on the way out
            if not elector.done():
                elector.cancel()
            self._end_term()

    def stop(self, release: bool = True) -> None:
        """End :meth:`run` (from any thread). ``release=False`` leaves the Lease to expire, as a crash would."""
        self._release = release
        if not release:
            self.elector.abdicate()  # no more writes from now on, without touching the Lease
        loop, stop = self._loop, self._stop
        if loop is None or stop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            stop.set()
        elif not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing left to stop
                loop.call_soon_threadsafe(stop.set)

    async def audit(self) -> None:
        """A background audit pass when one is due (an inventory change that matters, or the period)."""
        auditor = self.auditor
        if auditor is None or not self.elector.is_leader:
            return
        snap = self.inventory.snapshot()
        # due() fingerprints the nodes when they changed (O(nodes)): off the event loop that answers reviews.
        trigger = await asyncio.to_thread(auditor.due, snap)
        if trigger is None:
            return
        try:
            await asyncio.to_thread(auditor.run_pass, snap, trigger)
        except Exception as exc:  # an API error or a bug: logged, retried at the next period
            auditor.postpone()
            log.warning("audit pass failed: %s", exc, exc_info=not isinstance(exc, ApiError))

    def _begin_term(self) -> None:
        log.info("leading as %s: reconciling GPU node health", self.identity)
        self._acting = True
        if self.auditor is not None:
            self.auditor.forget()
        self.tracker.forget()
        self._settled_revision = None
        self._events.clear()
        self._backoff.clear()
        self._retry_at.clear()

    def _end_term(self) -> None:
        if self._acting:
            log.info("%s stopped leading", self.identity)
        self._acting = False
        self.tracker.forget()
        self._settled_revision = None
        for node in self._metric_nodes:
            for state in ("healthy", "unhealthy"):
                with contextlib.suppress(KeyError):
                    self.metrics.node_gpus.remove(node, state)
        self._metric_nodes.clear()
        self._clean.clear()
        for health in ("healthy", "degraded", "unhealthy"):
            self.metrics.nodes_by_health.labels(health=health).set(0)
        if self.auditor is not None:  # only the leader's audit counts: a follower exports zeros
            for result in ("pass", "warn", "fail", "skip"):
                self.metrics.audit_workloads.labels(result=result).set(0)

    # ------------------------------------------------------------------ reconcile

    async def reconcile(self) -> Decision | None:
        """One pass: decide every node's state, write what differs, record transitions, remediate."""
        snap = self.inventory.snapshot()
        if not snap.synced:
            return None
        now = self.clock()
        self.reconciles += 1
        decision = self.last_decision
        if decision is None or not self._unchanged(snap):
            decision, go_on = await self._decide_and_write(snap, now)
            if not go_on:
                return decision
        if self.config.controller.device_taint_rules and self.elector.is_leader:
            await self._sync_device_rules(snap.nodes, decision)
        if self.config.controller.remediation.enabled and now >= self._next_remediation and self.elector.is_leader:
            self._next_remediation = now + self.config.controller.remediation.interval_seconds
            try:
                await self.remediate(decision, now)
            except ApiError as exc:
                log.warning("remediation: %s", exc)
        return decision

    def _unchanged(self, snap: Any) -> bool:
        """Whether the last pass found every node as decided and nothing has changed since: the same node
        objects (``nodes_revision``), every node's state settled (no hysteresis or grace running, so time alone
        changes nothing), nothing left to retry. Then a pass would decide the same and write nothing, and
        skipping it keeps a steady reconcile off the event loop's clock (~5 ms a second at 5,000 nodes)."""
        return (self._settled_revision is not None and snap.nodes_revision == self._settled_revision
                and self.tracker.settled)

    async def _decide_and_write(self, snap: Any, now: float) -> tuple[Decision, bool]:
        """Decide every node and write what differs; False when the pass stopped early (leadership lost, the
        API server unreachable), so nothing else should act on it."""
        self._settled_revision = None
        decision = self.tracker.observe(snap.nodes.values(), now)
        self.last_decision = decision
        self._publish_metrics(snap.nodes, decision)
        for name in decision.gone:
            self._events.pop(name, None)
            self._backoff.pop(name, None)
            self._clean.pop(name, None)
        for transition in decision.transitions():
            log.info("node %s: %s", transition.node, transition.message)
            self._events[transition.node] = transition
        failures, next_try = self._api_backoff
        if now < next_try:
            return decision, False
        quiet = True  # every node found as decided: nothing written, recorded or put off
        for name, want in decision.nodes.items():
            if not self.elector.is_leader:
                return decision, False
            node = snap.nodes[name]
            clean = self._clean.get(name)
            if clean is not None and clean[0] is node and clean[1] is want and name not in self._events:
                continue  # unchanged node, unchanged decision, found in place last time
            needs_write = node_patch(_snapshot_node(node), want.labels, want.taint, self.config) is not None
            if not needs_write:
                self._clean[name] = (node, want)
                if name not in self._events:
                    continue
            else:
                self._clean.pop(name, None)
            quiet = False
            failures_node, at = self._backoff.get(name, (0, 0.0))
            if now < at:
                continue
            try:
                if needs_write:
                    await asyncio.to_thread(self._write_node, name, want)
                unrecorded = self._events.pop(name, None)
                if unrecorded is not None:
                    await asyncio.to_thread(self._record_event, unrecorded)
                self._backoff.pop(name, None)
            except ApiError as exc:
                if exc.status == 404:  # the node is gone; the inventory will drop it
                    self._events.pop(name, None)
                    continue
                if exc.status == 0:
                    self._api_backoff = (failures + 1, now + min(30.0, 2.0 ** failures))
                    log.warning("API server unreachable (%s); keeping the last state, retrying", exc.message)
                    return decision, False
                self._backoff[name] = (failures_node + 1, now + min(60.0, 2.0 ** failures_node))
                log.warning("node %s: %s", name, exc)
        self._api_backoff = (0, 0.0)
        if quiet and snap.nodes_revision and not decision.gone and not self._events and not self._backoff:
            self._settled_revision = snap.nodes_revision
        return decision, True

    async def _sync_device_rules(self, nodes: Any, decision: Decision) -> None:
        """DeviceTaintRules for the DRA devices of nodes whose taint is on; deleted once it is off."""
        if not self._device_rules_adopted:
            try:
                self._device_rules = await asyncio.to_thread(self._list_rules)
            except ApiError as exc:
                log.warning("DeviceTaintRules: %s", exc)
                return
            self._device_rules_adopted = True
        for name, want in decision.nodes.items():
            node = nodes.get(name)
            have = self._device_rules.get(name, ())
            if want.taint is True and node is not None and node.dra and not have:
                rules = device_taint_rules(name, node.dra, self.config.labels.unhealthy_taint, want.reason)
                try:
                    await asyncio.to_thread(self._create_rules, rules)
                except ApiError as exc:
                    log.warning("node %s: DeviceTaintRule: %s", name, exc)
                    continue
                self._device_rules[name] = tuple(r["metadata"]["name"] for r in rules)
                log.info("node %s: DeviceTaintRule %s added (%s)", name, ", ".join(self._device_rules[name]),
                         want.reason)
            elif have and (want.taint is False or node is None):
                try:
                    await asyncio.to_thread(self._delete_rules, have)
                except ApiError as exc:
                    log.warning("node %s: DeviceTaintRule: %s", name, exc)
                    continue
                del self._device_rules[name]
                log.info("node %s: DeviceTaintRule %s removed", name, ", ".join(have))
        for name in [n for n in self._device_rules if n not in decision.nodes]:
            with contextlib.suppress(ApiError):
                await asyncio.to_thread(self._delete_rules, self._device_rules.pop(name))

    def _list_rules(self) -> dict[str, tuple[str, ...]]:
        """The rules an earlier leader wrote, by node (annotation ``vramgate.io/node``)."""
        items = self.api.get(DEVICE_TAINT_RULES, {"labelSelector": "app.kubernetes.io/managed-by=vramgate"})
        out: dict[str, list[str]] = {}
        for item in (items or {}).get("items") or []:
            meta = item.get("metadata") or {}
            node = (meta.get("annotations") or {}).get("vramgate.io/node")
            if isinstance(node, str) and node:
                out.setdefault(node, []).append(str(meta.get("name", "")))
        return {k: tuple(v) for k, v in out.items()}

    def _create_rules(self, rules: list[dict[str, Any]]) -> None:
        for rule in rules:
            try:
                self.api.request("POST", DEVICE_TAINT_RULES, rule)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                name = rule["metadata"]["name"]
                fresh = self.api.get(f"{DEVICE_TAINT_RULES}/{name}")
                meta = {**rule["metadata"], "resourceVersion": fresh["metadata"]["resourceVersion"]}
                rule = {**rule, "metadata": meta}
                self.api.request("PUT", f"{DEVICE_TAINT_RULES}/{name}", rule)

    def _delete_rules(self, names: tuple[str, ...]) -> None:
        for name in names:
            try:
                self.api.request("DELETE", f"{DEVICE_TAINT_RULES}/{name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise

    def _write_node(self, name: str, want: NodeDecision) -> None:
        """Read-modify-write of our labels and taint on one Node; retried on 409 (blocking)."""
        path = f"/api/v1/nodes/{name}"
        for _ in range(CONFLICT_RETRIES):
            fresh = self.api.get(path)
            patch = node_patch(fresh, want.labels, want.taint, self.config)
            if patch is None:
                return
            if not self.elector.is_leader:
                return
            try:
                self.api.request("PATCH", path, patch, content_type=MERGE_PATCH)
            except ApiError as exc:
                if exc.status == 409:
                    continue
                raise
            if "spec" in patch:
                added = has_own_taint(patch["spec"]["taints"], self.config)
                self.metrics.taints.labels(action="added" if added else "removed").inc()
                log.info("node %s: taint %s:NoSchedule %s (%s)", name, self.config.labels.unhealthy_taint,
                         "added" if added else "removed", want.reason)
            return
        raise ApiError(409, f"node kept changing ({CONFLICT_RETRIES} conflicts)", "PATCH", path)

    def _record_event(self, transition: Transition) -> None:
        if not self.elector.is_leader:
            return
        uid = None
        with contextlib.suppress(ApiError):
            uid = (self.api.get(f"/api/v1/nodes/{transition.node}").get("metadata") or {}).get("uid")
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = event_body(transition, uid, COMPONENT, self.identity, stamp)
        try:
            self.api.request("POST", "/api/v1/namespaces/default/events", body)
        except ApiError as exc:
            if exc.status == 0:
                raise
            log.warning("node %s: cannot record event %s: %s", transition.node, transition.reason, exc)

    def _publish_metrics(self, nodes: Any, decision: Decision) -> None:
        current: dict[str, NodeGPUs] = {}
        for name, d in decision.nodes.items():
            node = nodes.get(name)
            if node is None or not node.is_gpu_node or (d.health is None and d.observed is None):
                continue
            current[name] = node
            if self._metric_nodes.get(name) is node:
                continue
            self.metrics.node_gpus.labels(node=name, state="healthy").set(node.allocatable)
            self.metrics.node_gpus.labels(node=name, state="unhealthy").set(node.unhealthy_gpus)
        for name in self._metric_nodes.keys() - current.keys():
            for state in ("healthy", "unhealthy"):
                with contextlib.suppress(KeyError):
                    self.metrics.node_gpus.remove(name, state)
        self._metric_nodes = current
        for health, count in decision.counts().items():
            self.metrics.nodes_by_health.labels(health=health).set(count)

    # ------------------------------------------------------------------ remediation

    async def remediate(self, decision: Decision, now: float) -> list[tuple[Candidate, str]]:
        """Evict GPU pods from unhealthy nodes and from GPUs reported Unhealthy, within the rate limit."""
        rule = self.config.controller.remediation
        pods = await asyncio.to_thread(self._list_pods)
        candidates = select_evictions(pods, decision.unhealthy(), self.config)
        keys = {c.key for c in candidates}
        self._retry_at = {k: t for k, t in self._retry_at.items() if k in keys}
        done: list[tuple[Candidate, str]] = []
        for cand in candidates:
            if now < self._retry_at.get(cand.key, 0.0):
                continue
            if not self.elector.is_leader:
                break
            if not self.bucket.take(self.clock()):
                log.info("remediation: rate limit reached (%.1f evictions/min); %s/%s waits",
                         rule.max_evictions_per_minute, cand.namespace, cand.name)
                break
            result = await asyncio.to_thread(self._evict, cand, rule.dry_run)
            self.metrics.evictions.labels(result=result).inc()
            done.append((cand, result))
            if result == "blocked":
                self.bucket.give_back()
                self._retry_at[cand.key] = now + rule.blocked_retry_seconds
            elif result == "dry_run":
                self._retry_at[cand.key] = now + DRY_RUN_REPEAT_SECONDS
            elif result == "evicted":
                self._retry_at[cand.key] = now + EVICTED_RECHECK_SECONDS
            elif result == "error":
                self.bucket.give_back()
                self._retry_at[cand.key] = now + rule.blocked_retry_seconds
        return done

    def _list_pods(self) -> list[dict[str, Any]]:
        # resourceVersion=0: served from the API server's watch cache, not a quorum read of etcd.
        data = self.api.get("/api/v1/pods", query={"fieldSelector": POD_SELECTOR, "resourceVersion": "0"})
        items = data.get("items") if isinstance(data, dict) else None
        return [p for p in items or [] if isinstance(p, dict)]

    def _evict(self, cand: Candidate, dry_run: bool) -> str:
        """One Eviction (blocking): evicted, blocked (a PodDisruptionBudget said no: 429), gone, error or dry_run."""
        if dry_run:
            log.info("remediation (dry run): would evict %s/%s from %s: %s", cand.namespace, cand.name, cand.node,
                     cand.reason)
            return "dry_run"
        path = f"/api/v1/namespaces/{cand.namespace}/pods/{cand.name}/eviction"
        try:
            self.api.request("POST", path, eviction_body(cand))
        except ApiError as exc:
            if exc.status == 429:
                log.info("remediation: eviction of %s/%s blocked by a disruption budget: %s", cand.namespace,
                         cand.name, exc.message)
                return "blocked"
            if exc.status in (404, 409):  # gone, or recreated under another uid
                return "gone"
            log.warning("remediation: eviction of %s/%s failed: %s", cand.namespace, cand.name, exc)
            return "error"
        log.info("remediation: evicted %s/%s from %s: %s", cand.namespace, cand.name, cand.node, cand.reason)
        return "evicted"
