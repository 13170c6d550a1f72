"""The admission verdict for one workload object; `vramgate check` and `/validate` both call it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .catalog import Catalog
from .config import Config, Enforcement
from .demand import DeclarationError, Demand, read_demand
from .placement import cluster_verdict
from .quantity import GIB, QuantityError, parse_size_bytes
from .rules import Narrow, cuda_visible_devices_warnings, narrow_selector, non_gpu_on_gpu_nodes
from .snapshot import Snapshot
from .workload import PodView, WorkloadError, pod_view


@dataclass(frozen=True)
class Judgement:
    """Allowed or not, the message people read, warnings, and a short reason code for metrics."""

    allowed: bool
    code: str
    message: str = ""
    warnings: tuple[str, ...] = ()
    demand: Demand | None = field(default=None, compare=False)
    view: PodView | None = field(default=None, compare=False)
    # Set when the pod's selector is too narrow and config says to reroute it (mutation replaces it).
    reroute: Narrow | None = field(default=None, compare=False)

    @property
    def fits(self) -> bool:
        """Some node can hold the workload (so a VRAM affinity can be satisfied)."""
        return self.code in (FITS, REROUTED)


FITS, REROUTED = "fits", "rerouted"


def host_memory_warnings(demand: Demand, config: Config) -> list[str]:
    """Warn when a GPU container's memory limit is below what staging the weights in host RAM needs."""
    weights = demand.weights_mib
    if weights is None:
        return []
    floor = weights * 1024 * 1024 * config.admission.host_memory_factor / demand.gpus
    out = []
    names = set(demand.gpu_containers)
    for c in demand.view.containers():
        if str(c.get("name", "")) not in names:
            continue
        limits = (c.get("resources") or {}).get("limits") or {}
        raw = limits.get("memory") if isinstance(limits, dict) else None
        if raw is None:
            continue
        try:
            limit = parse_size_bytes(str(raw))
        except QuantityError:
            continue
        if limit < floor:
            out.append(f"container {c.get('name')}: memory limit {raw} < {floor / GIB:.1f} GiB "
                       f"({config.admission.host_memory_factor:g}× weights); loading may be OOM-killed")
    return out


def judge(
    obj: dict[str, Any],
    snapshot: Snapshot,
    config: Config,
    catalog: Catalog,
    *,
    namespace: str | None = None,
    enforcement: Enforcement = "enforce",
) -> Judgement:
    """Decide admission for a workload object against the inventory snapshot."""
    if enforcement == "off":
        return Judgement(True, "enforcement-off")
    try:
        view = pod_view(obj, namespace)
    except WorkloadError as exc:
        return _deny(enforcement, "malformed", f"{obj.get('kind', 'object')}: {exc}")
    if view is None:
        return Judgement(True, "not-a-workload")
    try:
        view.containers()
    except WorkloadError as exc:
        return _deny(enforcement, "malformed", f"{view.ref}: {exc}", view=view)
    try:
        demand = read_demand(view, config, catalog)
    except DeclarationError as exc:
        return _deny(enforcement, "declaration", f"{view.ref}: {exc}", view=view)
    if demand is None:
        problem = non_gpu_on_gpu_nodes(view, snapshot, config)
        if problem is None:
            return Judgement(True, "no-gpu", view=view)
        if config.admission.non_gpu_pods_on_gpu_nodes == "reject":
            return _deny(enforcement, "non-gpu-on-gpu-nodes", problem, view=view)
        return Judgement(True, "non-gpu-on-gpu-nodes", warnings=(problem,), view=view)
    warnings = [*demand.warnings, *host_memory_warnings(demand, config), *cuda_visible_devices_warnings(demand, config)]
    verdict = cluster_verdict(demand, snapshot.by_vram)
    if not verdict.admit:
        return _deny(enforcement, str(verdict.code), verdict.message, tuple(warnings), demand, view)
    if verdict.message != "fits":
        warnings.append(verdict.message)
    narrow = narrow_selector(demand, snapshot)
    if narrow is not None:
        if config.admission.reroute_narrow_selectors:
            warnings.append(narrow.warning())
            return Judgement(True, REROUTED, warnings=tuple(warnings), demand=demand, view=view, reroute=narrow)
        return _deny(enforcement, "narrow-selector", narrow.message(view.ref), tuple(warnings), demand, view)
    return Judgement(True, FITS, warnings=tuple(warnings), demand=demand, view=view)


def _deny(
    enforcement: Enforcement,
    code: str,
    message: str,
    warnings: tuple[str, ...] = (),
    demand: Demand | None = None,
    view: PodView | None = None,
) -> Judgement:
    if enforcement == "warn":
        return Judgement(True, code, message, (message, *warnings), demand, view)
    return Judgement(False, code, message, warnings, demand, view)
