"""OME (ome.io) InferenceService: engine and decoder pods from the runtime and the BaseModel, as OME builds them."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli.main import main
from webhook.kinds import Context, Runtimes, reader_key, roles
from webhook.kinds.ome import merge, merge_runner, model_size

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "kinds" / "ome"
NODES = Path(__file__).resolve().parents[1] / "fixtures" / "distributed" / "nodes"


def docs(*names: str) -> list[dict[str, Any]]:
    return [d for n in names for d in yaml.safe_load_all((HERE / n).read_text()) if d]


def isvc_with(*names: str) -> tuple[dict[str, Any], Context]:
    objs = docs(*names)
    isvc = next(o for o in objs if o["kind"] == "InferenceService")
    return isvc, Context(runtimes=Runtimes.of(objs))


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_the_engine_pod_is_the_runtime_runner_with_the_base_models_storage() -> None:
    isvc, ctx = isvc_with("isvc-qwen2-5-vl-7b-instruct.yaml", "basemodel-qwen-qwen2-5-vl-7b-instruct.yaml",
                          "runtime-qwen-qwen2-5-vl-7b-instruct-rt.yaml")
    rs = roles(isvc, ctx)
    assert rs is not None and not rs.warnings  # the runtime is selected exactly (the BaseModel states all)
    (engine,) = rs.roles
    assert (engine.group_size, engine.replicas) == (1, 1)
    pod = engine.view.spec
    (c,) = pod["containers"]
    assert c["name"] == "ome-container" and c["image"].startswith("docker.io/lmsysorg/sglang")
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert env(c)["MODEL_PATH"] == "/raid/models/Qwen/Qwen2.5-VL-7B-Instruct" and env(c)["PARALLELISM_SIZE"] == "1"
    vol = next(v for v in pod["volumes"] if v["name"] == "qwen2-5-vl-7b-instruct")
    assert vol["hostPath"]["path"] == "/raid/models/Qwen/Qwen2.5-VL-7B-Instruct"
    assert {"name": "qwen2-5-vl-7b-instruct", "mountPath": "/raid/models/Qwen/Qwen2.5-VL-7B-Instruct",
            "readOnly": True} in c["volumeMounts"]
    (agent,) = pod["initContainers"]
    assert agent["args"] == ["hf://Qwen/Qwen2.5-VL-7B-Instruct", "/raid/models/Qwen/Qwen2.5-VL-7B-Instruct"]
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"  # the runtime's engineConfig pod fields


def test_the_published_set_is_admitted_and_the_model_found_where_ome_mounts_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(HERE / n) for n in ("isvc-qwen2-5-vl-7b-instruct.yaml", "basemodel-qwen-qwen2-5-vl-7b-instruct.yaml",
                                     "runtime-qwen-qwen2-5-vl-7b-instruct-rt.yaml")]
    code = main(["check", "-f", *files, "--nodes", str(NODES / "l4x8.yaml"), "--explain"])
    out = capsys.readouterr().out
    assert code == 0 and "ADMIT   inferenceservice/qwen2-5-vl-7b-instruct" in out, out
    assert "arg --model-path (via env MODEL_PATH) → catalog qwen2.5-vl-7b-instruct" in out


def test_an_inference_service_alone_says_what_is_missing_and_is_admitted(capsys: pytest.CaptureFixture[str]) -> None:
    isvc, ctx = isvc_with("isvc-qwen2-5-vl-7b-instruct.yaml")
    rs = roles(isvc, ctx)
    assert rs is not None and rs.roles == ()
    text = " ".join(rs.warnings)
    assert "ClusterBaseModel 'qwen2-5-vl-7b-instruct' is not visible in the files given" in text
    assert "no container to judge" in text
    # At admission nothing else is visible: still no rejection, and the reason is given.
    rs = roles(isvc, Context())
    assert rs is not None and rs.roles == () and "to vramgate at admission" in rs.warnings[0]


def test_pd_disaggregation_over_two_node_groups(capsys: pytest.CaptureFixture[str]) -> None:
    isvc, ctx = isvc_with("isvc-deepseek-v3-pd.yaml", "basemodel-deepseek-ai-deepseek-v3.yaml",
                          "runtime-deepseek-rdma-pd-rt.yaml")
    rs = roles(isvc, ctx)
    assert rs is not None and rs.grouped
    by = {r.name: r for r in rs.roles}
    assert set(by) == {"engine leader", "engine worker", "decoder leader", "decoder worker"}
    for r in rs.roles:
        assert r.group_size == 2 and r.replicas == 1  # a leader and worker.size 1 worker
        (c,) = [c for c in r.view.spec["containers"] if c["name"] == "ome-container"]
        assert env(c)["PARALLELISM_SIZE"] == "16" and env(c)["MODEL_PATH"] == "/raid/models/deepseek-ai/deepseek-v3"
    files = [str(HERE / n) for n in ("isvc-deepseek-v3-pd.yaml", "basemodel-deepseek-ai-deepseek-v3.yaml",
                                     "runtime-deepseek-rdma-pd-rt.yaml")]
    code = main(["check", "-f", *files, "--nodes", str(NODES / "h200x8.yaml")])
    out = capsys.readouterr().out
    assert code == 0 and out.count("ADMIT   inferenceservice/deepseek-v3") == 4 and "on each of 16 GPUs" in out, out


def _runtime(name: str, arch: str, priority: int, size: tuple[str, str] = ("1B", "10B"),
             auto: bool = True) -> dict[str, Any]:
    return {"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime", "metadata": {"name": name},
            "spec": {"modelSizeRange": {"min": size[0], "max": size[1]},
                     "supportedModelFormats": [{"modelFormat": {"name": "safetensors"}, "modelArchitecture": arch,
                                                "autoSelect": auto, "priority": priority}],
                     "engineConfig": {"runner": {"name": "ome-container", "image": name,
                                                 "resources": {"limits": {"nvidia.com/gpu": 1}}}}}}


def _selected(objs: list[dict[str, Any]], base_spec: dict[str, Any]) -> tuple[str | None, tuple[str, ...]]:
    base = {"apiVersion": "ome.io/v1beta1", "kind": "ClusterBaseModel", "metadata": {"name": "m"}, "spec": base_spec}
    isvc = {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "s", "namespace": "ml"},
            "spec": {"model": {"name": "m"}, "engine": {"minReplicas": 1}}}
    rs = roles(isvc, Context(runtimes=Runtimes.of([base, *objs])))
    assert rs is not None
    return (rs.roles[0].view.spec["containers"][0]["image"] if rs.roles else None), rs.warnings


def test_runtime_selection_follows_omes_matcher() -> None:
    stated = {"modelFormat": {"name": "safetensors"}, "modelArchitecture": "LlamaForCausalLM",
              "modelParameterSize": "8B", "quantization": None}
    rts = [_runtime("low", "LlamaForCausalLM", 1), _runtime("high", "LlamaForCausalLM", 5),
           _runtime("other-arch", "Qwen2ForCausalLM", 9), _runtime("too-small", "LlamaForCausalLM", 9, ("1B", "3B")),
           _runtime("manual", "LlamaForCausalLM", 9, auto=False)]
    assert _selected(rts, stated) == ("high", ())
    # A KServe runtime of a matching name and shape is another group's: never selected.
    kserve = {**_runtime("kserve", "LlamaForCausalLM", 99), "apiVersion": "serving.kserve.io/v1alpha1"}
    assert _selected([kserve], stated)[0] is None
    # The BaseModel as published states nothing the selector compares: one candidate is taken, said so; two are
    # not guessed between.
    image, warnings = _selected([rts[0]], {})
    assert image == "low" and "does not state its modelFormat" in warnings[0]
    image, warnings = _selected(rts[:2], {})
    assert image is None and any("2 auto-select runtimes could serve" in w for w in warnings)


def test_a_named_runtime_is_used_and_the_engine_overrides_it() -> None:
    rt = _runtime("srt", "LlamaForCausalLM", 1)
    rt["spec"]["engineConfig"]["runner"]["env"] = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    rt["spec"]["engineConfig"]["runner"]["args"] = ["--x"]
    isvc = {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "s"},
            "spec": {"model": {"name": "absent"}, "runtime": {"name": "srt"},
                     "engine": {"minReplicas": 3, "runner": {"name": "ome-container",
                                                             "env": [{"name": "B", "value": "9"}], "args": ["--y"],
                                                             "resources": {"limits": {"nvidia.com/gpu": 2}}}}}}
    rs = roles(isvc, Context(runtimes=Runtimes.of([rt])))
    assert rs is not None
    (engine,) = rs.roles
    (c,) = engine.view.spec["containers"]
    assert engine.replicas == 3 and c["image"] == "srt" and c["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert env(c) == {"A": "1", "B": "9", "PARALLELISM_SIZE": "2"}
    assert c["args"] == ["--y"]  # the InferenceService's runner replaces the runtime's args (strategic merge)
    assert any("'absent' is not visible" in w for w in rs.warnings)


def test_merge_helpers() -> None:
    assert merge({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": 3}, "l": [2], "n": None}) == {"a": {"b": 3, "c": 2},
                                                                                              "l": [2]}
    merged = merge({"env": [{"name": "X", "valueFrom": {"fieldRef": {}}}]}, {"env": [{"name": "X", "value": "1"}]})
    assert merged == {"env": [{"name": "X", "value": "1"}]}
    assert merge_runner({"name": "c", "args": ["--a"]}, {"name": "c", "args": ["--b"], "image": "i"}) == {
        "name": "c", "args": ["--a", "--b"], "image": "i"}
    assert model_size("7B") == 7e9 and model_size("568M") == 568e6 and model_size("1.5T") == 1.5e12
    assert model_size("big") is None and model_size(None) is None


def test_an_inference_service_without_api_version_is_not_guessed_between_kserve_and_ome() -> None:
    key, note = reader_key({"kind": "InferenceService"})
    assert key is None and "ome.io and serving.kserve.io both have one" in note
    rs = roles({"kind": "InferenceService", "metadata": {"name": "x"},
                "spec": {"predictor": {"containers": [{"name": "c", "image": "i"}]}}})
    assert rs is not None and any("read generically" in w for w in rs.warnings)


def test_the_published_reranker_is_admitted(capsys: pytest.CaptureFixture[str]) -> None:
    # Its runtime starts SGLang with --chunked-prefill-size -1 (chunked prefill off): never a rejection.
    files = [str(HERE / n) for n in ("isvc-bge-reranker-v2-m3.yaml", "basemodel-baai-bge-reranker-v2-m3.yaml",
                                     "runtime-baai-bge-reranker-v2-m3-rt.yaml")]
    code = main(["check", "-f", *files, "--nodes", str(NODES / "l4x8.yaml"), "--explain"])
    out = capsys.readouterr().out
    assert code == 0 and "ADMIT   inferenceservice/bge-reranker-v2-m3" in out and "catalog bge-reranker-v2-m3" in out
    assert "the only auto-select runtime visible that can match" in out, out
