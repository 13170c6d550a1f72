"""The kinds LLMs ship in, end to end (issue #11): upstream CRDs in a real kube-apiserver, and
``kubectl apply`` of a LeaderWorkerSet, an InferenceService and a RayService judged per role by
validate-kinds.vramgate.io as the chart registers it.

Nodes: L4 only (22.5 GiB usable per GPU). llama-3-70b-instruct (bf16, ~137 GiB) cannot fit on them
even split over a group of two pods; llama-3-8b-instruct on one GPU (17.7 GiB at context 8192) can.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import crds
from tests.e2e.harness import GPU_RESOURCE, ControlPlane
from tests.e2e.vramgate_fixture import Vramgate

pytestmark = pytest.mark.e2e

L4 = {"gpus": 4, "mem_mib": 23034, "product": "NVIDIA-L4"}
HUGE_ID, SMALL_ID = "meta-llama/Meta-Llama-3-70B-Instruct", "meta-llama/Meta-Llama-3-8B-Instruct"
DENIED = 'admission webhook "validate-kinds.vramgate.io" denied the request: '
NEEDS = r"needs [\d.]+ GiB VRAM per GPU \(weights .+\); the largest GPU in the cluster has 22\.5 GiB \(k-l4-0"


@pytest.fixture(scope="module")
def installed(cluster: ControlPlane) -> Iterator[list[str]]:
    """The upstream CRDs of LWS, KubeRay and KServe, from their Go modules."""
    paths: list[Path] = []
    try:
        for source in crds.SOURCES:
            paths.extend(crds.fetch(source))
        names = crds.install(cluster, paths)
    except crds.CrdFetchError as exc:
        pytest.fail(f"upstream CRDs unavailable: {exc}", pytrace=False)
    yield names


@pytest.fixture
def l4_cluster(vramgate: Vramgate, installed: list[str], gpu_nodes: Callable[..., Any]) -> Vramgate:
    if not vramgate.alive():
        vramgate.start()
    vramgate.wait_ready()
    gpu_nodes("k-l4-0", **L4)
    vramgate.wait_inventory({"k-l4-0"})
    return vramgate


def apply(
    cluster: ControlPlane, tmp_path: Path, obj: dict[str, Any], namespace: str
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return cluster.kubectl("apply", "-n", namespace, "-f", str(path), check=False)


def gpu_container(name: str, command: list[str], gpus: int = 1) -> dict[str, Any]:
    return {"name": name, "image": "vllm/vllm-openai:v0.8.5", "command": command,
            "resources": {"requests": {"cpu": "1", "memory": "8Gi"}, "limits": {GPU_RESOURCE: str(gpus)}}}


def lws(name: str, model: str) -> dict[str, Any]:
    # Shape of https://github.com/kubernetes-sigs/lws/blob/main/docs/examples/vllm/GPU/lws.yaml
    leader = ["sh", "-c", f"ray start --head; vllm serve {model} --max-model-len 8192 --tensor-parallel-size 1 "
              "--pipeline-parallel-size 2"]
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": name},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": {"spec": {"containers": [gpu_container("leader", leader)]}},
                "workerTemplate": {"spec": {"containers": [gpu_container(
                    "worker", ["sh", "-c", "ray start --address=$(LWS_LEADER_ADDRESS) --block"])]}}}}}


def isvc(name: str, model: str) -> dict[str, Any]:
    # https://kserve.github.io/website/latest/modelserving/v1beta1/llm/huggingface/text_generation/
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": name},
            "spec": {"predictor": {"model": {
                "modelFormat": {"name": "huggingface"},
                "args": ["--model_name=llm", f"--model_id={model}", "--max-model-len=8192"],
                "resources": {"limits": {"cpu": "6", "memory": "24Gi", GPU_RESOURCE: "1"},
                              "requests": {"cpu": "6", "memory": "24Gi", GPU_RESOURCE: "1"}}}}}}


def rayservice(name: str, model: str) -> dict[str, Any]:
    # https://docs.ray.io/en/latest/cluster/kubernetes/examples/rayserve-llm-example.html
    serve = {"applications": [{"name": "llms", "import_path": "ray.serve.llm:build_openai_app", "route_prefix": "/",
                               "args": {"llm_configs": [{
                                   "model_loading_config": {"model_id": "llm", "model_source": model},
                                   "engine_kwargs": {"max_model_len": 8192, "dtype": "bfloat16"}}]}}]}
    image = "rayproject/ray-llm:2.46.0-py311-cu124"
    return {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": name},
            "spec": {"serveConfigV2": yaml.safe_dump(serve),
                     "rayClusterConfig": {
                         "rayVersion": "2.46.0",
                         "headGroupSpec": {"rayStartParams": {"num-gpus": "0"}, "template": {"spec": {"containers": [
                             {"name": "ray-head", "image": image,
                              "resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}]}}},
                         "workerGroupSpecs": [{
                             "groupName": "gpu-group", "replicas": 1, "minReplicas": 1, "maxReplicas": 1,
                             "rayStartParams": {"num-gpus": "1"},
                             "template": {"spec": {"containers": [
                                 {"name": "ray-worker", "image": image,
                                  "resources": {"limits": {"cpu": "8", "memory": "32Gi", GPU_RESOURCE: "1"}}}]}}}]}}}


def test_lws_that_no_gpu_holds_is_denied_per_role(
    cluster: ControlPlane, l4_cluster: Vramgate, namespace: str, tmp_path: Path
) -> None:
    r = apply(cluster, tmp_path, lws("big", HUGE_ID), namespace)
    assert r.returncode != 0 and "Error from server" in r.stderr, r.stdout + r.stderr
    assert DENIED + "leaderworkerset/big (leader): " in r.stderr, r.stderr
    assert re.search(r"leaderworkerset/big \(leader\): " + NEEDS, r.stderr), r.stderr
    assert "leaderworkerset/big (worker): needs " in r.stderr, r.stderr
    assert cluster.kubectl("get", "leaderworkerset", "big", "-n", namespace, check=False).returncode != 0
    ok = apply(cluster, tmp_path, lws("small", SMALL_ID), namespace)
    assert ok.returncode == 0 and "leaderworkerset.leaderworkerset.x-k8s.io/small created" in ok.stdout, ok.stderr


def test_isvc_that_no_gpu_holds_is_denied_as_predictor(
    cluster: ControlPlane, l4_cluster: Vramgate, namespace: str, tmp_path: Path
) -> None:
    r = apply(cluster, tmp_path, isvc("big", HUGE_ID), namespace)
    assert r.returncode != 0, r.stdout
    assert re.search(re.escape(DENIED) + r"inferenceservice/big \(predictor\): " + NEEDS, r.stderr), r.stderr
    ok = apply(cluster, tmp_path, isvc("small", SMALL_ID), namespace)
    assert ok.returncode == 0 and "inferenceservice.serving.kserve.io/small created" in ok.stdout, ok.stderr


def test_rayservice_that_no_gpu_holds_is_denied_naming_the_gpu_group(
    cluster: ControlPlane, l4_cluster: Vramgate, namespace: str, tmp_path: Path
) -> None:
    r = apply(cluster, tmp_path, rayservice("big", HUGE_ID), namespace)
    assert r.returncode != 0, r.stdout
    assert re.search(re.escape(DENIED) + r"rayservice/big \(gpu-group\): " + NEEDS, r.stderr), r.stderr
    assert "(head)" not in r.stderr
    ok = apply(cluster, tmp_path, rayservice("small", SMALL_ID), namespace)
    assert ok.returncode == 0 and "rayservice.ray.io/small created" in ok.stdout, ok.stderr
    # An UPDATE that swaps in the big model is judged again.
    bigger = rayservice("small", HUGE_ID)
    r = apply(cluster, tmp_path, bigger, namespace)
    assert r.returncode != 0 and "rayservice/small (gpu-group): needs " in r.stderr, r.stdout + r.stderr


H200 = {"gpus": 8, "mem_mib": 143771, "product": "NVIDIA-H200"}


def wide_ep_lws(name: str) -> dict[str, Any]:
    # The shape of the llm-d / vLLM wide-EP guides: DP 16 over an LWS group of 2 pods, TP 1, experts over all 16.
    script = ("START_RANK=$(( ${LWS_WORKER_INDEX:-0} * DP_SIZE_LOCAL ))\n"
              "exec vllm serve deepseek-ai/DeepSeek-R1-0528 --port 8000 --tensor-parallel-size 1 "
              "--data-parallel-size $(( LWS_GROUP_SIZE * DP_SIZE_LOCAL )) --data-parallel-size-local $DP_SIZE_LOCAL "
              "--data-parallel-start-rank $START_RANK --data-parallel-address $LWS_LEADER_ADDRESS "
              "--enable-expert-parallel --max-model-len 32768")
    c = {"name": "vllm", "image": "vllm/vllm-openai:v0.11.0", "command": ["/bin/sh", "-c"], "args": [script],
         "env": [{"name": "DP_SIZE_LOCAL", "value": "8"}],
         "resources": {"requests": {"cpu": "1", "memory": "8Gi"}, "limits": {GPU_RESOURCE: "8"}}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": name},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {
                "containers": [c]}}}}}


def test_wide_ep_lws_and_the_pods_it_makes_are_admitted_and_bound(
    cluster: ControlPlane, vramgate: Vramgate, installed: list[str], gpu_nodes: Callable[..., Any],
    namespace: str, tmp_path: Path,
) -> None:
    """DeepSeek-R1 over 16 H200s (DP 16 × EP): ~63 GiB per GPU, not the whole 671B on one."""
    if not vramgate.alive():
        vramgate.start()
    vramgate.wait_ready()
    gpu_nodes("k-h200-0", **H200)
    gpu_nodes("k-h200-1", **H200)
    vramgate.wait_inventory({"k-h200-0", "k-h200-1"})
    obj = wide_ep_lws("r1-decode")
    ok = apply(cluster, tmp_path, obj, namespace)
    assert ok.returncode == 0 and "leaderworkerset.leaderworkerset.x-k8s.io/r1-decode created" in ok.stdout, ok.stderr
    # The pods the LWS controller makes from the template: the group size in an annotation, the index in a label
    # (the LWS pod webhook turns them into LWS_GROUP_SIZE / LWS_WORKER_INDEX); no LWS controller runs here.
    template = obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    for index, pod_name in enumerate(("r1-decode-0", "r1-decode-0-1")):
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": pod_name, "annotations": {"leaderworkerset.sigs.k8s.io/size": "2"},
            "labels": {"leaderworkerset.sigs.k8s.io/name": "r1-decode",
                       "leaderworkerset.sigs.k8s.io/worker-index": str(index)}}, "spec": template}
        made = apply(cluster, tmp_path, body, namespace)
        assert made.returncode == 0, made.stderr
        assert made.stderr == "" or "may not fit" not in made.stderr, made.stderr
    bound = {cluster.wait_pod_bound(n, namespace) for n in ("r1-decode-0", "r1-decode-0-1")}
    assert bound == {"k-h200-0", "k-h200-1"}


def argo_workflow(name: str, model: str) -> dict[str, Any]:
    # The shape of argo-workflows examples: a steps template calling a container template with a GPU limit.
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": name},
            "spec": {"entrypoint": "main", "arguments": {"parameters": [{"name": "model", "value": model}]},
                     "templates": [
                         {"name": "main", "steps": [[{"name": "s", "template": "serve"}]]},
                         {"name": "serve", "container": {
                             "image": "vllm/vllm-openai:v0.8.5",
                             "command": ["vllm", "serve", "{{workflow.parameters.model}}", "--max-model-len", "8192"],
                             "resources": {"limits": {GPU_RESOURCE: "1"}}}}]}}


def knative_service(name: str, model: str) -> dict[str, Any]:
    # knative/serving docs' GPU sample shape: one container, GPU limit, min-scale on the revision template.
    return {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"template": {
                "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
                "spec": {"containers": [{
                    "image": "vllm/vllm-openai:v0.8.5",
                    "args": ["--model", model, "--max-model-len", "8192"],
                    "resources": {"limits": {GPU_RESOURCE: "1"}}}]}}}}


@pytest.mark.parametrize(("make", "denied", "created"), [
    (argo_workflow, r"workflow/big \(serve\): ", "workflow.argoproj.io/small created"),
    (knative_service, r"service/big: ", "service.serving.knative.dev/small created"),
], ids=["argo-workflow", "knative-service"])
def test_an_upstream_kind_that_no_gpu_holds_is_denied_naming_its_role(
    cluster: ControlPlane, l4_cluster: Vramgate, namespace: str, tmp_path: Path,
    make: Callable[[str, str], dict[str, Any]], denied: str, created: str,
) -> None:
    r = apply(cluster, tmp_path, make("big", HUGE_ID), namespace)
    assert r.returncode != 0, r.stdout
    assert re.search(re.escape(DENIED) + denied + NEEDS, r.stderr), r.stderr
    ok = apply(cluster, tmp_path, make("small", SMALL_ID), namespace)
    assert ok.returncode == 0 and created in ok.stdout, ok.stderr


def configmap_deployment(name: str, configmap: str) -> dict[str, Any]:
    c = gpu_container("vllm", ["vllm", "serve", "$(MODEL_ID)", "--max-model-len", "8192"])
    c["env"] = [{"name": "MODEL_ID", "valueFrom": {"configMapKeyRef": {"name": configmap, "key": "model"}}}]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [c]}}}}


def test_env_from_a_configmap_is_read_at_admission(
    cluster: ControlPlane, l4_cluster: Vramgate, namespace: str, tmp_path: Path
) -> None:
    """The model named in a ConfigMap the Deployment's env refers to is the model judged (as `check -f` does)."""
    for cm, model in (("big-model", HUGE_ID), ("small-model", SMALL_ID)):
        made = apply(cluster, tmp_path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm},
                                         "data": {"model": model}}, namespace)
        assert made.returncode == 0, made.stderr
    r = apply(cluster, tmp_path, configmap_deployment("from-cm", "big-model"), namespace)
    assert r.returncode != 0, r.stdout
    denied = 'admission webhook "validate.vramgate.io" denied the request: deployment/from-cm: needs '
    assert denied in r.stderr, r.stderr
    ok = apply(cluster, tmp_path, configmap_deployment("from-cm-small", "small-model"), namespace)
    assert ok.returncode == 0 and "deployment.apps/from-cm-small created" in ok.stdout, ok.stderr
    assert "ConfigMap or Secret vramgate cannot read" not in ok.stderr
