"""Micro-benchmarks of the decision core: estimator, demand and the whole admission verdict.

Each figure is beside a baseline measured in the same run — decoding the same review with orjson,
the least any webhook must do — so the ratio holds on a noisy machine.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.demand import read_demand
from webhook.decide.verdict import judge
from webhook.kinds import pod_view
from webhook.kube.manifests import load_nodes
from webhook.models.catalog import builtin_catalog
from webhook.models.vram import EstimateRequest, estimate

from .payloads import PAYLOADS


def per_call_us(fn: Callable[[], Any], seconds: float = 0.5) -> float:
    """Median over 5 rounds of the mean µs per call."""
    fn()
    rounds = []
    for _ in range(5):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 5:
            fn()
            n += 1
        rounds.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(rounds)


def rows() -> list[tuple[str, float, float]]:
    config, catalog = Config(), builtin_catalog()
    snapshot = snapshot_from_nodes(load_nodes("examples/cluster.yaml"), config)
    spec = catalog.lookup("llama-3-8b-instruct")
    out: list[tuple[str, float, float]] = []
    for name, build in PAYLOADS.items():
        review = build()
        raw = orjson.dumps(review)
        obj = review["request"]["object"]
        view = pod_view(obj)
        assert view is not None
        base = per_call_us(lambda raw=raw: orjson.loads(raw))  # type: ignore[misc]
        out.append((f"orjson.loads({name} review) — baseline", base, 1.0))
        d = per_call_us(lambda view=view: read_demand(view, config, catalog))  # type: ignore[misc]
        out.append((f"read_demand({name})", d, d / base))
        j = per_call_us(lambda obj=obj: judge(obj, snapshot, config, catalog, namespace="ml"))  # type: ignore[misc]
        out.append((f"judge({name})", j, j / base))
    out += fleet_rows()
    assert spec is not None
    req = EstimateRequest(params=spec.params, precision="bf16", spec=spec, context=8192, batch=16)
    e = per_call_us(lambda: estimate(req))
    out.append(("estimate(llama-3-8b, 8192 × 16)", e, float("nan")))
    return out


def fleet_rows(size: int = 5000) -> list[tuple[str, float, float]]:
    """What a background audit pass and the first review after pod churn cost per workload at ``size`` nodes
    (``bench/cluster/fleet.py``'s mix), beside judge() of the same pod on the same snapshot."""
    from bench.cluster import fleet
    from webhook.audit.audit import audit_one
    from webhook.kube.nodecache import InventoryState

    config, catalog = Config(), builtin_catalog()
    state = InventoryState(config)
    nodes = [fleet.node_object(i) for i in range(size)]
    state.relist("Node", nodes, "1")
    pods = [fleet.existing_pod(n, i) for i, n in enumerate(nodes) if i % 4 == 0 and fleet.gpu_devices(n)]
    state.relist("Pod", pods, "2")
    state.relist("Namespace", [], "3")
    snapshot = state.snapshot()
    obj = fleet.admission_pod(0, "bench")
    base = per_call_us(lambda: judge(obj, snapshot, config, catalog, namespace="ml"))
    a = per_call_us(lambda: audit_one(obj, snapshot, config, catalog))
    rv = iter(range(10, 10**9))

    bound = [True]

    def churn_then_review() -> None:
        # The pod alternately leaves and returns: every call frees or takes its GPUs (a new snapshot).
        p = pods[0]
        etype = "DELETED" if bound[0] else "ADDED"
        bound[0] = not bound[0]
        state.apply("Pod", {"type": etype, "object": {**p, "metadata": {**p["metadata"],
                                                                         "resourceVersion": str(next(rv))}}})
        judge(obj, state.snapshot(), config, catalog, namespace="ml")

    c = per_call_us(churn_then_review)
    return [(f"judge(GPU pod, {size:,} nodes) — baseline", base, 1.0),
            (f"audit_one(GPU pod, {size:,} nodes): the audit's per-workload cost", a, a / base),
            (f"a pod event, publish, then judge on the new snapshot ({size:,} nodes)", c, c / base)]


def table() -> str:
    lines = ["| call | µs per call | × orjson.loads of the same review |", "|---|---|---|"]
    for name, us, ratio in rows():
        lines.append(f"| {name} | {us:.1f} | {'' if ratio != ratio else f'{ratio:.1f}×'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
