"""docs/autoscaling.md: its ScaledObject parses, and every series it queries exists (vramgate's /metrics,
dcgm-exporter's documented fields)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.chart.test_dashboard import served_names  # noqa: F401 - the fixture: series a running server serves

ROOT = Path(__file__).resolve().parents[2]
# dcgm-exporter's documented fields (etc/default-counters.csv and dcp-metrics-included.csv) that the doc may use.
DCGM_DOCUMENTED = {
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_XID_ERRORS",
}
# dcgm-exporter's labels with its Kubernetes pod mapping, and vramgate's.
LABELS = {"namespace", "pod", "container", "gpu", "UUID", "modelName", "Hostname", "exported_namespace",
          "exported_pod", "workload", "job"}
PROMQL_WORDS = {"sum", "by", "count", "max", "min", "avg", "rate", "without"}


def scaled_objects() -> list[dict]:
    text = (ROOT / "docs" / "autoscaling.md").read_text()
    docs = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S)]
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "ScaledObject"]


def test_scaled_object_is_well_formed() -> None:
    (so,) = scaled_objects()
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    triggers = {t["name"]: t for t in so["spec"]["triggers"]}
    assert set(triggers) == {"util", "pods", "placeable"}
    formula = so["spec"]["advanced"]["scalingModifiers"]["formula"]
    assert set(re.findall(r"[a-z]+", formula)) == set(triggers)  # the formula names only the triggers
    for t in triggers.values():
        assert t["type"] == "prometheus" and t["metadata"]["serverAddress"].startswith("http")
        float(t["metadata"]["threshold"])


def test_every_queried_series_exists(served_names: set[str]) -> None:  # noqa: F811
    (so,) = scaled_objects()
    text = (ROOT / "docs" / "autoscaling.md").read_text()
    queries = [t["metadata"]["query"] for t in so["spec"]["triggers"]]
    queries += re.findall(r"^    (DCGM_\S.*)$", text, flags=re.M)
    used: set[str] = set()
    for q in queries:
        labels = re.findall(r"\{([^}]*)\}", q)
        for sel in labels:
            for name in re.findall(r"([A-Za-z_]+)\s*(?:=~|!=|!~|=)", sel):
                assert name in LABELS, (name, q)
        q = re.sub(r"\b(by|without)\s*\([^)]*\)", "", re.sub(r"\{[^}]*\}", "", q))
        used |= {w for w in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", q) if w not in PROMQL_WORDS}
    assert "vramgate_workload_placeable_replicas" in used and "DCGM_FI_DEV_GPU_UTIL" in used
    missing = {u for u in used if u not in served_names and u not in DCGM_DOCUMENTED}
    assert not missing, missing
