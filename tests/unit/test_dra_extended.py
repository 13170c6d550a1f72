"""DRA-backed extended resources: a DeviceClass with ``extendedResourceName: nvidia.com/gpu`` serves plain
``nvidia.com/gpu`` requests from ResourceSlice devices on nodes with no device plugin (and no GPU labels).

Shapes: ``DeviceClassSpec.extendedResourceName`` and ``ResourceDeviceClassPrefix``
(kubernetes/kubernetes v1.37.2, staging/src/k8s.io/api/resource/v1/types.go); which node serves it how, and which
class wins a shared name: pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go,
pkg/scheduler/framework/plugins/noderesources/fit.go, staging/src/k8s.io/dynamic-resource-allocation/deviceclass/
extendedresourcecache/extendedresourcecache.go (same tag). Devices as NVIDIA's DRA driver publishes them
(tests/unit/test_dra.py's header).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from webhook.cluster import dra
from webhook.cluster.dra_extended import IMPLICIT_PREFIX, classes_by_resource, gpu_resources, offers
from webhook.cluster.snapshot import Snapshot, snapshot_from_nodes
from webhook.config import Config
from webhook.decide.mutation import mutate_pod
from webhook.decide.placement import Code, Need, dra_served, fit
from webhook.decide.selectors import required_terms, selects
from webhook.decide.verdict import judge
from webhook.models.catalog import builtin_catalog
from webhook.serve.extender.decide import Extender

CFG = Config()
CATALOG = builtin_catalog()
GPU_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
# Qwen2.5 14B at 8192 tokens on vLLM: about 35 GiB per GPU (30 GiB at the estimate's low end). Holds on 80 GiB,
# not on 24 GiB.
MODEL = {"vramgate.io/model": "qwen2.5-14b-instruct", "vramgate.io/context-length": "8192"}


def _class(name: str = "gpu.nvidia.com", extended: str | None = "nvidia.com/gpu", created: str = "",
           selector: str = GPU_SELECTOR) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": selector}}]}
    if extended:
        spec["extendedResourceName"] = extended
    meta: dict[str, Any] = {"name": name}
    if created:
        meta["creationTimestamp"] = created
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta, "spec": spec}


def _slice(node: str, memories: list[str], product: str = "NVIDIA H100 80GB HBM3",
           driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "productName": {"string": product},
                                                   "driverVersion": {"version": "560.35.3"}},
                "capacity": {"memory": {"value": m}}} for i, m in enumerate(memories)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpu"},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                  "resourceSliceCount": 1}, "devices": devices}}


def _bare(name: str) -> dict[str, Any]:
    """A node as a DRA-only GPU node looks: no nvidia.com/gpu, no GPU labels."""
    return {"kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": {"cpu": "64"}, "allocatable": {"cpu": "64"}}}


def _plugin(name: str, gib: int, product: str = "NVIDIA-L4") -> dict[str, Any]:
    """A node with the device plugin and GPU Feature Discovery's labels."""
    return {"kind": "Node", "metadata": {"name": name, "labels": {
        "nvidia.com/gpu.memory": str(gib * 1024), "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "1"}},
        "status": {"capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"}}}


def _pod(resource: str = "nvidia.com/gpu", count: str = "1", ann: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "qwen", "namespace": "default",
                                                            "annotations": dict(ann or MODEL)},
            "spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai:v0.8.5",
                                     "resources": {"limits": {resource: count}}}]}}


def _snap(nodes: list[dict[str, Any]], objs: list[dict[str, Any]]) -> Snapshot:
    return snapshot_from_nodes(nodes, CFG, dra=objs)


BIG_AND_SMALL = ([_bare("dra-h100"), _bare("dra-l4")],
                 [_class(), _slice("dra-h100", ["80Gi"]), _slice("dra-l4", ["24Gi"], "NVIDIA L4")])


# ---- which class serves which resource --------------------------------------------------------


def test_device_class_reads_extended_resource_name_and_implicit_names() -> None:
    dc = dra.device_class(_class(created="2026-12-01T00:00:00Z"))
    assert dc is not None and dc.extended_resource == "nvidia.com/gpu" and dc.created == "2026-12-01T00:00:00Z"
    plain = dra.device_class(_class("mig.nvidia.com", extended=None))
    assert plain is not None and plain.extended_resource == ""
    by = classes_by_resource([dc, plain])
    assert by["nvidia.com/gpu"].name == "gpu.nvidia.com"
    assert by[IMPLICIT_PREFIX + "mig.nvidia.com"].name == "mig.nvidia.com"
    assert by["deviceclass.resource.kubernetes.io/gpu.nvidia.com"].name == "gpu.nvidia.com"


@pytest.mark.parametrize(("a_created", "b_created", "winner"), [
    ("2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z", "b-gpu"),  # the newer class wins
    ("2026-12-02T00:00:00Z", "2026-12-01T00:00:00Z", "a-gpu"),
    ("2026-12-01T00:00:00Z", "2026-12-01T00:00:00Z", "a-gpu"),  # a tie: the lower name
    ("", "", "a-gpu"),
])
def test_a_shared_extended_resource_name_goes_to_the_newest_class(a_created: str, b_created: str,
                                                                   winner: str) -> None:
    classes = [dra.device_class(_class("b-gpu", created=b_created)), dra.device_class(_class("a-gpu",
                                                                                             created=a_created))]
    assert classes_by_resource([c for c in classes if c is not None])["nvidia.com/gpu"].name == winner


def test_only_gpu_driver_classes_count() -> None:
    view = dra.dra_view([_class(), _class("nic", "example.com/nic", selector="device.driver == 'nic.example.com'")])
    served = gpu_resources(view)
    assert "nvidia.com/gpu" in served and "example.com/nic" not in served


def test_offers_per_node() -> None:
    snap = _snap(*BIG_AND_SMALL)
    (offer,) = offers(snap.nodes["dra-h100"].dra, snap.dra)
    assert (offer.resource, offer.device_class, offer.memory_mib) == ("nvidia.com/gpu", "gpu.nvidia.com", (81920,))
    without = _snap(BIG_AND_SMALL[0], [_class(extended=None), *BIG_AND_SMALL[1][1:]])
    assert offers(without.nodes["dra-h100"].dra, without.dra) == ()


# ---- admission ---------------------------------------------------------------------------------


def test_plain_gpu_request_is_judged_on_dra_devices() -> None:
    j = judge(_pod(), _snap(*BIG_AND_SMALL), CFG, CATALOG)
    assert j.allowed and j.code == "fits", j.message
    assert j.demand is not None and [(r.name, r.class_name, r.count) for r in j.demand.extended] == [
        ("nvidia.com/gpu", "gpu.nvidia.com", 1)]
    # dra-l4 (24 GiB) stays open to it and cannot hold it: said
    assert any("dra-l4 cannot hold it" in w and "extender" in w for w in j.warnings), j.warnings


def test_rejected_where_every_device_is_too_small_naming_the_class() -> None:
    nodes, objs = BIG_AND_SMALL
    snap = _snap([nodes[1]], [objs[0], objs[2]])
    j = judge(_pod(), snap, CFG, CATALOG)
    assert not j.allowed and j.code == str(Code.VRAM_TOO_SMALL)
    assert "the largest GPU in the cluster has 24 GiB (dra-l4, NVIDIA L4 via DRA DeviceClass gpu.nvidia.com" in (
        j.message)
    assert "nvidia.com/gpu is DeviceClass gpu.nvidia.com's (extendedResourceName)" in j.message
    assert "DRA devices: 24 GiB ×1" in j.message
    # a small model fits there
    assert judge(_pod(ann={"vramgate.io/vram": "10Gi"}), snap, CFG, CATALOG).allowed


def test_without_a_mapping_the_devices_serve_no_plain_request() -> None:
    # No DeviceClass names nvidia.com/gpu: the scheduler cannot place the pod on DRA-only nodes either.
    nodes, objs = BIG_AND_SMALL
    j = judge(_pod(), _snap(nodes, [_class(extended=None), *objs[1:]]), CFG, CATALOG)
    assert not j.allowed and j.code == str(Code.TOO_FEW_GPUS)


def test_count_is_judged_on_matching_devices() -> None:
    nodes, objs = BIG_AND_SMALL
    snap = _snap(nodes, [objs[0], _slice("dra-h100", ["80Gi", "80Gi"]), objs[2]])
    assert judge(_pod(count="2"), snap, CFG, CATALOG).allowed
    j = judge(_pod(count="3"), snap, CFG, CATALOG)
    assert not j.allowed and "needs 3 GPUs on one node" in j.message


def test_implicit_class_resource_makes_a_gpu_pod() -> None:
    nodes, objs = BIG_AND_SMALL
    implicit = IMPLICIT_PREFIX + "gpu.nvidia.com"
    ok = judge(_pod(implicit), _snap(nodes, objs), CFG, CATALOG)
    assert ok.allowed and ok.demand is not None and ok.demand.gpus == 1
    assert [r.name for r in ok.demand.extended] == [implicit]
    bad = judge(_pod(implicit), _snap([nodes[1]], [objs[0], objs[2]]), CFG, CATALOG)
    assert not bad.allowed and "24 GiB" in bad.message


def test_device_plugin_and_dra_nodes_both_count() -> None:
    # A 24 GiB device-plugin node and an 80 GiB DRA node: admitted (the DRA node holds it) ...
    snap = _snap([_plugin("dp-l4", 24), _bare("dra-h100")], [_class(), _slice("dra-h100", ["80Gi"])])
    j = judge(_pod(), snap, CFG, CATALOG)
    assert j.allowed and j.code == "fits", j.message
    need = Need.of(j.demand)  # type: ignore[arg-type]
    assert fit(need, snap.nodes["dra-h100"]).code is Code.FITS
    assert fit(need, snap.nodes["dp-l4"]).code is Code.VRAM_TOO_SMALL
    # ... and an 80 GiB device-plugin node with 24 GiB DRA nodes: admitted too.
    snap = _snap([_plugin("dp-h100", 80, "NVIDIA-H100-80GB-HBM3"), _bare("dra-l4")],
                 [_class(), _slice("dra-l4", ["24Gi"], "NVIDIA L4")])
    j = judge(_pod(), snap, CFG, CATALOG)
    assert j.allowed and not j.dra_extended_fits


def test_a_node_with_a_device_plugin_is_served_by_it() -> None:
    # allocatable nvidia.com/gpu > 0: the scheduler uses the device plugin there, not the node's devices.
    node = _plugin("both", 24)
    snap = _snap([node], [_class(), _slice("both", ["80Gi"])])
    j = judge(_pod(), snap, CFG, CATALOG)
    need = Need.of(j.demand)  # type: ignore[arg-type]
    assert not dra_served(need, snap.nodes["both"])
    assert not j.allowed and j.code == str(Code.VRAM_TOO_SMALL)


# ---- mutation -------------------------------------------------------------------------------------


def test_mutation_leaves_dra_nodes_open() -> None:
    snap = _snap(*BIG_AND_SMALL)
    pod = _pod()
    j = judge(pod, snap, CFG, CATALOG)
    assert j.dra_extended_fits
    out, _ = mutate_pod(pod, j, CFG)
    terms = required_terms(out["spec"])
    assert terms, "a VRAM affinity is still written (it judges labelled nodes)"
    assert {"key": "nvidia.com/gpu.memory", "operator": "DoesNotExist"} in terms[-1]["matchExpressions"]
    # it excludes no DRA node, and still excludes a labelled device-plugin node whose GPU is too small
    assert selects(out["spec"], snap.nodes["dra-h100"]) and selects(out["spec"], snap.nodes["dra-l4"])
    small = _snap([_plugin("dp-l4", 24)], [])
    assert not selects(out["spec"], small.nodes["dp-l4"])
    # idempotent
    again, _ = mutate_pod(out, judge(out, snap, CFG, CATALOG), CFG)
    assert required_terms(again["spec"]) == terms


def test_mutation_steers_off_dra_nodes_that_cannot_hold_it() -> None:
    # Only the labelled device-plugin node holds it: the label affinity excludes the small DRA node, as it should.
    snap = _snap([_plugin("dp-h100", 80, "NVIDIA-H100-80GB-HBM3"), _bare("dra-l4")],
                 [_class(), _slice("dra-l4", ["24Gi"], "NVIDIA L4")])
    pod = _pod()
    out, _ = mutate_pod(pod, judge(pod, snap, CFG, CATALOG), CFG)
    assert selects(out["spec"], snap.nodes["dp-h100"]) and not selects(out["spec"], snap.nodes["dra-l4"])


# ---- extender --------------------------------------------------------------------------------------


def test_extender_filters_dra_nodes_on_their_devices() -> None:
    snap = _snap(*BIG_AND_SMALL)
    ext = Extender(CFG, CATALOG, lambda: snap)
    pod = _pod()
    out = orjson.loads(ext.filter(orjson.dumps({"Pod": pod, "NodeNames": ["dra-h100", "dra-l4"]})))
    assert out["NodeNames"] == ["dra-h100"]
    failed = {**(out["FailedNodes"] or {}), **(out["FailedAndUnresolvableNodes"] or {})}
    assert set(failed) == {"dra-l4"} and "NVIDIA L4 via DRA DeviceClass gpu.nvidia.com has 24 GiB" in failed["dra-l4"]
    scores = {s["Host"]: s["Score"] for s in orjson.loads(ext.prioritize(orjson.dumps(
        {"Pod": pod, "NodeNames": ["dra-h100", "dra-l4"]})))}
    assert scores["dra-h100"] > 0
    # NodeList mode: the Node objects carry no devices; the snapshot's are used
    items = {"items": BIG_AND_SMALL[0]}
    out = orjson.loads(ext.filter(orjson.dumps({"Pod": pod, "Nodes": items})))
    assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["dra-h100"]


def test_extender_forgets_needs_when_a_device_class_comes() -> None:
    nodes, objs = BIG_AND_SMALL
    current = [_snap(nodes, objs[1:])]  # the slices, no DeviceClass yet: nvidia.com/gpu is nobody's here
    ext = Extender(CFG, CATALOG, lambda: current[0])
    pod = {**_pod(), "metadata": {**_pod()["metadata"], "uid": "u1", "resourceVersion": "1"}}
    body = orjson.dumps({"Pod": pod, "NodeNames": ["dra-h100", "dra-l4"]})
    assert orjson.loads(ext.filter(body))["NodeNames"] == []
    current[0] = _snap(nodes, objs)  # the class arrives
    assert orjson.loads(ext.filter(body))["NodeNames"] == ["dra-h100"]


# ---- the CLI, from files as kubectl writes them ---------------------------------------------------


def test_cli_check_and_nodes(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from webhook.cli.main import main

    nodes, objs = BIG_AND_SMALL
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [*nodes, *objs]}))
    small = tmp_path / "small.yaml"
    small.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [nodes[1], objs[0], objs[2]]}))
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(_pod()))
    assert main(["check", "-f", str(pod), "--nodes", str(cluster)]) == 0
    assert capsys.readouterr().out.startswith("ADMIT   pod/qwen")
    assert main(["check", "-f", str(pod), "--nodes", str(small)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("REJECT  pod/qwen") and "via DRA DeviceClass gpu.nvidia.com" in out
    assert main(["nodes", "--nodes", str(cluster)]) == 0
    table = capsys.readouterr().out
    assert "serves nvidia.com/gpu: 1 via DeviceClass gpu.nvidia.com" in table.splitlines()[1]
