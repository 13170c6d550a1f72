"""The capacity planner behind ``vramgate fit``: where a model fits, on how many GPUs, at what context.

For each GPU kind (a product and its VRAM per GPU, from the inventory or a built-in list of common
GPUs) it asks the engine model the same questions admission asks: the per-GPU need at the fewest
GPUs tensor parallelism allows (the attention heads must split evenly), the largest context one
sequence can have there, and — for vLLM — how many sequences of the asked context the KV pool holds
(``webhook.engines.vllm.kv_pool``). A kind fits when the estimate's expected per-GPU need is within
the usable share of one GPU (admission admits from the band's low end, so everything listed as
fitting is admitted).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..cluster.cloud import builtin_table
from ..cluster.inventory import NodeGPUs
from ..config import Config
from ..decide.demand import default_util as default_utilization
from ..engines import Settings, engine_named, engines, estimate, max_context, parse_version, suggest
from ..engines.precision import resolve_precision
from ..models.catalog import Catalog, ModelSpec
from ..models.vram import EstimateRequest
from ..units.precision import ACCEPTED as PRECISIONS_ACCEPTED
from ..units.precision import canonical
from ..units.quantity import QuantityError, format_gib, parse_positive_int

# The GPUs people rent most, as keys of webhook/data/gpu_instances.yaml (where each figure's source is).
COMMON_GPUS: tuple[str, ...] = ("T4", "L4", "A10G", "L40S", "A100-40GB", "A100-80GB", "H100-80GB", "H200", "B200")
# GPUs per node assumed for the built-in list (an 8-GPU server); a real inventory says its own.
COMMON_GPUS_PER_NODE = 8
# Engines that serve (the trainer model answers another question).
SERVING_ENGINES = tuple(e.name for e in engines() if e.serves)
# How many nodes the built-in list lets a plan span (engines with spanning layouts: a LeaderWorkerSet group).
MULTI_NODE_MAX = 8


@dataclass(frozen=True)
class GPUKind:
    """One kind of GPU: its product, VRAM per GPU, how many a node has, and where the figure came from."""

    product: str
    vram_mib: int
    max_per_node: int
    source: str
    nodes: int = 0  # nodes of this kind in the inventory (0: the built-in list)
    gpus: int = 0  # GPUs of this kind in the inventory
    free: int = 0  # of which free
    health: str = "-"  # "3 healthy, 1 unhealthy"


@dataclass(frozen=True)
class KindFit:
    """The planner's answer for one GPU kind."""

    kind: GPUKind
    fits: bool
    gpus: int | None  # fewest GPUs per pod that hold the model at the asked context
    per_gpu_mib: int | None  # the expected need per GPU there
    usable_mib: float
    max_context: int | None  # the largest context of one sequence on those GPUs (or on the most a node has)
    concurrency: float | None  # sequences of the asked context the KV pool holds (vLLM)
    kv_pool_gib: float | None
    flags: str
    reason: str
    pods: int = 1  # pods (nodes) one instance spans: a LeaderWorkerSet of this size when > 1
    layout: str = ""  # "TP 8 × PP 2", "DP 16 × EP": how the model is split when it spans pods

    def as_dict(self) -> dict[str, Any]:
        k = self.kind
        return {
            "product": k.product, "vram_mib": k.vram_mib, "source": k.source, "nodes": k.nodes,
            "gpus_in_inventory": k.gpus, "free_gpus": k.free, "max_gpus_per_node": k.max_per_node,
            "health": k.health, "fits": self.fits, "gpus": self.gpus, "pods": self.pods, "layout": self.layout,
            "per_gpu_mib": self.per_gpu_mib,
            "usable_mib": round(self.usable_mib), "max_context": self.max_context,
            "concurrency": None if self.concurrency is None else round(self.concurrency, 2),
            "kv_pool_gib": None if self.kv_pool_gib is None else round(self.kv_pool_gib, 2),
            "flags": self.flags, "reason": self.reason,
        }


@dataclass(frozen=True)
class Plan:
    """What was asked, and the answer per GPU kind."""

    model: str
    params: float
    precision: str
    engine: str
    engine_version: tuple[int, ...] | None
    context: int
    utilization: float
    inventory: str  # "built-in list of common GPUs" or the inventory's description
    rows: list[KindFit] = field(default_factory=list)
    by_gpu: bool = False  # the engine sets its share by the GPU (SGLang): each row's ``usable`` says it


def common_kinds() -> list[GPUKind]:
    """The built-in list: common data-centre GPUs with the MiB GPU Feature Discovery reports."""
    table = builtin_table()
    out = []
    for key in COMMON_GPUS:
        p = table.products[key]
        out.append(GPUKind(p.name, p.mib, COMMON_GPUS_PER_NODE, f"built-in: {p.source}"))
    return out


def kinds_of(nodes: Iterable[NodeGPUs], free: dict[str, int] | None = None) -> list[GPUKind]:
    """GPU kinds in an inventory: nodes grouped by product and VRAM per GPU, largest GPUs last."""
    groups: dict[tuple[str, int], list[NodeGPUs]] = {}
    for n in nodes:
        if n.is_gpu_node:
            groups.setdefault((n.product or "unknown GPU", n.vram_mib), []).append(n)
    out = []
    for (product, vram), members in groups.items():
        counts: dict[str, int] = {}
        for n in members:
            counts[n.health] = counts.get(n.health, 0) + 1
        health = ", ".join(f"{c} {h}" for h, c in sorted(counts.items()))
        sources = sorted({n.vram_source for n in members})
        out.append(GPUKind(
            product=product, vram_mib=vram,
            max_per_node=max(max(n.capacity, n.labelled_count) for n in members),
            source=", ".join(sources), nodes=len(members), gpus=sum(n.capacity for n in members),
            free=sum((free or {}).get(n.name, n.allocatable) for n in members), health=health,
        ))
    out.sort(key=lambda k: (k.vram_mib, k.product))
    return out


def tp_sizes(spec: ModelSpec | None, engine: str, most: int) -> list[int]:
    """GPU counts a pod can split the model over: TP must divide the attention heads (powers of 2 if unknown)."""
    found = engine_named(engine)
    if found is None or not found.tensor_parallel:
        return [1]
    return [g for g in range(1, max(most, 1) + 1)
            if (spec.heads % g == 0 if spec and spec.heads else g & (g - 1) == 0)]


def _flags(engine: str, gpus: int, context: int) -> str:
    parts = []
    if gpus > 1 and (tp := suggest(engine, "tp", gpus)):
        parts.append(tp)
    if (ctx := suggest(engine, "context", context)) is not None:
        parts.append(ctx)
    return " ".join(parts)


def _concurrency(req: EstimateRequest, spec: ModelSpec | None, vram_mib: int, util: float
                 ) -> tuple[float | None, float | None]:
    """(KV pool GiB per GPU, sequences of ``req.context`` it holds); vLLM's rule, the same arithmetic elsewhere."""
    found = engine_named(req.engine)
    if found is not None and found.kv_pool is not None:
        pool_gib, _, conc = found.kv_pool(req, spec, vram_mib, util)
        return pool_gib, conc
    if found is not None and found.fixed_slots:
        return None, None  # fixed slots: concurrency is what -np / OLLAMA_NUM_PARALLEL says
    est = estimate(req.but(batch=1, gpu_mib=vram_mib))
    kv_seq = est.kv_cache_mib / max(req.gpus, 1)
    pool = vram_mib * util - (est.per_gpu_mib - kv_seq)
    return pool / 1024, (max(0.0, pool) / kv_seq if kv_seq else None)


# The engine's share of a GPU by (GPUs the model spans, the GPU's MiB), where it depends on them (SGLang).
Share = Callable[[int, float], float]


def engine_share(req: EstimateRequest) -> Share | None:
    """The engine's own share by GPU (SGLang's ``mem_fraction_static`` for this version), or None: one figure."""
    found = engine_named(req.engine)
    rule = found.utilization_rule if found is not None else None
    if rule is None:
        return None
    unsaid = Settings(req.engine or "")
    return lambda gpus, gpu_mib: rule(req.engine_version, gpus, 1, 1, unsaid)(gpu_mib)


def fit_kind(req: EstimateRequest, kind: GPUKind, utilization: float, share: Share | None = None) -> KindFit:
    """The answer for one GPU kind: ``req`` carries the model, precision, engine and asked context."""
    spec = req.spec
    engine = req.engine or "vllm"
    usable = kind.vram_mib * utilization
    base = req.but(gpu_mib=kind.vram_mib, gpu_product=kind.product)
    sizes = tp_sizes(spec, engine, kind.max_per_node)
    if kind.vram_mib <= 0:
        return KindFit(kind, False, None, None, 0.0, None, None, None, "", "VRAM per GPU unknown")
    for g in sizes:
        at = base.but(gpus=g)
        if share is not None:
            utilization = share(g, kind.vram_mib)
            usable = kind.vram_mib * utilization
        need = estimate(at).per_gpu_mib
        if need <= usable:
            ctx_max = max_context(at.but(context=max(req.context, spec.context if spec else req.context)), usable)
            pool, conc = _concurrency(at, spec, kind.vram_mib, utilization)
            return KindFit(kind, True, g, need, usable, ctx_max, conc, pool, _flags(engine, g, req.context),
                           f"fits on {g} GPU{'s' if g > 1 else ''}")
    most = sizes[-1]
    spanning = _multi_node(req, base, kind, most, usable, utilization)
    if spanning is not None:
        return spanning
    at = base.but(gpus=most)
    need = estimate(at).per_gpu_mib
    ctx_max = max_context(at, usable)
    on = f"{most} GPU{'s' if most > 1 else ''}" + (
        " (the most a node has)" if most == kind.max_per_node and kind.max_per_node > 1 else
        " (a node has 1)" if kind.max_per_node == 1 else " (the most TP allows)")
    if ctx_max is not None:
        reason = (f"{req.context} tokens need {need / 1024:.1f} GiB per GPU on {on}; "
                  f"at most {ctx_max} tokens fit")
    else:
        reason = (f"needs {estimate(at.but(context=1)).per_gpu_mib / 1024:.1f} GiB per GPU on {on} "
                  f"before any KV cache; {usable / 1024:.1f} GiB usable")
    return KindFit(kind, False, None, need, usable, ctx_max, None, None, "", reason)


def _multi_node(req: EstimateRequest, base: EstimateRequest, kind: GPUKind, per_node: int, usable: float,
                utilization: float) -> KindFit | None:
    """The fewest pods of ``kind`` one instance fits on, when one node is not enough (vLLM, SGLang)."""
    engine = req.engine or "vllm"
    found = engine_named(engine)
    if found is None or found.spanning is None or per_node < 1:
        return None
    limit = kind.nodes if kind.nodes else MULTI_NODE_MAX
    for pods in range(2, limit + 1):
        spec = req.spec
        for layout, fields, flags in found.spanning(bool(spec and spec.is_moe), spec.heads if spec else None,
                                                    per_node, pods):
            at = base.but(**fields)
            need = estimate(at).per_gpu_mib
            if need > usable:
                continue
            ctx_max = max_context(at.but(context=max(req.context, spec.context if spec else req.context)), usable)
            pool, conc = _concurrency(at, spec, kind.vram_mib, utilization)
            ctx = suggest(engine, "context", req.context)
            return KindFit(kind, True, per_node * pods, need, usable, ctx_max, conc, pool,
                           f"{flags}{' ' + ctx if ctx else ''} (LeaderWorkerSet size {pods})",
                           f"fits on {pods} nodes × {per_node} GPUs ({layout})", pods=pods, layout=layout)
    return None


def plan(req: EstimateRequest, kinds: Sequence[GPUKind], utilization: float, model: str, inventory: str, *,
         by_gpu: bool = True) -> Plan:
    """Every kind's answer. ``by_gpu``: where the engine sets its share by the GPU (SGLang), use its rule
    per kind and GPU count rather than ``utilization`` (False when the user gave the share)."""
    share = engine_share(req) if by_gpu else None
    out = Plan(model, req.params, req.precision, req.engine or "vllm", req.engine_version, req.context,
               utilization, inventory, by_gpu=share is not None)
    out.rows.extend(fit_kind(req, k, utilization, share) for k in kinds)
    return out


def _gib(mib: float) -> str:
    return format_gib(mib, trim=False)


def share_text(p: Plan) -> str:
    """How much of each GPU the plan counts usable, in words."""
    if p.by_gpu:
        return f"{p.engine}'s own share of each GPU by its memory and the GPUs ({p.utilization:g} where unknown)"
    return f"{p.utilization:g} of each GPU usable"


def render_table(p: Plan) -> str:
    """The plan as a table, one GPU kind a line."""
    version = ".".join(map(str, p.engine_version)) if p.engine_version else "newest"
    lines = [f"{p.model}: {p.params / 1e9:.3g}B parameters, {p.precision}, {p.engine} {version}, "
             f"context {p.context}, {share_text(p)} ({p.inventory})"]
    header = ("GPU", "VRAM", "NODES", "FITS", "GPUS", "PER-GPU", "MAX-CONTEXT", f"SEQS@{p.context}", "FLAGS")
    rows: list[tuple[str, ...]] = [header]
    for r in p.rows:
        k = r.kind
        rows.append((
            k.product, f"{k.vram_mib / 1024:.1f}Gi", str(k.nodes) if k.nodes else "-",
            "yes" if r.fits else "no",
            (f"{r.gpus} ({r.pods}×{r.gpus // r.pods})" if r.pods > 1 else str(r.gpus)) if r.gpus else "-",
            f"{_gib(r.per_gpu_mib)}Gi" if r.per_gpu_mib is not None else "-",
            str(r.max_context) if r.max_context else "-",
            f"{r.concurrency:.1f}" if r.concurrency is not None else "-",
            r.flags if r.fits else r.reason,
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if len(rows) == 1:
        lines.append("(no GPU nodes)")
    return "\n".join(lines)


def render_json(p: Plan) -> dict[str, Any]:
    return {
        "model": p.model, "params": p.params, "precision": p.precision, "engine": p.engine,
        "engine_version": ".".join(map(str, p.engine_version)) if p.engine_version else None,
        "context": p.context, "utilization": p.utilization, "inventory": p.inventory,
        "gpus": [r.as_dict() for r in p.rows],
    }


class FitError(ValueError):
    """Bad input: an unknown model, a bad number, precision or version."""


def request_for(catalog: Catalog, model: str, config: Config, *, engine: str = "vllm",
                engine_version: str | None = None, precision: str | None = None, context: str | None = None,
                kv_cache_dtype: str | None = None, utilization: str | None = None
                ) -> tuple[EstimateRequest, float, str]:
    """The estimate request, the usable share of each GPU and the model's name, as admission would build them."""
    found = catalog.resolve(model)
    if found is None:
        raise FitError(f"unknown model {model!r}: not in the catalog; see `vramgate models list`, "
                       "or add it with `vramgate models import`")
    spec = found.spec
    if precision and canonical(precision) is None:
        raise FitError(f"--precision: {precision!r} is not a precision; use {PRECISIONS_ACCEPTED}")
    prec, _ = resolve_precision([(precision, "--precision"), (found.quantization, "model id")], spec,
                                "inference", engine)
    kv = None
    if kv_cache_dtype:
        kv = canonical(kv_cache_dtype)
        if kv is None:
            raise FitError(f"--kv-cache-dtype: {kv_cache_dtype!r} is not a precision; use e.g. fp8")
    try:
        ctx = parse_positive_int(context) if context else spec.context
    except QuantityError as exc:
        raise FitError(f"--context: {exc}") from None
    if engine not in SERVING_ENGINES:
        raise FitError(f"--engine: {engine!r} is not a serving engine; use one of {', '.join(SERVING_ENGINES)}")
    version = parse_version(engine_version) if engine_version else None
    if engine_version and version is None:
        raise FitError(f"--engine-version: {engine_version!r} is not a version; use e.g. 0.8.5")
    if utilization is not None:
        try:
            util = float(utilization)
        except ValueError:
            util = -1.0
        if not 0 < util <= 1:
            raise FitError(f"--gpu-memory-utilization: {utilization!r} must be a fraction in (0, 1], e.g. 0.9")
    else:
        util = default_utilization(engine, config, "inference", 1, version)
    req = EstimateRequest(params=spec.params, precision=prec, spec=spec, context=ctx, engine=engine,
                          engine_version=version, kv_cache_dtype=kv)
    return req, util, spec.name
