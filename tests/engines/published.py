"""The engine models beside published start-up logs (tests/fixtures/published_engine_measurements.yaml).

Run ``python -m tests.engines.published`` to print the comparison table that docs/estimation.md carries.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from webhook.engines import estimate
from webhook.engines import vllm as vllm_engine
from webhook.engines.base import parse_version
from webhook.engines.identity import identify
from webhook.models.catalog import ModelSpec, builtin_catalog
from webhook.models.vram import EstimateRequest
from webhook.units.precision import canonical

FIXTURE = Path(__file__).parent.parent / "fixtures" / "published_engine_measurements.yaml"


def entries() -> list[dict[str, Any]]:
    data = yaml.safe_load(FIXTURE.read_text())
    return list(data["measurements"])


@dataclass(frozen=True)
class VllmCase:
    """One published vLLM start-up and vramgate's reading of the same configuration."""

    id: str
    spec: ModelSpec
    request: EstimateRequest
    total_gib: float
    utilization: float
    reported: dict[str, Any]
    outcome: str

    def pool(self) -> tuple[float, int, float]:
        return vllm_engine.kv_pool(self.request, self.spec, self.total_gib * 1024, self.utilization)

    def usable_mib(self) -> float:
        return self.total_gib * 1024 * self.utilization


def vllm_case(entry: dict[str, Any]) -> VllmCase | None:
    """A case when the entry names a cataloged model, the GPU's size and the context; else None."""
    if entry["engine"] != "vllm":
        return None
    ident = identify(builtin_catalog(), str(entry["model"]))
    total = (entry.get("gpu") or {}).get("total_gib")
    config = entry.get("config") or {}
    if ident.spec is None or not total:
        return None
    spec = ident.spec
    quant = config.get("quantization")
    precision = canonical(str(quant).split(" ")[0]) if quant else None
    precision = precision or ident.quantization or (config.get("dtype") and canonical(config["dtype"])) or spec.dtype
    version = parse_version(str(entry["engine_version"])) if entry.get("engine_version") else None
    if version is None:
        version = (0, 10, 0) if config.get("v1", True) else (0, 6, 3)
    tp, pp = int(config.get("tp") or 1), int(config.get("pp") or 1)
    req = EstimateRequest(
        params=spec.params, precision=precision, spec=spec, context=int(config.get("max_model_len") or spec.context),
        gpus=tp * pp, pipeline=pp, engine="vllm", engine_version=version,
        max_num_seqs=config.get("max_num_seqs"), batched_tokens=config.get("max_num_batched_tokens"),
        enforce_eager=bool(config.get("enforce_eager")), legacy_engine=not config.get("v1", True),
        kv_cache_dtype=None if config.get("kv_cache_dtype") in (None, "auto") else config["kv_cache_dtype"],
        gpu_product=(entry.get("gpu") or {}).get("product"),
    )
    util = float(config.get("gpu_memory_utilization") or vllm_engine.default_utilization(version))
    return VllmCase(entry["id"], spec, req, float(total), util, entry.get("reported") or {}, entry["outcome"])


def table() -> str:
    rows = ["| id | outcome | weights (log / vramgate) | KV pool GiB (log / vramgate) "
            "| need per GPU (low–mid) vs usable |", "|---|---|---|---|---|"]
    for e in entries():
        case = vllm_case(e)
        if case is None:
            continue
        est = estimate(case.request)
        pool, _, _ = case.pool()
        w = case.reported.get("weights_gib")
        kv = case.reported.get("kv_cache_gib")
        weights = est.weights_mib / 1024 / case.request.gpus
        band = f"{est.low_per_gpu_mib / 1024:.1f}–{est.per_gpu_mib / 1024:.1f}"
        rows.append(
            f"| {case.id} | {case.outcome} | {w if w is not None else '—'} / {weights:.2f} "
            f"| {kv if kv is not None else '—'} / {pool:.2f} | {band} vs {case.usable_mib() / 1024:.1f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
