"""Autofit: where a workload fits no GPU as written, the first eligible checked fix, applied with its trail.

Opt-in: the annotation ``vramgate.io/autofit: "true"`` on the workload (or its pod template), or the namespace
label ``vramgate.io/enforcement: autofit``. Only fixes that keep the model and its weights precision are
eligible — a shorter context, an FP8 KV cache where the engine and every GPU support it, tensor parallelism
over GPUs the pod already requests, ``--gpu-memory-utilization`` up to ``admission.autofit.max_gpu_memory_
utilization``, and fewer sequences — and only once they are re-judged admitted on the same inventory
(:func:`webhook.advise.fixes.fixes_for`). The least disruptive eligible fix wins (ORDER). Pure functions: the
admission route writes the Event and counts the metric.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonpatch
import orjson

from ..cluster.inventory import NodeGPUs
from ..cluster.snapshot import Snapshot
from ..config import Config
from ..decide.placement import Change, Code, on_gpu
from ..decide.verdict import Judgement
from ..engines import engine_named
from ..engines import estimate as run_estimate
from ..kinds import pod_part
from .fixes import Fix, Judge, Patch, checked_fix, escape, fixes_for

A_AUTOFIT = "vramgate.io/autofit"
A_APPLIED = "vramgate.io/autofit-applied"
NAMESPACE_MODE = "autofit"  # the vramgate.io/enforcement label value that turns autofit on for a namespace

# The least disruptive first: TP over GPUs already requested and a smaller start-up profile change nothing a
# client sees; a higher utilization leaves less headroom; an FP8 KV cache changes numerics slightly; a shorter
# context refuses long prompts; fewer reserved sequences lowers throughput.
ORDER = ("gpus", "max_seqs", "utilization", "kv_dtype", "context", "batch")

# FP8 KV cache needs FP8 conversion in hardware: compute capability 8.9+ (Ada, Hopper, Blackwell), per
# NVIDIA's CUDA GPU table (developer.nvidia.com/cuda-gpus). GFD's labels say it; else the product name does.
_CC_MAJOR, _CC_MINOR = "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"
_FP8_PRODUCTS = re.compile(r"(^|[-_ ])(H100|H200|H800|H20|GH200|B100|B200|B300|GB200|GB300|L4|L40S?|L20|"
                           r"RTX[-_ ]?(40|50)\d\d|RTX[-_ ]?PRO|RTX[-_ ]?[0-9]+[-_ ]?Ada)([-_ ]|$)", re.I)


@dataclass(frozen=True)
class Outcome:
    """What autofit did for one object: ``applied`` with the patch (the fix and its trail), or why not."""

    applied: bool
    reason: str
    patch: Patch
    fix: Fix | None = None

    @property
    def result(self) -> str:
        """The metric's label: applied or refused."""
        return "applied" if self.applied else "refused"


def _annotations(meta: Any) -> Mapping[str, Any]:
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    return ann if isinstance(ann, dict) else {}


def _template_meta(obj: dict[str, Any]) -> Any:
    part = pod_part(obj)
    return part.get("metadata") if isinstance(part, dict) else None


def wanted(obj: dict[str, Any], namespace_label: str | None) -> bool:
    """Autofit asked for: the annotation on the object or its pod template, or the namespace's label."""
    if namespace_label == NAMESPACE_MODE:
        return True
    for meta in (obj.get("metadata"), _template_meta(obj)):
        if str(_annotations(meta).get(A_AUTOFIT, "")).strip().lower() == "true":
            return True
    return False


def already_applied(obj: dict[str, Any]) -> bool:
    """The object carries autofit's trail: it is judged as written (autofit applies once)."""
    return A_APPLIED in _annotations(obj.get("metadata"))


def trail(obj: dict[str, Any]) -> dict[str, Any] | None:
    """What ``vramgate.io/autofit-applied`` records (change, reason, patch), or None when absent."""
    raw = _annotations(obj.get("metadata")).get(A_APPLIED)
    if raw is None:
        return None
    try:
        data = orjson.loads(str(raw))
    except orjson.JSONDecodeError:
        return {"change": str(raw)}
    return data if isinstance(data, dict) else {"change": str(raw)}


def engine_flags_changed(obj: dict[str, Any], old: dict[str, Any] | None) -> bool:
    """On UPDATE: whether any container's command, args or env changed (what the engine reads its flags from)."""
    if not isinstance(old, dict):
        return True
    return _engine_inputs(obj) != _engine_inputs(old)


def _engine_inputs(obj: dict[str, Any]) -> list[Any]:
    part = pod_part(obj)
    spec = part.get("spec") if isinstance(part, dict) else None
    if not isinstance(spec, dict):
        return []
    out: list[Any] = []
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                out.append([c.get("name"), c.get("command"), c.get("args"), c.get("env"), c.get("envFrom")])
    return out


def fp8_kv_capable(node: NodeGPUs) -> bool:
    """The node's GPUs convert FP8 in hardware (compute capability 8.9 or later)."""
    try:
        cc = (int(node.labels[_CC_MAJOR]), int(node.labels[_CC_MINOR]))
    except (KeyError, ValueError):
        return bool(_FP8_PRODUCTS.search(node.product or ""))
    return cc >= (8, 9)


def ineligible(change: Change, judgement: Judgement, nodes: list[NodeGPUs]) -> str | None:
    """Why autofit may not make ``change`` (None: it may)."""
    demand = judgement.demand
    if change.what == "gpus":
        if demand is None or int(change.value) > demand.gpus:
            return f"{change.value} GPUs is more than the {demand.gpus if demand else 0} the pod requests"
        return None
    if change.what == "kv_dtype":
        if not nodes or not all(fp8_kv_capable(n) for n in nodes):
            return "an FP8 KV cache needs compute capability 8.9+ on every GPU node (Ada, Hopper, Blackwell)"
        return None
    if change.what in ("context", "max_seqs", "batch", "utilization"):
        return None
    return f"a {change.what} change alters the model or its weights"


def _utilization_fix(doc: dict[str, Any], judgement: Judgement, nodes: list[NodeGPUs], ceiling: float,
                     rejudge: Judge) -> Fix | None:
    """``--gpu-memory-utilization`` raised to what the expected need takes on the largest GPU able to host the
    pod, when that stays at or under ``ceiling``; re-judged like every fix."""
    demand = judgement.demand
    found = engine_named(demand.engine) if demand is not None else None
    if demand is None or demand.estimate is None or found is None or not found.tunes_utilization:
        return None
    hosts = [n for n in nodes if n.capacity >= demand.gpus and n.vram_mib > 0]
    if not hosts:
        return None
    host = max(hosts, key=lambda n: n.vram_mib)
    expected = run_estimate(on_gpu(demand.estimate.request, host)).per_gpu_mib
    needed = math.ceil(expected / host.vram_mib * 100) / 100
    if needed <= demand.utilization or needed > ceiling:
        return None
    return checked_fix(doc, demand, (Change("utilization", f"{needed:.2f}"),),
                       f"--gpu-memory-utilization {needed:.2f} (was {demand.utilization:.2f}; ceiling {ceiling:.2f})",
                       rejudge)


def autofit(doc: dict[str, Any], judgement: Judgement, snapshot: Snapshot, config: Config,
            rejudge: Judge) -> Outcome | None:
    """The fix autofit applies to a rejected ``doc``, or why it applies none; None for an admitted object."""
    if judgement.allowed:
        return None  # never turns a fitting workload into another one
    if judgement.roles:
        return Outcome(False, "autofit judges single-role workloads; this one has roles: judged as written", [])
    if judgement.code not in (str(Code.VRAM_TOO_SMALL), str(Code.TOO_FEW_GPUS)) or judgement.demand is None:
        return Outcome(False, f"rejected for {judgement.code}, not for VRAM: no fix autofit may make", [])
    nodes = [n for n in snapshot.by_vram if n.is_gpu_node]
    offered = fixes_for(doc, judgement, None, snapshot, rejudge)
    util = _utilization_fix(doc, judgement, nodes, config.admission.autofit.max_gpu_memory_utilization, rejudge)
    if util is not None:
        offered.append(util)
    eligible: list[Fix] = []
    refused: list[str] = []
    for fix in offered:
        why = next((w for c in fix.changes if (w := ineligible(c, judgement, nodes))), None)
        if fix.declares_only:
            why = why or "it only declares (the engine would not change)"
        if not fix.changes:
            why = why or "it names no change autofit can make"
        if why is None:
            eligible.append(fix)
        else:
            refused.append(f"{fix.description}: {why}")
    if not eligible:
        tail = "; ".join(refused) if refused else "no fix makes it fit"
        return Outcome(False, f"no eligible fix ({tail})", [])
    chosen = min(eligible, key=lambda f: min(ORDER.index(c.what) for c in f.changes))
    # The rejection's first sentence (its "Try:" list is what autofit just chose from).
    reason = (judgement.message.splitlines()[0] if judgement.message else judgement.code).split(" Try:")[0]
    return Outcome(True, chosen.description, _with_trail(doc, chosen, reason), chosen)


def _with_trail(doc: dict[str, Any], fix: Fix, reason: str) -> Patch:
    """The fix's patch and the ``vramgate.io/autofit-applied`` annotation recording it on the object itself."""
    trail = orjson.dumps({"change": fix.description, "reason": reason, "patch": fix.patch}).decode()
    patched = jsonpatch.apply_patch(doc, fix.patch)  # the fix may itself have added metadata or annotations
    meta = patched.get("metadata")
    ops: Patch = list(fix.patch)
    if not isinstance(meta, dict):
        ops.append({"op": "add", "path": "/metadata", "value": {"annotations": {A_APPLIED: trail}}})
    elif not isinstance(meta.get("annotations"), dict):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {A_APPLIED: trail}})
    else:
        ops.append({"op": "add", "path": f"/metadata/annotations/{escape(A_APPLIED)}", "value": trail})
    return ops
