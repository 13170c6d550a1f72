"""The bench-cluster fleet and report (``make bench-cluster``): what vramgate's inventory reads from the
simulated nodes, the pod mix, and the summary line the issue fixes. No cluster needed."""

from __future__ import annotations

import copy
import re

from bench.cluster import fleet
from bench.cluster.kube import percentile
from bench.cluster.run import AdmissionResult, Results, SchedResult, final_line, table
from webhook.config import Config
from webhook.kube.nodecache import InventoryState


def _ready(node: dict) -> dict:
    """The node as KWOK's node-initialize stage leaves it: Ready, with a uid and resourceVersion."""
    n = copy.deepcopy(node)
    n["metadata"].update({"uid": f"uid-{n['metadata']['name']}", "resourceVersion": "10"})
    n["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": ""}]
    return n


def test_fleet_is_stable_and_grows_by_appending() -> None:
    assert fleet.node_object(123) == fleet.node_object(123)
    names = [fleet.node_object(i)["metadata"]["name"] for i in range(5000)]
    assert len(set(names)) == 5000
    cidrs = {fleet.node_object(i)["spec"]["podCIDR"] for i in range(5000)}
    assert len(cidrs) == 5000


def test_fleet_shapes_read_by_the_inventory() -> None:
    nodes = [_ready(fleet.node_object(i)) for i in range(1000)]
    state = InventoryState(Config())
    state.relist("Node", nodes, "100")
    state.relist("Pod", [], "100")
    state.relist("Namespace", [], "100")
    snap = state.snapshot()
    gpu = {n.name: n for n in snap.gpu_nodes()}
    cpu_share = 1 - len(gpu) / len(nodes)
    assert 0.05 < cpu_share < 0.15
    products = {n.product for n in gpu.values()}
    assert len(products) >= 6
    mig = [n for n in gpu.values() if n.mig == "single"]
    assert mig and all(n.vram_mib <= 10 * 1024 for n in mig)  # a 1g.10gb slice, not the 80 GB card
    shared = [n for n in gpu.values() if n.replicas == 4]
    assert shared and all(n.vram_mib == 23028 // 4 for n in shared)
    assert any(n.allocatable < n.capacity for n in gpu.values())  # some devices taken out by the plugin


def test_existing_pods_occupy_half_a_node() -> None:
    node = fleet.node_object(next(i for i in range(100) if fleet.gpu_devices(fleet.node_object(i)) >= 8))
    pod = fleet.existing_pod(node, 0)
    assert pod["spec"]["nodeName"] == node["metadata"]["name"]
    assert int(pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]) == fleet.gpu_devices(node) // 2


def test_bench_pods_are_the_same_mix_for_every_configuration() -> None:
    a = fleet.bench_pods(500, "default-scheduler", "r")
    b = fleet.bench_pods(500, "vramgate-scheduler", "r")
    assert [p["metadata"]["labels"]["shape"] for p in a] == [p["metadata"]["labels"]["shape"] for p in b]
    shapes = {p["metadata"]["labels"]["shape"] for p in a}
    assert {"small", "large", "tp4", "tp8"} <= shapes
    assert all(p["spec"]["schedulerName"] == "vramgate-scheduler" for p in b)
    assert len({p["metadata"]["name"] for p in a}) == 500


def test_percentile_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) != percentile([], 50)  # NaN


def test_final_line_and_table() -> None:
    res = Results("t", "2 CPUs", [1000, 5000])
    for nodes, rate in ((1000, 200.0), (5000, 100.0)):
        res.scheduler.append(SchedResult(nodes, "default", 500, 495, 5, rate, 15, 150, 20, 40, 2.0))
        res.scheduler.append(SchedResult(nodes, "native", 495, 495, 0, rate * 0.97, 15, 150, 20, 41, 2.0))
        res.scheduler.append(SchedResult(nodes, "extender-cache", 500, 490, 10, rate * 0.83, 15, 150, 25, 60, 2.0,
                                         1.2, 1.1, 500))
        res.admission.append(AdmissionResult(nodes, False, "Pod", 180, 3.0, 6.0, 3.2))
        res.admission.append(AdmissionResult(nodes, True, "Pod", 180, 4.0, 7.4, 4.2))
    line = final_line(res)
    assert line == ("bench-cluster: 5000 nodes: native/default throughput 0.97, extender/default throughput 0.83, "
                    "webhook create p99 +1.4 ms")
    # The line docs/scaling.md and CONTRACT name.
    assert re.fullmatch(r"bench-cluster: \d+ nodes: native/default throughput \d\.\d\d, extender/default throughput "
                        r"\d\.\d\d, webhook create p99 [+-]\d+\.\d ms", line)
    text = table(res)
    assert "| 5,000 | extender-cache | 83.0 | 0.83 |" in text
    assert "| 5,000 | native | 97.0 | 0.97 | 495 | 0 | 20 | 41 | – | – |" in text
    assert "| 5,000 | Pod | on | 180 | 4.00 | 7.40 | 4.20 | +1.4 | nan / nan | nan |" in text


def test_scheduler_cycle_parts_from_its_own_histograms() -> None:
    from bench.cluster.run import parse_scheduler_metrics, per_cycle_ms

    ep = "scheduler_framework_extension_point_duration_seconds"
    ok = 'profile="p",status="Success"'
    text = "\n".join([
        "# TYPE scheduler_scheduling_algorithm_duration_seconds histogram",
        'scheduler_scheduling_algorithm_duration_seconds_bucket{le="+Inf"} 400',
        "scheduler_scheduling_algorithm_duration_seconds_sum 2.0",
        "scheduler_scheduling_algorithm_duration_seconds_count 400",
        "# TYPE scheduler_scheduling_attempt_duration_seconds histogram",
        'scheduler_scheduling_attempt_duration_seconds_sum{profile="p",result="scheduled"} 3.0',
        'scheduler_scheduling_attempt_duration_seconds_count{profile="p",result="scheduled"} 400',
        'scheduler_scheduling_attempt_duration_seconds_sum{profile="p",result="unschedulable"} 9.0',
        'scheduler_scheduling_attempt_duration_seconds_count{profile="p",result="unschedulable"} 7',
        "# TYPE scheduler_framework_extension_point_duration_seconds histogram",
        f'{ep}_sum{{extension_point="Score",{ok}}} 0.4',
        f'{ep}_count{{extension_point="Score",{ok}}} 400',
        f'{ep}_sum{{extension_point="PreFilter",{ok}}} 0.2',
        f'{ep}_sum{{extension_point="PreScore",{ok}}} 0.2',
        f'{ep}_sum{{extension_point="Bind",{ok}}} 9.0',
    ])
    parts = per_cycle_ms(parse_scheduler_metrics(text))
    assert parts["algorithm"] == 5.0 and parts["attempt"] == 7.5 and parts["score"] == 1.0
    assert parts["filter+extenders"] == 5.0 - 0.5 - 0.5 - 1.0
    assert per_cycle_ms({}) == {}


def test_hand_placed_pods_name_the_products_that_hold_them() -> None:
    pods = {p["metadata"]["labels"]["shape"]: p for p in fleet.bench_pods(200, "s", "r")}

    def products(shape: str) -> list[str]:
        placed = fleet.hand_placed(pods[shape])
        terms = placed["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        return list(terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"])

    assert products("large") == ["NVIDIA-H100-80GB-HBM3"]
    assert products("small") == ["NVIDIA-A100-SXM4-40GB", "NVIDIA-A10G", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4",
                                 "Tesla-T4"]
    assert "NVIDIA-A10G-SHARED" in products("sixteen") and products("nowhere-vram") == ["none"]


def test_feasible_nodes_to_find_is_kube_schedulers_adaptive_quota() -> None:
    from bench.cluster.bound import feasible_to_find, visited

    # pkg/scheduler/schedule_one.go numFeasibleNodesToFind: all below 100 nodes, 50 % - n/125 (>= 5 %), >= 100.
    assert [feasible_to_find(n) for n in (50, 100, 150, 1000, 5000, 20000)] == [50, 100, 100, 420, 500, 1000]
    assert visited(5000, 5000) == 500 and visited(5000, 1250) == 2000 and visited(5000, 100) == 5000
    assert visited(5000, 0) == 5000


def test_correct_placement_makes_the_filter_pass_visit_more_nodes() -> None:
    from bench.cluster.bound import scan
    from bench.cluster.run import filter_pass_line

    nodes = [fleet.node_object(i) for i in range(1000)]
    b = scan(nodes, {})
    # The 70 GiB one-GPU pod: any free GPU as written, only the H100s (about a quarter of the fleet) placed: fewer
    # than the 420 feasible nodes kube-scheduler wants at 1,000 nodes, so it visits every node.
    written, placed, v_written, v_placed = b.by_shape["large"]
    assert 0.15 < placed / written < 0.35 and v_placed == 1000 > 2 * v_written
    # A shape that fits every GPU with free devices costs the same both ways; one no GPU holds is never created.
    assert b.by_shape["sixteen"][0] == b.by_shape["sixteen"][1]
    assert b.by_shape["nowhere-vram"][1] == 0
    assert 1.2 < b.ratio < 2.0
    res = Results("t", "2 CPUs", [1000])
    res.scheduler.append(SchedResult(1000, "default", 400, 400, 0, 100.0, 15, 150, 20, 40, 2.0,
                                     cycle_ms={"algorithm": 5.0, "filter+extenders": 3.0}))
    res.scheduler.append(SchedResult(1000, "native", 393, 393, 0, 70.0, 15, 150, 20, 40, 2.0,
                                     cycle_ms={"algorithm": 8.0, "filter+extenders": 6.0}))
    line = filter_pass_line(res, 1000, {"as_written": b.as_written, "placed": b.placed, "ratio": b.ratio})
    assert f"x{b.ratio:.2f}" in line and "measured native x2.00 (6.00 vs 3.00 ms a cycle)" in line


def test_webhook_call_times_from_kube_apiservers_histogram() -> None:
    from bench.cluster.run import WEBHOOK_HISTOGRAM, webhook_call_stats

    def sample(suffix: str, name: str, op: str, kind: str, value: float, le: str = "") -> str:
        bucket = f',le="{le}"' if le else ""
        return (f'{WEBHOOK_HISTOGRAM}_{suffix}{{name="{name}",operation="{op}",rejected="false",type="{kind}"'
                f"{bucket}}} {value}")

    text = "\n".join([
        f"# HELP {WEBHOOK_HISTOGRAM} [STABLE] Admission webhook latency",
        f"# TYPE {WEBHOOK_HISTOGRAM} histogram",
        sample("bucket", "mutate.vramgate.io", "CREATE", "admit", 3, "0.005"),
        sample("bucket", "mutate.vramgate.io", "CREATE", "admit", 4, "+Inf"),
        sample("sum", "mutate.vramgate.io", "CREATE", "admit", 0.02),
        sample("count", "mutate.vramgate.io", "CREATE", "admit", 4),
        sample("sum", "validate.vramgate.io", "CREATE", "validating", 0.03),
        sample("count", "validate.vramgate.io", "CREATE", "validating", 5),
        sample("sum", "validate.vramgate.io", "UPDATE", "validating", 0.01),
        sample("count", "validate.vramgate.io", "UPDATE", "validating", 1),
        "# TYPE apiserver_request_total counter",
        'apiserver_request_total{code="201",verb="POST"} 9',
        "",
    ])
    assert webhook_call_stats(text) == {"mutate.vramgate.io": (0.02, 4.0), "validate.vramgate.io": (0.04, 6.0)}
