"""Operators' kinds: Volcano Jobs by API group, NVIDIA Dynamo services, any other kind read generically, and
`check` that says something about every document, broken ones included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli.inputs import read_documents
from webhook.cli.main import main
from webhook.kinds import is_builtin, pod_view, roles

from .helpers import gpu_node

LLAMA8 = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"]
LLAMA70 = ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192"]


def gpu_container(command: list[str], gpus: int = 1, image: str = "vllm/vllm-openai:v0.11.0") -> dict[str, Any]:
    return {"name": "engine", "image": image, "command": command, "resources": {"limits": {"nvidia.com/gpu": gpus}}}


def volcano_job(command: list[str]) -> dict[str, Any]:
    # volcano-sh/apis pkg/apis/batch/v1alpha1/job.go: spec.tasks[].{name, replicas, template}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "vc", "namespace": "ml"},
            "spec": {"minAvailable": 3, "schedulerName": "volcano", "tasks": [
                {"name": "server", "replicas": 1, "template": {"spec": {"containers": [gpu_container(command)]}}},
                {"name": "client", "replicas": 2, "template": {"spec": {"containers": [
                    {"name": "c", "image": "busybox"}]}}}]}}


def run(capsys: pytest.CaptureFixture[str], tmp_path: Path, docs: list[Any] | str,
        nodes: list[dict[str, Any]] | None = None) -> tuple[int, str, str]:
    path = tmp_path / "manifests.yaml"
    path.write_text(docs if isinstance(docs, str) else yaml.safe_dump_all(docs, sort_keys=False))
    inventory = tmp_path / "nodes.yaml"
    inventory.write_text(yaml.safe_dump_all(nodes or [gpu_node("l4-0", gpus=4, mem=23034, product="NVIDIA-L4")]))
    code = main(["check", "-f", str(path), "--nodes", str(inventory)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_volcano_job_is_not_a_batch_job() -> None:
    obj = volcano_job(LLAMA8)
    assert not is_builtin(obj) and pod_view(obj) is None
    found = roles(obj)
    assert found is not None and [(r.name, r.replicas) for r in found.roles] == [("server", 1), ("client", 2)]


def test_a_volcano_job_is_judged_per_task_not_rejected_as_malformed(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path) -> None:
    # Before: "Job has no spec.template" — a working Volcano Job rejected as a malformed batch/v1 Job.
    code, out, _ = run(capsys, tmp_path, [volcano_job(LLAMA8)])
    assert code == 0, out
    assert out.startswith("ADMIT   job/vc (server): ") and "ADMIT   job/vc (client): no GPU requested" in out
    code, out, _ = run(capsys, tmp_path, [volcano_job(LLAMA70)])
    assert code == 1 and out.startswith("REJECT  job/vc (server): needs "), out


def test_a_batch_job_is_still_a_batch_job() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": {"spec": {"containers": [gpu_container(LLAMA8)]}}}}
    assert is_builtin(job) and pod_view(job) is not None
    assert is_builtin({"kind": "Pod"})  # no apiVersion: as kubectl's own examples are read
    # Garbage a client may send (found by tests/admission/test_robustness.py): never a TypeError.
    assert not is_builtin({"kind": [], "apiVersion": "v1"})


def test_dynamo_services_are_roles_with_the_operators_gpu_field(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    # ai-dynamo/dynamo deploy/cloud/operator/api/v1alpha1: services.<name>.{replicas, resources.limits.gpu,
    # extraPodSpec.mainContainer, multinode.nodeCount}
    dgd = {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
           "metadata": {"name": "agg", "namespace": "ml"},
           "spec": {"services": {
               "Frontend": {"componentType": "frontend", "replicas": 1, "extraPodSpec": {"mainContainer": {
                   "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.4.0", "command": ["python3", "-m",
                                                                                   "dynamo.frontend"]}}},
               "VllmDecodeWorker": {"replicas": 2, "resources": {"limits": {"gpu": "4"}},
                                    "multinode": {"nodeCount": 2},
                                    "extraPodSpec": {"mainContainer": {
                                        "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.4.0",
                                        "command": ["python3", "-m", "dynamo.vllm", "--model",
                                                    "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size",
                                                    "8", "--max-model-len", "8192"]}}}}}}
    found = roles(dgd)
    assert found is not None
    worker = next(r for r in found.roles if r.name == "VllmDecodeWorker")
    assert worker.group_size == 2 and worker.replicas == 4
    assert worker.view.spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    code, out, _ = run(capsys, tmp_path, [dgd], [gpu_node(f"l4-{i}", gpus=4, mem=23034, product="NVIDIA-L4")
                                                 for i in range(2)])
    # TP 8 over the two pods of four L4s (multinode.nodeCount 2): 70B bf16 is ~16.4 GiB of weights a GPU.
    assert code == 0, out
    assert out.startswith("ADMIT   dynamographdeployment/agg (Frontend): no GPU requested")
    assert "ADMIT   dynamographdeployment/agg (VllmDecodeWorker): " in out and "on each of 8 GPUs on vllm newest" in out
    assert "vllm 0.4.0" not in out  # the runtime image's tag is Dynamo's version, not vLLM's


def test_an_unknown_kind_with_pod_templates_is_read_generically_and_says_so(capsys: pytest.CaptureFixture[str],
                                                                              tmp_path: Path) -> None:
    rbg = {"apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup",
           "metadata": {"name": "rbg", "namespace": "ml"},
           "spec": {"roles": [
               {"name": "prefill", "replicas": 2, "template": {"spec": {"containers": [gpu_container(LLAMA70)]}}},
               {"name": "router", "replicas": 1, "template": {"spec": {"containers": [
                   {"name": "r", "image": "router"}]}}}]}}
    code, out, _ = run(capsys, tmp_path, [rbg])
    assert code == 1
    assert out.startswith("REJECT  rolebasedgroup/rbg (prefill): needs ")
    assert ("rolebasedgroup/rbg (prefill): RoleBasedGroup (workloads.x-k8s.io/v1alpha1) is read generically: "
            "the pod spec at spec.roles[prefill].template.spec") in out
    assert "ADMIT   rolebasedgroup/rbg (router): no GPU requested" in out


def test_runtime_and_template_kinds_are_not_read_generically() -> None:
    config = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "LLMInferenceServiceConfig",
              "metadata": {"name": "defaults"}, "spec": {"template": {"containers": [gpu_container(LLAMA70)]}}}
    assert roles(config) is None


def test_every_document_gets_a_line_and_a_broken_one_costs_only_itself(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path) -> None:
    pod = {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [gpu_container(LLAMA8)]}}
    deployment = yaml.safe_dump({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ok"},
                                 "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": pod}})
    service = "apiVersion: v1\nkind: Service\nmetadata: {name: svc}\nspec: {ports: [{port: 80}]}\n"
    secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: hf}\nstringData:\n  token: {{HF_TOKEN}}\n"
    text = f"{deployment}---\n{service}---\n{secret}"
    code, out, err = run(capsys, tmp_path, text)
    assert code == 2  # bad input, after the verdicts of every readable document
    assert out.splitlines()[0].startswith("ADMIT   deployment/ok: ")
    assert "SKIP    service/svc: kind Service: nothing to judge (no pod template found)" in out
    broken_line = text.splitlines().index("  token: {{HF_TOKEN}}") + 1
    assert f"manifests.yaml:{broken_line}:" in err and "document 2 is not valid YAML" in err


def test_read_documents_keeps_document_indexes_and_lines(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("# header\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
                    "a: {{broken}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n")
    found, problems = read_documents(path)
    assert [(loc.document, loc.line, loc.obj["metadata"]["name"]) for loc in found] == [(0, 3, "a"), (2, 9, "b")]
    assert len(problems) == 1 and problems[0].startswith(f"{path}:7:")


@pytest.mark.parametrize("resource", ["nvidia.com/gpu.shared", "nvidia.com/gpualloc"])
def test_renamed_and_hami_gpu_resources_count(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               resource: str) -> None:
    c = {"name": "engine", "image": "vllm/vllm-openai:v0.11.0", "command": LLAMA70,
         "resources": {"limits": {resource: 1}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [c]}}
    code, out, _ = run(capsys, tmp_path, [pod])
    # Before: "no GPU requested" — a 70B model on a time-sliced L4 admitted without a word.
    assert code == 1 and out.startswith("REJECT  pod/p: needs "), out


def test_hami_gpumem_is_the_declared_vram(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    c = {"name": "engine", "image": "vllm/vllm-openai:v0.11.0", "command": LLAMA8,
         "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [c]}}
    code, out, _ = run(capsys, tmp_path, [pod])  # 30000 MiB on a 23034 MiB L4: cannot be granted
    assert code == 1 and "needs 29.3 GiB VRAM per GPU" in out, out
    # 12000 MiB for an 8B model in bf16 (15 GiB of weights): HAMi-core caps the device there, so vLLM cannot load
    # it. Before issue 41 the share was taken as the need and this was admitted.
    c["resources"]["limits"]["nvidia.com/gpumem"] = 12000
    code, out, _ = run(capsys, tmp_path, [pod])
    assert code == 1 and out.startswith("REJECT  pod/p asks HAMi for nvidia.com/gpumem 12000 MiB of each GPU, but "
                                        "llama-3.1-8b-instruct on vllm needs 16.4 GiB"), out
    assert "Try: nvidia.com/gpumem: " in out
    c["resources"]["limits"]["nvidia.com/gpumem"] = 20000  # 0.9 of it holds the band's low end, on an L4
    code, out, _ = run(capsys, tmp_path, [pod])
    assert code == 0 and out.startswith("ADMIT   pod/p: 19.5 GiB per GPU (declared nvidia.com/gpumem 20000 MiB)"), out


def test_a_knative_service_is_read_as_its_revision() -> None:
    # knative/serving pkg/apis/serving/v1: spec.template (RevisionTemplateSpec); autoscaling annotations on it.
    ksvc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": "llm", "namespace": "ml"},
            "spec": {"template": {"metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "2",
                                                               "autoscaling.knative.dev/max-scale": "5"}},
                                  "spec": {"containerConcurrency": 4, "containers": [gpu_container(LLAMA8)]}}}}
    found = roles(ksvc)
    assert found is not None and [(r.name, r.replicas) for r in found.roles] == [("", 2)]
    assert found.warnings == ()  # no longer "read generically"
    config = {**ksvc, "kind": "Configuration"}
    assert [r.replicas for r in roles(config).roles] == [2]  # type: ignore[union-attr]
    assert roles({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": []}}) is None


PATCH = '{"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}'


def test_an_argo_workflow_template_is_judged_with_its_parameters(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    wf = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"generateName": "serve-"},
          "spec": {"entrypoint": "main", "arguments": {"parameters": [
              {"name": "model", "value": "meta-llama/Llama-3.1-70B-Instruct"}]},
              "templates": [
                  {"name": "main", "steps": [[{"name": "s", "template": "serve"}]]},
                  {"name": "serve", "container": {
                      "image": "vllm/vllm-openai:v0.11.0",
                      "command": ["vllm", "serve", "{{workflow.parameters.model}}", "--max-model-len", "8192"]},
                   "podSpecPatch": PATCH},
              ]}}
    found = roles(wf)
    assert found is not None and [r.name for r in found.roles] == ["serve"]
    code, out, _ = run(capsys, tmp_path, [wf])
    assert code == 1 and out.startswith("REJECT  workflow/serve- (serve): needs "), out
    assert "llama-3.1-70b" in out or "70.5B" in out


def test_kaito_presets_are_judged_on_their_instance_type_and_templates_as_written(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # kaito-project/kaito api/v1beta1: top-level resource and inference.{preset, template}.
    def preset(name: str, model: str, instance: str, nodes: int = 1) -> dict[str, Any]:
        return {"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace", "metadata": {"name": name},
                "resource": {"instanceType": instance, "count": nodes, "labelSelector": {"matchLabels": {"a": "b"}}},
                "inference": {"preset": {"name": model}}}

    template = {"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace", "metadata": {"name": "custom"},
                "resource": {"labelSelector": {"matchLabels": {"a": "b"}}},
                "inference": {"template": {"spec": {"containers": [gpu_container(LLAMA70)]}}}}
    docs = [preset("phi", "phi-4-mini-instruct", "Standard_NC24ads_A100_v4"),
            preset("big", "llama-3.3-70b-instruct", "Standard_NC12s_v3"),
            preset("two", "llama-3.3-70b-instruct", "Standard_NC96ads_A100_v4", nodes=2),
            preset("odd", "phi-4-mini-instruct", "Standard_Unknown_v9"), template]
    code, out, _ = run(capsys, tmp_path, docs)  # only the template is rejected: today's nodes are 4 × L4
    assert code == 1 and out.count("REJECT") == 1 and "REJECT  workspace/custom (inference): needs " in out, out
    # On the instance type KAITO provisions (1 × A100 80GB), not on today's L4s:
    assert "ADMIT   workspace/phi (inference): " in out
    assert "workspace/phi (inference): judged on 1 × Standard_NC24ads_A100_v4 (1 × NVIDIA-A100-SXM4-80GB" in out
    # 70B on 2 × V100 16GB cannot start: said, never rejected (KAITO's own estimator may raise count).
    assert "ADMIT   workspace/big (inference): " in out
    assert "warning: workspace/big (inference): needs " in out
    # Two nodes of 4 × A100 80GB: TP 4 within a node, PP 2 across: weights of 70B spread over 8 GPUs.
    two = out[out.index("ADMIT   workspace/two"):].splitlines()[0]
    assert "on each of 8 GPUs" in two, two
    assert "ADMIT   workspace/odd (inference): not judged here" in out
    assert "instance type Standard_Unknown_v9 is not in vramgate's instance tables" in out
    inference_set = {"apiVersion": "kaito.sh/v1beta1", "kind": "InferenceSet", "metadata": {"name": "is"},
                     "spec": {"replicas": 3, "template": {"inference": {"template": {"spec": {"containers": [
                         gpu_container(LLAMA8)]}}}}}}
    found = roles(inference_set)
    assert found is not None and [(r.name, r.replicas) for r in found.roles] == [("inference", 3)]
    no_instance = {"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace", "metadata": {"name": "byo"},
                   "resource": {"labelSelector": {"matchLabels": {"a": "b"}}},
                   "inference": {"preset": {"name": "phi-4-mini-instruct"}}}
    code, out, _ = run(capsys, tmp_path, [no_instance])
    assert "SKIP    workspace/byo" in out and "KAITO sizes the nodes and the engine flags itself" in out


def test_production_stack_vllmruntime_is_the_deployment_its_operator_builds() -> None:
    rt = {"apiVersion": "production-stack.vllm.ai/v1alpha1", "kind": "VLLMRuntime", "metadata": {"name": "r"},
          "spec": {"model": {"modelURL": "meta-llama/Llama-3.1-8B-Instruct", "maxModelLen": 4096},
                   "vllmConfig": {"tensorParallelSize": 1, "gpuMemoryUtilization": "0.8"},
                   "deploymentConfig": {"replicas": 2, "resources": {"gpu": "1"}}}}
    found = roles(rt)
    assert found is not None
    [role] = found.roles
    c = role.view.spec["containers"][0]
    assert role.replicas == 2 and c["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert c["command"][:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert "--max-model-len" in c["command"] and "--gpu-memory-utilization" in c["command"]


def test_an_lws_shaped_subtree_gives_its_size_to_a_generic_reading() -> None:
    # llm-d's DisaggregatedSet: roles with leaderWorkerTemplate.size, DP over LWS_GROUP_SIZE × 8.
    script = ("exec vllm serve deepseek-ai/DeepSeek-R1-0528 --data-parallel-size $((LWS_GROUP_SIZE * DP_SIZE_LOCAL)) "
              "--data-parallel-size-local 8 --enable-expert-parallel --max-model-len 8192")
    c = {"name": "vllm", "image": "vllm/vllm-openai:v0.11.0", "command": ["/bin/sh", "-c", script],
         "env": [{"name": "DP_SIZE_LOCAL", "value": "8"}], "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    ds = {"apiVersion": "disaggregatedset.x-k8s.io/v1alpha1", "kind": "DisaggregatedSet", "metadata": {"name": "d"},
          "spec": {"roles": [{"name": "decode", "replicas": 1, "leaderWorkerTemplate": {
              "size": 2, "workerTemplate": {"spec": {"containers": [c]}}}}]}}
    found = roles(ds)
    assert found is not None and [(r.name, r.view.group_size) for r in found.roles] == [("decode", 2)]
    from webhook.config import Config
    from webhook.decide.demand import read_demand
    from webhook.models.catalog import builtin_catalog

    d = read_demand(found.roles[0].view, Config(), builtin_catalog())
    assert d is not None and d.estimate is not None and d.estimate.request.expert_split == 16


def test_a_dash_dash_after_bash_c_does_not_hide_the_script() -> None:
    from webhook.engines.cmdline import commands_of

    [ray, vllm] = commands_of({"command": ["/bin/bash", "-lc", "--"], "args": [
        "ray start --head; vllm serve Qwen/Qwen2.5-Coder-7B-Instruct --tensor-parallel-size 2"]}, {})
    assert ray.words[:2] == ("ray", "start") and vllm.words[-2:] == ("--tensor-parallel-size", "2")


def ray_job(entrypoint: str, runtime_env: str, workers: int = 2) -> dict[str, Any]:
    # kuberay ray-operator/apis/ray/v1/rayjob_types.go: spec.{entrypoint, runtimeEnvYAML, rayClusterSpec}
    ray = "rayproject/ray:2.46.0"
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj", "namespace": "ml"},
            "spec": {"entrypoint": entrypoint, "runtimeEnvYAML": runtime_env, "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                    {"name": "head", "image": ray}]}}},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers, "rayStartParams": {}, "template": {
                    "spec": {"containers": [gpu_container(["ray", "start"], image=ray)]}}}]}}}


def test_a_rayjob_entrypoint_is_judged_with_its_runtime_env_on_the_gpu_workers(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    env = "pip: [vllm==0.11.0]\nenv_vars:\n  MODEL_ID: meta-llama/Llama-3.1-8B-Instruct\n  TP: '2'\n"
    entry = "python -m vllm.entrypoints.openai.api_server --model $MODEL_ID -tp ${TP} --max-model-len 8192"
    found = roles(ray_job(entry, env))
    assert found is not None
    gpu = next(r for r in found.roles if r.name == "gpu")
    assert gpu.group_size == 2  # TP 2 over workers of one GPU each: one engine spans two pods
    code, out, _ = run(capsys, tmp_path, [ray_job(entry, env)])
    assert code == 0 and "ADMIT   rayjob/rj (gpu): " in out and "on each of 2 GPUs" in out and "8.03B" in out, out
    # Before: "no model named anywhere in the pod"; the 70B model now finds no room on 2 × L4.
    code, out, _ = run(capsys, tmp_path, [ray_job(entry, env.replace("8B", "70B"))])
    assert code == 1 and "REJECT  rayjob/rj (gpu): needs " in out, out


def test_a_rayjob_with_a_broken_runtime_env_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, tmp_path, [ray_job("vllm serve $MODEL_ID", "env_vars: [unclosed\n")])
    assert code == 0 and "spec.runtimeEnvYAML is not YAML (line " in out, out


def train_job(command: list[str] | None, uri: str = "hf://meta-llama/Llama-3.1-8B-Instruct") -> dict[str, Any]:
    # kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go: spec.initializer.model.storageUri
    trainer: dict[str, Any] = {"numNodes": 1, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}}
    if command is not None:
        trainer["command"] = command
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "tj", "namespace": "ml"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "initializer": {"model": {"storageUri": uri}},
                     "trainer": trainer}}


def test_a_trainjob_model_is_read_from_its_initializer(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    command = ["torchrun", "--nproc_per_node", "2", "train_sft.py", "--model_name_or_path", "/workspace/model",
               "--use_peft", "--bf16"]
    nodes = [gpu_node("h100-0", gpus=8, mem=81559, product="NVIDIA-H100-80GB-HBM3")]
    code, out, _ = run(capsys, tmp_path, [train_job(command)], nodes)
    assert code == 0 and "on trainer (lora)" in out and "8.03B" in out, out
    assert "model-initializer hf://meta-llama/Llama-3.1-8B-Instruct → catalog llama-3.1-8b-instruct" in out


def test_a_trainjob_whose_recipe_is_not_visible_names_its_model_but_guesses_nothing(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Full fine-tuning of a 70B model, unsharded, would be "rejected": the recipe (LoRA? FSDP?) is in the runtime.
    code, out, _ = run(capsys, tmp_path, [train_job(None, "hf://meta-llama/Llama-3.1-70B-Instruct")])
    assert code == 0 and "no VRAM estimate" in out, out
    assert "the model is hf://meta-llama/Llama-3.1-70B-Instruct (spec.initializer)" in out


def test_kaito_inference_configmap_sets_the_presets_vllm_arguments(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path) -> None:
    from webhook.kube.configmaps import configmap_refs

    ws = {"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace", "metadata": {"name": "q", "namespace": "ml"},
          "resource": {"instanceType": "Standard_NC24ads_A100_v4", "labelSelector": {"matchLabels": {"a": "b"}}},
          "inference": {"preset": {"name": "llama-3.1-8b-instruct"}, "config": "q-inference"}}
    assert configmap_refs(ws) == ["q-inference"]  # what admission reads for it
    # KAITO's inference_config.yaml: a vllm section of engine arguments.
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "q-inference", "namespace": "ml"},
          "data": {"inference_config.yaml": "vllm:\n  max-model-len: 4096\n  gpu-memory-utilization: 0.95\n"}}
    code, out, _ = run(capsys, tmp_path, [ws, cm])
    assert code == 0 and "(4096 tokens × 1 seq)" in out, out
    code, out, _ = run(capsys, tmp_path, [ws])
    assert "inference ConfigMap q-inference (inference_config.yaml) is not readable here" in out, out
    assert "(131072 tokens × 1 seq)" in out


AXOLOTL = """base_model: meta-llama/Llama-3.1-8B
adapter: qlora
load_in_4bit: true
lora_r: 32
sequence_len: 4096
micro_batch_size: 2
gradient_checkpointing: true
"""


def axolotl_job(items: bool = False) -> dict[str, Any]:
    # axolotl's documented form: `axolotl train config.yml`, the config mounted from a ConfigMap.
    container = gpu_container(["axolotl", "train", "/config/qlora.yml"], image="axolotlai/axolotl:main-latest")
    container["volumeMounts"] = [{"name": "cfg", "mountPath": "/config"}]
    source: dict[str, Any] = {"name": "axolotl-cfg"}
    if items:
        source["items"] = [{"key": "config.yaml", "path": "qlora.yml"}]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ft", "namespace": "ml"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container],
                                           "volumes": [{"name": "cfg", "configMap": source}]}}}}


@pytest.mark.parametrize("items", [False, True], ids=["key-is-file-name", "items-map-key-to-path"])
def test_a_trainer_config_mounted_from_a_configmap_is_read(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                           items: bool) -> None:
    from webhook.kube.configmaps import configmap_refs

    job = axolotl_job(items)
    assert configmap_refs(job) == ["axolotl-cfg"]  # admission reads it too
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "axolotl-cfg", "namespace": "ml"},
          "data": {"config.yaml" if items else "qlora.yml": AXOLOTL}}
    code, out, _ = run(capsys, tmp_path, [job, cm])
    assert code == 0 and "on trainer (qlora)" in out and "8.03B" in out, out
    code, out, _ = run(capsys, tmp_path, [job])  # without the ConfigMap: no model, as before
    assert "no VRAM estimate" in out, out
