"""DRA: ResourceSlice/DeviceClass/claim parsing, CEL selectors, claims in demand and placement, the CLI.

Shapes come from the sources they imitate:
- ``resource.k8s.io/v1`` types (k8s.io/api v0.37.2, resource/v1/types.go): ResourceSliceSpec ``driver``,
  ``pool{name,generation,resourceSliceCount}``, ``nodeName``, ``devices[].{attributes,capacity,
  allowMultipleAllocations,taints}``, DeviceCapacity ``{value: <quantity>}``, DeviceAttribute
  ``{string|int|bool|version}``; DeviceRequest ``exactly``/``firstAvailable`` with ``deviceClassName``,
  ``selectors[].cel.expression``, ``allocationMode``, ``count``, ``capacity.requests``.
- NVIDIA's DRA driver (github.com/NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/deviceinfo.go): device
  names ``gpu-<minor>`` and ``gpu-<minor>-mig-<profileId>-<start>-<size>``, attributes ``type`` (gpu|mig),
  ``productName``, ``driverVersion``/``cudaDriverVersion`` as versions, MIG ``profile``, capacity
  ``memory`` as a BinarySI quantity; its chart's DeviceClasses select ``device.driver == 'gpu.nvidia.com'
  && device.attributes['gpu.nvidia.com'].type == 'gpu'`` (``'mig'`` for mig.nvidia.com).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli.main import main
from webhook.cluster import dra
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.placement import Code, Need, fit
from webhook.decide.verdict import judge
from webhook.kube.manifests import load_file, load_inventory
from webhook.models.catalog import builtin_catalog

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples" / "dra"
CFG = Config()
CATALOG = builtin_catalog()


def _inventory() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return load_inventory(EX / "nodes-and-slices.yaml")


def _slice(devices: list[dict[str, Any]], node: str = "n1", generation: int = 1, driver: str = "gpu.nvidia.com",
           **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-x"},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": generation,
                                                                  "resourceSliceCount": 1},
                     "devices": devices, **spec}}


def _gpu(name: str, memory: Any, product: str = "NVIDIA H100 80GB HBM3", type_: str = "gpu",
         **extra: Any) -> dict[str, Any]:
    return {"name": name,
            "attributes": {"type": {"string": type_}, "productName": {"string": product},
                           "driverVersion": {"version": "560.35.3"}, "cudaDriverVersion": {"version": "12.6.0"}},
            "capacity": {"memory": memory}, **extra}


# ---- ResourceSlices ---------------------------------------------------------------------------


def test_example_slices_per_node() -> None:
    _, objs = _inventory()
    by_node = dra.devices_by_node([o for o in objs if o["kind"] == "ResourceSlice"], ["gpu.nvidia.com"])
    assert sorted(by_node) == ["dra-a100", "dra-l4", "dra-mig"]
    a100 = by_node["dra-a100"]
    assert [d.name for d in a100] == ["gpu-0", "gpu-1"]
    assert a100[0].memory_mib == 80 * 1024 and a100[0].product == "NVIDIA A100-SXM4-80GB" and a100[0].type == "gpu"
    assert a100[0].driver_version == "550.54.15" and a100[0].driver_major == 550
    assert a100[0].cuda_driver_version == "12.4.0"
    assert by_node["dra-l4"][0].memory_mib == 23034
    mig = by_node["dra-mig"]
    assert {(d.profile, d.memory_mib, d.type) for d in mig} == {("1g.10gb", 9728, "mig"), ("3g.40gb", 40192, "mig")}
    assert mig[0].label.endswith("MIG 1g.10gb")


def test_capacity_shapes_v1_bare_and_bytes() -> None:
    # v1 {value: …}, v1alpha3's bare quantity, and raw bytes as resource.NewQuantity(bytes, BinarySI) prints them
    # when they are not a whole number of Mi (81559 MiB H100 80GB HBM3 as bytes).
    devs = dra.devices_by_node([_slice([
        _gpu("gpu-0", {"value": "81559Mi"}), _gpu("gpu-1", "80Gi"), _gpu("gpu-2", {"value": str(81559 * 2**20)}),
        _gpu("gpu-3", {"value": "not-a-size"}),
    ])], ["gpu.nvidia.com"])["n1"]
    assert [d.memory_mib for d in devs] == [81559, 80 * 1024, 81559, 0]


def test_v1beta1_basic_wrapper() -> None:
    raw = _gpu("gpu-0", {"value": "40Gi"})
    devs = dra.devices_by_node([_slice([{"name": "gpu-0", "basic": {k: v for k, v in raw.items() if k != "name"}}])],
                               ["gpu.nvidia.com"])
    assert devs["n1"][0].memory_mib == 40 * 1024


def test_other_drivers_ignored_unless_configured() -> None:
    s = _slice([_gpu("d0", {"value": "64Gi"})], driver="gpu.example.com")
    assert dra.devices_by_node([s], ["gpu.nvidia.com"]) == {}
    assert dra.devices_by_node([s], ["gpu.nvidia.com", "gpu.example.com"])["n1"][0].memory_mib == 64 * 1024


def test_older_pool_generation_dropped() -> None:
    old = _slice([_gpu("gpu-0", {"value": "40Gi"})], generation=1)
    new = _slice([_gpu("gpu-0", {"value": "80Gi"})], generation=2)
    assert [d.memory_mib for d in dra.devices_by_node([new, old], ["gpu.nvidia.com"])["n1"]] == [80 * 1024]


def test_node_from_pool_and_device_node_name() -> None:
    s = _slice([_gpu("gpu-0", {"value": "80Gi"})], node="pool-node")
    del s["spec"]["nodeName"]
    assert list(dra.devices_by_node([s], ["gpu.nvidia.com"])) == ["pool-node"]
    s2 = _slice([{**_gpu("gpu-0", {"value": "80Gi"}), "nodeName": "n7"}], perDeviceNodeSelection=True)
    del s2["spec"]["nodeName"]
    assert list(dra.devices_by_node([s2], ["gpu.nvidia.com"])) == ["n7"]
    s3 = _slice([_gpu("gpu-0", {"value": "80Gi"})], allNodes=True)
    del s3["spec"]["nodeName"]
    assert dra.devices_by_node([s3], ["gpu.nvidia.com"]) == {}


def test_taints_and_consumable_capacity() -> None:
    devs = dra.devices_by_node([_slice([
        _gpu("gpu-0", {"value": "80Gi"}, taints=[{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"}]),
        _gpu("gpu-1", {"value": "80Gi"}, allowMultipleAllocations=True,
             taints=[{"key": "maintenance", "effect": "PreferNoSchedule"}]),
    ])], ["gpu.nvidia.com"])["n1"]
    assert devs[0].taint == "gpu.nvidia.com/xid=79:NoExecute" and not devs[0].shared
    assert devs[1].taint is None and devs[1].shared


# ---- inventory --------------------------------------------------------------------------------


def test_inventory_takes_memory_from_slices_when_no_labels() -> None:
    nodes, objs = _inventory()
    snap = snapshot_from_nodes(nodes, CFG, dra=objs)
    a100 = snap.nodes["dra-a100"]
    assert a100.vram_mib == 80 * 1024 and a100.vram_source == "dra ResourceSlice"
    assert a100.product == "NVIDIA A100-SXM4-80GB" and a100.driver_major == 550 and a100.is_gpu_node
    assert a100.labelled_count == 2 and a100.health == "healthy" and "2 DRA devices" in a100.health_reason
    assert set(snap.dra.classes) == {"gpu.nvidia.com", "mig.nvidia.com"}


def test_gfd_label_wins_over_slices() -> None:
    node = {"kind": "Node", "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.memory": "40960",
                                                                  "nvidia.com/gpu.product": "A100-40GB"}},
            "status": {"capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"}}}
    snap = snapshot_from_nodes([node], CFG, dra=[_slice([_gpu("gpu-0", {"value": "80Gi"})])])
    n = snap.nodes["n1"]
    assert n.vram_mib == 40960 and n.vram_source == "gfd" and len(n.dra) == 1


def test_all_devices_tainted_is_unhealthy() -> None:
    node = {"kind": "Node", "metadata": {"name": "n1"}, "status": {}}
    taint = [{"key": "k", "effect": "NoSchedule"}]
    snap = snapshot_from_nodes([node], CFG, dra=[_slice([_gpu("gpu-0", {"value": "80Gi"}, taints=taint)])])
    assert snap.nodes["n1"].health == "unhealthy"


# ---- selectors --------------------------------------------------------------------------------

H100 = dra.Device("gpu.nvidia.com", "n1", "gpu-0", "n1", "gpu", "NVIDIA H100 80GB HBM3", 81559,
                  attributes=(("productName", "NVIDIA H100 80GB HBM3"), ("type", "gpu")),
                  capacity=(("memory", 81559 * 2**20),))
MIG = dra.Device("gpu.nvidia.com", "n1", "gpu-0-mig-9-0-1", "n1", "mig", "NVIDIA A100-SXM4-80GB", 9728,
                 profile="1g.10gb",
                 attributes=(("productName", "NVIDIA A100-SXM4-80GB"), ("profile", "1g.10gb"), ("type", "mig")),
                 capacity=(("memory", 9728 * 2**20),))


_EITHER = "device.attributes['gpu.nvidia.com'].type == 'gpu' || device.attributes['gpu.nvidia.com'].type == 'mig'"


@pytest.mark.parametrize(("expr", "h100", "mig", "unread"), [
    ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'", True, False, None),
    ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"', True, False, None),
    ('device.attributes["gpu.nvidia.com"].type != "gpu"', False, True, None),
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0', True, False, None),
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("10Gi")) < 0', False, True, None),
    ("(device.driver == \"gpu.nvidia.com\") && device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",
     False, True, None),
    ('device.driver == "other.example.com"', False, False, None),
    # not understood: taken as "may match", the clause reported
    ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA')", True, True,
     "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA')"),
    (_EITHER, True, True, _EITHER),
])
def test_selector_shapes(expr: str, h100: bool, mig: bool, unread: str | None) -> None:
    sel = dra.Selector(expr)
    assert sel.matches(H100)[0] is h100
    assert sel.matches(MIG)[0] is mig
    assert (sel.unread() or [None])[0] == unread


def test_other_domain_attribute_does_not_match() -> None:
    assert dra.Selector('device.attributes["other.io"].type == "gpu"').matches(H100)[0] is False


# ---- claims -----------------------------------------------------------------------------------


def test_claim_requests_v1_exactly_first_available_and_v1beta1() -> None:
    spec = {"devices": {"requests": [
        {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2, "selectors": [
            {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"'}}]}},
        {"name": "any", "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu.nvidia.com"},
            {"name": "slice", "deviceClassName": "mig.nvidia.com", "count": 2}]},
        {"name": "old", "deviceClassName": "gpu.nvidia.com", "allocationMode": "All"},
        {"name": "shared", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                       "capacity": {"requests": {"memory": "20Gi"}}}},
    ]}}
    reqs = dra.claim_requests(spec, "c")
    assert [(r.name, r.class_name, r.count) for r in reqs] == [
        ("gpus", "gpu.nvidia.com", 2), ("any", "gpu.nvidia.com", 1), ("old", "gpu.nvidia.com", 1),
        ("shared", "gpu.nvidia.com", 1)]
    assert len(reqs[0].selectors) == 1 and reqs[2].all
    assert [(a.name, a.class_name, a.count) for a in reqs[1].alternatives] == [("any/slice", "mig.nvidia.com", 2)]
    assert reqs[3].capacity == (("memory", 20 * 2**30),)


def _objs() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes, inv = _inventory()
    return nodes, [*inv, *load_file(EX / "workload-with-claim.yaml")]


def _deployment(name: str) -> dict[str, Any]:
    return copy.deepcopy(next(o for o in load_file(EX / "workload-with-claim.yaml") if o["metadata"]["name"] == name))


def test_pod_claims_counts_devices_of_referenced_requests() -> None:
    nodes, objs = _objs()
    view = snapshot_from_nodes(nodes, CFG, dra=objs).dra
    spec = _deployment("llama-8b-dra")["spec"]["template"]["spec"]
    found = dra.pod_claims(spec, "", view)
    assert found is not None and found.gpus == 1 and found.requests[0].class_name == "gpu.nvidia.com"
    # class selectors folded in: the request sees type == 'gpu'
    assert any("type == 'gpu'" in s.expression for s in found.requests[0].selectors)
    # a claim no container uses asks for nothing
    spec2 = copy.deepcopy(spec)
    spec2["containers"][0]["resources"] = {}
    assert dra.pod_claims(spec2, "", view) is None


def test_pod_claim_template_not_in_view_counts_one_unknown_device() -> None:
    spec = _deployment("llama-8b-dra")["spec"]["template"]["spec"]
    found = dra.pod_claims(spec, "", dra.DraView())
    assert found is not None and found.gpus == 1 and found.requests[0].unknown
    assert "not in view" in found.warnings[0]


def test_container_request_filter_and_count() -> None:
    view = dra.dra_view([{"kind": "ResourceClaimTemplate", "metadata": {"name": "t"}, "spec": {"spec": {"devices": {
        "requests": [{"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}},
                     {"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}}]}}}}])
    spec = {"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "t"}],
            "containers": [{"name": "main", "resources": {"claims": [{"name": "c", "request": "a"}]}},
                           {"name": "side", "resources": {"claims": [{"name": "c"}]}}]}
    found = dra.pod_claims(spec, "ns", view)
    assert found is not None and found.gpus == 4  # the NIC request is not a GPU; a shared claim counts once


# ---- verdicts ---------------------------------------------------------------------------------


def _snap() -> Any:
    nodes, objs = _objs()
    return snapshot_from_nodes(nodes, CFG, dra=objs)


def test_judge_claim_admits_on_a_full_gpu_and_rejects_on_a_mig_slice() -> None:
    snap = _snap()
    ok = judge(_deployment("llama-8b-dra"), snap, CFG, CATALOG)
    assert ok.allowed and ok.demand is not None and ok.demand.claims and ok.demand.gpus == 1
    bad = judge(_deployment("llama-8b-on-a-mig-slice"), snap, CFG, CATALOG)
    assert not bad.allowed and bad.code == "VRAMTooSmall"
    assert "the largest device its claims can match has 9.5 GiB" in bad.message and "MIG 1g.10gb" in bad.message
    assert "nvidia.com/gpu:" not in bad.message


def test_judge_claim_selector_no_device_matches() -> None:
    snap = _snap()
    dep = _deployment("llama-8b-dra")
    dep["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "h200"
    tmpl = {"kind": "ResourceClaimTemplate", "metadata": {"name": "h200"}, "spec": {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [
            {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200"'}}]}}]}}}}
    snap = replace(snap, dra=dra.dra_view([tmpl], base=snap.dra))
    j = judge(dep, snap, CFG, CATALOG)
    assert not j.allowed and "no device in the cluster matches its claims" in j.message


def test_judge_claim_without_slices_is_admitted_unchecked() -> None:
    j = judge(_deployment("llama-8b-on-a-mig-slice"), snapshot_from_nodes([], CFG), CFG, CATALOG)
    assert j.allowed


def test_fit_claims_on_node_devices() -> None:
    snap = _snap()
    demand = judge(_deployment("llama-8b-dra"), snap, CFG, CATALOG).demand
    assert demand is not None
    need = Need.of(demand)
    assert fit(need, snap.nodes["dra-a100"], free=0).code is Code.FITS  # free nvidia.com/gpu is irrelevant
    assert fit(need, snap.nodes["dra-l4"]).code is Code.FITS
    assert fit(need, snap.nodes["dra-mig"]).code is Code.NO_GPUS  # MIG devices are not in gpu.nvidia.com's class
    two = Need(2, need.per_gpu_mib, need.utilization, claims=need.claims)
    assert fit(two, snap.nodes["dra-l4"]).code is Code.TOO_FEW_GPUS


# ---- CEL generation ---------------------------------------------------------------------------


def test_memory_expression() -> None:
    assert dra.memory_expression(40 * 1024) == \
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
    assert dra.memory_expression(19969) == \
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("19969Mi")) >= 0'
    # what it generates, it understands
    sel = dra.Selector(dra.memory_expression(40 * 1024))
    assert sel.matches(H100)[0] is True and sel.matches(MIG)[0] is False and sel.unread() == []


def test_with_memory_selector_idempotent_never_widens() -> None:
    body: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com"}
    assert dra.with_memory_selector(body, 20 * 1024)
    first = copy.deepcopy(body)
    assert not dra.with_memory_selector(body, 20 * 1024) and body == first
    assert not dra.with_memory_selector(body, 10 * 1024) and body == first  # a smaller need never loosens it
    assert dra.with_memory_selector(body, 30 * 1024)  # a larger one narrows further
    assert len(body["selectors"]) == 2
    user = {"selectors": [{"cel": {"expression":
                                   "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0"}}]}
    assert not dra.with_memory_selector(user, 40 * 1024)


# ---- CLI --------------------------------------------------------------------------------------


def test_cli_check_workload_with_claim(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "-f", str(EX / "workload-with-claim.yaml"), "--nodes", str(EX / "nodes-and-slices.yaml")])
    out = capsys.readouterr().out
    assert code == 1
    assert "ADMIT   deployment/llama-8b-dra:" in out
    assert "REJECT  deployment/llama-8b-on-a-mig-slice: needs " in out


def test_cli_nodes_shows_dra_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nodes", "--nodes", str(EX / "nodes-and-slices.yaml")]) == 0
    out = capsys.readouterr().out
    assert "dra ResourceSlice" in out and "MIG 1g.10gb" in out


def test_example_file_is_a_kubectl_list() -> None:
    doc = yaml.safe_load((EX / "nodes-and-slices.yaml").read_text())
    assert doc["kind"] == "List" and {i["kind"] for i in doc["items"]} == {"Node", "ResourceSlice", "DeviceClass"}


# ---- admission of claims and templates, and the selector mutation ------------------------------


def _template(ann: dict[str, str] | None = None, inner: dict[str, str] | None = None,
              selectors: list[dict[str, Any]] | None = None, cls: str = "gpu.nvidia.com") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls, "count": 1}
    if selectors is not None:
        exactly["selectors"] = selectors
    spec: dict[str, Any] = {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}
    body: dict[str, Any] = {"spec": spec}
    if inner:
        body["metadata"] = {"annotations": inner}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "llama", "namespace": "ml", "annotations": ann or {}}, "spec": body}


def test_unannotated_claim_template_is_not_judged() -> None:
    j = judge(_template(), _snap(), CFG, CATALOG)
    assert j.allowed and j.code == "not-a-workload"
    from webhook.decide.mutation import mutation
    assert mutation(_template(), j, CFG) == ([], [])


def test_annotated_template_rejected_when_no_device_holds_it() -> None:
    t = _template({"vramgate.io/model": "llama-3.1-70b-instruct", "vramgate.io/context-length": "8192"})
    j = judge(t, _snap(), CFG, CATALOG)
    assert not j.allowed and j.message.startswith("resourceclaimtemplate/llama: needs ")
    assert "the largest device its claims can match has 80 GiB" in j.message


def test_annotated_template_gets_memory_selector_idempotently() -> None:
    from webhook.decide.mutation import mutation
    t = _template(inner={"vramgate.io/model": "llama-3.1-8b-instruct", "vramgate.io/context-length": "8192"})
    snap = _snap()
    j = judge(t, snap, CFG, CATALOG)
    assert j.allowed and j.fits and j.demand is not None
    patch, _ = mutation(t, j, CFG)
    assert len(patch) == 1 and patch[0]["path"] == "/spec/spec/devices/requests/0/exactly/selectors"
    expr = patch[0]["value"][0]["cel"]["expression"]
    assert expr.startswith('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("') and expr.endswith(" >= 0")
    # the need over the engine's share of the device: 17.1 GiB low end / 0.9
    floor = dra.memory_floor_mib([dra.Selector(expr)])
    assert floor is not None and 17 * 1024 / 0.9 < floor < 20 * 1024 / 0.9
    # applied, the second pass changes nothing; and it still fits (the selector is understood)
    import jsonpatch  # type: ignore[import-untyped]
    once = jsonpatch.apply_patch(t, patch)
    j2 = judge(once, snap, CFG, CATALOG)
    assert j2.allowed and mutation(once, j2, CFG)[0] == []


def test_explicit_per_gpu_annotation_on_a_claim() -> None:
    from webhook.decide.mutation import mutation
    t = _template({"vramgate.io/vram-per-gpu-mib": "30720", "vramgate.io/gpu-memory-utilization": "1"})
    j = judge(t, _snap(), CFG, CATALOG)
    assert j.allowed and j.demand is not None and j.demand.per_gpu_mib == 30720
    patch, _ = mutation(t, j, CFG)
    assert patch[0]["value"][0]["cel"]["expression"].endswith('quantity("30Gi")) >= 0')


def test_never_widens_a_stricter_user_selector() -> None:
    from webhook.decide.mutation import mutation
    strict = [{"cel": {"expression": 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'}}]
    t = _template({"vramgate.io/vram": "30Gi"}, selectors=strict)
    j = judge(t, _snap(), CFG, CATALOG)
    assert j.allowed and mutation(t, j, CFG)[0] == []


def test_resource_claim_first_available_each_choice_narrowed() -> None:
    from webhook.decide.mutation import mutation
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "ml", "annotations": {"vramgate.io/vram": "20Gi"}},
             "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": [
                 {"name": "full", "deviceClassName": "gpu.nvidia.com"},
                 {"name": "slice", "deviceClassName": "mig.nvidia.com"}]}]}}}
    j = judge(claim, _snap(), CFG, CATALOG)
    assert j.allowed
    patch, _ = mutation(claim, j, CFG)
    assert sorted(op["path"] for op in patch) == ["/spec/devices/requests/0/firstAvailable/0/selectors",
                                                  "/spec/devices/requests/0/firstAvailable/1/selectors"]


# ---- the live inventory's state machine --------------------------------------------------------


def test_inventory_state_follows_slices_classes_and_templates() -> None:
    from webhook.kube.nodecache import DRA_KINDS, KINDS, InventoryState
    state = InventoryState(CFG, (*KINDS, *DRA_KINDS))
    node = {"metadata": {"name": "n1", "resourceVersion": "5"}, "status": {}}
    state.relist("Node", [node], "5")
    state.relist("Pod", [], "5")
    state.relist("Namespace", [], "5")
    assert not state.synced
    sl = _slice([_gpu("gpu-0", {"value": "80Gi"})])
    sl["metadata"]["resourceVersion"] = "6"
    del sl["kind"]  # list items carry no kind
    state.relist("ResourceSlice", [sl], "6")
    state.relist("DeviceClass", [], "6")
    state.relist("ResourceClaimTemplate", [], "6")
    state.relist("ResourceClaim", [], "6")
    assert state.synced
    snap = state.snapshot()
    assert snap.nodes["n1"].vram_mib == 80 * 1024 and snap.nodes["n1"].vram_source == "dra ResourceSlice"
    # a node update keeps its devices
    state.apply("Node", {"type": "MODIFIED", "object": {**node, "metadata": {"name": "n1", "resourceVersion": "7"}}})
    assert state.snapshot().nodes["n1"].dra
    # the driver republishes a bigger device in a new generation; then the slice goes away
    sl2 = _slice([_gpu("gpu-0", {"value": "141Gi"}, product="NVIDIA H200")], generation=2)
    sl2["metadata"]["resourceVersion"] = "8"
    assert state.apply("ResourceSlice", {"type": "MODIFIED", "object": sl2}) == "applied"
    assert state.snapshot().nodes["n1"].vram_mib == 141 * 1024
    sl2["metadata"]["resourceVersion"] = "9"
    assert state.apply("ResourceSlice", {"type": "DELETED", "object": sl2}) == "applied"
    gone = state.snapshot().nodes["n1"]
    assert not gone.dra and gone.vram_mib == 0 and not gone.is_gpu_node
    # classes and templates feed the claims view
    tmpl = {"metadata": {"name": "t", "namespace": "ml", "resourceVersion": "10"},
            "spec": {"spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "x"}}]}}}}
    state.apply("ResourceClaimTemplate", {"type": "ADDED", "object": {**tmpl, "kind": "ResourceClaimTemplate"}})
    dc = {"kind": "DeviceClass", "metadata": {"name": "x", "resourceVersion": "11"},
          "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}
    state.apply("DeviceClass", {"type": "ADDED", "object": dc})
    view = state.snapshot().dra
    assert view.lookup("ResourceClaimTemplate", "ml", "t") is not None and "x" in view.classes


def test_kube_inventory_counts_an_unserved_dra_kind_as_listed() -> None:
    import asyncio

    from tests.extender.cluster import FakeApi
    from webhook.kube.nodecache import KubeInventory, Unavailable

    api = FakeApi()
    for kind in ("Node", "Pod", "Namespace"):
        api.lists[kind] = [{"items": [], "metadata": {"resourceVersion": "1"}}]
    for kind in ("ResourceSlice", "DeviceClass", "ResourceClaimTemplate", "ResourceClaim"):
        api.lists[kind] = [Unavailable(f"{kind}: Not Found")]  # type: ignore[index]
        api.watches[kind] = []  # type: ignore[index]
    inv = KubeInventory(CFG, api=api, dra=True)
    assert "ResourceSlice" in inv.kinds and "ResourceSlice" not in KubeInventory(CFG, api=api).kinds

    async def go() -> bool:
        await inv.start()
        try:
            return await asyncio.to_thread(inv.wait_synced, 5)
        finally:
            await inv.stop()

    assert asyncio.run(go())


# ---- the extender -----------------------------------------------------------------------------


def test_extender_filters_claim_pods_on_node_devices() -> None:
    import orjson

    from webhook.serve.extender import Extender

    snap = _snap()
    dep = _deployment("llama-8b-on-a-mig-slice")
    tmpl = dep["spec"]["template"]
    # a 3g.40gb slice holds the 8B model; a 1g.10gb does not; the full-GPU nodes have no MIG devices
    tmpl["metadata"]["annotations"] = {"vramgate.io/gpu-memory-utilization": "0.9"}
    pod = {"kind": "Pod", "metadata": {"name": "p", "namespace": "default", **tmpl["metadata"]},
           "spec": {**tmpl["spec"], "resourceClaims": [{"name": "slice", "resourceClaimTemplateName": "any-mig"}]}}
    any_mig = {"kind": "ResourceClaimTemplate", "metadata": {"name": "any-mig"}, "spec": {"spec": {"devices": {
        "requests": [{"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}}}}
    snap = replace(snap, dra=dra.dra_view([any_mig], base=snap.dra))
    ext = Extender(CFG, CATALOG, lambda: snap)
    out = orjson.loads(ext.filter(orjson.dumps({"Pod": pod, "NodeNames": ["dra-a100", "dra-l4", "dra-mig"]})))
    assert out["NodeNames"] == ["dra-mig"]
    assert set(out["FailedAndUnresolvableNodes"] or {}) | set(out["FailedNodes"] or {}) == {"dra-a100", "dra-l4"}
    # NodeList mode: the Node objects carry no devices; the snapshot's are used
    nodes = {"items": [n for n in _inventory()[0]]}
    out = orjson.loads(ext.filter(orjson.dumps({"Pod": pod, "Nodes": nodes})))
    assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["dra-mig"]
    scores = {s["Host"]: s["Score"] for s in orjson.loads(ext.prioritize(orjson.dumps(
        {"Pod": pod, "NodeNames": ["dra-mig"]})))}
    assert scores["dra-mig"] > 0


def test_shared_devices_get_a_memory_request() -> None:
    from webhook.decide.mutation import mutation
    node = {"kind": "Node", "metadata": {"name": "n1"}, "status": {}}
    shared = _slice([_gpu("gpu-0", {"value": "80Gi"}, allowMultipleAllocations=True)])
    snap = snapshot_from_nodes([node], CFG, dra=[shared])
    t = _template({"vramgate.io/vram": "30Gi", "vramgate.io/gpu-memory-utilization": "1"})
    j = judge(t, snap, CFG, CATALOG)
    assert j.allowed and j.shared_requests == ("gpu",)
    patch, _ = mutation(t, j, CFG)
    assert {op["path"] for op in patch} == {"/spec/spec/devices/requests/0/exactly/selectors",
                                            "/spec/spec/devices/requests/0/exactly/capacity"}
    cap = next(op["value"] for op in patch if op["path"].endswith("/capacity"))
    assert cap == {"requests": {"memory": "30Gi"}}
    # a request that names its own amount keeps it
    body: dict[str, Any] = {"capacity": {"requests": {"memory": "10Gi"}}}
    assert not dra.with_memory_request(body, 30 * 1024) and body["capacity"]["requests"]["memory"] == "10Gi"
    # full (exclusive) devices: no request added
    snap2 = _snap()
    j2 = judge(t, snap2, CFG, CATALOG)
    assert j2.shared_requests == () and all("capacity" not in op["path"] for op in mutation(t, j2, CFG)[0])


def test_claim_pods_get_no_vram_node_affinity() -> None:
    from webhook.decide.mutation import mutation
    snap = _snap()
    tmpl = _deployment("llama-8b-dra")["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **tmpl["metadata"]}, "spec": tmpl["spec"]}
    j = judge(pod, snap, CFG, CATALOG)
    assert j.allowed and j.fits
    patch, _ = mutation(pod, j, CFG)
    assert patch and not any("affinity" in op["path"] for op in patch)
    assert any(op["path"].endswith("vram-per-gpu-mib") or "annotations" in op["path"] for op in patch)


def test_identical_dra_nodes_share_a_capability_class() -> None:
    nodes = [{"kind": "Node", "metadata": {"name": n}, "status": {}} for n in ("n1", "n2", "n3")]
    slices = [_slice([_gpu("gpu-0", {"value": "80Gi"})], node=n) for n in ("n1", "n2")]
    slices.append(_slice([_gpu("gpu-0", {"value": "40Gi"})], node="n3"))
    snap = snapshot_from_nodes(nodes, CFG, dra=slices)
    assert snap.classes["n1"] == snap.classes["n2"] != snap.classes["n3"]
