"""DRA asked through operator fields, and AMD's DRA driver: read as the operators and the driver do, judged on slices.

Sources (cited in the modules too): kserve/kserve aaac4e2 pkg/controller/v1alpha2/llmisvc/managed_dra.go and
pkg/validation/managed_dra.go (the ``serving.kserve.io/exp-dra-*`` annotations); NVIDIA/k8s-nim-operator f63f74d
api/apps/v1alpha1/dra_types.go, internal/shared/resourceclaims.go, manifests/resourceclaimtemplate.yaml,
internal/k8sutil/cel/cel.go (``spec.draResources``); kaito-project/kaito 056b828 api/v1beta1/workspace_types.go,
pkg/workspace/inference/preset_inferences.go (``resource.partition``); ROCm/k8s-gpu-dra-driver 2622427
cmd/gpu-kubeletplugin/deviceinfo.go, types.go (``gpu.amd.com`` devices). The sample manifests under
tests/fixtures/dra/operators/ are the operators' own, unchanged, each with its source header.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from webhook.cli.main import main
from webhook.cluster import dra
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.demand import read_demand
from webhook.decide.verdict import judge
from webhook.kinds import Context, DeclaredValueError, WorkloadError, roles
from webhook.kube.manifests import load_file, load_inventory
from webhook.models.catalog import builtin_catalog

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "tests" / "fixtures" / "dra" / "operators"
LARGE, SMALL = OPS / "nodes-large.yaml", OPS / "nodes-small.yaml"
CFG = Config()
CATALOG = builtin_catalog()
_LINE = re.compile(r"^(ADMIT|REJECT|SKIP)\s+(\S+)(?: \(([^)]*)\))?: (.*)$")


def _check(files: list[Path], cluster: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, tuple[str, str]]:
    """``vramgate check -f … --nodes cluster``: verdict and message per workload (SKIP lines left out)."""
    args = ["check"]
    for f in files:
        args += ["-f", str(f)]
    main([*args, "--nodes", str(cluster)])
    out: dict[str, tuple[str, str]] = {}
    for line in capsys.readouterr().out.splitlines():
        m = _LINE.match(line)
        if m and m.group(1) != "SKIP":
            out[m.group(2)] = (m.group(1), m.group(4))
    return out


# file → (workload, verdict on the large cluster, a phrase of the small cluster's rejection)
SAMPLES = [
    ("kserve-llmisvc-managed-dra-minimal.yaml", "llminferenceservice/qwen2-7b-instruct-dra-minimal", "ADMIT",
     "the largest device its claims can match has 4 GiB"),
    ("nim-dra-auto-creation-example0.yaml", "nimservice/meta-llama3-2-1b-instruct", "ADMIT",
     "the largest device its claims can match has 4 GiB"),
    # memory >= 40Gi (capacitySelectors / the CEL clause) rules the 4 GiB devices out
    ("nim-dra-auto-creation-example1.yaml", "nimservice/meta-llama3-2-1b-instruct", "ADMIT",
     "no device in the cluster matches its claims"),
    ("nim-dra-auto-creation-example2.yaml", "nimservice/meta-llama3-2-1b-instruct", "ADMIT",
     "no device in the cluster matches its claims"),
    ("nim-dra-manual.yaml", "nimservice/meta-llama3-2-1b-instruct", "ADMIT",
     "the largest device its claims can match has 4 GiB"),
    ("kaito_workspace_accelerator.yaml", "workspace/workspace-accelerator-llama-3-1-8b-instruct", "ADMIT",
     "needs 2 GPUs on one node with"),
    ("kaito_inferenceset_mig_mixed_strategy.yaml", "inferenceset/phi-4-mini", "ADMIT",
     "asks nvidia.com/mig-2g.24gb; no node offers that MIG profile"),
    # type == 'A100' is no type NVIDIA's driver publishes (gpu, mig): no device anywhere can take it
    ("kserve-llmisvc-managed-dra-multi-device.yaml", "llminferenceservice/qwen2-7b-instruct-dra-multi", "REJECT",
     "no device in the cluster matches its claims"),
]


@pytest.mark.parametrize(("name", "workload", "large", "small"), SAMPLES, ids=[s[0] for s in SAMPLES])
def test_published_sample_judged_on_slices(name: str, workload: str, large: str, small: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    on_large = _check([OPS / name], LARGE, capsys)
    verdict, message = on_large[workload]
    assert "no GPU requested" not in message
    assert verdict == large, message
    if large == "REJECT":
        assert "managed-device/device (gpu.nvidia.com)" in message
    on_small = _check([OPS / name], SMALL, capsys)
    verdict, message = on_small[workload]
    assert verdict == "REJECT" and small in message, message


def test_samples_have_source_headers() -> None:
    for f in OPS.glob("*.yaml"):
        head = f.read_text(encoding="utf-8").splitlines()[:2]
        assert head[0].startswith("#") and ("Source:" in head[0] or "kubectl" in head[0] or "cluster" in head[0]), f


# ---- KServe LLMInferenceService: Managed DRA -------------------------------------------------------------


def _obj(name: str, kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(o for o in load_file(OPS / name) if o.get("kind") == kind))


def test_kserve_managed_dra_claim_as_the_controller_injects_it() -> None:
    obj = _obj("kserve-llmisvc-managed-dra-multi-device.yaml", "LLMInferenceService")
    rs = roles(obj, Context())
    assert rs is not None and len(rs.roles) == 1
    view = rs.roles[0].view
    assert view.spec["resourceClaims"] == [{"name": "managed-device",
                                            "resourceClaimTemplateName": "qwen2-7b-instruct-dra-multi-managed-dra"}]
    by_name = {c["name"]: c for c in view.spec["containers"]}
    assert by_name["main"]["resources"]["claims"] == [{"name": "managed-device"}]
    assert "claims" not in by_name["sidecar"].get("resources", {})  # exp-dra-container-name: main
    (template, spec), = view.claim_templates
    assert template == "qwen2-7b-instruct-dra-multi-managed-dra"
    exactly = spec["devices"]["requests"][0]["exactly"]
    assert spec["devices"]["requests"][0]["name"] == "device"
    assert exactly["deviceClassName"] == "gpu.nvidia.com" and exactly["count"] == 2
    assert [s["cel"]["expression"] for s in exactly["selectors"]] == [
        "device.attributes['gpu.nvidia.com']['type'] == 'A100'",
        "device.capacity['gpu.nvidia.com']['memory'].compareTo(quantity('40Gi')) >= 0"]
    demand = read_demand(view, CFG, CATALOG)
    assert demand is not None and demand.gpus == 2 and demand.claims[0].class_name == "gpu.nvidia.com"


def test_kserve_minimal_targets_the_first_container_and_counts_one() -> None:
    obj = _obj("kserve-llmisvc-managed-dra-minimal.yaml", "LLMInferenceService")
    rs = roles(obj, Context())
    assert rs is not None
    view = rs.roles[0].view
    assert view.spec["containers"][0]["resources"]["claims"] == [{"name": "managed-device"}]
    assert "count" not in view.claim_templates[0][1]["devices"]["requests"][0]["exactly"]  # only set when > 1
    demand = read_demand(view, CFG, CATALOG)
    assert demand is not None and demand.gpus == 1 and not demand.claims[0].unknown
    assert demand.vendor == "nvidia"


def test_kserve_managed_dra_on_every_pod_template() -> None:
    obj = _obj("kserve-llmisvc-managed-dra-minimal.yaml", "LLMInferenceService")
    obj["spec"]["parallelism"] = {"pipeline": 2, "tensor": 1}
    obj["spec"]["worker"] = {"containers": [{"name": "main"}]}
    obj["spec"]["prefill"] = {"template": {"containers": [{"name": "main"}]}}
    rs = roles(obj, Context())
    assert rs is not None and len(rs.roles) == 3
    for role in rs.roles:
        assert role.view.spec["resourceClaims"][0]["name"] == "managed-device", role.name
        assert role.view.claim_templates, role.name


def test_kserve_managed_dra_malformed_count_and_missing_container() -> None:
    obj = _obj("kserve-llmisvc-managed-dra-minimal.yaml", "LLMInferenceService")
    obj["metadata"]["annotations"]["serving.kserve.io/exp-dra-device-count"] = "two"
    with pytest.raises(DeclaredValueError, match=r"exp-dra-device-count='two'"):
        roles(obj, Context())
    obj = _obj("kserve-llmisvc-managed-dra-minimal.yaml", "LLMInferenceService")
    obj["metadata"]["annotations"]["serving.kserve.io/exp-dra-container-name"] = "nope"
    rs = roles(obj, Context())
    assert rs is not None and any("names no container" in w for w in rs.warnings)
    assert read_demand(rs.roles[0].view, CFG, CATALOG) is None  # KServe gives no container the devices


def test_kserve_without_the_annotation_is_unchanged() -> None:
    obj = _obj("kserve-llmisvc-managed-dra-minimal.yaml", "LLMInferenceService")
    del obj["metadata"]["annotations"]
    rs = roles(obj, Context())
    assert rs is not None and "resourceClaims" not in rs.roles[0].view.spec and not rs.roles[0].view.claim_templates


# ---- NIMService spec.draResources ---------------------------------------------------------------


def test_nim_claim_creation_spec_rendered_as_the_operator_does() -> None:
    obj = _obj("nim-dra-auto-creation-example1.yaml", "NIMService")
    rs = roles(obj, Context())
    assert rs is not None
    view = rs.roles[0].view
    (claim,) = view.spec["resourceClaims"]
    (template, spec), = view.claim_templates
    assert claim["resourceClaimTemplateName"] == template
    assert view.spec["containers"][0]["resources"]["claims"] == [{"name": claim["name"]}]
    exactly = spec["devices"]["requests"][0]["exactly"]
    assert exactly["allocationMode"] == "ExactCount" and exactly["count"] == 1
    assert [s["cel"]["expression"] for s in exactly["selectors"]] == [
        'device.driver == "gpu.nvidia.com"',
        'device.attributes["gpu.nvidia.com"].architecture == "Ampere"',
        '(device.capacity["gpu.nvidia.com"].memory).compareTo(quantity("40Gi")) >= 0']
    # every clause understood: no "may match" warning
    found = dra.pod_claims(view.spec, "", dra.with_templates(dra.DraView(), "", view.claim_templates))
    assert found is not None and found.gpus == 1 and not found.warnings


def test_nim_defaults_requests_and_multinode() -> None:
    obj = _obj("nim-dra-auto-creation-example0.yaml", "NIMService")
    obj["spec"]["draResources"][0]["claimCreationSpec"]["devices"][0]["count"] = 2
    obj["spec"]["draResources"].append({"resourceClaimName": "shared-gpus", "requests": ["a", "b"]})
    obj["spec"]["multiNode"] = {"parallelism": {"pipeline": 2, "tensor": 2}}
    obj["spec"]["resources"] = {"limits": {"cpu": "8"}, "claims": [{"name": "ignored"}]}
    rs = roles(obj, Context())
    assert rs is not None
    view = rs.roles[0].view
    c = view.spec["containers"][0]
    assert "nvidia.com/gpu" not in c["resources"].get("limits", {})  # the operator assigns none with DRA
    assert c["resources"]["claims"] == [{"name": "claim-0"}, {"name": "claim-1", "request": "a"},
                                        {"name": "claim-1", "request": "b"}]
    assert view.spec["resourceClaims"][1] == {"name": "claim-1", "resourceClaimName": "shared-gpus"}
    exactly = view.claim_templates[0][1]["devices"]["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == "gpu.nvidia.com" and exactly["count"] == 2
    assert exactly["selectors"] == [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]
    assert view.group_size == 2


def test_nim_dra_resource_without_a_source_is_an_error() -> None:
    obj = _obj("nim-dra-auto-creation-example0.yaml", "NIMService")
    obj["spec"]["draResources"] = [{"requests": ["gpu"]}]
    with pytest.raises(WorkloadError, match=r"spec.draResources\[0\]: exactly one of"):
        roles(obj, Context())


def test_nim_unreadable_selector_is_a_warning_not_a_rejection() -> None:
    obj = _obj("nim-dra-auto-creation-example1.yaml", "NIMService")
    dev = obj["spec"]["draResources"][0]["claimCreationSpec"]["devices"][0]
    dev["attributeSelectors"] = [{"key": "architecture", "op": "GreaterThan", "value": {"stringValue": "Ampere"}}]
    del dev["capacitySelectors"]
    rs = roles(obj, Context())
    assert rs is not None and any("attributeSelectors[0]: not read" in w for w in rs.warnings)


# ---- KAITO resource.partition ---------------------------------------------------------------------


def test_kaito_mig_partition_asks_the_profile_on_the_selected_nodes() -> None:
    obj = _obj("kaito_inferenceset_mig_mixed_strategy.yaml", "InferenceSet")
    rs = roles(obj, Context())
    assert rs is not None and len(rs.roles) == 1 and rs.roles[0].replicas == 2
    view = rs.roles[0].view
    c = view.spec["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/mig-2g.24gb": "1"}
    assert c["command"][:3] == ["vllm", "serve", "microsoft/phi-4-mini-instruct"]  # the hub id KAITO maps it to
    assert "--max-model-len" in c["command"] and "0.84" in c["command"]
    assert view.spec["nodeSelector"] == {"kaito-inferenceset": "phi-4-mini"} and not view.provisioned


def test_kaito_accelerator_partition_is_count_gpus_in_tensor_parallel() -> None:
    obj = _obj("kaito_workspace_accelerator.yaml", "Workspace")
    rs = roles(obj, Context())
    assert rs is not None
    c = rs.roles[0].view.spec["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert c["command"][c["command"].index("--tensor-parallel-size") + 1] == "2"
    obj["resource"]["partition"] = {"mode": "tpu"}
    with pytest.raises(WorkloadError, match=r"partition\.mode='tpu'"):
        roles(obj, Context())


def test_kaito_partition_not_on_the_labelled_nodes_is_not_placed(capsys: pytest.CaptureFixture[str]) -> None:
    nodes, inv = load_inventory(LARGE)
    moved = copy.deepcopy(nodes)
    for n in moved:
        n["metadata"]["labels"].pop("apps", None)
    snap = snapshot_from_nodes(moved, CFG, dra=inv)
    j = judge(_obj("kaito_workspace_accelerator.yaml", "Workspace"), snap, CFG, CATALOG)
    # a labelSelector no node matches is KAITO's and the scheduler's to report, never a VRAM rejection
    assert j.allowed, j.message


# ---- AMD's DRA driver ------------------------------------------------------------------------------


def _amd_devices(cluster: Path) -> tuple[dra.Device, ...]:
    _, inv = load_inventory(cluster)
    by_node = dra.devices_by_node([o for o in inv if o.get("kind") == "ResourceSlice"], CFG.labels.dra_drivers)
    return next(ds for ds in by_node.values() if ds[0].driver == "gpu.amd.com")


def test_amd_driver_known_by_default_and_read_as_it_publishes() -> None:
    assert "gpu.amd.com" in Config().labels.dra_drivers
    full = _amd_devices(LARGE)
    assert [d.memory_mib for d in full] == [192 * 1024] * 2
    assert all(d.full and d.profile == "" and d.label == "AMD_Instinct_MI300X_OAM" for d in full)
    # driverVersion is the amdgpu kernel module's: never a CUDA driver
    assert full[0].driver_version == "6.10.5" and full[0].driver_major is None
    parts = _amd_devices(SMALL)
    assert all(not d.full and d.profile == "cpx_nps4" for d in parts)
    assert parts[0].label == "AMD_Instinct_MI300X_OAM partition cpx_nps4"
    summary = dra.summarize(parts)
    assert summary is not None and summary.vram_mib == 24 * 1024 and summary.driver_major is None


def _amd_pod(model: str, count: int = 1) -> list[dict[str, Any]]:
    tmpl = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "amd"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.amd.com", "count": count}}]}}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vllm-rocm"},
           "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "amd"}],
                    "containers": [{"name": "vllm", "image": "rocm/vllm:latest",
                                    "command": ["vllm", "serve", model, "--max-model-len", "8192",
                                                "--tensor-parallel-size", str(count)],
                                    "resources": {"claims": [{"name": "gpu"}]}}]}}
    return [tmpl, pod]


@pytest.mark.parametrize(("cluster", "allowed"), [(LARGE, True), (SMALL, False)])
def test_amd_claim_judged_on_amd_devices(cluster: Path, allowed: bool) -> None:
    nodes, inv = load_inventory(cluster)
    tmpl, pod = _amd_pod("meta-llama/Llama-3.1-70B-Instruct")
    snap = snapshot_from_nodes(nodes, CFG, dra=[*inv, tmpl])
    j = judge(pod, snap, CFG, CATALOG)
    assert j.allowed is allowed, j.message
    assert j.demand is not None and j.demand.claims[0].class_name == "gpu.amd.com"
    assert j.demand.vendor == "amd"  # as an amd.com/gpu pod is
    if not allowed:
        assert "AMD_Instinct_MI300X_OAM partition cpx_nps4" in j.message and "24 GiB" in j.message


def test_amd_claim_template_gets_an_amd_memory_selector() -> None:
    from webhook.decide.mutation import mutation
    nodes, inv = load_inventory(LARGE)
    tmpl, _ = _amd_pod("x")
    tmpl["metadata"]["annotations"] = {"vramgate.io/model": "llama-3.1-8b-instruct",
                                       "vramgate.io/context-length": "8192"}
    for with_class in (True, False):  # the class from the cluster, or only its name (the class is not in view)
        objs = inv if with_class else [o for o in inv if o.get("kind") != "DeviceClass"]
        j = judge(tmpl, snapshot_from_nodes(nodes, CFG, dra=objs), CFG, CATALOG)
        assert j.allowed and j.fits
        patch, _ = mutation(tmpl, j, CFG)
        assert patch[0]["value"][0]["cel"]["expression"].startswith('device.capacity["gpu.amd.com"].memory')


# ---- CEL spellings ----------------------------------------------------------------------------


@pytest.mark.parametrize(("expr", "holds"), [
    ("device.attributes['gpu.nvidia.com']['type'] == 'gpu'", True),
    ("device.attributes['gpu.nvidia.com']['type'] == 'A100'", False),
    ('device.attributes["gpu.nvidia.com"]["productName"] != "NVIDIA H100 80GB HBM3"', False),
    ("device.capacity['gpu.nvidia.com']['memory'].compareTo(quantity('40Gi')) >= 0", True),
    ('(device.capacity["gpu.nvidia.com"].memory).compareTo(quantity("100Gi")) >= 0', False),
    ('(device.capacity["gpu.nvidia.com"].memory).compareTo(quantity("80Gi")) == 0', True),
])
def test_cel_index_and_parenthesised_spellings(expr: str, holds: bool) -> None:
    _, (h100,) = dra.slice_devices({"spec": {"driver": "gpu.nvidia.com", "nodeName": "n", "pool": {"name": "n"},
                                             "devices": [{"name": "gpu-0", "attributes": {
                                                 "type": {"string": "gpu"},
                                                 "productName": {"string": "NVIDIA H100 80GB HBM3"}},
                                                 "capacity": {"memory": {"value": "80Gi"}}}]}},
                                   ["gpu.nvidia.com"])
    sel = dra.Selector(expr)
    assert sel.unread() == []
    assert sel.matches(h100) == (holds, None)


def test_memory_floor_reads_the_parenthesised_spelling() -> None:
    sel = dra.Selector('(device.capacity["gpu.nvidia.com"].memory).compareTo(quantity("40Gi")) >= 0')
    assert dra.memory_floor_mib([sel]) == 40 * 1024


# ---- a Pod's status.resourceClaimStatuses -------------------------------------------------------------


def _running_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llama-abc12", "namespace": "ml"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                     "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.8.5",
                                     "args": ["--model", "meta-llama/Llama-3.1-70B-Instruct",
                                              "--max-model-len", "8192", "--tensor-parallel-size", "2"],
                                     "resources": {"claims": [{"name": "gpu"}]}}]},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "llama-abc12-gpu-x9f2k"}]}}


def _claim_objects(claim_class: str | None) -> list[dict[str, Any]]:
    """The pod's template (two full GPUs) and, where ``claim_class`` is given, the claim made from it."""
    def spec(cls: str) -> dict[str, Any]:
        return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls, "count": 2}}]}}
    out = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": "ml"}, "spec": {"spec": spec("gpu.nvidia.com")}}]
    if claim_class is not None:
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": "llama-abc12-gpu-x9f2k", "namespace": "ml"}, "spec": spec(claim_class)})
    return out


def test_generated_claim_read_where_in_view() -> None:
    nodes, inv = load_inventory(LARGE)
    # the template alone: two 80 GiB A100s hold 70B bf16 at 8192 tokens in TP 2
    j = judge(_running_pod(), snapshot_from_nodes(nodes, CFG, dra=[*inv, *_claim_objects(None)]), CFG, CATALOG)
    assert j.allowed and j.demand is not None and j.demand.claims[0].class_name == "gpu.nvidia.com"
    # the claim made for the pod (here: MIG slices) is what it really got: judged on that
    j = judge(_running_pod(), snapshot_from_nodes(nodes, CFG, dra=[*inv, *_claim_objects("mig.nvidia.com")]), CFG,
              CATALOG)
    assert j.demand is not None and j.demand.claims[0].class_name == "mig.nvidia.com"
    assert not j.allowed and "MIG 2g.20gb" in j.message, j.message


def test_status_ignored_on_templates() -> None:
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
           "spec": {"template": {"spec": _running_pod()["spec"]}},
           "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "x"}]}}
    rs = roles(dep, Context())
    assert rs is not None and rs.roles[0].view.generated_claims == ()
    pod_rs = roles(_running_pod(), Context())
    assert pod_rs is not None and pod_rs.roles[0].view.generated_claims == (("gpu", "llama-abc12-gpu-x9f2k"),)


# ---- the service's inventory follows ResourceClaims ---------------------------------------------------


def test_inventory_state_follows_resource_claims_and_ignores_status_writes() -> None:
    from webhook.kube.nodecache import DRA_KINDS, KINDS, InventoryState
    state = InventoryState(CFG, (*KINDS, *DRA_KINDS))
    nodes, inv = load_inventory(LARGE)
    for kind in (*KINDS, *DRA_KINDS):
        items = {"Node": nodes, "ResourceSlice": [o for o in inv if o["kind"] == "ResourceSlice"],
                 "DeviceClass": [o for o in inv if o["kind"] == "DeviceClass"]}.get(kind, [])
        state.relist(kind, [{**o, "metadata": {**o["metadata"], "resourceVersion": "5"}} for o in items], "5")
    assert state.synced
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "uses-a-claim", "namespace": "ml"},
           "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "mig-slice"}],
                    "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.8.5",
                                    "args": ["--model", "meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192"],
                                    "resources": {"claims": [{"name": "gpu"}]}}]}}
    unseen = judge(pod, state.snapshot(), CFG, CATALOG)
    assert unseen.allowed and any("not in view" in w for w in unseen.warnings)  # one device of unknown kind
    meta = {"name": "mig-slice", "namespace": "ml", "resourceVersion": "6", "managedFields": [{"manager": "kubectl"}]}
    claim: dict[str, Any] = {"kind": "ResourceClaim", "metadata": meta, "spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}}}
    assert state.apply("ResourceClaim", {"type": "ADDED", "object": claim}) == "applied"
    snap = state.snapshot()
    assert snap.dra.lookup("ResourceClaim", "ml", "mig-slice") is not None
    seen = judge(pod, snap, CFG, CATALOG)
    assert not seen.allowed and "MIG 2g.20gb" in seen.message, seen.message  # 70B on the 20 GiB slice
    # the scheduler writes the allocation: same spec, the view is not rebuilt
    result = {"pool": "dra-a100", "device": "gpu-2-mig-9-0-1"}
    allocated = {**claim, "metadata": {**claim["metadata"], "resourceVersion": "7"},
                 "status": {"allocation": {"devices": {"results": [result]}}}}
    view = snap.dra
    assert state.apply("ResourceClaim", {"type": "MODIFIED", "object": allocated}) == "applied"
    assert state.snapshot().dra is view
    gone = {**allocated, "metadata": {**allocated["metadata"], "resourceVersion": "8"}}
    assert state.apply("ResourceClaim", {"type": "DELETED", "object": gone}) == "applied"
    assert state.snapshot().dra.lookup("ResourceClaim", "ml", "mig-slice") is None
