"""Why a GPU workload is rejected or Pending, and the one change that would place it — pure.

Puts together what is otherwise spread over admission's message, the extender's per-node reasons,
node labels and taints, and the scheduler's events: the estimate with where each input came from,
every GPU node grouped by outcome (the extender's codes, then the pod's selector and tolerations),
the last ``FailedScheduling``/``FailedCreate`` events, and a fix re-estimated against the nodes the
workload could really use. ``vramgate explain`` gathers the inputs (a cluster, or files) and prints this.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..cluster.accelerators import NVIDIA
from ..cluster.inventory import NodeGPUs
from ..cluster.snapshot import Snapshot
from ..config import Config
from ..decide.demand import Demand
from ..decide.placement import Code, Need, NodeFit, fit, suggestions
from ..decide.selectors import describe_constraints, selects
from ..decide.verdict import Judgement, judge
from ..kinds import Runtimes, as_list
from ..models.catalog import Catalog
from ..units.quantity import format_gib
from .autofit import trail

SELECTOR = "Selector"
TAINT = "Taint"
# The order outcomes are listed in: what places it first, then what waiting fixes, then the rest.
ORDER = (str(Code.FITS), str(Code.GPUS_BUSY), SELECTOR, TAINT, str(Code.GPU_FAULT), str(Code.NO_DEVICE_PLUGIN),
         str(Code.DRIVER_TOO_OLD), str(Code.TOO_FEW_GPUS), str(Code.VRAM_TOO_SMALL))


@dataclass(frozen=True)
class NodeOutcome:
    """One GPU node's answer for one role: the code (the extender's, or Selector/Taint) and why."""

    node: str
    product: str
    code: str
    reason: str


@dataclass(frozen=True)
class RoleExplanation:
    """One pod shape of the workload (the workload itself for the built-in kinds)."""

    ref: str
    allowed: bool
    code: str
    message: str
    estimate: str
    need: str
    sources: tuple[str, ...]
    nodes: tuple[NodeOutcome, ...]
    fix: str

    def groups(self) -> list[tuple[str, list[NodeOutcome]]]:
        by: dict[str, list[NodeOutcome]] = {}
        for n in self.nodes:
            by.setdefault(n.code, []).append(n)
        return sorted(by.items(), key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else len(ORDER))


@dataclass(frozen=True)
class Explanation:
    ref: str
    namespace: str
    allowed: bool
    message: str
    warnings: tuple[str, ...]
    roles: tuple[RoleExplanation, ...]
    events: tuple[str, ...] = field(default=())
    placed: tuple[str, ...] = field(default=())  # pod → node, for the workload's pods already bound
    autofit: Mapping[str, Any] | None = None  # vramgate.io/autofit-applied: what autofit changed, and why

    @property
    def fix(self) -> str:
        return next((r.fix for r in self.roles if r.fix), "")


def _tolerates(tolerations: Sequence[Any], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        if not isinstance(t, dict):
            continue
        if t.get("effect") not in (None, "", taint.get("effect")):
            continue
        op = t.get("operator") or "Equal"
        key = t.get("key")
        if not key and op == "Exists":
            return True
        if key != taint.get("key"):
            continue
        if op == "Exists" or str(t.get("value") or "") == str(taint.get("value") or ""):
            return True
    return False


def untolerated(spec: Mapping[str, Any], node: NodeGPUs, gpu_resource: str, *, template: bool) -> list[str]:
    """The node's NoSchedule/NoExecute taints the pod does not tolerate (the GPU taint is tolerated by a
    template's pods once vramgate's mutation adds its toleration)."""
    tolerations = as_list(spec.get("tolerations"))
    out = []
    for taint in node.taints:
        if not isinstance(taint, dict) or taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if template and taint.get("key") == gpu_resource:
            continue
        if not _tolerates(tolerations, taint):
            value = f"={taint['value']}" if taint.get("value") else ""
            out.append(f"{taint.get('key')}{value}:{taint.get('effect')}")
    return out


def node_outcome(demand: Demand, node: NodeGPUs, free: int, gpu_resource: str, *,
                 fitted: NodeFit | None = None) -> NodeOutcome:
    """What the extender says about ``node`` for the pod, then whether its selector and tolerations allow it.

    ``fitted``: the extender's verdict when the caller has it already (judged once per placement class)."""
    f = fitted if fitted is not None else fit(Need.of(demand), node, free)
    product = node.product or "-"
    if f.code not in (Code.FITS, Code.GPUS_BUSY):
        return NodeOutcome(node.name, product, str(f.code), f.reason)
    spec = demand.view.spec
    if not selects(spec, node):
        return NodeOutcome(node.name, product, SELECTOR, f"does not match its {describe_constraints(spec)}")
    # The resource whose taint the mutation tolerates: the pod's vendor's (amd.com/gpu), else the config's.
    resource = demand.gpu_resource if demand.vendor != NVIDIA else gpu_resource
    taints = untolerated(spec, node, resource, template=demand.view.kind != "Pod")
    if taints:
        return NodeOutcome(node.name, product, TAINT, f"taint {', '.join(taints)} not tolerated")
    return NodeOutcome(node.name, product, str(f.code), f.reason)


def _gib(mib: float) -> str:
    return format_gib(mib)


def _fix(demand: Demand | None, judgement: Judgement, outcomes: list[NodeOutcome], snapshot: Snapshot) -> str:
    """The one change that would place the role, re-estimated where it is an estimate change."""
    if demand is None:
        return judgement.message.split("Try: ", 1)[1] if "Try: " in judgement.message else ""
    codes = {o.code for o in outcomes}
    if str(Code.FITS) in codes:
        where = [o.node for o in outcomes if o.code == str(Code.FITS)]
        return f"none needed: it fits now on {', '.join(where[:3])}{' …' if len(where) > 3 else ''}"
    if str(Code.GPUS_BUSY) in codes:
        busy = [o for o in outcomes if o.code == str(Code.GPUS_BUSY)]
        return (f"wait for or free {demand.gpus} GPU(s) on {busy[0].node} ({busy[0].reason}); "
                "vramgate.io/tier: production lets it preempt batch pods")
    # Where would it fit but for the selector or a taint? Removing that is the smallest change.
    for code, what in ((SELECTOR, "remove or widen its node selector"), (TAINT, "tolerate")):
        hit = [o for o in outcomes if o.code == code]
        if hit:
            if code == TAINT:
                return f"tolerate {hit[0].reason.removeprefix('taint ').removesuffix(' not tolerated')} " \
                       f"(then it fits on {hit[0].node})"
            return f"{what} ({describe_constraints(demand.view.spec)}): it would fit on {hit[0].node}"
    if not judgement.allowed and "Try: " in judgement.message:
        return judgement.message.split("Try: ", 1)[1].split("; ")[0]
    # Admitted, but nothing can take it now: re-estimate against the nodes that are up.
    usable = [n for n in snapshot.by_vram if n.health != "unhealthy" and not n.plugin_missing and n.allocatable > 0]
    small = [o for o in outcomes if o.code in (str(Code.VRAM_TOO_SMALL), str(Code.TOO_FEW_GPUS))]
    if usable and small and demand.estimate is not None:
        tips = suggestions(demand, usable)
        if tips:
            return f"{tips[0]} (on the healthy nodes; the larger ones are down)"
    faults = [o for o in outcomes if o.code in (str(Code.GPU_FAULT), str(Code.NO_DEVICE_PLUGIN))]
    if faults:
        return f"repair {faults[0].node} ({faults[0].reason}); it is the node that can hold it"
    old = [o for o in outcomes if o.code == str(Code.DRIVER_TOO_OLD)]
    if old:
        return f"an image built for an older CUDA, or upgrade the driver on {old[0].node} ({old[0].reason})"
    return ""


def explain(
    obj: dict[str, Any], snapshot: Snapshot, config: Config, catalog: Catalog, *,
    runtimes: Runtimes | None = None, events: Iterable[str] = (), placed: Mapping[str, str] | None = None,
) -> Explanation:
    """Explain one workload object against the inventory (and the scheduler's events about its pods).

    ``placed`` maps the workload's pods that are already bound to their nodes: the GPUs they hold are
    theirs, so a node that is busy only because of them is not a reason it cannot run.
    """
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    ns = str(meta.get("namespace") or "default")
    judgement = judge(obj, snapshot, config, catalog, namespace=ns, runtimes=runtimes)
    ref = f"{str(obj.get('kind')).lower()}/{meta.get('name')}"
    parts = [(r.role.view.ref, r.judgement) for r in judgement.roles] or [(ref, judgement)]
    roles = []
    gpu_resource = config.labels.gpu_resource
    for role_ref, j in parts:
        d = j.demand
        outcomes: list[NodeOutcome] = []
        if d is not None:
            outcomes = [node_outcome(d, n, snapshot.free_gpus(n.name), gpu_resource) for n in snapshot.by_vram]
        estimate = d.summary() if d is not None else ("no GPU requested" if j.allowed else "")
        need = ""
        if d is not None:
            per = d.per_gpu_mib
            need = f"{d.gpus} GPU(s) × {_gib(per)} GiB" if per is not None else f"{d.gpus} GPU(s), VRAM not declared"
            if d.min_per_gpu_mib is not None and per is not None and d.min_per_gpu_mib < per:
                need += f" (at least {_gib(d.min_per_gpu_mib)} GiB)"
        roles.append(RoleExplanation(
            ref=role_ref, allowed=j.allowed, code=j.code, message=j.message, estimate=estimate, need=need,
            sources=tuple(d.explain()) if d is not None else (), nodes=tuple(outcomes),
            fix=_fix(d, j, outcomes, snapshot),
        ))
    bound = tuple(f"{pod} → {node}" for pod, node in sorted((placed or {}).items()))
    if placed and judgement.allowed and len(roles) == 1 and roles[0].fix.startswith("wait for or free"):
        nodes = sorted(set(placed.values()))
        roles[0] = replace(roles[0], fix=f"none needed for its running pods (on {', '.join(nodes[:3])}); "
                                         f"a further replica must {roles[0].fix}")
    return Explanation(ref, ns, judgement.allowed, judgement.message, judgement.warnings, tuple(roles),
                       tuple(events), bound, trail(obj))


def render(e: Explanation, per_group: int = 5) -> str:
    """The explanation as people read it in a terminal."""
    lines = [f"{e.ref} (namespace {e.namespace})"]
    lines.append(f"  admission: {'admitted' if e.allowed else 'REJECTED'}" + (f": {e.message}" if e.message else ""))
    if e.autofit is not None:
        lines.append(f"  autofit: applied {e.autofit.get('change', '?')}")
        if e.autofit.get("reason"):
            lines.append(f"    instead of rejecting: {e.autofit['reason']}")
    for w in e.warnings:
        lines.append(f"  warning: {w}")
    for r in e.roles:
        if len(e.roles) > 1 or r.ref != e.ref:
            lines.append(f"{r.ref}:")
        lines.append(f"  estimate: {r.estimate}")
        if r.need:
            lines.append(f"  need: {r.need}")
        if r.sources:
            lines.append("  from:")
            lines.extend(f"    {s}" for s in r.sources)
        if r.nodes:
            lines.append(f"  GPU nodes ({len(r.nodes)}):")
            for code, nodes in r.groups():
                lines.append(f"    {code} ({len(nodes)}):")
                for n in nodes[:per_group]:
                    lines.append(f"      {n.node} ({n.product}): {n.reason}")
                if len(nodes) > per_group:
                    lines.append(f"      … and {len(nodes) - per_group} more")
        elif r.estimate and r.estimate != "no GPU requested":
            lines.append("  GPU nodes: none in the inventory")
        if r.fix:
            lines.append(f"  change that would place it: {r.fix}")
    if e.placed:
        lines.append("pods bound:")
        lines.extend(f"  {p}" for p in e.placed)
    if e.events:
        lines.append("scheduler:")
        lines.extend(f"  {ev}" for ev in e.events)
    return "\n".join(lines)


def as_dict(e: Explanation) -> dict[str, Any]:
    """The explanation as JSON/YAML."""
    return {
        "workload": e.ref,
        "namespace": e.namespace,
        "admitted": e.allowed,
        "message": e.message,
        "warnings": list(e.warnings),
        "roles": [{
            "ref": r.ref, "admitted": r.allowed, "code": r.code, "estimate": r.estimate, "need": r.need,
            "sources": list(r.sources),
            "nodes": {code: [{"node": n.node, "product": n.product, "reason": n.reason} for n in nodes]
                      for code, nodes in r.groups()},
            "fix": r.fix,
        } for r in e.roles],
        "events": list(e.events),
        "podsBound": list(e.placed),
        "autofit": dict(e.autofit) if e.autofit is not None else None,
        "fix": e.fix,
    }
