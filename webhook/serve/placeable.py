"""How many more replicas of each admitted GPU workload the free GPUs could hold now:
``vramgate_workload_placeable_replicas{namespace,workload}``, the capacity signal for autoscalers
(docs/autoscaling.md).

Admission remembers the need of the last ``admission.placeable_workloads_max`` GPU workloads it
admitted (Deployments, StatefulSets, LeaderWorkerSets, …; not their Pods, whose names churn), and
a collector works the figure out at scrape time from the current snapshot with the placement rules
admission and the extender use: on each healthy node whose GPUs can hold one pod, ⌊free GPUs ÷ GPUs
per pod⌋ more pods, summed over nodes. Entries older than ``admission.placeable_ttl_seconds`` are
dropped, so a deleted workload's series goes away.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..cluster.snapshot import Snapshot
from ..config import Admission
from ..decide.placement import Need, fits_ever

NAME = "vramgate_workload_placeable_replicas"


class PlaceableWorkloads(Collector):
    """A bounded, thread-safe map of (namespace, workload) → Need, exported as a gauge at scrape time."""

    def __init__(self, limits: Callable[[], Admission], snapshot: Callable[[], Snapshot]) -> None:
        # Callables, not values: the config and the snapshot are swapped whole while serving.
        self.limits = limits
        self.snapshot = snapshot
        self._needs: OrderedDict[tuple[str, str], tuple[Need, float]] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, namespace: str, workload: str, need: Need) -> None:
        cap = self.limits().placeable_workloads_max
        if cap <= 0 or need.gpus <= 0:
            return
        key = (namespace, workload)
        with self._lock:
            self._needs[key] = (need, time.monotonic())
            self._needs.move_to_end(key)
            while len(self._needs) > cap:
                self._needs.popitem(last=False)

    def tracked(self) -> list[tuple[str, str, Need]]:
        ttl = self.limits().placeable_ttl_seconds
        now = time.monotonic()
        with self._lock:
            for key in [k for k, (_, at) in self._needs.items() if now - at > ttl]:
                del self._needs[key]
            return [(ns, wl, need) for (ns, wl), (need, _) in self._needs.items()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            NAME, "More replicas of an admitted GPU workload that the free GPUs of healthy nodes could hold now",
            labels=["namespace", "workload"])
        snapshot = self.snapshot()
        for namespace, workload, need in self.tracked():
            family.add_metric([namespace, workload], placeable(need, snapshot))
        yield family


def placeable(need: Need, snapshot: Snapshot) -> int:
    """Pods of ``need`` that the free GPUs of healthy nodes able to hold one could take now."""
    total = 0
    for node in snapshot.gpu_nodes():
        if node.health == "unhealthy" or node.plugin_missing or not fits_ever(need, node):
            continue
        total += snapshot.free_gpus(node.name) // need.gpus
    return total
