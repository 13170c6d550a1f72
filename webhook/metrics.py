"""Prometheus metrics of one service instance, on their own registry (tests run many instances)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .cluster.snapshot import Snapshot

HEALTH_STATES = ("healthy", "degraded", "unhealthy")

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    """Every metric vramgate exports. Names are prefixed ``vramgate_``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.admission_requests = Counter(
            "vramgate_admission_requests", "AdmissionReviews answered",
            ["operation", "kind", "verdict", "reason"], registry=r,
        )
        self.admission_duration = Histogram(
            "vramgate_admission_duration_seconds", "Time to answer an AdmissionReview",
            ["webhook"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.admission_errors = Counter(
            "vramgate_admission_errors", "Unexpected errors in admission decisions (answered per failure mode)",
            ["webhook"], registry=r,
        )
        self.bad_requests = Counter(
            "vramgate_bad_requests", "Requests rejected as malformed (4xx)", ["endpoint", "reason"], registry=r,
        )
        self.extender_requests = Counter(
            "vramgate_extender_requests", "Scheduler extender calls", ["verb"], registry=r,
        )
        self.extender_duration = Histogram(
            "vramgate_extender_duration_seconds", "Time to answer an extender call",
            ["verb"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.connections_closed_slow = Counter(
            "vramgate_connections_closed_slow", "Connections aborted for not delivering a complete request in time",
            registry=r,
        )
        self.connections_refused = Counter(
            "vramgate_connections_refused", "Connections refused over server.max_connections", registry=r,
        )
        self.client_disconnects = Counter(
            "vramgate_client_disconnects", "Requests whose client went away before its body arrived (not an error)",
            ["endpoint"], registry=r,
        )
        self.access_requests = Counter(
            "vramgate_access_requests", "Requests to /metrics, /inventory and the status page under "
            "server.metrics_auth, by outcome: allowed, no_token, bad_token (401), forbidden (403), error (503)",
            ["result"], registry=r,
        )
        self.configmap_reads_late = Counter(
            "vramgate_configmap_reads_late", "ConfigMap reads at admission that missed the review's budget "
            "(admission.configmap_budget_seconds); each is done in the background for the next review", registry=r,
        )
        self.hub_lookups = Counter(
            "vramgate_hub_lookups", "Unknown models asked of the model hub (config.hub), by result", ["result"],
            registry=r,
        )
        self.autofit = Counter(
            "vramgate_autofit", "Autofit (vramgate.io/autofit) on rejected workloads: a fix applied, or refused",
            ["result"], registry=r,
        )
        self.extender_errors = Counter(
            "vramgate_extender_errors", "Unexpected errors in extender decisions (answered, never a 500)",
            ["verb"], registry=r,
        )
        self.extender_filtered = Counter(
            "vramgate_extender_filtered_nodes", "Nodes filtered out, by reason code", ["reason"], registry=r,
        )
        self.inventory_nodes = Gauge("vramgate_inventory_nodes", "GPU nodes in the inventory", registry=r)
        self.inventory_staleness = Gauge(
            "vramgate_inventory_staleness_seconds", "Seconds since the inventory last heard from the API server",
            registry=r,
        )
        self.inventory_api_answering = Gauge(
            "vramgate_inventory_api_answering",
            "1 while the API server answers the inventory's probes; 0 once it has stopped (frozen or unreachable)",
            registry=r,
        )
        self.inventory_relists = Counter(
            "vramgate_inventory_relists", "Full re-lists of the node/pod inventory", ["resource", "cause"], registry=r,
        )
        self.node_gpus = Gauge(
            "vramgate_node_gpus", "GPUs per node by state", ["node", "state"], registry=r,
        )
        self.nodes_by_health = Gauge(
            "vramgate_nodes_by_health", "GPU nodes per health state", ["health"], registry=r,
        )
        self.taints = Counter(
            "vramgate_controller_taints", "Unhealthy taints added or removed", ["action"], registry=r,
        )
        self.evictions = Counter(
            "vramgate_controller_evictions", "Evictions of pods from failed GPUs", ["result"], registry=r,
        )
        self.is_leader = Gauge("vramgate_controller_leader", "1 while this replica leads the controller", registry=r)
        self.audit_workloads = Gauge(
            "vramgate_audit_workloads", "GPU workloads by the last audit's verdict", ["result"], registry=r,
        )
        self.audit_passes = Counter("vramgate_audit_passes", "Background audit passes", ["trigger"], registry=r)
        self.audit_duration = Histogram(
            "vramgate_audit_duration_seconds", "Time of one background audit pass",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0), registry=r,
        )
        self.audit_judged = Counter(
            "vramgate_audit_judged", "Workloads judged by the audit (unchanged ones are not re-judged)", registry=r,
        )
        self.audit_report_writes = Counter(
            "vramgate_audit_report_writes", "Report writes by the audit", ["action"], registry=r,
        )
        self.gc_pause = Histogram(
            "vramgate_gc_pause_seconds",
            "Time of each cyclic garbage collection; it holds the GIL, so reviews and extender calls wait",
            ["generation"], buckets=LATENCY_BUCKETS, registry=r,
        )
        # vramgate_workload_placeable_replicas, registered by the AppState that owns it (webhook/serve/placeable.py).
        self.placeable_collector: Collector | None = None

    def observe_fixed_inventory(self, snapshot: Snapshot) -> None:
        """Set the inventory gauges from a fixed inventory (``--nodes FILE``), which no watch ever updates.

        The same figures the live watch and the health controller publish: GPU nodes, nodes per
        health state, GPUs per node by state; the staleness is 0 (a file is as fresh as it gets).
        """
        gpu = snapshot.gpu_nodes()
        self.inventory_nodes.set(len(gpu))
        self.inventory_staleness.set(0)
        self.inventory_api_answering.set(1)
        counts = dict.fromkeys(HEALTH_STATES, 0)
        for n in gpu:
            counts[n.health] = counts.get(n.health, 0) + 1
            self.node_gpus.labels(node=n.name, state="healthy").set(n.allocatable)
            self.node_gpus.labels(node=n.name, state="unhealthy").set(n.unhealthy_gpus)
        for health, count in counts.items():
            self.nodes_by_health.labels(health=health).set(count)


    def observe_gc_pause(self, generation: int, seconds: float) -> None:
        self.gc_pause.labels(generation=str(generation)).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
