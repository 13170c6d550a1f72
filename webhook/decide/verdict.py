"""The admission verdict for one workload object; `vramgate check` and `/validate` both call it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..cluster.accelerators import NVIDIA, resources_of_vendors
from ..cluster.dra import CLAIM_KIND, TEMPLATE_KIND, DraView, claim_spec_of, matching, pod_claims
from ..cluster.snapshot import Snapshot
from ..cluster.usage import container_gpus
from ..config import Config, Enforcement
from ..kinds import (
    POD_KINDS,
    Context,
    PodView,
    Role,
    RoleSet,
    Runtimes,
    WorkloadError,
    is_builtin,
    pod_view,
    roles,
    with_attachments,
)
from ..models.catalog import Catalog
from ..units.bounds import OverBudget, TooLarge
from ..units.declaration import DeclarationError
from ..units.quantity import GIB, QuantityError, parse_size_bytes
from .demand import Demand, read_demand
from .placement import Code, Fitting, Need, cluster_verdict, dra_served, fits_ever, for_extended, picked_context
from .provisioned import provisioned_nodes
from .rules import (
    Narrow,
    cuda_visible_devices_warnings,
    fp8_compute_warnings,
    narrow_selector,
    non_gpu_on_gpu_nodes,
    spans_hosts,
)
from .scaleup import after_scale_up
from .shares import Share, as_whole_gpus, judge_share, larger_fraction, share_of
from .smaller_slice import smaller_slice_warnings, whole_gpu_warnings


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
    # Multi-role kinds (LWS, Ray, …): each role's own judgement, in the object's order.
    roles: tuple[RoleJudgement, ...] = field(default=(), compare=False)
    # A claim's requests whose matching devices allow multiple allocations (consumable capacity).
    shared_requests: tuple[str, ...] = field(default=(), compare=False)
    # Nodes that hold the pod serve its extended resource from DRA devices (no device plugin, no GPU labels there):
    # a VRAM affinity on labels must leave unlabelled nodes eligible (mutation).
    dra_extended_fits: bool = field(default=False, compare=False)

    @property
    def fits(self) -> bool:
        """Some node can hold the workload (so a VRAM affinity can be satisfied)."""
        return self.code in (FITS, REROUTED)

    def summary(self) -> str:
        """What an admitted judgement says of the workload: its estimate, or why there is none."""
        if self.demand is not None:
            return self.demand.summary()
        if self.code in (NOT_JUDGED, TOO_LARGE, OVER_BUDGET):
            return "not judged here (see its warning)"
        return "no GPU requested"


FITS, REROUTED, NOT_JUDGED = "fits", "rerouted", "not-judged"
# Past a bound of units/bounds.py (a script, a flag list, embedded YAML, nesting, the review's CPU budget):
# admitted unjudged, with the warning saying which.
TOO_LARGE, OVER_BUDGET = "too-large", "over-budget"
SHARE_TOO_SMALL = "ShareTooSmall"  # a GPU share capped by HAMi-core below what the pod's model needs
SPANS_HOSTS = "slice-spans-hosts"  # admitted unchecked: the pod's slice spans hosts whose chips one host cannot show


@dataclass(frozen=True)
class RoleJudgement:
    """One role of a multi-role workload and its verdict."""

    role: Role
    judgement: Judgement


def host_memory_warnings(demand: Demand, config: Config) -> list[str]:
    """Warn when a GPU container's memory limit is below what its weights need in host RAM.

    Two needs: staging the weights while they load (``host_memory_factor`` × the weights, per GPU), and the weights
    the engine keeps in host memory for good (``Estimate.host_weights_mib``: llama.cpp ``-ot``/``--cpu-moe``,
    ``--cpu-offload-gb``), each container its GPUs' share of them. A limit below the kept weights is its own
    warning: the engine is OOM-killed once they are read, or pages them back from disk on every token.
    """
    weights = demand.weights_mib
    if weights is None:
        return []
    kept = demand.host_weights_mib * 1024 * 1024
    floor = (weights * 1024 * 1024 + kept) * config.admission.host_memory_factor / demand.gpus
    out = []
    names = set(demand.gpu_containers)
    resource = demand.gpu_resource  # amd.com/gpu for an AMD pod: its containers' share of the weights
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
        share = kept * (container_gpus(c, resource) or demand.gpus) / demand.gpus
        if kept and limit < share:
            out.append(f"container {c.get('name')}: memory limit {raw} < {share / GIB:.1f} GiB of weights the "
                       "engine keeps in host memory instead of on the GPU; it will be OOM-killed or page them "
                       "from disk on every token. Try: raise resources.limits.memory")
        elif limit < floor:
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
    runtimes: Runtimes | None = None,
) -> Judgement:
    """Decide admission for a workload object against the inventory snapshot.

    ``runtimes`` are the ServingRuntimes/TrainingRuntimes the object may refer to (`vramgate check -f`
    passes those in its files); without them kinds fall back to the projects' default runtimes.

    An object past a bound of ``units/bounds.py`` is admitted unjudged, with a warning naming the bound.
    """
    try:
        return _judge(obj, snapshot, config, catalog, namespace, enforcement, runtimes)
    except OverBudget as exc:
        return Judgement(True, OVER_BUDGET, warnings=(exc.warning,))
    except TooLarge as exc:
        return Judgement(True, TOO_LARGE, warnings=(exc.warning,))
    except RecursionError:  # a structure nested past what a bound caught: the same answer, never a traceback
        return Judgement(True, TOO_LARGE, warnings=(TooLarge("nested too deep").warning,))
    except OverflowError:  # a setting past what a float holds (`--max-model-len 1<1,233 zeros>`): never computed
        return Judgement(True, TOO_LARGE, warnings=(TooLarge("a number past 1.8e308 in its settings").warning,))


def _judge(obj: dict[str, Any], snapshot: Snapshot, config: Config, catalog: Catalog, namespace: str | None,
           enforcement: Enforcement, runtimes: Runtimes | None) -> Judgement:
    if enforcement == "off":
        return Judgement(True, "enforcement-off")
    if not isinstance(obj, dict):
        return _deny(enforcement, "malformed", "object: object must be a mapping")
    kind = obj.get("kind")
    if kind in (TEMPLATE_KIND, CLAIM_KIND):
        return _judge_claim(obj, snapshot, config, catalog, namespace, enforcement)
    if isinstance(kind, str) and kind in POD_KINDS and is_builtin(obj):  # the hot path: one pod template
        try:
            view = pod_view(obj, namespace)
        except WorkloadError as exc:
            return _deny(enforcement, "malformed", f"{obj.get('kind', 'object')}: {exc}")
        assert view is not None
        view, note = with_attachments(view, runtimes)
        judged = _judge_view(view, snapshot, config, catalog, enforcement, runtimes)
        return replace(judged, warnings=(*judged.warnings, note)) if note else judged
    try:
        found = roles(obj, Context(namespace, runtimes, config.labels.gpu_resource, resources_of_vendors()))
    except WorkloadError as exc:
        where = _ref(obj) if isinstance(kind, str) else "object"
        return _deny(enforcement, exc.code, f"{where}: {exc}")
    if found is None or not found.roles:
        return Judgement(True, "not-a-workload", warnings=found.warnings if found else ())
    return _combine(found, [(r, _judge_view(r.view, snapshot, config, catalog, enforcement, runtimes))
                            for r in found.roles])


def _ref(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return f"{str(obj.get('kind')).lower()}/{name if isinstance(name, str) and name else '<unnamed>'}"


def _combine(found: RoleSet, results: list[tuple[Role, Judgement]]) -> Judgement:
    """One judgement for a multi-role object: denied if any role is; every role's warnings, each naming it."""
    warnings: list[str] = list(found.warnings)
    several = len(results) > 1 or found.grouped
    for role, j in results:
        ref = role.view.ref
        for w in j.warnings:
            text = w if not several or w.startswith(ref) else f"{ref}: {w}"
            if text not in warnings:
                warnings.append(text)
    per_role = tuple(RoleJudgement(r, j) for r, j in results)
    denied = [j for _, j in results if not j.allowed]
    if denied:
        first = denied[0]
        return Judgement(False, first.code, "; ".join(j.message for j in denied), tuple(warnings), first.demand,
                         first.view, roles=per_role)
    lead = next((j for _, j in results if j.demand is not None), results[0][1])
    code = lead.code if lead.code != REROUTED else FITS
    return Judgement(True, code, "", tuple(warnings), lead.demand, lead.view, roles=per_role)


_A_PER_GPU = "vramgate.io/vram-per-gpu-mib"  # what vramgate writes on pods; on a claim it states the need


def _strs(raw: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def claim_annotations(obj: dict[str, Any]) -> dict[str, str]:
    """A claim's (or template's) annotations, a template's claim-metadata ones under its own."""
    spec = obj.get("spec")
    inner = spec.get("metadata") if isinstance(spec, dict) and obj.get("kind") == TEMPLATE_KIND else None
    meta = obj.get("metadata")
    return {**_strs(inner.get("annotations") if isinstance(inner, dict) else None),
            **_strs(meta.get("annotations") if isinstance(meta, dict) else None)}


def _judge_claim(obj: dict[str, Any], snapshot: Snapshot, config: Config, catalog: Catalog, namespace: str | None,
                 enforcement: Enforcement) -> Judgement:
    """A ResourceClaim or ResourceClaimTemplate that declares the workload it is for (``vramgate.io/*``).

    It is judged as a pod whose only GPUs are this claim's devices, carrying its annotations.
    """
    ann = claim_annotations(obj)
    if not any(k.startswith("vramgate.io/") for k in ann):
        return Judgement(True, "not-a-workload")
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = str(meta.get("name") or meta.get("generateName") or "")  # type: ignore[union-attr]
    ns = namespace or str(meta.get("namespace") or "")  # type: ignore[union-attr]
    spec = claim_spec_of(obj) or {}
    dra = DraView(snapshot.dra.classes, snapshot.dra.templates, {**snapshot.dra.claims, (ns, name): spec},
                  snapshot.dra.drivers)
    pod_spec: dict[str, Any] = {"resourceClaims": [{"name": "claim", "resourceClaimName": name}],
                                "containers": [{"name": "main", "resources": {"claims": [{"name": "claim"}]}}]}
    if _A_PER_GPU in ann and "vramgate.io/vram" not in ann:
        claimed = pod_claims(pod_spec, ns, dra)
        per = ann[_A_PER_GPU].strip()
        if claimed is not None and per.isdigit():
            ann["vramgate.io/vram"] = f"{int(per) * claimed.gpus}Mi"
    view = PodView(kind=str(obj.get("kind")), namespace=ns, name=name, meta={"annotations": ann}, spec=pod_spec)
    judgement = _judge_view(view, snapshot, config, catalog, enforcement, dra=dra)
    claims = judgement.demand.claims if judgement.demand is not None else ()
    shared = tuple(r.name for r in claims if any(
        d.shared for n in snapshot.nodes.values() if n.dra for c in r.choices() for d in matching(c, n.dra).devices))
    return replace(judgement, shared_requests=shared) if shared else judgement


def _judge_view(
    view: PodView, snapshot: Snapshot, config: Config, catalog: Catalog, enforcement: Enforcement,
    runtimes: Runtimes | None = None,
    dra: DraView | None = None,
) -> Judgement:
    """The verdict for one pod shape (a Pod, a template, or one role of a multi-role kind)."""
    if view.provisioned:
        return _judge_provisioned(view, config, catalog, runtimes)
    try:
        view.containers()
    except WorkloadError as exc:
        return _deny(enforcement, "malformed", f"{view.ref}: {exc}", view=view)
    share_denial: str | None = None
    try:
        # ConfigMaps in the files `vramgate check -f` reads resolve env (never Secrets).
        lookup = runtimes.configmap if runtimes else None
        share = share_of(view, config)
        if share is None:
            demand = read_demand(view, config, catalog, lookup, dra=dra or snapshot.dra)
        else:
            largest = next((n.vram_mib for n in snapshot.by_vram if n.vendor == NVIDIA), None)
            demand, share_denial = _shared_demand(view, share, config, catalog, lookup, dra or snapshot.dra, largest)
    except DeclarationError as exc:
        return _deny(enforcement, "declaration", f"{view.ref}: {exc}", view=view)
    if share_denial is not None:
        assert demand is not None
        return _deny(enforcement, SHARE_TOO_SMALL, share_denial, demand.warnings, demand, view)
    if demand is None:
        problem = non_gpu_on_gpu_nodes(view, snapshot, config)
        if problem is None:
            return Judgement(True, "no-gpu", view=view)
        if config.admission.non_gpu_pods_on_gpu_nodes == "reject":
            return _deny(enforcement, "non-gpu-on-gpu-nodes", problem, view=view)
        return Judgement(True, "non-gpu-on-gpu-nodes", warnings=(problem,), view=view)
    warnings = [*demand.warnings, *host_memory_warnings(demand, config), *cuda_visible_devices_warnings(demand, config)]
    verdict = cluster_verdict(demand, snapshot.by_vram)
    if not verdict.admit and verdict.code is Code.VRAM_TOO_SMALL and (
            why := spans_hosts(demand, snapshot.nodes.values())) is not None:
        # A TPU slice over several hosts holds the model with their chips: one host's chips are weak grounds.
        warnings.append(f"{verdict.message.split('. Try:')[0]}; not rejected: {why}")
        return Judgement(True, SPANS_HOSTS, warnings=tuple(warnings), demand=demand, view=view)
    if not verdict.admit and snapshot.provisioners:
        # Only here, on the way to a rejection: can a NodePool add a node that holds it?
        verdict = after_scale_up(demand, verdict, snapshot.scale_up, demand.gpu_resource)
    if not verdict.admit:
        message = verdict.message
        share = demand.share
        if share is not None and share.enforced and share.fraction and demand.min_per_gpu_mib and snapshot.by_vram:
            largest = next((n.vram_mib for n in snapshot.by_vram if n.vendor == demand.vendor), 0)
            hint = larger_fraction(share, demand.min_per_gpu_mib, demand.utilization / share.fraction,
                                   largest) if largest else ""
            if hint:  # the share first: it is what the user wrote
                message = (message.replace(". Try: ", f". Try: {hint}; ", 1) if ". Try: " in message
                           else f"{message}. Try: {hint}")
        if snapshot.sliced and not demand.mig:  # the rejection path only: a slice by profile may hold it
            message += "".join(f" {w[0].upper()}{w[1:]}." for w in whole_gpu_warnings(Need.of(demand), snapshot.sliced))
        return _deny(enforcement, str(verdict.code), message, tuple(warnings), demand, view)
    if verdict.message != "fits":
        warnings.append(verdict.message)
    assert verdict.fitting is not None  # every admitting verdict carries its nodes
    warnings.extend(fp8_compute_warnings(demand, verdict.fitting))
    if demand.mig:  # a pod asking slices: does a smaller profile hold it? (only these pods pay the scan)
        warnings.extend(smaller_slice_warnings(verdict.fitting.need, verdict.fitting.nodes))
    elif snapshot.sliced:  # a whole GPU where the cluster has slices by profile: does one hold it?
        warnings.extend(whole_gpu_warnings(verdict.fitting.need, snapshot.sliced))
    if demand.auto_context:
        demand, said = picked_context(demand, verdict.fitting)
        warnings.extend(said)
    narrow = narrow_selector(demand, verdict.fitting, snapshot.nodes.values())
    if narrow is not None:
        if config.admission.reroute_narrow_selectors:
            warnings.append(narrow.warning())
            return Judgement(True, REROUTED, warnings=tuple(warnings), demand=demand, view=view, reroute=narrow)
        return _deny(enforcement, "narrow-selector", narrow.message(view.ref), tuple(warnings), demand, view)
    dra_fits = False
    if demand.extended:
        dra_fits, said = _extended_steering(demand, verdict.fitting, snapshot)
        warnings.extend(said)
    return Judgement(True, FITS, warnings=tuple(warnings), demand=demand, view=view, dra_extended_fits=dra_fits)


def _shared_demand(view: PodView, share: Share, config: Config, catalog: Catalog, lookup: Any,
                   dra: DraView, largest_mib: int | None) -> tuple[Demand | None, str | None]:
    """The demand of a pod that states a GPU share: its model priced on whole GPUs, placed by the share; and the
    denial when the share (capped by HAMi-core) cannot hold the model."""
    labels = config.labels
    whole = as_whole_gpus(view, share, labels.gpu_resource, tuple(labels.gpu_memory_resources))
    model = read_demand(whole, config, catalog, lookup, dra=dra)
    if model is None:
        return None, None
    declared_util = any(k == "gpu-memory-utilization" for k, _ in model.sources)
    low = model.estimate.low_per_gpu_mib if model.estimate else None
    high = model.estimate.high_per_gpu_mib if model.estimate else None
    finding = judge_share(share, low, high, model.utilization, model.engine, declared_util,
                          model.spec.name if model.spec else model.model, view.ref, largest_mib)
    sources = (*model.sources, ("vram" if share.mib is not None else "share", share.said()))
    demand = replace(model, **finding.demand_changes, share=share, sources=sources,
                     warnings=(*model.warnings, *finding.warnings))
    return demand, finding.denial


def _extended_steering(demand: Demand, fitting: Fitting, snapshot: Snapshot) -> tuple[bool, list[str]]:
    """For a pod asking a DRA-backed extended resource: whether a DRA-served node holds it, and a warning when
    DRA-served nodes whose devices cannot hold it remain open to it (nothing native steers away from them: the
    scheduler's claim carries the class's selectors only, and those nodes carry no GPU labels)."""
    need = fitting.need
    # One look per placement class (nodes of one class have the same devices), not per node: a fleet of DRA nodes
    # is a handful of classes.
    groups, unclassed = snapshot.class_members
    by = snapshot.by_vram
    shapes = [(snapshot.class_info[c][0], ix) for c, ix in groups.items()] + [(by[i], (i,)) for i in unclassed]
    holds = False
    small: list[int] = []  # the first few positions in by_vram of each class too small
    count = 0
    for shape, members in shapes:
        if not dra_served(need, shape):
            continue
        if fits_ever(need, for_extended(need, shape)):
            holds = True
        else:
            small.extend(members[:3])
            count += len(members)
    if not holds or not count:
        return holds, []
    asked = ", ".join(f"{r.name} (DeviceClass {r.class_name})" for r in need.extended)
    shown = ", ".join(by[i].name for i in sorted(small)[:3]) + (f" and {count - 3} more" if count > 3 else "")
    return True, [f"{demand.view.ref}: {asked} is served from DRA devices; those on {shown} cannot hold it, and "
                  "neither a node affinity nor the scheduler's claim for the resource can steer away from them. "
                  "Try: the vramgate extender (extender.enabled), or a ResourceClaim (vramgate adds a memory "
                  "selector to it)"]


def _judge_provisioned(view: PodView, config: Config, catalog: Catalog, runtimes: Runtimes | None) -> Judgement:
    """A pod whose nodes its operator provisions: judged on that instance type, and only ever warned about."""
    found = provisioned_nodes(view, config)
    if found is None:
        return Judgement(True, NOT_JUDGED, warnings=(
            f"{view.ref}: instance type {view.provisioned} is not in vramgate's instance tables; {view.kind} sizes "
            "it, and the pods it creates are judged when created",), view=view)
    patched, nodes, where = found
    inner = _judge_view(patched, nodes, config, catalog, "warn", runtimes)
    return replace(inner, warnings=(*inner.warnings, f"{view.ref}: judged on {where}, not on today's nodes"))


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
