"""Fits after scale-up: a workload no current node can hold is admitted when a Karpenter NodePool can add one that does.

Asked only on the path that would otherwise reject (``verdict._judge_view``), so admitting costs nothing more.
Each pool's nodes (``cluster/provisioners.py``) are judged with the rules every node is (``fits_ever``: GPUs per
node, VRAM per GPU at the engine's usable share); a pool whose limits leave no room for such a node does not
count, and the rejection says the pool is full; nor does one with a taint the pod does not tolerate (Karpenter
launches only from pools whose every template taint the pod tolerates: sigs.k8s.io/karpenter v1.15.0
pkg/scheduling/taints.go ``Tolerates``, called from pkg/controllers/provisioning/scheduling/nodeclaim.go). A GPU
pool whose GPUs nothing tells never rejects: the workload is admitted unchecked, as on nodes of unknown VRAM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..cluster.cloud import INSTANCE_TYPE
from ..cluster.provisioners import PoolNode, PoolOffer, Requirement, intersects, label_requirements, requirements
from ..units.quantity import format_gib
from .demand import Demand
from .placement import ClusterVerdict, Code, Fitting, Need, fits_ever
from .selectors import node_selector, required_terms

# What a new node can change: the GPUs' memory and how many a node has (not a driver, nor claims or MIG slices).
RESCUED = frozenset({Code.VRAM_TOO_SMALL, Code.TOO_FEW_GPUS})
SHOWN = 3


def node_words(n: PoolNode) -> str:
    """``p5.48xlarge (8× NVIDIA-H100-80GB-HBM3, 79.6 GiB each)``; a labels-only pool's node is "a node"."""
    what = n.instance_type or "a node"
    return f"{what} ({n.gpus}× {n.node.product or 'GPU'}, {format_gib(n.node.vram_mib)} GiB each)"


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, str]) -> bool:
    """``v1.Toleration.ToleratesTaint``: the effect matches (empty: any), the key matches (empty with Exists: any),
    and Exists, or Equal with the same value."""
    if toleration.get("effect") not in (None, "", taint.get("effect")):
        return False
    op = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if not key:
        return op == "Exists"
    if key != taint.get("key"):
        return False
    return op == "Exists" or str(toleration.get("value") or "") == str(taint.get("value") or "")


def untolerated(spec: Mapping[str, Any], taints: Sequence[Mapping[str, str]], resource: str) -> list[str]:
    """The pool's taints the pod does not tolerate, as ``key=value:Effect``. The mutation gives every GPU pod the
    ``<resource>`` NoSchedule toleration, so that one counts as tolerated."""
    given = [t for t in spec.get("tolerations") or [] if isinstance(t, dict)]
    given.append({"key": resource, "operator": "Exists", "effect": "NoSchedule"})
    return [f"{t.get('key')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect')}"
            for t in taints if not any(_tolerates(g, t) for g in given)]


def selects_pool(spec: Mapping[str, Any], offer: PoolOffer, node: PoolNode) -> bool:
    """Whether the pod's nodeSelector and required node affinity (any term) can be met by ``node`` of the pool.

    Karpenter's way (pkg/scheduling/requirements.go ``Intersects``): only keys both the pod and the pool (its
    requirements, template labels, the instance type's labels) define are compared, so a key the pool leaves open
    never excludes it. A selector vramgate cannot read counts as met.
    """
    sel = node_selector(spec)
    terms = required_terms(spec)
    if not sel and terms is None:
        return True
    known = node.node.labels if not node.source.startswith("node ") \
        else {INSTANCE_TYPE: node.instance_type}
    pool = requirements([*offer.pool.requirements.values(), *label_requirements(known).values()])
    try:
        if sel and not intersects(pool, label_requirements(sel)):
            return False
        if terms is None:
            return True
        for term in terms:
            exprs = term.get("matchExpressions") if isinstance(term, dict) else None
            wanted = requirements(Requirement.of(str(e.get("key")), str(e.get("operator")),
                                                 [str(v) for v in e.get("values") or []])
                                  for e in exprs or [] if isinstance(e, dict))
            if intersects(pool, wanted):
                return True
        return False
    except (ValueError, AttributeError, TypeError):
        return True


def _need_words(need: Need) -> str:
    per = f"{format_gib(need.per_gpu_mib)} GiB VRAM per GPU" if need.per_gpu_mib is not None else "its GPUs"
    return f"needs {per} on {need.gpus} GPU{'s' if need.gpus != 1 else ''} of one node"


def after_scale_up(demand: Demand, rejected: ClusterVerdict, offers: Sequence[PoolOffer], resource: str
                   ) -> ClusterVerdict:
    """``rejected`` (no current node can ever hold ``demand``) judged again with the nodes ``offers`` can add."""
    need = Need.of(demand)
    if rejected.admit or rejected.code not in RESCUED or need.claims or need.mig or not offers:
        return rejected
    can: list[tuple[PoolOffer, PoolNode]] = []
    full: list[tuple[PoolOffer, PoolNode]] = []
    unknown: list[PoolOffer] = []
    tainted: list[tuple[PoolOffer, PoolNode, list[str]]] = []
    spec = demand.view.spec
    for o in offers:
        holding = [n for n in o.nodes if fits_ever(need, n.node) and selects_pool(spec, o, n)]
        refused = untolerated(spec, o.pool.taints, resource) if o.pool.taints else []
        if refused:
            if holding:
                tainted.append((o, holding[0], refused))
            continue
        roomy = next((n for n in holding if o.room_for(n)), None)
        if roomy is not None:
            can.append((o, roomy))
        elif holding:
            full.append((o, holding[0]))
        elif o.unknown and not o.full:
            unknown.append(o)
    who = demand.view.ref
    nothing = Fitting(need, ())  # no current node: the selector and context rules have nothing to judge on
    if can:
        said = "; ".join(f"NodePool {o.pool.name} can add {node_words(n)}" for o, n in can[:SHOWN])
        more = f"; {len(can) - SHOWN} more NodePools can" if len(can) > SHOWN else ""
        first = can[0][1].node
        tight = ""
        if need.expected is not None and need.expected > need.usable_on(first.vram_mib):
            tight = (f"; it may not fit there: expected {format_gib(need.expected)} GiB per GPU, "
                     f"{format_gib(need.usable_on(first.vram_mib))} GiB usable")
        msg = (f"{who}: no node holds it now ({_need_words(need)}); {said}{more}{tight}. "
               "The pod stays Pending until the new node is up")
        return ClusterVerdict(True, Code.FITS, msg, fitting=nothing)
    if unknown:
        said = "; ".join(f"NodePool {o.pool.name} ({', '.join(o.unknown[:3])})" for o in unknown[:SHOWN])
        msg = (f"{who}: {_need_words(need)}, not checked: no node holds it now and NodePools may add GPUs vramgate "
               f"cannot size: {said}. Fix: label the NodePool template nvidia.com/gpu.memory (MiB) and "
               "nvidia.com/gpu.count, or name instance types in webhook/data/gpu_instances.yaml")
        return ClusterVerdict(True, Code.VRAM_UNKNOWN, msg, fitting=nothing)
    notes = [f"NodePool {o.pool.name} could add {node_words(n)}, but it is full ({o.limit_words(resource)}): "
             "raise its spec.limits or free its nodes" for o, n in full[:SHOWN]]
    notes += [f"NodePool {o.pool.name} could add {node_words(n)}, but the pod does not tolerate its taint "
             f"{', '.join(refused)}" for o, n, refused in tainted[:SHOWN]]
    return replace(rejected, message=f"{rejected.message}. {'; '.join(notes)}") if notes else rejected
