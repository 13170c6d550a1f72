"""Models found where they are stored: hostPath and PVC volumes, HF cache folders, object-store URIs, OCI modelcars,
KServe's storageUri behind /mnt/models — and a path that names nothing is never guessed."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.config import Config
from webhook.decide.demand import Demand, read_demand
from webhook.decide.storage import is_location, oci_names
from webhook.kinds import pod_view, roles
from webhook.models.catalog import builtin_catalog

CFG = Config()
CAT = builtin_catalog()


def pod(model_arg: str, volumes: list[dict[str, Any]], mounts: list[dict[str, Any]],
        init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    c = {"name": "engine", "image": "vllm/vllm-openai:v0.11.0", "command": ["vllm", "serve", model_arg],
         "volumeMounts": mounts, "resources": {"limits": {"nvidia.com/gpu": 1}}}
    spec: dict[str, Any] = {"containers": [c], "volumes": volumes}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": spec}


def demand(obj: dict[str, Any]) -> Demand:
    view = pod_view(obj)
    assert view is not None
    d = read_demand(view, CFG, CAT)
    assert d is not None
    return d


@pytest.mark.parametrize("volume, mount_path, model_arg, want, where", [
    ({"name": "m", "hostPath": {"path": "/data1/models/DeepSeek-R1-0528/deepseek_r1_0528"}}, "/work/models",
     "/work/models", "deepseek-r1", "hostPath /data1/models/DeepSeek-R1-0528/deepseek_r1_0528"),
    ({"name": "m", "persistentVolumeClaim": {"claimName": "llama-3.1-8b-instruct"}}, "/models", "/models",
     "llama-3.1-8b-instruct", "PersistentVolumeClaim llama-3.1-8b-instruct"),
    ({"name": "m", "hostPath": {"path": "/data/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/a09a3545"}},
     "/models", "/models", "qwen2.5-7b-instruct", "hostPath /data/hub/models--Qwen--Qwen2.5-7B-Instruct"),
    ({"name": "m", "image": {"reference": "quay.io/redhat-ai-services/modelcar-catalog:granite-3.1-8b-instruct"}},
     "/mnt/models", "/mnt/models", "granite-3.1-8b-instruct", "image volume"),
])
def test_the_volume_behind_a_path_names_the_model(volume: dict[str, Any], mount_path: str, model_arg: str,
                                                  want: str, where: str) -> None:
    d = demand(pod(model_arg, [volume], [{"name": "m", "mountPath": mount_path}]))
    assert d.spec is not None and d.spec.name == want, d.warnings
    assert any(w.startswith(f"model read from where {model_arg} is stored: {where}") for w in d.warnings), d.warnings
    assert any(k == "model" and where in v for k, v in d.sources)


def test_an_init_container_that_downloads_into_the_path_names_the_model() -> None:
    init = [{"name": "fetch", "image": "amazon/aws-cli",
             "args": ["s3://acme-models/prod/deepseek-r1-distill-llama-8b", "/mnt/models"]}]
    d = demand(pod("/mnt/models", [{"name": "m", "emptyDir": {}}], [{"name": "m", "mountPath": "/mnt/models"}], init))
    assert d.spec is not None and d.spec.name.startswith("deepseek-r1-distill-llama-8b"), d.warnings


def test_a_kserve_storage_uri_reaches_the_runtime_that_reads_mnt_models() -> None:
    runtime = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime", "metadata": {"name": "vllm-rt"},
               "spec": {"supportedModelFormats": [{"name": "vllm"}], "containers": [{
                   "name": "kserve-container", "image": "vllm/vllm-openai:v0.11.0",
                   "args": ["--model=/mnt/models", "--max-model-len=8192"]}]}}
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "q", "namespace": "ml"},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "vllm"}, "runtime": "vllm-rt",
                                             "storageUri": "s3://models/Qwen/Qwen2.5-7B-Instruct",
                                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}}}}
    from webhook.kinds import Context, Runtimes

    found = roles(isvc, Context("ml", Runtimes.of([runtime])))
    assert found is not None
    view = found.roles[0].view
    assert view.spec["initContainers"][-1]["args"] == ["s3://models/Qwen/Qwen2.5-7B-Instruct", "/mnt/models"]
    d = read_demand(view, CFG, CAT)
    assert d is not None and d.spec is not None and d.spec.name == "qwen2.5-7b-instruct"


def test_a_hugging_face_cache_path_names_its_model_itself() -> None:
    path = "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/a09a3545"
    d = demand(pod(path, [], []))
    assert d.spec is not None and d.spec.name == "qwen2.5-7b-instruct"


def test_a_path_that_names_no_model_is_never_guessed() -> None:
    d = demand(pod("/llm-folder", [{"name": "m", "hostPath": {"path": "/llm-folder"}}],
                   [{"name": "m", "mountPath": "/llm-folder"}]))
    assert d.spec is None and d.estimate is None
    assert not any("model read from" in w for w in d.warnings)


def test_oci_modelcar_names() -> None:
    assert "granite-3.1-8b-instruct" in oci_names("oci://registry.io/org/modelcar-granite-3-1-8b-instruct:1.5")
    assert oci_names("oci://quay.io/x/modelcar-catalog:granite-3.1-8b-instruct")[0] == "granite-3.1-8b-instruct"
    assert is_location("/mnt/models") and is_location("s3://b/m") and not is_location("Qwen/Qwen2.5-7B-Instruct")
