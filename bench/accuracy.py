"""`python -m bench.accuracy`: vramgate's engine models against published start-up logs, per component.

Reads every record of tests/fixtures/published_engine_measurements.yaml and tests/fixtures/accuracy/*.yaml
(one published log each, with its source and quoted lines), prices the same configuration, and prints per
engine family, version band and component the mean absolute error, the signed bias, the P5–P95 of the
residuals, and the worst rows; then the outcomes (a published start that vramgate would reject, a published
failure it would admit). ``--doc docs/accuracy.md`` rewrites the tables that page carries; ``--plot F`` draws
predicted against logged per component (needs matplotlib: ``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from webhook.engines import estimate
from webhook.engines import hybrid as hybrid_engine
from webhook.engines import ollama as ollama_engine
from webhook.engines import sglang as sglang_engine
from webhook.engines import tgi as tgi_engine
from webhook.engines import vllm as vllm_engine
from webhook.engines.base import Version, parse_version
from webhook.engines.identity import identify
from webhook.engines.precision import resolve_precision
from webhook.models.catalog import ModelSpec, builtin_catalog
from webhook.models.vram import Estimate, EstimateRequest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SOURCES = (FIXTURES / "published_engine_measurements.yaml", *sorted((FIXTURES / "accuracy").glob("*.yaml")))
GIB = 1024**3

# Engine spellings in the records → vramgate's engine names (webhook/engines).
ENGINES = {"vllm": "vllm", "sglang": "sglang", "tgi": "tgi", "llama.cpp": "llama.cpp", "llamacpp": "llama.cpp",
           "ollama": "ollama", "trtllm": "trtllm"}
# Published figures below these are rounding noise as a share (a 0.2 GiB KV pool, 100 tokens).
FLOOR = {"weights": 0.25, "kv_gib": 0.5, "kv_tokens": 2048, "concurrency": 0.2, "activation": 0.2,
         "non_torch": 0.05, "non_kv": 0.5, "compute": 0.05, "kv_token_bytes": 1.0, "pool_tokens": 2048}
COMPONENTS = ("weights", "kv_gib", "kv_tokens", "concurrency", "activation", "non_torch", "non_kv", "compute",
              "kv_token_bytes", "pool_tokens")
LABELS = {"weights": "weights per GPU", "kv_gib": "KV pool GiB", "kv_tokens": "KV pool tokens",
          "concurrency": "max concurrency", "activation": "activation peak", "non_torch": "non-torch",
          "non_kv": "all but the KV pool", "compute": "compute buffer GiB", "kv_token_bytes": "KV bytes per token",
          "pool_tokens": "tokens in the logged pool"}


@dataclass(frozen=True)
class Residual:
    """One component of one record: what the log printed and what vramgate predicts."""

    record: str
    engine: str
    band: str
    component: str
    logged: float
    predicted: float

    @property
    def error(self) -> float:
        """Signed relative error, predicted over logged."""
        return (self.predicted - self.logged) / abs(self.logged)


@dataclass(frozen=True)
class Outcome:
    """A published start or failure beside vramgate's verdict on the same GPU."""

    record: str
    engine: str
    logged: str  # started | failed
    verdict: str  # admit | reject | straddle
    low_gib: float
    usable_gib: float


def records(paths: Iterable[Path] = SOURCES) -> Iterator[dict[str, Any]]:
    for path in paths:
        data = yaml.safe_load(path.read_text()) or {}
        for entry in data.get("measurements") or []:
            yield {**entry, "_file": path.name}


def version_band(engine: str, version: Version | None, v1: bool | None) -> str:
    """The release band a record belongs to: the engine behaviour changes at these versions (engine-sources docs)."""
    if engine != "vllm":
        return "all" if version is None else ".".join(map(str, version[:2]))
    if version is None:
        return "V0 (version unprinted)" if v1 is False else "V1 (version unprinted)"
    if version < (0, 8, 0):
        return "0.2–0.7"
    if version < (0, 10, 0):
        return "0.8–0.9"
    if version < (0, 20, 0):
        return "0.10–0.19"
    return "0.20+"


def _float(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


@dataclass(frozen=True)
class Case:
    """A record vramgate can price: the request, the GPU and what the log printed."""

    id: str
    engine: str
    band: str
    spec: ModelSpec
    request: EstimateRequest
    total_gib: float | None
    utilization: float
    reported: dict[str, Any]
    config: dict[str, Any]
    outcome: str


def case_of(entry: dict[str, Any]) -> Case | None:
    """The configuration a record describes, as vramgate would price it; None for an uncataloged model."""
    engine = ENGINES.get(str(entry.get("engine")))
    if engine is None or not entry.get("model"):
        return None
    model = str(entry["model"])
    if engine == "trtllm":
        # The TRT-LLM records say the engine's build in brackets: "Qwen/Qwen2.5-Coder-0.5B-Instruct (int8 engine)".
        model = model.split(" (", 1)[0]
    ident = identify(builtin_catalog(), model)
    if ident.spec is None:
        return None
    spec = ident.spec
    config = entry.get("config") or {}
    gpu = entry.get("gpu") or {}
    quant = config.get("quantization") or config.get("quantize")
    if engine == "trtllm":
        built = str(quant or entry["model"]).lower()
        quant = "int4" if "int4" in built else "int8" if "int8" in built else quant
    dtype = config.get("dtype")
    precision, _ = resolve_precision(
        [(str(quant).split(" ")[0] if quant else None, "config"), (ident.quantization, "model id"),
         (None if dtype in (None, "auto") else str(dtype), "dtype")], spec, "inference", engine)
    raw_version = entry.get("engine_version")
    version = parse_version(str(raw_version)) if raw_version else None
    v1 = config.get("v1")
    priced_version = version
    if engine == "vllm" and version is None:
        priced_version = (0, 10, 0) if v1 is not False else (0, 6, 3)
    tp = int(_float(config.get("tp") or config.get("num_shard")) or 1)
    pp = int(_float(config.get("pp")) or 1)
    if engine == "ollama" and tp == 1:  # Ollama spreads its layers over every GPU it sees
        tp = int(_float(gpu.get("count")) or 1)
    context = int(_float(config.get("max_model_len") or config.get("context") or config.get("n_ctx")
                         or config.get("num_ctx") or config.get("max_total_tokens")) or spec.context)
    if engine == "ollama" and not any(config.get(k) for k in ("context", "n_ctx", "num_ctx", "kv_size")):
        context = min(spec.context, ollama_engine.default_context(version))
    context = int(_float(config.get("kv_size")) or context) if engine == "ollama" else context
    if engine == "tgi" and not config.get("max_total_tokens"):
        # As admission prices it (webhook/decide/demand.py): the version's default, 3.x at min(model, 4096).
        context = min(spec.context, tgi_engine.default_context(version) or 4096)
    slots = int(_float(config.get("num_parallel") or config.get("parallel")) or 0) if engine == "ollama" else 0
    total = _float(gpu.get("total_gib"))
    req = EstimateRequest(
        params=spec.params, precision=precision, spec=spec, context=context, gpus=tp * pp, pipeline=pp,
        engine=engine, engine_version=priced_version, max_num_seqs=config.get("max_num_seqs"),
        batched_tokens=config.get("max_num_batched_tokens"), enforce_eager=bool(config.get("enforce_eager")),
        legacy_engine=v1 is False,
        kv_cache_dtype=None if config.get("kv_cache_dtype") in (None, "auto") else str(config["kv_cache_dtype"]),
        gpu_product=gpu.get("product"), gpu_mib=total * 1024 if total else None,
        # The log's "Using FlashInfer for top-p & top-k sampling" (vLLM 0.9–0.11: only when it is installed).
        flashinfer_sampler=config.get("flashinfer_sampler"),
    )
    if slots:
        req = req.but(slots=slots)
    if engine == "vllm" and isinstance(config.get("enable_prefix_caching"), bool):
        req = req.but(prefix_caching=config["enable_prefix_caching"])
    if engine == "vllm" and (drafted := vllm_engine.speculative(json.dumps(config.get("speculative_config")), spec)):
        req = req.but(speculative_tokens=drafted[0], draft_attention_layers=drafted[1])
    if engine == "llama.cpp":
        req = _llamacpp_request(req, config)
    if engine == "tgi":
        # The launcher's warm-up batch: --max-batch-prefill-tokens split into --max-input-tokens requests.
        prefill = _float(config.get("max_batch_prefill_tokens"))
        inputs = _float(config.get("max_input_tokens") or config.get("max_input_length"))
        req = req.but(prefill_tokens=int(prefill) if prefill else None, input_tokens=int(inputs) if inputs else None)
    if engine == "vllm":
        util = _float(config.get("gpu_memory_utilization")) or vllm_engine.default_utilization(priced_version)
    elif engine == "sglang":
        util = _float(config.get("mem_fraction_static")) or (
            sglang_engine.StaticFraction(priced_version or sglang_engine.NEWEST, tp, pp)(total * 1024) if total
            else sglang_engine.default_mem_fraction(tp, priced_version))
    elif engine == "tgi":
        util = _float(config.get("cuda_memory_fraction")) or 1.0
    elif engine == "trtllm":
        req = req.but(batched_tokens=config.get("max_num_tokens"))
        util = 1.0  # the free fraction is of what the profiling peak leaves (webhook/engines/trtllm.py)
    else:
        util = 1.0
    return Case(str(entry["id"]), engine, version_band(engine, version, v1), spec, req, total, util,
                dict(entry.get("reported") or {}), dict(config), str(entry.get("outcome") or "started"))


def _llamacpp_request(req: EstimateRequest, config: dict[str, Any]) -> EstimateRequest:
    """llama-server's -ngl, -np (n_ctx is every slot's), -ub, -fa and --cache-type-k as a record gives them."""
    changes: dict[str, Any] = {}
    ngl = config.get("ngl")
    if isinstance(ngl, (int, float)):
        changes["gpu_layers"] = int(ngl)
    elif str(ngl).startswith("all"):  # "all (29/29)": every block and the output layer offloaded
        changes["gpu_layers"] = 999
    slots = int(_float(config.get("parallel") or config.get("n_seq_max")) or 1)
    if slots > 1:
        changes.update(slots=slots, context=max(1, req.context // slots))
    if (ubatch := _float(config.get("n_ubatch"))) is not None:
        changes["batched_tokens"] = int(ubatch)
    if config.get("flash_attn") is not None:
        changes["flash_attention"] = bool(config["flash_attn"])
    if config.get("cache_type_k") not in (None, "f16"):
        changes["kv_cache_dtype"] = str(config["cache_type_k"])
    return req.but(**changes) if changes else req


def _kv_per_token_per_gpu(est: Estimate, spec: ModelSpec, tp: int) -> float:
    kv_heads = spec.kv_heads or 1
    shards = 1 if spec.kv_lora_rank else max(1, min(tp, kv_heads))
    return est.kv_bytes_per_token / shards


def residuals(case: Case) -> list[Residual]:
    """Every component the record printed, beside vramgate's figure for it."""
    est = estimate(case.request)
    g = max(case.request.gpus, 1)
    rep = case.reported
    out: list[tuple[str, float | None, float]] = []
    weights = est.weights_mib / g / 1024
    if case.engine == "ollama":  # Ollama's log prints the whole model's figures, GPU and CPU layers together
        weights = ollama_engine.weights_total_bytes(case.request, case.spec) / GIB
    logged_weights = _float(rep.get("weights_gib"))
    if logged_weights is None and case.engine == "sglang":
        logged_weights = _float(rep.get("weights_gb"))  # SGLang's "GB" is bytes / 2^30
    if logged_weights is None and case.engine == "trtllm":
        # "Loaded engine size: N MiB", or the engine after context creation less the execution context.
        engine_mib = _float(rep.get("engine_size_mib"))
        if engine_mib is None and _float(rep.get("engine_context_gpu_mib")) is not None:
            engine_mib = float(rep["engine_context_gpu_mib"]) - (_float(rep.get("execution_context_mib")) or 0.0)
        logged_weights = engine_mib / 1024 if engine_mib is not None else None
    if logged_weights is None and case.engine in ("llama.cpp", "ollama"):
        mib = _float(rep.get("model_buffer_mib_gpu"))
        logged_weights = mib / 1024 if mib is not None else _float(rep.get("weights_total_gib"))
    out.append(("weights", logged_weights, weights))
    if case.engine == "vllm" and case.total_gib:
        pool_gib, tokens, concurrency = vllm_engine.kv_pool(case.request, case.spec, case.total_gib * 1024,
                                                            case.utilization)
        out.append(("kv_gib", _float(rep.get("kv_cache_gib")), pool_gib))
        logged_tokens = _float(rep.get("kv_cache_tokens"))
        if logged_tokens is None and _float(rep.get("gpu_blocks")) is not None:
            logged_tokens = float(rep["gpu_blocks"]) * float(case.config.get("block_size") or vllm_engine.BLOCK)
        out.append(("kv_tokens", logged_tokens, float(tokens)))
        out.append(("concurrency", _float(rep.get("max_concurrency")), concurrency))
        non_kv = case.total_gib * case.utilization - pool_gib
        logged_kv = _float(rep.get("kv_cache_gib"))
        if logged_kv is not None and case.spec.hybrid:
            # The page arithmetic alone: the tokens vramgate says the logged pool holds (hybrid block geometry).
            at_pool, _ = vllm_engine.pool_capacity(case.request, case.spec, logged_kv * 1024)
            out.append(("pool_tokens", logged_tokens, float(at_pool)))
        logged_non_kv = case.total_gib * case.utilization - logged_kv if logged_kv is not None else None
        out.append(("non_kv", logged_non_kv, non_kv))
    activation = est.activations_mib / g / 1024
    logged_act = _float(rep.get("activation_peak_gib"))
    peak = _float(rep.get("peak_torch_gib"))
    if logged_act is None and peak is not None and logged_weights is not None:
        logged_act = peak - logged_weights
    if case.engine == "vllm":
        out.append(("activation", logged_act, activation))
        nt = est.overhead_mib / g / 1024
        if case.request.engine_version and case.request.engine_version >= (0, 20, 0) and not case.request.enforce_eager:
            nt -= vllm_engine.cuda_graph_mib(min(case.spec.active_params or case.spec.params, case.spec.params),
                                             g // max(case.request.pipeline, 1)) / 1024
        out.append(("non_torch", _float(rep.get("non_torch_gib")), nt))
    if case.engine == "sglang" and case.total_gib:
        rest = (case.total_gib * case.utilization * GIB - (est.per_gpu_mib * 2**20 - est.kv_cache_mib / g * 2**20))
        if case.spec.hybrid:  # the state pool takes its --mamba-full-memory-ratio share first
            rest = hybrid_engine.sglang_pools(rest, case.spec.state_bytes_per_sequence(g))[1]
        out.append(("kv_tokens", _float(rep.get("kv_cache_tokens")),
                    max(0.0, rest) / _kv_per_token_per_gpu(est, case.spec, g)))
    if case.engine == "tgi" and case.total_gib:
        tokens = tgi_engine.pool_tokens(est, _kv_per_token_per_gpu(est, case.spec, g), case.total_gib * 1024,
                                        case.utilization)
        out.append(("kv_tokens", _float(rep.get("max_batch_total_tokens")), float(tokens)))
    if case.engine == "trtllm":
        # "Allocate N bytes for k/v cache. Using T tokens": one token's KV on one rank.
        pool = _float(rep.get("kv_cache_bytes"))
        if pool is None and _float(rep.get("kv_cache_gib")) is not None:
            pool = float(rep["kv_cache_gib"]) * GIB
        logged_tokens = _float(rep.get("kv_cache_tokens"))
        out.append(("kv_token_bytes", pool / logged_tokens if pool and logged_tokens else None,
                    _kv_per_token_per_gpu(est, case.spec, g)))
    if case.engine in ("llama.cpp", "ollama"):
        kv_mib = _float(rep.get("kv_buffer_mib")) or _float(rep.get("kv_self_mib"))
        kv_gib = kv_mib / 1024 if kv_mib is not None else _float(rep.get("required_kv_gib"))
        kv_pred = est.kv_cache_mib / 1024
        if case.engine == "ollama":
            kv_pred = ollama_engine.kv_total_bytes(case.request, case.spec) / GIB
        out.append(("kv_gib", kv_gib, kv_pred))
    if case.engine == "llama.cpp":
        compute = _float(rep.get("compute_buffer_mib_gpu")) or _float(rep.get("compute_buffer_mib_gpu0"))
        out.append(("compute", compute / 1024 if compute is not None else None, est.activations_mib / g / 1024))
    return [Residual(case.id, case.engine, case.band, name, logged, predicted)
            for name, logged, predicted in out
            if logged is not None and abs(logged) >= FLOOR[name] and math.isfinite(predicted)]


def outcome(case: Case) -> Outcome | None:
    """vramgate's verdict on the record's GPU: reject only when even the band's low end cannot fit."""
    if not case.total_gib or case.outcome not in ("started", "failed"):
        return None
    est = estimate(case.request)
    usable = case.total_gib * case.utilization
    low, mid = est.low_per_gpu_mib / 1024, est.per_gpu_mib / 1024
    verdict = "reject" if low > usable else ("admit" if mid <= usable else "straddle")
    return Outcome(case.id, case.engine, case.outcome, verdict, low, usable)


def collect(paths: Iterable[Path] = SOURCES) -> tuple[list[Residual], list[Outcome], int, int]:
    found: list[Residual] = []
    outcomes: list[Outcome] = []
    n = priced = 0
    for entry in records(paths):
        n += 1
        case = case_of(entry)
        if case is None:
            continue
        priced += 1
        found.extend(residuals(case))
        if (o := outcome(case)) is not None:
            outcomes.append(o)
    return found, outcomes, n, priced


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary_rows(found: list[Residual], *, by_band: bool) -> list[tuple[str, str, str, int, float, float, float, float,
                                                                            str]]:
    groups: dict[tuple[str, str, str], list[Residual]] = defaultdict(list)
    for r in found:
        groups[(r.engine, r.band if by_band else "all", r.component)].append(r)
    rows = []
    for (engine, band, comp), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                            COMPONENTS.index(kv[0][2]))):
        errs = [r.error for r in rs]
        worst = max(rs, key=lambda r: abs(r.error))
        rows.append((engine, band, LABELS[comp], len(rs), statistics.fmean(abs(e) for e in errs),
                     statistics.fmean(errs), _percentile(errs, 0.05), _percentile(errs, 0.95),
                     f"{worst.record} ({worst.error:+.0%})"))
    return rows


def table(found: list[Residual], *, by_band: bool) -> str:
    lines = ["| engine | versions | component | n | MAE | bias | P5 | P95 | worst |",
             "|---|---|---|---|---|---|---|---|---|"]
    for engine, band, comp, n, mae, bias, p5, p95, worst in summary_rows(found, by_band=by_band):
        lines.append(f"| {engine} | {band} | {comp} | {n} | {mae:.1%} | {bias:+.1%} | {p5:+.1%} | {p95:+.1%} "
                     f"| {worst} |")
    return "\n".join(lines)


def outcome_table(outcomes: list[Outcome]) -> str:
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    for o in outcomes:
        counts[(o.engine, o.logged, o.verdict)] += 1
    lines = ["| engine | published | admit | straddle (admitted, warned) | reject |", "|---|---|---|---|---|"]
    for engine in sorted({o.engine for o in outcomes}):
        for logged in ("started", "failed"):
            row = [counts[(engine, logged, v)] for v in ("admit", "straddle", "reject")]
            if sum(row):
                lines.append(f"| {engine} | {logged} | {row[0]} | {row[1]} | {row[2]} |")
    return "\n".join(lines)


def worst_rows(found: list[Residual], k: int = 12) -> str:
    lines = ["| record | component | logged | vramgate | error |", "|---|---|---|---|---|"]
    for r in sorted(found, key=lambda r: -abs(r.error))[:k]:
        lines.append(f"| {r.record} | {LABELS[r.component]} | {r.logged:.4g} | {r.predicted:.4g} | {r.error:+.0%} |")
    return "\n".join(lines)


def plot(found: list[Residual], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    comps = [c for c in COMPONENTS if any(r.component == c for r in found)]
    colours = {e: f"C{i}" for i, e in enumerate(sorted({r.engine for r in found}))}
    cols = 4
    rows = math.ceil(len(comps) / cols)
    fig, grid = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.2 * rows), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[len(comps):]:
        ax.axis("off")
    for ax, comp in zip(axes, comps, strict=False):
        rs = [r for r in found if r.component == comp]
        for engine in sorted({r.engine for r in rs}):
            pts = [(r.logged, r.predicted) for r in rs if r.engine == engine]
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=12, label=engine, color=colours[engine])
        hi = max(max(r.logged, r.predicted) for r in rs)
        lo = min(min(r.logged, r.predicted) for r in rs)
        ax.plot([lo, hi], [lo, hi], color="grey", linewidth=0.8)
        if lo > 0 and hi / lo > 50:
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_title(LABELS[comp], fontsize=9)
        ax.set_xlabel("logged", fontsize=8)
        ax.set_ylabel("vramgate", fontsize=8)
        ax.tick_params(labelsize=7)
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=c, label=e) for e, c in colours.items()]
    axes[-1].legend(handles=handles, fontsize=8, loc="center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


BEGIN, END = "<!-- accuracy:begin -->", "<!-- accuracy:end -->"
MEASURED = ROOT / "webhook" / "data" / "measured.yaml"


def measured_text(found: list[Residual]) -> str:
    """webhook/data/measured.yaml: per engine, the residuals of what it keeps before its KV pool (sorted)."""
    lines = ["# Generated by `python -m bench.accuracy --write-measured`; do not edit. Per engine: the signed",
             "# relative error (vramgate − logged) / logged of everything the engine keeps before its KV pool",
             "# (weights, activation peak, non-torch, CUDA graphs), one per published start-up log in",
             "# tests/fixtures/published_engine_measurements.yaml and tests/fixtures/accuracy/*.yaml.",
             "# webhook/engines/measured.py turns them into the chance that a straddling workload fits."]
    by: dict[str, list[float]] = defaultdict(list)
    for r in found:
        if r.component == "non_kv":
            by[r.engine].append(round(r.error, 4))
    for engine in sorted(by):
        values = sorted(by[engine])
        lines.append(f"{engine}:")
        lines.append(f"  records: {len(values)}")
        lines.append("  residuals: [" + ", ".join(f"{v:g}" for v in values) + "]")
    return "\n".join(lines) + "\n"


def report(found: list[Residual], outcomes: list[Outcome], n: int, priced: int, *, by_version: bool) -> str:
    logs = len({r.record for r in found})
    parts = [f"accuracy: {n} published records, {priced} of cataloged models, {logs} with figures vramgate prices "
             f"({len(found)} component rows)\n",
             "## Per engine and component (error = (vramgate − logged) / logged)\n", table(found, by_band=False), ""]
    if by_version:
        parts += ["## Per engine, version band and component\n", table(found, by_band=True), ""]
    parts += ["## Published outcomes against vramgate's verdict on the same GPU\n", outcome_table(outcomes), ""]
    parts += [f"- REJECTS A PUBLISHED START: {o.record}: low end {o.low_gib:.1f} GiB > usable {o.usable_gib:.1f} GiB"
              for o in outcomes if o.logged == "started" and o.verdict == "reject"]
    admitted = [o for o in outcomes if o.logged == "failed" and o.verdict != "reject"]
    if admitted:
        parts += ["Published failures vramgate admits (straddle = admitted with a warning):\n"]
        parts += [f"- {o.record}: {o.verdict}, low end {o.low_gib:.1f} GiB, usable {o.usable_gib:.1f} GiB"
                  for o in admitted]
        parts.append("")
    parts += ["## Worst rows\n", worst_rows(found)]
    return "\n".join(parts)


def write_doc(path: Path, text: str) -> None:
    """Replace the generated block of docs/accuracy.md, keeping the prose around it."""
    doc = path.read_text()
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    path.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.accuracy", description=__doc__.splitlines()[0])
    parser.add_argument("--by-version", action="store_true", help="split each engine by version band")
    parser.add_argument("--plot", type=Path, help="write predicted-vs-logged scatter plots to this PNG")
    parser.add_argument("--doc", type=Path, help="rewrite the generated block of this file (docs/accuracy.md)")
    parser.add_argument("--write-measured", action="store_true",
                        help=f"rewrite {MEASURED.relative_to(ROOT)} (the residuals admission's chance of fitting uses)")
    args = parser.parse_args(argv)
    found, outcomes, n, priced = collect()
    text = report(found, outcomes, n, priced, by_version=args.by_version)
    print(text)
    if args.doc:
        write_doc(args.doc, text)
    if args.write_measured:
        MEASURED.write_text(measured_text(found))
    if args.plot:
        plot(found, args.plot)
        print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
