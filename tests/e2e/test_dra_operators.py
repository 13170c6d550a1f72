"""DRA asked through an operator's fields, end to end: KServe's own LLMInferenceService CRD (v0.20.0, the release
that added Managed DRA) in a real kube-apiserver, and ``kubectl apply`` of KServe's published Managed DRA sample
(tests/fixtures/dra/operators/kserve-llmisvc-managed-dra-minimal.yaml) judged by vramgate against ResourceSlices.

No KServe controller runs: what is judged is the pod it would create, with the claim template
``<name>-managed-dra`` and the pod claim ``managed-device`` (webhook/kinds/kserve.py). The devices are NVIDIA
DRA devices shaped as in tests/e2e/test_dra.py: first only 4 GiB ones (the sample's Qwen2.5-7B cannot fit: denied),
then two 80 GiB A100s as well (created). A Pod that names a pre-created ResourceClaim is judged on that claim once
the service's watch has it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import crds
from tests.e2e.harness import ControlPlane
from tests.e2e.vramgate_fixture import Vramgate

pytestmark = pytest.mark.e2e

RES = "/apis/resource.k8s.io/v1"
SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "dra" / "operators" / \
    "kserve-llmisvc-managed-dra-minimal.yaml"
LLMISVC = crds.CrdSource("github.com/kserve/kserve", "v0.20.0",
                         ("config/crd/minimal/llmisvc/serving.kserve.io_llminferenceservices.yaml",))
SMALL, LARGE = "ops-t400", "ops-a100"


def _device(name: str, memory: str, product: str) -> dict[str, Any]:
    return {"name": name, "attributes": {"type": {"string": "gpu"}, "productName": {"string": product},
                                         "driverVersion": {"version": "550.54.15"},
                                         "cudaDriverVersion": {"version": "12.4.0"}},
            "capacity": {"memory": {"value": memory}}}


def _slice(node: str, memory: str, product: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpu"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [_device(f"gpu-{i}", memory, product) for i in range(2)]}}


@pytest.fixture(scope="module")
def llmisvc_crd(cluster: ControlPlane) -> list[str]:
    try:
        return crds.install(cluster, crds.fetch(LLMISVC))
    except crds.CrdFetchError as exc:
        pytest.fail(f"KServe's LLMInferenceService CRD unavailable: {exc}", pytrace=False)


@pytest.fixture
def dra_node(cluster: ControlPlane) -> Iterator[Any]:
    made: list[str] = []
    cluster.request("POST", f"{RES}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": (
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'")}}]}},
        ok=(201, 409))

    def add(node: str, memory: str, product: str) -> None:
        cluster.create_gpu_node(node, gpus=0)
        cluster.request("POST", f"{RES}/resourceslices", _slice(node, memory, product))
        made.append(node)

    try:
        yield add
    finally:
        for node in made:
            cluster.request("DELETE", f"{RES}/resourceslices/{node}-gpu", ok=(200, 202, 404))
            cluster.delete_node(node)


def test_managed_dra_sample_judged_on_the_slices(
    cluster: ControlPlane, vramgate: Vramgate, llmisvc_crd: list[str], dra_node: Any, namespace: str, tmp_path: Path
) -> None:
    vramgate.wait_ready()
    dra_node(SMALL, "4Gi", "NVIDIA T400 4GB")
    vramgate.wait_inventory({SMALL})
    r = cluster.kubectl("apply", "-n", namespace, "-f", str(SAMPLE), check=False)
    assert r.returncode != 0, r.stdout
    assert re.search(r'admission webhook "[^"]+" denied the request: llminferenceservice/'
                     r"qwen2-7b-instruct-dra-minimal: needs [\d.]+ GiB VRAM per GPU \(.+\); the largest device its "
                     rf"claims can match has 4 GiB \({SMALL}, NVIDIA T400 4GB", r.stderr), r.stderr
    assert "no GPU requested" not in r.stderr

    # A pod that names a pre-created ResourceClaim: judged on it once the service's watch has it.
    cluster.request("POST", f"{RES}/namespaces/{namespace}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "pre-made"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}})
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "qwen-on-a-claim"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "pre-made"}],
                 "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.8.5",
                                 "args": ["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"],
                                 "resources": {"claims": [{"name": "gpu"}]}}]}}))

    def denied() -> str | None:
        r = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(pod), check=False)
        return r.stderr if r.returncode != 0 and "the largest device its claims can match has 4 GiB" in r.stderr \
            else None
    assert "pod/qwen-on-a-claim: needs" in cluster.wait_for("the pod judged on its ResourceClaim", denied, 20)

    dra_node(LARGE, "80Gi", "NVIDIA A100-SXM4-80GB")
    vramgate.wait_inventory({SMALL, LARGE})
    ok = cluster.kubectl("apply", "-n", namespace, "-f", str(SAMPLE), check=False)
    assert ok.returncode == 0, ok.stderr
    assert "llminferenceservice.serving.kserve.io/qwen2-7b-instruct-dra-minimal created" in ok.stdout, ok.stdout
