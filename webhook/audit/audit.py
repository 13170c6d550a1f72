"""Background audit, pure: which objects are workloads (owners resolved), and each one's verdict today.

Admission judges an object once, when it is written; the cluster changes under it afterwards. This
module re-judges what already runs with the same :func:`webhook.decide.verdict.judge`, so the audit, the
webhook and ``vramgate check`` never disagree, and adds what admission cannot see: whether a node
that can hold the workload is healthy *now* (``warn``: admitted, but at risk). No I/O here; the
controller (:mod:`webhook.audit.auditor`) and ``vramgate audit`` feed it objects and render what it returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..advise.explain import node_outcome
from ..cluster.snapshot import Snapshot
from ..config import Config
from ..decide.demand import Demand
from ..decide.placement import Code, Need, NodeFit, fit, score
from ..decide.verdict import Judgement, judge
from ..kinds import KINDS, RUNTIME_KINDS, Runtimes
from ..models.catalog import Catalog
from ..units.quantity import format_gib

Result = Literal["pass", "warn", "fail", "skip"]
RESULTS: tuple[Result, ...] = ("pass", "warn", "fail", "skip")

# Kinds that are runtimes or templates, not running workloads: read as runtimes, never judged here.
NOT_RUNNING = RUNTIME_KINDS | {"TrainingRuntime", "ClusterTrainingRuntime"}

# Pods that finished hold nothing and will not come back.
_TERMINAL = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class WorkloadRef:
    """Which object a result is about, as a PolicyReport's ``resources`` entry names it."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @property
    def ref(self) -> str:
        return f"{self.kind.lower()}/{self.name}"

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.kind, self.name)

    def resource(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace, "name": self.name}
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclass(frozen=True)
class AuditResult:
    """One workload's verdict today: pass, warn (admitted, at risk), fail (admission would reject it), skip."""

    workload: WorkloadRef
    result: Result
    code: str  # the reason code (admission's, or the node code that puts it at risk)
    message: str = ""
    need: str = ""  # "2 × 40 GiB" (GPUs × VRAM per GPU), empty when it asks for no GPU
    best_node: str = ""  # a node that can hold it now, or the one that comes closest
    per_gpu_mib: int | None = field(default=None, compare=False)
    gpus: int = field(default=0, compare=False)

    def properties(self) -> dict[str, str]:
        """What a report result carries besides the message (PolicyReport properties are strings)."""
        out: dict[str, str] = {}
        if self.need:
            out["need"] = self.need
        if self.best_node:
            out["bestNode"] = self.best_node
        return out


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def workload_ref(obj: Mapping[str, Any], namespace: str | None = None) -> WorkloadRef:
    meta = _meta(obj)
    return WorkloadRef(
        str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""),
        str(meta.get("namespace") or namespace or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""),
    )


def _controller_owner(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    owners = _meta(obj).get("ownerReferences")
    for o in owners if isinstance(owners, list) else []:
        if isinstance(o, dict) and o.get("controller"):
            return o
    return None


def workloads(objects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects to judge: every workload kind, except those a listed workload owns.

    A Pod owned by a ReplicaSet owned by a Deployment is judged once, as the Deployment; a Pod whose
    controller is not among ``objects`` (a bare Pod, or one of an operator vramgate does not know) is
    judged itself. Owners are matched by uid where the objects have uids (a cluster), else by kind,
    namespace and name (manifests). Finished pods and runtimes are left out.
    """
    objs = [o for o in objects if isinstance(o, dict) and str(o.get("kind")) in KINDS
            and str(o.get("kind")) not in NOT_RUNNING]
    uids = {str(_meta(o).get("uid")) for o in objs if _meta(o).get("uid")}
    names = {(str(o.get("kind")), str(_meta(o).get("namespace") or ""), str(_meta(o).get("name") or ""))
             for o in objs}
    out = []
    for o in objs:
        if o.get("kind") == "Pod" and (o.get("status") or {}).get("phase") in _TERMINAL:
            continue
        owner = _controller_owner(o)
        if owner is not None:
            if owner.get("uid") and str(owner["uid"]) in uids:
                continue
            if (str(owner.get("kind")), str(_meta(o).get("namespace") or ""), str(owner.get("name"))) in names:
                continue
        out.append(o)
    return out


def _gib(mib: float) -> str:
    return format_gib(mib)


def need_text(gpus: int, per_gpu_mib: int | None) -> str:
    if per_gpu_mib is None:
        return f"{gpus} GPU{'s' if gpus != 1 else ''}, VRAM not declared"
    return f"{gpus} × {_gib(per_gpu_mib)} GiB"


def best_node(demand: Demand, snapshot: Snapshot, gpu_resource: str = "nvidia.com/gpu") -> tuple[str, str | None, str]:
    """A node that takes the pod now (best scored), else the nearest miss: (name, its code, its reason).

    Each node is judged as the extender judges it, then by the pod's selector and tolerations
    (:func:`webhook.advise.explain.node_outcome`). Busy GPUs do not count against a node (waiting or preemption
    frees them); a fault, a missing device plugin, too few or too small GPUs, an old driver, a selector
    that excludes it or a taint the pod does not tolerate do.

    A pass judges every workload against one snapshot, so this must not cost O(nodes) of Python per
    workload (at 5,000 nodes it did: ~20 ms each, seconds per pass holding the GIL while reviews and
    extender calls waited). Nodes of one placement class (``Snapshot.classes``) fit and score alike: each
    class is judged once, and the classes that take the pod are searched best score first, each class's
    members largest first, for the first node its selector and taints allow. Only a pod that no node
    takes walks every node, to name the nearest miss.
    """
    need = Need.of(demand)
    mode = demand.placement or "binpack"
    info, nodes = snapshot.class_info, snapshot.by_vram
    groups, unclassed = snapshot.class_members
    fits: dict[int | str, tuple[NodeFit, int]] = {}
    for c in groups:
        cap, free = info[c]
        f = fit(need, cap, free)
        fits[c] = (f, score(need, cap, cap.allocatable, mode) if f.code in _TAKES else -1)
    if not unclassed:
        for level in sorted({s for _, s in fits.values() if s >= 0}, reverse=True):
            first: int | None = None  # the largest node (lowest index) at this score that takes the pod
            for cls, (f, s) in fits.items():
                if s != level or not isinstance(cls, int):
                    continue
                for i in groups[cls]:
                    if first is not None and i >= first:
                        break
                    n = nodes[i]
                    if node_outcome(demand, n, snapshot.free_gpus(n.name), gpu_resource, fitted=f).code in _TAKES:
                        first = i
                        break
            if first is not None:
                return nodes[first].name, None, ""
    best: tuple[int, str] | None = None
    miss: tuple[str, str, str] | None = None
    for n in nodes:
        key: int | str = snapshot.classes.get(n.name, n.name)
        judged = fits.get(key)
        if judged is None:
            f = fit(need, n, snapshot.free_gpus(n.name))
            judged = fits[key] = (f, score(need, n, n.allocatable, mode) if f.code in _TAKES else -1)
        f, s = judged
        if s >= 0:
            if best is not None and s <= best[0]:
                continue  # cannot beat the best found: its selector and taints do not matter
            o = node_outcome(demand, n, snapshot.free_gpus(n.name), gpu_resource, fitted=f)
            if o.code in _TAKES:
                best = (s, n.name)
                continue
            code, reason = o.code, o.reason
        else:
            code, reason = str(f.code), f.reason
        if best is None and (miss is None or (miss[1] in _SIZE and code not in _SIZE)):
            # by_vram is largest first, so the first miss is the nearest for size; a miss for another cause
            # (a fault, the driver, a taint) is the more useful thing to name.
            miss = (n.name, code, reason)
    if best is not None:
        return best[1], None, ""
    return miss if miss is not None else ("", None, "")


_TAKES = frozenset({str(Code.FITS), str(Code.GPUS_BUSY)})
_SIZE = frozenset({str(Code.VRAM_TOO_SMALL), str(Code.TOO_FEW_GPUS)})
_Row = tuple[Result, str, str, str, str, int | None, int]


def classify(judgement: Judgement, snapshot: Snapshot, gpu_resource: str = "nvidia.com/gpu") -> _Row:
    """(result, code, message, need, best node, MiB per GPU, GPUs) for one judgement.

    fail: admission would reject it. warn: admitted, but no node can hold it now (all that could are
    faulty, lack the device plugin or GPUs), or its VRAM could not be checked, or it may not fit.
    """
    if not judgement.allowed:
        d = judgement.demand
        if d is None:
            return "fail", judgement.code, judgement.message, "", "", None, 0
        # The node that comes closest: a fitting one now if any (a selector or the driver failed it), else
        # the largest GPUs.
        best, code, _ = best_node(d, snapshot)
        if code is not None and snapshot.by_vram:
            best = snapshot.by_vram[0].name
        return "fail", judgement.code, judgement.message, need_text(d.gpus, d.per_gpu_mib), best, d.per_gpu_mib, d.gpus
    rows: list[_Row] = []
    for j in [r.judgement for r in judgement.roles] or [judgement]:
        d = j.demand
        if d is None:
            continue
        text = need_text(d.gpus, d.per_gpu_mib)
        name, code, reason = best_node(d, snapshot, gpu_resource)
        ref = j.view.ref if j.view else d.view.ref
        if code is not None:
            msg = f"{ref}: admitted, but no GPU node can take it now: {name}: {code}: {reason}"
            return "warn", code, msg, text, name, d.per_gpu_mib, d.gpus
        risky = [w for w in j.warnings if "not checked" in w or "may not fit" in w]
        if j.code == Code.VRAM_UNKNOWN or risky:
            rows.append(("warn", j.code, risky[0] if risky else "; ".join(j.warnings), text, name, d.per_gpu_mib,
                         d.gpus))
        else:
            rows.append(("pass", j.code, "", text, name, d.per_gpu_mib, d.gpus))
    rows.sort(key=lambda r: r[0] != "warn")
    return rows[0] if rows else ("pass", judgement.code, "", "", "", None, 0)


def audit_one(
    obj: dict[str, Any], snapshot: Snapshot, config: Config, catalog: Catalog, *,
    runtimes: Runtimes | None = None, enforcement: str = "enforce",
) -> AuditResult | None:
    """The audit result for one workload object, or None when it runs no pod that asks for a GPU."""
    ref = workload_ref(obj)
    judgement = judge(obj, snapshot, config, catalog, namespace=ref.namespace or None, runtimes=runtimes)
    gpu = judgement.demand is not None or any(r.judgement.demand for r in judgement.roles)
    if not gpu and judgement.allowed:
        return None  # no GPU asked for (non-GPU pods aimed at GPU nodes are admission's business)
    if enforcement == "off":
        return AuditResult(ref, "skip", "enforcement-off", "namespace has vramgate.io/enforcement=off")
    result, code, message, need, best, per_gpu, gpus = classify(judgement, snapshot, config.labels.gpu_resource)
    return AuditResult(ref, result, code, message, need, best, per_gpu, gpus)


def audit(
    objects: Iterable[dict[str, Any]], snapshot: Snapshot, config: Config, catalog: Catalog, *,
    runtimes: Runtimes | None = None, enforcement: Mapping[str, str] | None = None,
) -> list[AuditResult]:
    """Judge every workload among ``objects`` (owners resolved); results sorted by namespace, kind, name."""
    objs = list(objects)
    runtimes = runtimes if runtimes is not None else Runtimes.of(objs)
    modes = enforcement if enforcement is not None else snapshot.enforcement
    out = []
    for obj in workloads(objs):
        ns = workload_ref(obj).namespace
        found = audit_one(obj, snapshot, config, catalog, runtimes=runtimes, enforcement=modes.get(ns, "enforce"))
        if found is not None:
            out.append(found)
    out.sort(key=lambda r: r.workload.key)
    return out


def counts(results: Iterable[AuditResult]) -> dict[Result, int]:
    out: dict[Result, int] = dict.fromkeys(RESULTS, 0)
    for r in results:
        out[r.result] += 1
    return out


def capabilities(snapshot: Snapshot) -> frozenset[tuple[Any, ...]]:
    """What an audit verdict depends on in the inventory: each GPU node's capability, health, labels and taints,
    not its free GPUs. Two snapshots with the same fingerprint give every workload the same verdict, so the
    controller re-judges only when this changes (a node added, removed, relabelled, its health or driver)."""
    from ..cluster.snapshot import capability

    return frozenset(
        (n.name, capability(n), frozenset(n.labels.items()),
         frozenset(tuple(sorted((str(k), str(v)) for k, v in t.items())) for t in n.taints))
        for n in snapshot.by_vram
    )
