"""Compare the estimator with published measurements (tests/fixtures/published_measurements.yaml).

Run ``python -m tests.published`` to print the markdown table that docs/estimation.md carries.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from webhook.models.catalog import builtin_catalog
from webhook.models.vram import EstimateRequest, estimate
from webhook.units.precision import canonical

FIXTURE = Path(__file__).parent / "fixtures" / "published_measurements.yaml"
GIB = 1024.0

# Tolerances per kind: (lowest ratio, highest ratio, slack in GiB added to the high bound).
# Weights and files are bytes we can count: ±3 %. "total" is torch's peak allocation in the Qwen
# speed benchmark, which excludes the CUDA context that vramgate adds (512 MiB per GPU), so the
# estimate may sit above it by 15 % plus that context. An engine reservation is what vLLM grabbed
# (gpu_memory_utilization × the GPU), an upper bound the need must fit under.
TOLERANCE: dict[str, tuple[float, float, float]] = {
    "weights": (0.97, 1.03, 0.0),
    "file_size": (0.97, 1.03, 0.0),
    "kv_per_token": (0.99, 1.01, 0.0),
    "total": (0.95, 1.15, 0.6),
    "engine_reservation": (0.0, 1.0, 0.0),
}


@dataclass(frozen=True)
class Comparison:
    """One published figure beside vramgate's estimate of the same quantity."""

    id: str
    model: str
    kind: str
    precision: str
    gpus: int
    context: int
    published_gib: float
    estimate_gib: float
    source: str

    @property
    def ratio(self) -> float:
        return self.estimate_gib / self.published_gib

    @property
    def within(self) -> bool:
        lo, hi, slack = TOLERANCE[self.kind]
        return lo * self.published_gib <= self.estimate_gib <= hi * self.published_gib + slack


def load() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = yaml.safe_load(FIXTURE.read_text())["measurements"]
    return data


def compare(m: dict[str, Any]) -> Comparison:
    spec = builtin_catalog().lookup(m["model"])
    if spec is None:
        raise LookupError(f"{m['id']}: model {m['model']!r} is not in the catalog")
    precision = canonical(m["precision"])
    if precision is None:
        raise LookupError(f"{m['id']}: precision {m['precision']!r} unknown")
    gpus = int(m.get("gpus") or 1)
    context = int(m.get("context") or 1)
    batch = int(m.get("batch") or 1)
    kind = m["kind"]
    req = EstimateRequest(params=spec.params, precision=precision, spec=spec, context=context, batch=batch,
                          gpus=gpus)
    if kind in ("weights", "file_size"):
        # vLLM logs the weights each rank holds; a file or a footprint is the whole model.
        est = estimate(req.but(context=1))
        value = est.weights_mib / (gpus if kind == "weights" else 1) / GIB
    elif kind == "kv_per_token":
        value = estimate(req.but(context=1)).kv_bytes_per_token / 2**30
    elif kind == "total":
        value = estimate(req).total_mib / GIB
    elif kind == "engine_reservation":
        value = estimate(req).per_gpu_mib / GIB
    else:
        raise LookupError(f"{m['id']}: unknown kind {kind!r}")
    return Comparison(m["id"], spec.name, kind, m["precision"], gpus, context, float(m["value_gib"]), value,
                      str(m.get("source", "")))


def markdown_table() -> str:
    rows = ["| measurement | model | kind | precision | GPUs | published GiB | estimate GiB | ratio | within |",
            "|---|---|---|---|---|---|---|---|---|"]
    for m in load():
        c = compare(m)
        if c.kind == "kv_per_token":
            pub, est = f"{c.published_gib * 2**30:,.0f} B", f"{c.estimate_gib * 2**30:,.0f} B"
        else:
            pub, est = f"{c.published_gib:.2f}", f"{c.estimate_gib:.2f}"
        rows.append(f"| {c.id} | {c.model} | {c.kind} | {c.precision} | {c.gpus} | {pub} | {est} | "
                    f"{c.ratio:.3f} | {'yes' if c.within else 'NO'} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
