"""What the mutating webhook writes into an admitted GPU Pod (and a GPU Job's failure policy), as pure functions.

Every function here takes the object and returns a changed copy; applying a mutation to its
own output changes nothing (a second pass yields an empty patch), which keeps the webhook
safe under ``reinvocationPolicy: IfNeeded``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import orjson
from jsonpointer import escape

from ..cluster.accelerators import (
    NVIDIA,
    instance_type_names_of_vendors,
    instance_types_by_fit,
    memory_labels_of_vendors,
    memory_values_holding,
    partition_labels_of_vendors,
    partitioned_modes,
    vendor_named,
)
from ..cluster.cloud import INSTANCE_TYPE, PROVISIONER_KEYS, provisioner_requirements
from ..cluster.dra import CLAIM_KIND, TEMPLATE_KIND, with_memory_request, with_memory_selector
from ..cluster.usage import container_gpus
from ..config import Config
from ..kinds import api_group, as_list
from ..units.quantity import QuantityError, parse_size_bytes
from .demand import Demand
from .selectors import required_terms, widen
from .verdict import Judgement

A_VRAM_REQUIRED = "vramgate.io/vram-required-mib"
A_VRAM_PER_GPU = "vramgate.io/vram-per-gpu-mib"
A_ESTIMATE = "vramgate.io/estimate"
# The low end of the estimate's band: what the VRAM affinity asks of a node.
A_VRAM_PER_GPU_MIN = "vramgate.io/vram-per-gpu-min-mib"
OUTPUT_ANNOTATIONS = (A_VRAM_REQUIRED, A_VRAM_PER_GPU, A_VRAM_PER_GPU_MIN, A_ESTIMATE)

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
# What kube-apiserver's DefaultTolerationSeconds plugin adds (before webhooks run): treated as "not set".
PLUGIN_DEFAULT_SECONDS = 300
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
# The expressions vram_terms adds for another vendor's pod (read back so that re-applying never stacks them).
_VENDOR_EXPRS = frozenset({*((k, op) for k in memory_labels_of_vendors() for op in ("In", "DoesNotExist")),
                           *((k, "NotIn") for k in partition_labels_of_vendors())})
_VENDOR_TYPES = instance_type_names_of_vendors()


def _is_vendor_type_expr(e: Any) -> bool:
    """A machine-type expression vram_terms writes for another vendor's pod (only the table's types, so a user's
    own ``instance-type`` requirement is kept)."""
    values = e.get("values") if isinstance(e, dict) else None
    return (e.get("key") == INSTANCE_TYPE and e.get("operator") in ("In", "NotIn") and isinstance(values, list)
            and bool(values) and all(v in _VENDOR_TYPES for v in values))


def node_vram_floor_mib(demand: Demand) -> int | None:
    """The smallest per-GPU VRAM (MiB) a node must advertise to hold the demand at its utilization."""
    # The low end of the estimate: a pod admitted because it may fit must not be made unschedulable.
    per_gpu = demand.min_per_gpu_mib
    if per_gpu is None:
        return None
    if demand.util_rule is not None:
        return max(demand.util_rule.floor_mib(per_gpu), 1)
    util = demand.utilization or 1.0
    floor = math.ceil(per_gpu / util - 1e-9)
    while floor * util < per_gpu:  # guard against float rounding: fit() checks per_gpu <= vram * util
        floor += 1
    return max(floor, 1)


# ---------------------------------------------------------------------------------------------------------------
# Node affinity on VRAM.


def _is_ours_a(expr: Any, a_key: str) -> bool:
    return isinstance(expr, dict) and expr.get("key") == a_key and expr.get("operator") in ("Gt", "DoesNotExist")


def _base_of(term: dict[str, Any], a_key: str, g_key: str) -> dict[str, Any]:
    """A term without the expressions vramgate adds (so re-applying never stacks them)."""
    exprs = term.get("matchExpressions") or []
    if not isinstance(exprs, list):
        return term

    def has(key: str, op: str) -> bool:
        return any(isinstance(e, dict) and e.get("key") == key and e.get("operator") == op for e in exprs)

    fallback = has(a_key, "DoesNotExist")
    # A provisioner term: neither vramgate's nor GFD's label (the node does not exist yet), then the cloud's.
    provisioner = fallback and has(g_key, "DoesNotExist")
    kept = [
        e for e in exprs
        if not _is_ours_a(e, a_key)
        and not (fallback and isinstance(e, dict) and e.get("key") == g_key and e.get("operator") in ("Gt",
                                                                                                     "DoesNotExist"))
        and not (provisioner and isinstance(e, dict) and e.get("key") in PROVISIONER_KEYS)
        and not (fallback and isinstance(e, dict) and (e.get("key"), e.get("operator")) in _VENDOR_EXPRS)
        and not (fallback and _is_vendor_type_expr(e))
    ]
    base = {k: v for k, v in term.items() if k != "matchExpressions"}
    if kept:
        base["matchExpressions"] = kept
    return base


def vram_terms(terms: list[Any] | None, floor_mib: int, config: Config, vendor: str = NVIDIA, *,
               unlabelled: bool = False) -> list[dict[str, Any]]:
    """The user's required terms ANDed with (vramgate label Gt floor-1) OR (no vramgate label, GFD label Gt floor-1)
    OR, with ``admission.provisioner_affinity``, (neither label, a provisioner's GPU name among those that hold it).

    The last terms are what Karpenter and GKE's autoscaler can satisfy before a node exists; a labelled node
    is judged by the first two only. A pod of another vendor (``amd``) gets, instead of GFD's label, its
    labeller's memory label ``In`` the sizes of the table's devices that hold it (``amd.com/gpu.vram`` is
    written ``192G``, which ``Gt`` cannot compare), and no provisioner terms (they name NVIDIA GPUs). With
    ``unlabelled`` (a DRA-backed extended resource that nodes without GPU labels can serve) the last term is
    (no memory label at all): those nodes stay open, labelled ones are still judged.
    """
    a_key, g_key = config.labels.normalized_memory, config.labels.gpu_memory
    value = [str(floor_mib - 1)]
    ours: list[list[dict[str, Any]]] = [[{"key": a_key, "operator": "Gt", "values": value}]]
    other = vendor_named(vendor) if vendor != NVIDIA else None
    if other is not None:
        sizes = memory_values_holding(other, floor_mib)
        # A partitioned GPU's vram label may be the whole GPU's: those nodes wait for the controller's label.
        whole = [{"key": other.partition_labels[0], "operator": "NotIn", "values": list(partitioned_modes(other))}
                 ] if other.partition_labels else []
        ours.extend([{"key": a_key, "operator": "DoesNotExist"},
                     {"key": label, "operator": "In", "values": list(sizes)}, *[dict(e) for e in whole]]
                    for label in other.memory_labels if sizes)
        holding, small = instance_types_by_fit(other, floor_mib)
        if not other.memory_labels:
            # Gaudi, TPU and Neuron nodes carry no memory label, only vramgate's from the controller: a node it has
            # not labelled yet stays open (the extender, where it runs, still judges it) unless its machine type is
            # one whose devices are too small. NotIn holds where the label is missing, so on-premises nodes and
            # those a provisioner would make of a type that holds the pod both qualify.
            ours.append([{"key": a_key, "operator": "DoesNotExist"},
                         *([{"key": INSTANCE_TYPE, "operator": "NotIn", "values": list(small)}] if small else [])])
        elif holding and config.admission.provisioner_affinity and not unlabelled:
            # A node a provisioner makes has neither label until the labeller runs: its machine type tells.
            ours.append([{"key": a_key, "operator": "DoesNotExist"},
                         *({"key": k, "operator": "DoesNotExist"} for k in other.memory_labels),
                         {"key": INSTANCE_TYPE, "operator": "In", "values": list(holding)}])
    else:
        ours.append([{"key": a_key, "operator": "DoesNotExist"},
                     {"key": g_key, "operator": "Gt", "values": list(value)}])
    none = [{"key": a_key, "operator": "DoesNotExist"},
            *({"key": k, "operator": "DoesNotExist"} for k in (other.memory_labels if other is not None else (g_key,)))]
    if unlabelled:
        ours.append(none)  # holds every provisioner term below, so they would add nothing
    elif config.admission.provisioner_affinity and other is None:
        ours.extend([*none, *req] for req in provisioner_requirements(floor_mib))
    bases: list[dict[str, Any]] = []
    for term in as_list(terms):
        if not isinstance(term, dict):
            continue
        base = _base_of(term, a_key, g_key)
        if base not in bases:
            bases.append(base)
    if not bases:
        bases = [{}]
    out: list[dict[str, Any]] = []
    for base in bases:
        for exprs in ours:
            term = dict(base)
            term["matchExpressions"] = [*as_list(base.get("matchExpressions")), *[dict(e) for e in exprs]]
            out.append(term)
    return out


def _dict_at(parent: dict[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def _set_required_terms(spec: dict[str, Any], terms: list[Any] | None) -> None:
    affinity = _dict_at(spec, "affinity")
    node_affinity = _dict_at(affinity, "nodeAffinity")
    if terms is None:
        node_affinity.pop(_REQUIRED, None)
    else:
        required = _dict_at(node_affinity, _REQUIRED)
        required["nodeSelectorTerms"] = terms
        node_affinity[_REQUIRED] = required
    if node_affinity:
        affinity["nodeAffinity"] = node_affinity
    else:
        affinity.pop("nodeAffinity", None)
    if affinity:
        spec["affinity"] = affinity
    else:
        spec.pop("affinity", None)


# ---------------------------------------------------------------------------------------------------------------
# Tolerations, env, resources.


def _tolerates_all(tolerations: list[Any], effect: str) -> bool:
    return any(
        isinstance(t, dict) and not t.get("key") and t.get("operator") == "Exists"
        and t.get("effect") in (None, "", effect)
        for t in tolerations
    )


def _add_gpu_toleration(tolerations: list[Any], resource: str) -> None:
    for t in tolerations:
        if (isinstance(t, dict) and t.get("key") == resource and t.get("operator") == "Exists"
                and t.get("effect") in (None, "", "NoSchedule")):
            return
    if _tolerates_all(tolerations, "NoSchedule"):
        return
    tolerations.append({"key": resource, "operator": "Exists", "effect": "NoSchedule"})


def _is_plugin_default(t: dict[str, Any], key: str) -> bool:
    return (t.get("key") == key and t.get("operator") == "Exists" and t.get("effect") == "NoExecute"
            and t.get("tolerationSeconds") == PLUGIN_DEFAULT_SECONDS and "value" not in t)


def _set_node_problem_toleration(tolerations: list[Any], key: str, seconds: int) -> None:
    ours = {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
    if _tolerates_all(tolerations, "NoExecute"):
        return
    for i, t in enumerate(tolerations):
        if isinstance(t, dict) and t.get("key") == key:
            if _is_plugin_default(t, key):
                tolerations[i] = ours
            return
    tolerations.append(ours)


def _ensure_env(container: dict[str, Any], gpus: int) -> None:
    if container.get("envFrom"):
        return  # a ConfigMap/Secret may set them; an explicit env entry would silently override it
    env = container.get("env")
    if not isinstance(env, list):
        env = []
    names = {e.get("name") for e in env if isinstance(e, dict) and isinstance(e.get("name"), str)}
    added = False
    if "CUDA_DEVICE_ORDER" not in names:
        env.append({"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"})
        added = True
    if "CUDA_VISIBLE_DEVICES" not in names:
        env.append({"name": "CUDA_VISIBLE_DEVICES", "value": ",".join(str(i) for i in range(gpus))})
        added = True
    if added:
        container["env"] = env


def _ensure_memory_floor(container: dict[str, Any], floor_mib: float) -> None:
    resources = container.get("resources")
    if resources is None:
        resources = {}
    if not isinstance(resources, dict):
        return
    limits = resources.get("limits")
    if limits is None:
        limits = {}
    if not isinstance(limits, dict) or "memory" in limits:
        return
    value = math.ceil(floor_mib)
    requests = resources.get("requests")
    if isinstance(requests, dict) and "memory" in requests:
        try:
            requested = parse_size_bytes(str(requests["memory"]))
        except QuantityError:
            return
        if requested >= value * 1024 * 1024:
            limits["memory"] = requests["memory"]
            resources["limits"] = limits
            container["resources"] = resources
            return
    limits["memory"] = f"{value}Mi"
    resources["limits"] = limits
    container["resources"] = resources


# ---------------------------------------------------------------------------------------------------------------
# The mutations.


def mutate_pod(pod: dict[str, Any], judgement: Judgement, config: Config,
               priorities: Mapping[str, tuple[int, str]] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The admitted GPU Pod with vramgate's additions, and warnings about what was changed. ``priorities``: the
    PriorityClasses' (value, preemptionPolicy) by name (Snapshot.priority_classes)."""
    demand = judgement.demand
    if demand is None or not judgement.allowed:
        return pod, []
    out = _copy(pod)
    notes: list[str] = []
    meta = out.get("metadata")
    if not isinstance(meta, dict):
        meta = out["metadata"] = {}
    spec = out["spec"]
    adm = config.admission
    # The resource the pod asks (amd.com/gpu for an AMD pod): its toleration and its GPU containers.
    resource = demand.gpu_resource
    nvidia = demand.vendor == NVIDIA

    # Annotations: the computed need.
    if demand.per_gpu_mib is not None:
        annotations = _dict_at(meta, "annotations")
        annotations[A_VRAM_REQUIRED] = str(demand.total_mib)
        annotations[A_VRAM_PER_GPU] = str(demand.per_gpu_mib)
        if demand.min_per_gpu_mib is not None:
            annotations[A_VRAM_PER_GPU_MIN] = str(demand.min_per_gpu_mib)
        sources = demand.explain()
        annotations[A_ESTIMATE] = demand.summary() + (f" [inputs: {'; '.join(sources)}]" if sources else "")
        meta["annotations"] = annotations

    # Node constraints: a too-narrow selector is replaced; a VRAM affinity is ANDed into what remains.
    if judgement.reroute is not None:
        selector, terms = widen(spec, judgement.reroute.fitting)
        if selector is None:
            spec.pop("nodeSelector", None)
        else:
            spec["nodeSelector"] = selector
        _set_required_terms(spec, terms)
        notes.append(f"replaced {judgement.reroute.selector} (only GPUs too small) with a VRAM node affinity")
    floor = node_vram_floor_mib(demand)
    # GPUs from DRA claims: which device (a MIG slice, a full GPU) is the claim's choice; the node label
    # (its largest GPU) says nothing of it. The claim's memory selector and the extender place these.
    if floor is not None and judgement.fits and not demand.claims:
        # Nodes that serve a DRA-backed extended resource have no GPU labels: leave unlabelled nodes open then.
        _set_required_terms(spec, vram_terms(required_terms(spec), floor, config, demand.vendor,
                                             unlabelled=judgement.dra_extended_fits))

    # Tolerations: the taint GPU node pools carry, keyed by the resource (nvidia.com/gpu=present:NoSchedule on
    # GKE and AKS; amd.com/gpu=present:NoSchedule, as KubeAI's amd-gpu-mi300x profile tolerates it,
    # charts/kubeai/values.yaml at kubeai-project/kubeai@f442a2c). AMD's GPU operator itself taints only
    # amd-gpu-unhealthy:NoSchedule while it remediates a node (docs/autoremediation/auto-remediation.md,
    # ROCm/gpu-operator@6df13c1), a fault that is never tolerated.
    tolerations = as_list(spec.get("tolerations"))
    _add_gpu_toleration(tolerations, resource)
    if adm.not_ready_toleration_seconds > 0:
        for key in (NOT_READY, UNREACHABLE):
            _set_node_problem_toleration(tolerations, key, adm.not_ready_toleration_seconds)
    spec["tolerations"] = tolerations

    # sharing.fill: the share the estimate holds, into the GPU container that states none.
    fill = judgement.share_fill
    if fill is not None:
        for c in as_list(spec.get("containers")):
            if isinstance(c, dict) and c.get("name") == fill.container:
                res = c.setdefault("resources", {})
                for section in ("limits", "requests"):
                    amounts = res.get(section)
                    if section == "limits" or (isinstance(amounts, dict) and resource in amounts):
                        # An extended resource's request must equal its limit.
                        res.setdefault(section, {})[fill.resource] = str(fill.amount)
                notes.append(f"wrote {fill.resource}: {fill.amount} (sharing.fill)")

    # GPU containers: CUDA env and a host-memory limit floor.
    # The floor counts the weights the engine keeps in host memory (llama.cpp -ot/--cpu-moe, --cpu-offload-gb) too.
    weights = demand.weights_mib + demand.host_weights_mib if demand.weights_mib is not None else None
    for key in ("containers", "initContainers"):
        for c in as_list(spec.get(key)):
            if not isinstance(c, dict):
                continue
            gpus = container_gpus(c, resource)
            if not gpus:
                continue
            if nvidia:
                # CUDA env for NVIDIA pods only. Under ROCm, vLLM raises on a CUDA_VISIBLE_DEVICES that differs
                # from a HIP_VISIBLE_DEVICES the image or user sets (vllm/platforms/rocm.py
                # _sync_hip_cuda_env_vars, vllm-project/vllm@001eda31), and CUDA_DEVICE_ORDER is the CUDA
                # runtime's: an AMD pod's env is left as written.
                _ensure_env(c, gpus)
            if weights is not None and adm.host_memory_floor_factor > 0:
                _ensure_memory_floor(c, weights * adm.host_memory_floor_factor * gpus / demand.gpus)

    # Pod-level settings.
    pc = adm.tiers.get(demand.tier)
    if pc and not spec.get("priorityClassName"):
        spec["priorityClassName"] = pc
        # kube-apiserver's Priority plugin resolved these before webhooks ran (for no class) and re-runs after a
        # webhook changes the Pod. Set as it will resolve them, its re-run changes nothing and this webhook is not
        # called again (reinvocationPolicy IfNeeded re-invokes it when a later plugin changes the Pod); a class
        # not known yet is left to the plugin, at the price of that second call.
        resolved = priorities.get(pc) if priorities else None
        if resolved is not None:
            spec["priority"], spec["preemptionPolicy"] = resolved
        else:
            spec.pop("priority", None)
            spec.pop("preemptionPolicy", None)
    if adm.scheduler_name and spec.get("schedulerName") in (None, "", "default-scheduler"):
        spec["schedulerName"] = adm.scheduler_name
    grace = spec.get("terminationGracePeriodSeconds")
    floor_grace = adm.termination_grace_period_floor
    if floor_grace > 0 and (not isinstance(grace, int) or grace < floor_grace):
        spec["terminationGracePeriodSeconds"] = floor_grace
    return out, notes


def mutate_job(job: dict[str, Any], judgement: Judgement, config: Config) -> dict[str, Any]:
    """A GPU Job with restartPolicy Never gets a podFailurePolicy that ignores disruptions and device faults."""
    if judgement.demand is None or not judgement.allowed:
        return job
    spec = job.get("spec")
    if not isinstance(spec, dict) or spec.get("podFailurePolicy") is not None:
        return job
    if judgement.demand.view.spec.get("restartPolicy") != "Never":
        return job
    rules: list[dict[str, Any]] = [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    codes = sorted({c for c in config.admission.device_fault_exit_codes if c != 0})
    if codes:
        rules.append({"action": "Ignore", "onExitCodes": {"operator": "In", "values": codes}})
    out = dict(job)
    out["spec"] = {**spec, "podFailurePolicy": {"rules": rules}}
    if spec.get("podReplacementPolicy") not in (None, "Failed"):
        # kube-apiserver defaulted it to TerminatingOrFailed (no podFailurePolicy yet); the Job API accepts a
        # podFailurePolicy only with podReplacementPolicy Failed.
        out["spec"]["podReplacementPolicy"] = "Failed"
    return out


# What mutate_pod may touch. Diffing only these parts (paths unchanged) keeps the differ off the rest of the Pod.
_POD_SPEC_KEYS = ("affinity", "nodeSelector", "tolerations", "priorityClassName", "priority", "preemptionPolicy",
                  "schedulerName", "terminationGracePeriodSeconds", "containers", "initContainers")
_CONTAINER_KEYS = ("env", "resources")


def _pod_projection(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The parts of a Pod mutate_pod may change, at their real paths; None when the Pod's shape does not allow it."""
    meta, spec = pod.get("metadata"), pod.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return None
    proj_meta = {"annotations": meta["annotations"]} if "annotations" in meta else {}
    proj_spec: dict[str, Any] = {}
    for key in _POD_SPEC_KEYS:
        if key not in spec:
            continue
        value = spec[key]
        if key in ("containers", "initContainers") and isinstance(value, list):
            value = [{k: c[k] for k in _CONTAINER_KEYS if k in c} if isinstance(c, dict) else c for c in value]
        proj_spec[key] = value
    return {"metadata": proj_meta, "spec": proj_spec}


def _request_bodies(claim: dict[str, Any], names: set[str]) -> list[dict[str, Any]]:
    """The request bodies (``exactly``, each ``firstAvailable`` choice, or a v1beta1 request) named in ``names``."""
    spec = claim.get("spec")
    if claim.get("kind") == TEMPLATE_KIND:
        spec = spec.get("spec") if isinstance(spec, dict) else None
    devices = spec.get("devices") if isinstance(spec, dict) else None
    out: list[dict[str, Any]] = []
    for r in as_list(devices.get("requests") if isinstance(devices, dict) else None):
        if not isinstance(r, dict) or r.get("name") not in names:
            continue
        if isinstance(r.get("exactly"), dict):
            out.append(r["exactly"])
        elif isinstance(r.get("firstAvailable"), list):
            out.extend(sub for sub in r["firstAvailable"] if isinstance(sub, dict))
        elif r.get("deviceClassName"):
            out.append(r)
    return out


def mutate_claim(claim: dict[str, Any], judgement: Judgement, config: Config) -> dict[str, Any]:
    """Add ``device.capacity["<driver>"].memory.compareTo(quantity("<need>")) >= 0`` to each GPU request.

    Where the devices it can match allow multiple allocations (consumable capacity), the request also
    asks for that much of their memory (``capacity.requests.memory``) unless it asks for some already.

    The stock scheduler then allocates only devices that hold the workload, with no extender. Only
    a fitting verdict narrows (unknown VRAM never does); a selector asking as much is left alone.
    """
    demand = judgement.demand
    floor = node_vram_floor_mib(demand) if demand is not None and judgement.fits else None
    if demand is None or floor is None or not demand.claims:
        return claim
    drivers = config.labels.dra_drivers
    out = _copy(claim)
    changed = False
    for req in demand.claims:
        # The driver whose memory the selector names: from the selectors (the class's folded in), else the class name.
        texts = " ".join([*(sel.expression for choice in req.choices() for sel in choice.selectors),
                          *(choice.class_name for choice in req.choices())])
        driver = next((d for d in drivers if d in texts), drivers[0] if drivers else "gpu.nvidia.com")
        for body in _request_bodies(out, {req.name}):
            changed = with_memory_selector(body, floor, driver) or changed
            if req.name in judgement.shared_requests:
                changed = with_memory_request(body, floor) or changed
    return out if changed else claim


def mutation(obj: dict[str, Any], judgement: Judgement, config: Config,
             priorities: Mapping[str, tuple[int, str]] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """JSONPatch operations (empty when nothing changes) and warnings for one admitted object."""
    kind = obj.get("kind")
    if kind == "Pod":
        mutated, notes = mutate_pod(obj, judgement, config, priorities)
    elif kind == "Job" and api_group(obj) == "batch":  # a batch/v1 Job, not a namesake (Volcano's Job)
        mutated, notes = mutate_job(obj, judgement, config), []
    elif kind in (TEMPLATE_KIND, CLAIM_KIND):
        mutated, notes = mutate_claim(obj, judgement, config), []
    else:
        return [], []
    if mutated is obj:
        return [], notes
    before, after = obj, mutated
    if kind == "Pod":
        proj_before, proj_after = _pod_projection(obj), _pod_projection(mutated)
        if proj_before is not None and proj_after is not None:
            before, after = proj_before, proj_after
    ops: list[dict[str, Any]] = []
    _diff(before, after, "", ops)
    return ops, notes


def _diff(before: Any, after: Any, path: str, ops: list[dict[str, Any]]) -> None:
    """Append add/remove/replace operations turning ``before`` into ``after``.

    Mappings are compared key by key and equal-length lists element by element; any other change
    replaces the value whole. Mutation only adds and rewrites at known places, so this yields the
    same small patch as jsonpatch's general differ (whose list alignment costs ~0.5 ms a Pod) without
    its search. Equality checks run in C.
    """
    if before == after:
        return
    if isinstance(before, dict) and isinstance(after, dict):
        for key, value in before.items():
            if key not in after:
                ops.append({"op": "remove", "path": f"{path}/{escape(str(key))}"})
            elif value != after[key]:
                _diff(value, after[key], f"{path}/{escape(str(key))}", ops)
        for key, value in after.items():
            if key not in before:
                ops.append({"op": "add", "path": f"{path}/{escape(str(key))}", "value": value})
        return
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (old, new) in enumerate(zip(before, after, strict=True)):
            if old != new:
                _diff(old, new, f"{path}/{i}", ops)
        return
    ops.append({"op": "replace", "path": path, "value": after})


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = orjson.loads(orjson.dumps(obj))
    return result
