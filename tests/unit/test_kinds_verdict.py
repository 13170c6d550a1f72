"""judge() per role: multi-role objects denied when any role is, messages naming the role, warnings combined."""

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.cli.main import main
from webhook.cluster.snapshot import Snapshot, snapshot_from_nodes
from webhook.config import Config
from webhook.decide.verdict import judge
from webhook.kinds import READERS, Runtimes
from webhook.models.catalog import builtin_catalog
from webhook.serve.admission.decision import declaration_changed

from .helpers import gpu_node

CFG = Config()
CATALOG = builtin_catalog()
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kinds"
A100 = snapshot_from_nodes([gpu_node(f"a100-{i}") for i in range(4)], CFG)
T4 = snapshot_from_nodes([gpu_node("t4-0", gpus=4, mem=15360, product="Tesla-T4")], CFG)
SMALL = snapshot_from_nodes([gpu_node("t1000-0", gpus=1, mem=4096, product="NVIDIA-T1000")], CFG)


def fixture(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]


def lws(model: str, gpus: int = 1, size: int = 2, **annotations: str) -> dict[str, Any]:
    def tpl(cmd: list[str]) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.8.5", "command": cmd,
                                         "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "x", "namespace": "ml", "annotations": annotations},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {
                "size": size, "leaderTemplate": tpl(["vllm", "serve", model, "--max-model-len", "4096"]),
                "workerTemplate": tpl(["ray", "start", "--block"])}}}


def verdict(obj: dict[str, Any], snapshot: Snapshot = A100, **kw: Any) -> Any:
    return judge(obj, snapshot, CFG, CATALOG, **kw)


def test_lws_that_no_gpu_holds_is_denied_naming_the_role() -> None:
    j = verdict(lws("Qwen/Qwen2.5-7B-Instruct"), T4)
    assert not j.allowed and j.code != "fits"
    parts = j.message.split("; the largest GPU")[0]
    assert parts.startswith("leaderworkerset/x (leader): needs ")
    assert "leaderworkerset/x (worker): needs " in j.message
    assert [r.role.name for r in j.roles] == ["leader", "worker"] and not any(r.judgement.allowed for r in j.roles)
    assert j.view is not None and j.view.role == "leader"


def test_lws_that_fits_is_admitted_with_every_roles_warnings() -> None:
    j = verdict(lws("Qwen/Qwen2.5-7B-Instruct"))
    assert j.allowed and j.code == "fits" and j.message == ""
    assert [r.judgement.code for r in j.roles] == ["fits", "fits"]
    # The worker was judged with the leader's model (it names none itself).
    assert j.roles[1].judgement.demand is not None and j.roles[1].judgement.demand.model == "Qwen/Qwen2.5-7B-Instruct"


def test_warn_mode_admits_with_the_denials_as_warnings() -> None:
    j = verdict(lws("Qwen/Qwen2.5-7B-Instruct"), T4, enforcement="warn")
    assert j.allowed and any(w.startswith("leaderworkerset/x (leader): needs ") for w in j.warnings)
    assert verdict(lws("Qwen/Qwen2.5-7B-Instruct"), T4, enforcement="off").code == "enforcement-off"


def test_only_the_role_that_cannot_fit_is_named() -> None:
    obj = fixture("rayservice-llm.yaml")[0]
    obj["spec"]["serveConfigV2"] = obj["spec"]["serveConfigV2"].replace(
        "Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-70B-Instruct")
    j = verdict(obj)
    assert not j.allowed
    assert j.message.startswith("rayservice/ray-serve-llm (gpu-group): needs ") and "(head)" not in j.message
    assert (j.roles[0].role.name, j.roles[0].judgement.code) == ("head", "no-gpu")


def test_rayservice_sample_fits_on_a100() -> None:
    j = verdict(fixture("rayservice-llm.yaml")[0])
    assert j.allowed and j.code == "fits", j.message
    assert j.demand is not None and j.demand.model == "Qwen/Qwen2.5-7B-Instruct"


def test_bad_serve_config_is_a_clear_denial() -> None:
    obj = fixture("rayservice-llm.yaml")[0]
    obj["spec"]["serveConfigV2"] = "applications:\n  - name: [oops"
    j = verdict(obj)
    assert not j.allowed and j.code == "declaration"
    assert j.message.startswith("rayservice/ray-serve-llm: spec.serveConfigV2 is not valid YAML (line ")


def test_malformed_custom_kind_names_the_object() -> None:
    obj = lws("m")
    obj["spec"]["leaderWorkerTemplate"]["size"] = "many"
    j = verdict(obj)
    assert (j.allowed, j.code) == (False, "malformed")
    assert j.message == "leaderworkerset/x: spec.leaderWorkerTemplate.size must be a whole number, not 'many'"


def test_isvc_fallback_warning_reaches_admission() -> None:
    obj = fixture("isvc-hf.yaml")[0]
    obj["spec"]["predictor"]["model"]["runtime"] = "my-vllm"
    j = verdict(obj)
    assert j.allowed and j.warnings[0].startswith("inferenceservice/huggingface-llama3: ServingRuntime or ")
    assert j.demand is not None and j.demand.model == "meta-llama/meta-llama-3-8b-instruct"


def test_isvc_too_big_is_denied_as_predictor() -> None:
    obj = fixture("isvc-hf.yaml")[0]
    obj["spec"]["predictor"]["model"]["args"][1] = "--model_id=meta-llama/Llama-3.1-70B-Instruct"
    j = verdict(obj, T4)
    assert not j.allowed and j.message.startswith("inferenceservice/huggingface-llama3 (predictor): needs ")


def test_single_role_custom_kind_reads_like_a_deployment() -> None:
    model = yaml.safe_load((Path(__file__).parent / "test_kinds.py").read_text().split('KUBEAI = """')[1]
                           .split('"""')[0])
    j = verdict(model, SMALL)
    assert not j.allowed and j.message.startswith("model/llama-3.1-8b-instruct-fp8-l4: needs ")
    assert j.roles and j.roles[0].role.name == "server"


def test_trainjob_annotations_on_the_resource_reach_the_trainer() -> None:
    runtime, job = fixture("trainjob.yaml")
    j = verdict(job, T4, runtimes=Runtimes.of([runtime]))
    assert not j.allowed and j.message.startswith("trainjob/fine-tune-llama (node): needs ")
    assert j.demand is not None and j.demand.workload == "training"


def test_update_of_a_custom_kind_is_rejudged_only_when_spec_or_declaration_changes() -> None:
    old = lws("m")
    same = {**lws("m"), "status": {"replicas": 1}}
    assert not declaration_changed(same, old)
    bigger = lws("m", size=4)
    assert declaration_changed(bigger, old)
    annotated = lws("m", **{"vramgate.io/precision": "fp8"})
    assert declaration_changed(annotated, old)


def test_check_prints_one_line_per_role_and_reads_runtimes_from_the_files(tmp_path: Path, capsys: Any) -> None:
    runtime = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
               "metadata": {"name": "vllm-rt"},
               "spec": {"supportedModelFormats": [{"name": "huggingface"}],
                        "containers": [{"name": "kserve-container", "image": "vllm/vllm-openai:v0.8.5",
                                        "args": ["--model=meta-llama/Llama-3.1-70B-Instruct"]}]}}
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "big"},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "huggingface"}, "runtime": "vllm-rt",
                                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}}}}
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump_all([gpu_node("t4-0", gpus=4, mem=15360, product="Tesla-T4")]))
    manifests = tmp_path / "all.yaml"
    manifests.write_text(yaml.safe_dump_all([runtime, isvc, lws("Qwen/Qwen2.5-7B-Instruct")]))
    code = main(["check", "-f", str(manifests), "--nodes", str(nodes)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[0] == ("SKIP    servingruntime/vllm-rt: kind ServingRuntime: a runtime or template the workloads "
                      "refer to, judged with them")
    out = out[1:]
    # The runtime in the same file supplies the model (70B): no fallback warning.
    assert out[0].startswith("REJECT  inferenceservice/big (predictor): needs ") and "not visible" not in "\n".join(out)
    lines = [line for line in out if not line.startswith("  ")]
    assert lines[1].startswith("REJECT  leaderworkerset/x (leader): needs ")
    assert lines[2].startswith("REJECT  leaderworkerset/x (worker): needs ")
    assert len(lines) == 3  # the ServingRuntime itself is not a workload


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**12) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["spec", "template", "containers", "replicas", "size", "leaderWorkerTemplate",
                         "workerTemplate", "leaderTemplate", "predictor", "model", "workerSpec", "serveConfigV2",
                         "rayClusterConfig", "rayClusterSpec", "headGroupSpec", "workerGroupSpecs", "trainer",
                         "resourcesPerNode", "runtimeRef", "pytorchReplicaSpecs", "replicatedJobs", "url",
                         "resourceProfile", "engine", "args", "resources", "limits", "nvidia.com/gpu", "metadata",
                         "annotations", "name", "parallelism", "worker", "prefill", "numNodes", "runtime"]),
        inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(sorted(READERS)), spec=_json, meta=_json)
def test_garbage_never_raises_out_of_judge(key: tuple[str, str], spec: Any, meta: Any) -> None:
    group, kind = key  # every reader, under its own group (each reader is keyed by group and kind)
    j = verdict({"apiVersion": f"{group}/v1", "kind": kind, "metadata": meta, "spec": spec})
    assert isinstance(j.allowed, bool) and (j.allowed or j.message)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_any_serve_config_text_never_raises(text: str) -> None:
    obj = fixture("rayservice-llm.yaml")[0]
    obj["spec"]["serveConfigV2"] = text
    j = verdict(obj)
    assert j.allowed or j.code in ("declaration", "malformed") or "needs" in j.message


def test_rayjob_on_an_existing_cluster_has_nothing_to_judge() -> None:
    j = verdict({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "j"},
                 "spec": {"entrypoint": "python train.py", "clusterSelector": {"ray.io/cluster": "shared"}}}, SMALL)
    assert (j.allowed, j.code) == (True, "not-a-workload")


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    return [_replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]


_SAMPLES = [*fixture("lws-vllm.yaml"), *fixture("isvc-hf.yaml"), *fixture("rayservice-llm.yaml"),
            *fixture("trainjob.yaml")]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), garbage=_json)
def test_a_sample_with_any_part_replaced_never_raises(data: st.DataObject, garbage: Any) -> None:
    sample = data.draw(st.sampled_from(_SAMPLES))
    path = data.draw(st.sampled_from(_paths(sample)[1:]))
    j = verdict(_replaced(sample, path, garbage), runtimes=Runtimes.of(_SAMPLES))
    assert isinstance(j.allowed, bool) and (j.allowed or j.message)


def test_only_a_batch_job_gets_a_pod_failure_policy_never_its_volcano_namesake() -> None:
    from webhook.decide.mutation import mutation

    pod = {"restartPolicy": "Never", "containers": [{
        "name": "c", "image": "vllm/vllm-openai:v0.11.0", "command": ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"template": {"metadata": {}, "spec": pod}}}
    j = verdict(job)
    assert j.allowed and j.demand is not None
    ops, _ = mutation(job, j, CFG)
    assert any(op["path"] == "/spec/podFailurePolicy" for op in ops)
    volcano = {**job, "apiVersion": "batch.volcano.sh/v1alpha1"}
    assert mutation(volcano, j, CFG) == ([], [])
