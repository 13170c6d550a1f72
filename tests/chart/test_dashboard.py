"""The Grafana dashboard the chart ships: a valid dashboard whose every query reads metrics vramgate serves."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.chart.conftest import Render
from tests.chart.render import CHART, find, one
from tests.harness import serve_app
from webhook.cluster.snapshot import StaticInventory
from webhook.config import Config
from webhook.kube.manifests import load_nodes
from webhook.serve.server import build_app
from webhook.serve.state import AppState

DASHBOARD = CHART / "dashboards" / "vramgate.json"
NS = "gpu-system"
# Series suffixes of each metric type in the exposition format.
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "gauge": ("",), "summary": ("", "_sum", "_count"), "untyped": ("",)}
# PromQL words that are not series names.
PROMQL_WORDS = {"sum", "by", "rate", "increase", "max", "min", "histogram_quantile", "le", "without", "avg",
                "count", "on", "ignoring", "group_left", "label_values"}


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", [])


def exprs(dash: dict[str, Any]) -> list[str]:
    out = [t["expr"] for p in panels(dash) for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            out.append(var["query"]["query"] if isinstance(var["query"], dict) else var["query"])
    return out


@pytest.fixture(scope="module")
def served_names() -> set[str]:
    """Every series name the /metrics of a running server declares (HELP/TYPE lines and samples)."""
    from tests.admission.helpers import EXAMPLES

    config = Config()
    state = AppState(config, StaticInventory(load_nodes(EXAMPLES / "cluster.yaml"), config))
    with serve_app(build_app(state)) as running, running.client() as client:
        r = client.get("/metrics")
        assert r.status_code == 200
        text = r.text
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            base = name.removesuffix("_total")
            names.update(base + s for s in SUFFIXES[kind])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_dashboard_is_a_valid_grafana_dashboard() -> None:
    dash = load()
    assert dash["title"] == "vramgate" and dash["uid"] == "vramgate"
    assert isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
    assert "id" not in dash or dash["id"] is None  # provisioning assigns ids
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids))
    for p in panels(dash):
        assert p["type"] in {"row", "timeseries", "stat", "gauge", "table", "bargauge", "heatmap"}
        grid = p["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0 and grid["y"] >= 0
        if p["type"] == "row":
            continue
        assert p["title"] and p["datasource"]["uid"] == "${datasource}"
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
            assert t["expr"].count("{") == t["expr"].count("}"), t["expr"]
    # no two panels overlap
    cells: set[tuple[int, int]] = set()
    for p in panels(dash):
        g = p["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, p["title"]
        cells |= mine


def test_every_query_reads_a_metric_a_running_server_serves(served_names: set[str]) -> None:
    dash = load()
    used: set[str] = set()
    for expr in exprs(dash):
        without_groups = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)
        without_labels = re.sub(r"\{[^}]*\}", "", without_groups)
        without_strings = re.sub(r'"[^"]*"', "", without_labels)
        words = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b(?=\s*(?:\{|\[|\)|,|$))", without_strings))
        series = {w for w in words if w not in PROMQL_WORDS and not w.startswith("$") and w != "job"}
        assert series, expr
        used |= series
    missing = used - served_names
    assert not missing, f"dashboard queries metrics /metrics does not serve: {sorted(missing)}"
    # the operator's questions each have a panel
    assert {"vramgate_admission_requests_total", "vramgate_admission_duration_seconds_bucket",
            "vramgate_extender_requests_total", "vramgate_extender_filtered_nodes_total",
            "vramgate_nodes_by_health", "vramgate_inventory_staleness_seconds", "vramgate_inventory_nodes",
            "vramgate_controller_taints_total", "vramgate_controller_evictions_total"} <= used


def test_chart_ships_it_for_the_sidecar(render: Render) -> None:
    assert not [c for c in find(render({}, namespace=NS), "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]
    objs = render({"monitoring": {"grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "GPU"}}}},
                  namespace=NS)
    cm = one(objs, "ConfigMap", "vramgate-dashboard")
    assert cm["metadata"]["namespace"] == NS
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    assert json.loads(cm["data"]["vramgate.json"]) == load()
    other = render({"monitoring": {"grafanaDashboard": {"enabled": True, "namespace": "monitoring",
                                                         "label": "dash", "labelValue": "yes"}}}, namespace=NS)
    cm = one(other, "ConfigMap", "vramgate-dashboard")
    assert cm["metadata"]["namespace"] == "monitoring" and cm["metadata"]["labels"]["dash"] == "yes"
