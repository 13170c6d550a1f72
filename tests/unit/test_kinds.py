"""webhook.kinds: each kind the LLM world ships in, turned into pod roles (templates, group sizes, replicas)."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.kinds import (
    KINDS,
    TEMPLATE_PATHS,
    Context,
    DeclaredValueError,
    PodView,
    Runtimes,
    WorkloadError,
    pod_view,
    roles,
)
from webhook.kinds.kserve import fill_placeholders, merge_container

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kinds"


def load(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]


def one(name: str) -> dict[str, Any]:
    (doc,) = load(name)
    return doc


def tokens(view: PodView) -> list[str]:
    c = view.spec["containers"][0]
    return [str(t) for t in (c.get("command") or []) + (c.get("args") or [])]


def gpus(view: PodView) -> str | None:
    return view.spec["containers"][0].get("resources", {}).get("limits", {}).get("nvidia.com/gpu")


def test_workload_module_keeps_its_names() -> None:
    assert TEMPLATE_PATHS["CronJob"] == ("spec", "jobTemplate", "spec", "template")
    assert {"Pod", "Deployment", "LeaderWorkerSet", "RayService", "InferenceService", "Model"} <= KINDS
    view = pod_view({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}})
    assert view is not None and view.role == "" and view.group_size == 1 and view.ref == "pod/p"
    assert PodView("Pod", "ns", "p", {}, {}).group_size == 1  # old positional constructor still works
    assert pod_view({"kind": "LeaderWorkerSet"}) is None  # pod_view stays the built-in kinds' reader


def test_builtin_kinds_are_one_unnamed_role() -> None:
    dep = {"kind": "Deployment", "metadata": {"name": "d", "namespace": "ml"},
           "spec": {"template": {"metadata": {}, "spec": {"containers": []}}}}
    rs = roles(dep)
    assert rs is not None and not rs.grouped and len(rs.roles) == 1
    assert rs.roles[0].name == "" and rs.roles[0].view.ref == "deployment/d"
    assert roles({"kind": "ConfigMap"}) is None


# --- LeaderWorkerSet ------------------------------------------------------------------------------


def test_lws_leader_and_workers() -> None:
    rs = roles(one("lws-vllm.yaml"), Context(namespace="ml"))
    assert rs is not None and rs.grouped
    leader, worker = rs.roles
    assert (leader.name, leader.group_size, leader.replicas) == ("leader", 2, 2)
    assert (worker.name, worker.group_size, worker.replicas) == ("worker", 2, 2)  # 2 groups × (size 2 - 1)
    assert worker.view.ref == "leaderworkerset/vllm (worker)" and worker.view.group_size == 2
    assert worker.view.namespace == "ml"
    # The worker names no model: it is judged with the leader's serving command (its GPUs hold a share of it).
    assert "--tensor-parallel-size" in " ".join(tokens(worker.view))
    assert not rs.warnings  # the vLLM recipe always looks like this: no noise on every apply
    # Annotations on the LWS apply to every role (the template sets none).
    assert worker.view.annotations["vramgate.io/tier"] == "production"


def test_lws_does_not_change_the_object() -> None:
    obj = one("lws-vllm.yaml")
    before = yaml.safe_dump(obj)
    roles(obj)
    assert yaml.safe_dump(obj) == before


def test_lws_worker_with_its_own_model_keeps_it_and_template_annotations_win() -> None:
    obj = one("lws-vllm.yaml")
    wt = obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    wt["metadata"] = {"annotations": {"vramgate.io/tier": "batch"}}
    wt["spec"]["containers"][0]["command"] = ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]
    rs = roles(obj)
    assert rs is not None
    worker = rs.roles[1]
    assert tokens(worker.view) == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]
    assert worker.view.annotations["vramgate.io/tier"] == "batch"


def test_lws_without_leader_template_is_one_role_of_all_pods() -> None:
    obj = one("lws-vllm.yaml")
    del obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    rs = roles(obj)
    assert rs is not None
    (only,) = rs.roles
    assert (only.name, only.group_size, only.replicas) == ("worker", 2, 4)


@pytest.mark.parametrize(("patch", "message"), [
    ({"size": "two"}, "spec.leaderWorkerTemplate.size must be a whole number"),
    ({"size": 0}, "must be at least 1"),
    ({"workerTemplate": None}, "workerTemplate is missing"),
    ({"workerTemplate": {"spec": "x"}}, "has no pod spec"),
])
def test_lws_malformed(patch: dict[str, Any], message: str) -> None:
    obj = one("lws-vllm.yaml")
    obj["spec"]["leaderWorkerTemplate"].update(patch)
    with pytest.raises(WorkloadError, match=message):
        roles(obj)


# --- KServe InferenceService ----------------------------------------------------------------------


def test_isvc_default_hf_runtime_merge() -> None:
    rs = roles(one("isvc-hf.yaml"), Context(namespace="ml"))
    assert rs is not None and not rs.warnings  # huggingface format: the default runtime is KServe's own
    (pred,) = rs.roles
    assert pred.name == "predictor" and pred.view.ref == "inferenceservice/huggingface-llama3 (predictor)"
    c = pred.view.spec["containers"][0]
    assert c["name"] == "kserve-container"
    # Runtime args first, the ISVC's appended (MergeRuntimeContainers), placeholders filled from the ISVC.
    assert c["args"] == ["--model_name=huggingface-llama3", "--model_name=llama3",
                         "--model_id=meta-llama/meta-llama-3-8b-instruct"]
    # Resources merge key by key: the ISVC's limits override the runtime's 1 CPU / 2Gi and add the GPU.
    assert c["resources"]["limits"] == {"cpu": "6", "memory": "24Gi", "nvidia.com/gpu": "1"}


RUNTIME = {
    "apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
    "metadata": {"name": "vllm-runtime", "namespace": "ml"},
    "spec": {
        "supportedModelFormats": [{"name": "huggingface", "autoSelect": True, "priority": 5}],
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "containers": [{
            "name": "kserve-container", "image": "vllm/vllm-openai:v0.8.5",
            "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
            "args": ["--served-model-name={{.Name}}", "--port=8080", "--download-dir={{.Namespace}}/{{.Labels.team}}",
                     '--tokenizer={{index .Annotations "example.com/tokenizer"}}', "--keep={{.Unknown}}"],
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            "resources": {"limits": {"cpu": "4", "memory": "16Gi"}},
        }],
    },
}


def isvc(**model: Any) -> dict[str, Any]:
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": "ml", "labels": {"team": "nlp"},
                         "annotations": {"example.com/tokenizer": "tok"}},
            "spec": {"predictor": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                                   "model": {"modelFormat": {"name": "huggingface"}, **model}}}}


def test_isvc_named_serving_runtime_from_the_files() -> None:
    obj = isvc(runtime="vllm-runtime", args=["--model=Qwen/Qwen2.5-7B-Instruct"],
               env=[{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
               resources={"limits": {"nvidia.com/gpu": "1"}})
    rs = roles(obj, Context(runtimes=Runtimes.of([RUNTIME])))
    assert rs is not None and not rs.warnings
    (pred,) = rs.roles
    c = pred.view.spec["containers"][0]
    assert c["image"] == "vllm/vllm-openai:v0.8.5" and c["command"][0] == "python3"
    assert c["args"] == ["--served-model-name=chat", "--port=8080", "--download-dir=ml/nlp", "--tokenizer=tok",
                         "--keep={{.Unknown}}", "--model=Qwen/Qwen2.5-7B-Instruct"]
    assert c["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]
    assert c["resources"]["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
    # The runtime's nodeSelector and the predictor's tolerations both reach the pod (MergePodSpec).
    assert pred.view.spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pred.view.spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert RUNTIME["spec"]["containers"][0]["args"][0] == "--served-model-name={{.Name}}"  # not changed in place


def test_isvc_auto_selects_the_highest_priority_runtime() -> None:
    low = {**RUNTIME, "metadata": {"name": "low"}, "kind": "ClusterServingRuntime",
           "spec": {**RUNTIME["spec"], "supportedModelFormats": [{"name": "huggingface", "autoSelect": True,
                                                                   "priority": 1}],
                    "containers": [{"name": "kserve-container", "image": "low"}]}}
    off = {**RUNTIME, "metadata": {"name": "off", "namespace": "ml"},
           "spec": {**RUNTIME["spec"], "disabled": True, "containers": [{"name": "kserve-container",
                                                                         "image": "disabled"}]}}
    rs = roles(isvc(), Context(namespace="ml", runtimes=Runtimes.of([low, off, RUNTIME])))
    assert rs is not None and rs.roles[0].view.spec["containers"][0]["image"] == "vllm/vllm-openai:v0.8.5"
    rs = roles(isvc(), Context(namespace="ml", runtimes=Runtimes.of([low])))
    assert rs is not None and rs.roles[0].view.spec["containers"][0]["image"] == "low"


def test_isvc_missing_runtime_falls_back_with_a_warning() -> None:
    obj = isvc(runtime="vllm-runtime", resources={"limits": {"nvidia.com/gpu": "1"}})
    at_admission = roles(obj)
    assert at_admission is not None
    assert at_admission.warnings == ("inferenceservice/chat: ServingRuntime or ClusterServingRuntime 'vllm-runtime' "
                                     "is not visible to vramgate at admission; judged with KServe's default Hugging "
                                     "Face runtime shape (kserve-huggingfaceserver)",)
    in_files = roles(obj, Context(runtimes=Runtimes.of([])))
    assert in_files is not None and "is not visible in the files given" in in_files.warnings[0]
    # A CPU predictor is not worth a warning.
    cpu = roles(isvc(runtime="vllm-runtime"))
    assert cpu is not None and not cpu.warnings


def test_isvc_hf_storage_uri_names_the_model() -> None:
    rs = roles(isvc(storageUri="hf://Qwen/Qwen2.5-7B-Instruct", resources={"limits": {"nvidia.com/gpu": "1"}}))
    assert rs is not None
    assert rs.roles[0].view.spec["containers"][0]["args"][-1] == "--model_id=Qwen/Qwen2.5-7B-Instruct"


def test_isvc_multinode_default_runtime_splits_tp_pp_over_head_and_workers() -> None:
    # https://kserve.github.io/website/latest/modelserving/v1beta1/llm/huggingface/multi-node/
    obj = isvc(storageUri="pvc://llama-3-8b-pvc/hf/8b_instruction_tuned")
    obj["spec"]["predictor"]["workerSpec"] = {"pipelineParallelSize": 2, "tensorParallelSize": 1}
    rs = roles(obj)
    assert rs is not None and rs.grouped
    head, worker = rs.roles
    # No GPU on either container: computeRayNodeAndGPUs case 4 gives TP×PP nodes of one GPU each.
    assert (head.name, head.group_size, head.replicas, gpus(head.view)) == ("head", 2, 1, "1")
    assert (worker.name, worker.group_size, worker.replicas, gpus(worker.view)) == ("worker", 2, 1, "1")
    text = " ".join(tokens(head.view))
    assert "--tensor-parallel-size=1 --pipeline-parallel-size=2" in text
    assert tokens(worker.view) == tokens(head.view)


def test_isvc_multinode_worker_gpus_decide_the_node_count() -> None:
    obj = isvc()
    obj["spec"]["predictor"]["workerSpec"] = {
        "pipelineParallelSize": 2, "tensorParallelSize": 4,
        "containers": [{"name": "worker-container", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}
    rs = roles(obj)
    assert rs is not None
    head, worker = rs.roles
    assert (gpus(head.view), gpus(worker.view), head.group_size, worker.replicas) == ("4", "4", 2, 1)
    # Head GPUs alone can hold TP × PP: a single node, no workers.
    obj["spec"]["predictor"]["model"]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    rs = roles(obj)
    assert rs is not None and [r.name for r in rs.roles] == ["head"] and gpus(rs.roles[0].view) == "8"


def test_merge_container_and_placeholders_units() -> None:
    merged = merge_container({"name": "kserve-container", "args": ["a"], "env": [{"name": "X", "valueFrom": {}}]},
                             {"name": "", "args": ["b"], "env": [{"name": "X", "value": "v"}], "command": ["c"]})
    assert merged == {"name": "kserve-container", "args": ["a", "b"], "env": [{"name": "X", "value": "v"}],
                      "command": ["c"]}
    assert fill_placeholders(["{{ .Name }}", {"k": "{{.GenerateName}}x"}, 3], {"name": "n"}) == ["n", {"k": "x"}, 3]


# --- LLMInferenceService --------------------------------------------------------------------------

LLMISVC = """
# https://kserve.github.io/website/docs/model-serving/generative-inference/llmisvc/llmisvc-overview
apiVersion: serving.kserve.io/v1alpha1
kind: LLMInferenceService
metadata:
  name: qwen
spec:
  model:
    uri: hf://Qwen/Qwen2.5-7B-Instruct
    name: Qwen/Qwen2.5-7B-Instruct
  replicas: 3
  template:
    containers:
      - name: main
        resources:
          limits: {cpu: "4", memory: 32Gi, nvidia.com/gpu: "1"}
  router:
    gateway: {}
    route: {}
    scheduler: {}
"""


def test_llmisvc_single_node_runs_vllm_serve_on_the_model_uri() -> None:
    rs = roles(yaml.safe_load(LLMISVC))
    assert rs is not None and not rs.grouped
    (main,) = rs.roles
    assert (main.name, main.replicas, main.group_size) == ("", 3, 1) and main.view.ref == "llminferenceservice/qwen"
    assert tokens(main.view) == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]


def test_llmisvc_pipeline_parallel_workers_and_prefill() -> None:
    obj = yaml.safe_load(LLMISVC)
    obj["spec"]["parallelism"] = {"tensor": 1, "pipeline": 2}
    obj["spec"]["worker"] = {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    obj["spec"]["prefill"] = {"replicas": 1, "template": {"containers": [
        {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}, "parallelism": {"tensor": 2}}
    rs = roles(obj)
    assert rs is not None and rs.grouped
    assert [(r.name, r.group_size, r.replicas) for r in rs.roles] == [
        ("decode leader", 2, 3), ("decode worker", 2, 3), ("prefill", 1, 1)]
    assert "--pipeline-parallel-size" in tokens(rs.roles[1].view)
    assert tokens(rs.roles[2].view)[-2:] == ["--tensor-parallel-size", "2"]


# --- KubeRay --------------------------------------------------------------------------------------


def test_rayservice_llm_config_becomes_a_vllm_command_on_the_gpu_group() -> None:
    rs = roles(one("rayservice-llm.yaml"))
    assert rs is not None and rs.grouped and not rs.warnings
    head, group = rs.roles
    assert head.name == "head" and "args" not in head.view.spec["containers"][0]
    assert (group.name, group.group_size, group.replicas) == ("gpu-group", 1, 1)
    assert group.view.ref == "rayservice/ray-serve-llm (gpu-group)"
    c = group.view.spec["containers"][0]
    assert c["args"] == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--dtype", "bfloat16", "--max-model-len",
                         "1024", "--device", "auto", "--gpu-memory-utilization", "0.75", "--enforce-eager"]
    assert {"name": "VLLM_USE_V1", "value": "1"} in c["env"] and c["env"][0]["name"] == "HUGGING_FACE_HUB_TOKEN"


def _serve(config: str) -> dict[str, Any]:
    obj = one("rayservice-llm.yaml")
    obj["spec"]["serveConfigV2"] = config
    return obj


def test_rayservice_tensor_parallel_spans_worker_pods() -> None:
    obj = _serve("""
applications:
- name: llms
  import_path: ray.serve.llm:build_openai_app
  args:
    llm_configs:
    - model_loading_config: {model_id: llama, model_source: meta-llama/Llama-3.1-70B-Instruct}
      engine_kwargs: {tensor_parallel_size: 4, pipeline_parallel_size: 1}
    - model_loading_config: {model_id: small}
    - ./configs/other-model.yaml
""")
    rs = roles(obj)
    assert rs is not None
    names = [(r.name, r.group_size) for r in rs.roles]
    assert names == [("head", 1), ("gpu-group llama", 4), ("gpu-group small", 1)]
    assert any("needs 4 GPUs, 4 pods of 1 GPU(s), but group gpu-group has at most 1 pods" in w for w in rs.warnings)
    assert any("llm_configs[2] is a file (./configs/other-model.yaml)" in w for w in rs.warnings)
    assert tokens(rs.roles[2].view)[:3] == ["vllm", "serve", "small"]


@pytest.mark.parametrize("config", [
    "", "applications: []", "applications: [{import_path: my.app:build}]", "applications: 3",
    "applications: [{args: {llm_configs: 7}}]", "applications: [{args: {llm_configs: [{engine_kwargs: 3}]}}]",
    "applications: [{args: {llm_configs: [{model_loading_config: {model_id: m},"
    " engine_kwargs: {tensor_parallel_size: x, speculative_config: {a: 1}, max_model_len: null, hf_token: s}}]}}]",
])
def test_rayservice_odd_but_valid_serve_configs_never_raise(config: str) -> None:
    rs = roles(_serve(config))
    assert rs is not None and [r.name for r in rs.roles][:2] == ["head", "gpu-group"]
    assert all("hf_token" not in " ".join(tokens(r.view)) and tokens(r.view)[-1:] != ["s"]
               for r in rs.roles[1:])


@pytest.mark.parametrize(("config", "message"), [
    ("applications: [unclosed", r"spec.serveConfigV2 is not valid YAML \(line 1\): expected"),
    ("- just\n- a list", "must be a YAML mapping with applications, not a list"),
    (12, "must be a string"),
])
def test_rayservice_bad_serve_config_is_a_declaration_error(config: Any, message: str) -> None:
    with pytest.raises(DeclaredValueError, match=message):
        roles(_serve(config))


def test_raycluster_and_rayjob_groups() -> None:
    svc = one("rayservice-llm.yaml")
    cluster_spec = svc["spec"]["rayClusterConfig"]
    cluster_spec["workerGroupSpecs"][0]["numOfHosts"] = 2
    cluster_spec["workerGroupSpecs"][0]["replicas"] = 3
    rc = roles({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"}, "spec": cluster_spec})
    assert rc is not None and [(r.name, r.group_size, r.replicas) for r in rc.roles] == [
        ("head", 1, 1), ("gpu-group", 2, 6)]
    job = roles({"kind": "RayJob", "metadata": {"name": "j"}, "spec": {"entrypoint": "python x.py",
                                                                       "rayClusterSpec": cluster_spec}})
    assert job is not None and len(job.roles) == 2 and job.roles[1].view.ref == "rayjob/j (gpu-group)"
    on_existing = roles({"kind": "RayJob", "metadata": {"name": "j"}, "spec": {"clusterSelector": {"a": "b"}}})
    assert on_existing is not None and on_existing.roles == ()
    with pytest.raises(WorkloadError, match=r"spec.rayClusterSpec.workerGroupSpecs\[0\] must be a mapping"):
        roles({"kind": "RayJob", "metadata": {"name": "j"},
               "spec": {"rayClusterSpec": {**cluster_spec, "workerGroupSpecs": ["x"]}}})


# --- Kubeflow Trainer, PyTorchJob, JobSet ---------------------------------------------------------


def test_trainjob_on_its_runtime() -> None:
    runtime, job = load("trainjob.yaml")
    rs = roles(job, Context(runtimes=Runtimes.of([runtime])))
    assert rs is not None and not rs.warnings
    (node,) = rs.roles
    assert (node.name, node.group_size, node.replicas) == ("node", 2, 2)
    c = node.view.spec["containers"][0]
    assert c["image"].startswith("pytorch/pytorch") and c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert node.view.annotations["vramgate.io/workload"] == "training"


def test_trainjob_without_its_runtime_is_judged_from_the_trainer_and_warns() -> None:
    _, job = load("trainjob.yaml")
    rs = roles(job)
    assert rs is not None and rs.roles[0].view.spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "ClusterTrainingRuntime 'torch-distributed' is not visible" in rs.warnings[0]


def test_training_runtime_itself() -> None:
    runtime, _ = load("trainjob.yaml")
    rs = roles(runtime)
    assert rs is not None and [(r.name, r.group_size, r.replicas) for r in rs.roles] == [("node", 1, 1)]


def test_pytorchjob_master_and_workers() -> None:
    # https://github.com/kubeflow/training-operator/blob/master/examples/pytorch/simple.yaml
    obj = yaml.safe_load("""
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: pytorch-simple, namespace: kubeflow}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
              command: ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"]
              resources: {limits: {nvidia.com/gpu: 1}}
    Worker:
      replicas: 3
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
              command: ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"]
              resources: {limits: {nvidia.com/gpu: 1}}
""")
    rs = roles(obj)
    assert rs is not None and [(r.name, r.group_size, r.replicas) for r in rs.roles] == [
        ("master", 4, 1), ("worker", 4, 3)]
    assert rs.roles[1].view.ref == "pytorchjob/pytorch-simple (worker)"


def test_jobset_replicated_jobs() -> None:
    # https://github.com/kubernetes-sigs/jobset/blob/main/site/static/examples/simple/paralleljobs.yaml
    obj = yaml.safe_load("""
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: paralleljobs}
spec:
  replicatedJobs:
  - name: workers
    replicas: 2
    template:
      spec:
        parallelism: 4
        completions: 4
        template:
          spec:
            containers:
            - {name: worker, image: bash:latest, command: ["bash", "-xc", "sleep 1000"]}
  - name: driver
    template:
      spec:
        template:
          spec:
            containers:
            - {name: driver, image: bash:latest}
""")
    rs = roles(obj)
    assert rs is not None and [(r.name, r.group_size, r.replicas) for r in rs.roles] == [
        ("workers", 1, 8), ("driver", 1, 1)]


# --- KubeAI ---------------------------------------------------------------------------------------

KUBEAI = """
# https://github.com/substratusai/kubeai/blob/main/manifests/models/llama-3.1-8b-instruct-fp8-l4.yaml
apiVersion: kubeai.org/v1
kind: Model
metadata:
  name: llama-3.1-8b-instruct-fp8-l4
spec:
  features: [TextGeneration]
  url: hf://neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8
  engine: VLLM
  args:
    - --max-model-len=16384
    - --max-num-batched-token=16384
    - --gpu-memory-utilization=0.9
    - --disable-log-requests
  env:
    VLLM_ATTENTION_BACKEND: FLASHINFER
  resourceProfile: nvidia-gpu-l4:1
"""


def test_kubeai_model_server_pod() -> None:
    rs = roles(yaml.safe_load(KUBEAI))
    assert rs is not None and not rs.warnings and not rs.grouped
    (server,) = rs.roles
    c = server.view.spec["containers"][0]
    assert c["image"] == "vllm/vllm-openai:v0.8.3"
    assert c["args"][:2] == ["--model=neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8",
                             "--served-model-name=llama-3.1-8b-instruct-fp8-l4"]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert c["env"] == [{"name": "VLLM_ATTENTION_BACKEND", "value": "FLASHINFER"}]
    assert server.view.spec["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_kubeai_profile_count_multiplies_resources() -> None:
    obj = yaml.safe_load(KUBEAI)
    obj["spec"]["resourceProfile"] = "nvidia-gpu-l4:2"
    rs = roles(obj)
    assert rs is not None
    res = rs.roles[0].view.spec["containers"][0]["resources"]
    assert res["limits"]["nvidia.com/gpu"] == "2" and res["requests"]["cpu"] == "12"
    assert res["requests"]["memory"] == str(48 * 1024**3)
    obj["spec"]["resourceProfile"] = "my-b200:4"
    rs = roles(obj)
    assert rs is not None and "not one of KubeAI's defaults; assumed 4 nvidia.com/gpu" in rs.warnings[0]
    assert rs.roles[0].view.spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    obj["spec"]["resourceProfile"] = "nvidia-gpu-l4"
    with pytest.raises(WorkloadError, match="should be <name>:<count>"):
        roles(obj)


def test_another_projects_model_kind_is_not_a_workload() -> None:
    # Not KubeAI's: the generic reader, which finds no pod in it (nothing to judge), never KubeAI's server pod.
    assert roles({"apiVersion": "example.com/v1", "kind": "Model", "metadata": {"name": "m"}, "spec": {}}) is None


def test_runtime_lookup_scopes() -> None:
    ns_rt = {"kind": "ServingRuntime", "metadata": {"name": "rt", "namespace": "a"}}
    cluster_rt = {"kind": "ClusterServingRuntime", "metadata": {"name": "rt"}}
    file_rt = {"kind": "ServingRuntime", "metadata": {"name": "loose"}}
    index = Runtimes.of([ns_rt, cluster_rt, file_rt, {"kind": "Deployment", "metadata": {"name": "rt"}}, "junk"])
    assert index.lookup("ServingRuntime", "rt", "a") is ns_rt
    assert index.lookup("ServingRuntime", "rt", "b") is cluster_rt  # another namespace's runtime is not visible
    assert index.lookup("ServingRuntime", "loose", "b") is file_rt  # a file without namespaces: any
    assert index.lookup("ServingRuntime", "none", "a") is None
    assert [o["metadata"]["name"] for o in index.all("ServingRuntime", "b")] == ["loose", "rt"]


def test_a_custom_serve_app_installing_vllm_is_read_from_its_runtime_env() -> None:
    """A custom Ray Serve app (its own import_path, no llm_configs) that pip-installs vLLM names its model and
    TP in env_vars, as GKE's published RayService samples do; without vLLM, or with a bare name, nothing is read."""
    from webhook.kinds.ray import serve_llm_apps

    def apps(pip: list[str], env: dict[str, str]) -> tuple[list[Any], list[str]]:
        warnings: list[str] = []
        doc = {"applications": [{"name": "llm", "import_path": "serve:model",
                                 "runtime_env": {"pip": pip, "env_vars": env}}]}
        return serve_llm_apps(yaml.safe_dump(doc), warnings), warnings

    found, said = apps(["vllm==0.11.0", "ray==2.40.0"], {"MODEL_ID": "google/gemma-2-9b-it", "TENSOR_PARALLELISM": "2"})
    assert [(a.model_id, a.gpus, a.args[:3]) for a in found] == [("google/gemma-2-9b-it", 2,
                                                                   ("vllm", "serve", "google/gemma-2-9b-it"))]
    assert "runtime_env.env_vars.MODEL_ID" in said[0] and "on 2 GPU(s)" in said[0]
    assert apps(["torch", "transformers"], {"MODEL_ID": "google/gemma-2-9b-it"}) == ([], [])
    assert apps(["vllm"], {"MODEL_ID": "gemma"}) == ([], [])  # not a hub id or a path: never guessed


def test_a_local_checkpoint_is_sized_by_the_model_its_pod_names_and_never_by_a_bare_alias() -> None:
    """A post-trained local checkpoint is sized as the catalog model its pod label ai.gke.io/model or its served
    hub id (NIM_SERVED_MODEL_NAME, --served-model-name) names, with a warning; a bare alias is not taken."""
    from webhook.config import Config
    from webhook.decide.demand import read_demand
    from webhook.kinds import pod_view
    from webhook.models.catalog import builtin_catalog

    def demand(args: list[str], labels: dict[str, str] | None = None) -> Any:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels or {}},
               "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                                        "command": ["vllm", "serve", *args],
                                        "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
        view = pod_view(pod)
        assert view is not None
        return read_demand(view, Config(), builtin_catalog())

    by_label = demand(["/data/ckpt"], {"ai.gke.io/model": "gemma-3-27b-it"})
    assert by_label.estimate is not None and any("pod label ai.gke.io/model" in w for w in by_label.warnings)
    served = demand(["/data/ckpt", "--served-model-name", "google/gemma-3-27b-it"])
    assert served.estimate is not None and any("--served-model-name" in w for w in served.warnings)
    alias = demand(["/data/ckpt", "--served-model-name", "chat"])
    assert alias.estimate is None and not any("local checkpoint" in w for w in alias.warnings)
