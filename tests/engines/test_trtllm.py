"""TensorRT-LLM: its launchers' flags, the LLM API YAML, and the 15 published manifests of tests/fixtures/trtllm."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from webhook.cli.main import main
from webhook.engines import engine_named, estimate, read_container
from webhook.models.catalog import builtin_catalog
from webhook.models.vram import EstimateRequest

CORPUS = Path(__file__).parents[1] / "fixtures" / "trtllm"
ENGINE = engine_named("trtllm")
assert ENGINE is not None


def _read(command: list[str], image: str = "nvcr.io/nvidia/tensorrt-llm/release:1.1.0",
          env: dict[str, str] | None = None) -> Any:
    container: dict[str, Any] = {"name": "c", "image": image, "command": command}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return read_container(container).settings


def test_trtllm_serve_underscore_flags() -> None:
    s = _read(["trtllm-serve", "serve", "Qwen/Qwen3-8B", "--tp_size", "2", "--pp_size", "2", "--ep_size", "2",
               "--max_batch_size", "64", "--max_num_tokens", "4096", "--max_seq_len", "16384",
               "--kv_cache_free_gpu_memory_fraction", "0.7", "--backend", "pytorch",
               "--extra_llm_api_options", "/cfg/x.yaml"])
    assert s.engine == "trtllm" and s.version == (1, 1, 0)
    got = {k: s.value(k) for k in ("model", "tp", "pp", "ep_size", "max_seqs", "batched_tokens", "context",
                                   "free_fraction", "backend", "config")}
    assert got == {"model": "Qwen/Qwen3-8B", "tp": "2", "pp": "2", "ep_size": "2", "max_seqs": "64",
                   "batched_tokens": "4096", "context": "16384", "free_fraction": "0.7", "backend": "pytorch",
                   "config": "/cfg/x.yaml"}
    # The free fraction is of memory free after the weights, never the core's whole-GPU share.
    assert s.value("util") is None


@pytest.mark.parametrize("flag,alias", [("--tensor_parallel_size", "tp"), ("--pipeline_parallel_size", "pp"),
                                        ("--moe_expert_parallel_size", "ep_size"),
                                        ("--free_gpu_memory_fraction", "free_fraction"), ("--config", "config")])
def test_long_aliases(flag: str, alias: str) -> None:
    s = _read(["trtllm-serve", "m", flag, "4"])
    assert s.value(alias) == "4"


def test_serve_without_the_subcommand_and_after_mpirun() -> None:
    s = _read(["sh", "-c", "mpirun -n 2 --allow-run-as-root trtllm-llmapi-launch trtllm-serve /models/Qwen3-8B "
                           "--tp_size 2 --host 0.0.0.0"])
    assert s.engine == "trtllm" and s.value("model") == "/models/Qwen3-8B" and s.value("tp") == "2"
    assert _read(["trtllm-llmapi-launch", "python3", "run.py"]).engine == "trtllm"


def test_release_image_alone() -> None:
    s = _read([], image="nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc1")
    assert s.engine == "trtllm" and s.version == (1, 2, 0)


def test_dynamo_worker_flags() -> None:
    s = _read(["python3", "-m", "dynamo.trtllm", "--model-path", "/model-cache/deepseek-r1-fp4",
               "--served-model-name", "deepseek-ai/DeepSeek-R1", "--extra_engine_args", "/config/c.yaml",
               "--tensor-parallel-size", "8", "--expert-parallel-size", "8", "--max-batch-size", "8",
               "--max-num-tokens", "1024", "--max-seq-len", "8192", "--free-gpu-memory-fraction", "0.85"],
              image="nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.0.2")
    assert s.engine == "trtllm" and s.version is None  # the Dynamo image's tag is Dynamo's version
    assert s.value("model") == "deepseek-ai/DeepSeek-R1"
    assert s.value("quantization") == "nvfp4"  # the checkpoint path says FP4
    assert (s.value("tp"), s.value("ep_size"), s.value("max_seqs"), s.value("batched_tokens"),
            s.value("context"), s.value("free_fraction"), s.value("config")) == \
        ("8", "8", "8", "1024", "8192", "0.85", "/config/c.yaml")


def test_modelopt_fp4_id_is_the_base_model() -> None:
    s = _read(["python3", "-m", "dynamo.trtllm", "--model-path", "nvidia/DeepSeek-V3.2-NVFP4"])
    assert s.value("model") == "DeepSeek-V3.2" and s.value("quantization") == "nvfp4"


def test_other_engines_are_not_taken() -> None:
    assert read_container({"image": "vllm/vllm-openai:v0.10.1", "command": ["vllm", "serve", "m"]}).engine == "vllm"
    assert read_container({"image": "nvcr.io/nim/meta/llama3-8b-instruct:1.0.3"}).engine == "nim"


YAML = """
backend: pytorch
tensor_parallel_size: 8
moe_expert_parallel_size: 8
pipeline_parallel_size: 1
enable_attention_dp: true
max_batch_size: 256
max_num_tokens: 2048
max_seq_len: 9216
cuda_graph_config:
  enable_padding: true
  max_batch_size: 64
kv_cache_config:
  dtype: fp8
  free_gpu_memory_fraction: 0.6
  max_tokens: 4096
speculative_config:
  decoding_type: Eagle
  max_draft_len: 3
"""


def test_llm_api_yaml_replaces_the_flags() -> None:
    s = _read(["trtllm-serve", "m", "--max_batch_size", "8", "--tp_size", "2"])
    assert ENGINE.read_config_file is not None and ENGINE.read_config_file(s, YAML, "ConfigMap c key k")
    got = {k: s.value(k) for k in ("tp", "ep_size", "pp", "dp_attention", "max_seqs", "batched_tokens", "context",
                                   "cuda_graph_bs", "kv_dtype", "free_fraction", "kv_max_tokens", "speculative",
                                   "draft_len")}
    assert got == {"tp": "8", "ep_size": "8", "pp": "1", "dp_attention": "true", "max_seqs": "256",
                   "batched_tokens": "2048", "context": "9216", "cuda_graph_bs": "64", "kv_dtype": "fp8",
                   "free_fraction": "0.6", "kv_max_tokens": "4096", "speculative": "Eagle", "draft_len": "3"}
    assert s.get("max_seqs").source == "ConfigMap c key k max_batch_size"
    assert not ENGINE.read_config_file(s, "- a list", "x")


def test_build_config_block() -> None:
    s = _read(["trtllm-serve", "m"])
    assert ENGINE.read_config_file is not None
    ENGINE.read_config_file(s, "build_config:\n  max_num_tokens: 4608\n  max_seq_len: 1227\n", "f")
    assert (s.value("batched_tokens"), s.value("context")) == ("4608", "1227")


def test_heredoc_in_the_script_is_read() -> None:
    script = ("cat <<'EOF' > /tmp/config.yaml\nbackend: pytorch\nkv_cache_config:\n  free_gpu_memory_fraction: "
              "__F__\n  dtype: fp8\nmax_num_tokens: 4096\nmax_batch_size: 16\nEOF\n"
              "sed -i \"s/__F__/${F}/\" /tmp/config.yaml\n"
              "trtllm-serve serve /models/Qwen3-8B --extra_llm_api_options /tmp/config.yaml")
    s = _read(["bash", "-c", script], env={"F": "0.85"})
    assert (s.value("free_fraction"), s.value("kv_dtype"), s.value("batched_tokens"), s.value("max_seqs")) == \
        ("0.85", "fp8", "4096", "16")
    assert "heredoc" in s.get("batched_tokens").source


def test_plan_band_and_the_lowered_max_seq_len() -> None:
    spec = builtin_catalog().lookup("qwen3-8b")
    assert spec is not None
    req = EstimateRequest(params=spec.params, precision="bf16", spec=spec, context=40960, engine="trtllm")
    est = estimate(req)
    weights = est.weights_mib
    assert est.low_per_gpu_mib < est.per_gpu_mib < est.high_per_gpu_mib
    # The low end: weights + half the activations and fixed cost + a few KV blocks (the pool may shrink).
    assert weights < est.low_per_gpu_mib < weights + 2048
    assert any("lowers max_seq_len" in n for n in est.notes)
    gib, tokens, seqs = ENGINE.kv_pool(req, spec, 46068, 0.9) if ENGINE.kv_pool else (0, 0, 0)
    assert gib > 10 and tokens > 40960 and seqs > 1


def test_engine_fields() -> None:
    assert ENGINE.tensor_parallel and ENGINE.default_utilization is not None
    assert ENGINE.default_utilization(None, 8) == 1.0
    assert ENGINE.suggest("context", 8192) == "--max_seq_len 8192"
    assert ENGINE.fix_adds["tp"] == ("arg", "--tp_size", "{n}")
    assert "kv_dtype" not in ENGINE.fix_adds  # set in the YAML's kv_cache_config, not by a flag
    assert engine_named("tensorrt-llm") is ENGINE


# (file, inventory it was written for, inventory too small for its weights or None, roles expected to stay
# admitted on the small one: decode ranks of the wide-EP recipes hold ~20 GiB).
CASES = [
    ("01-dynamo-deepseek-r1-nvfp4-agg-b200-tp8-ep8-adp.yaml", "b200", "l40s", ()),
    ("02-dynamo-deepseek-r1-nvfp4-wideep-disagg-gb200-dep4-dep32.yaml", "gb200", "h100", ("decode",)),
    ("03-dynamo-kimi-k25-nvfp4-wideep-disagg-gb200-dep4-dep32.yaml", "gb200", "h100", ("decode",)),
    ("04-dynamo-qwen3-235b-a22b-fp8-agg-hopper-tp4-ep4.yaml", "h200", "l40s", ()),
    ("05-dynamo-qwen3-235b-a22b-fp8-disagg-hopper-tp2-tp4.yaml", "h200", "h100", ("TRTLLMDecodeWorker",)),
    ("06-dynamo-gpt-oss-120b-agg-gb200-tp4-ep4-adp.yaml", "gb200", "t4", ()),
    ("07-dynamo-kimi-k25-nvfp4-agg-eagle3-specdec-tp8-ep8.yaml", "b200", "l40s", ()),
    ("08-dynamo-deepseek-v32-nvfp4-agg-gb200-dep8-2nodes.yaml", "gb200", "l40s", ()),
    ("09-dynamo-example-qwen3-0.6b-agg-1gpu.yaml", "h100", None, ()),
    ("10-dynamo-example-qwen3-0.6b-disagg-multinode-tp8.yaml", "h100", None, ()),
    ("12-aibrix-deployment-trtllm-serve-qwen3-8b-1gpu.yaml", "h100", "t4", ()),
    ("13-aibrix-stormservice-trtllm-serve-pd-qwen3-8b.yaml", "h100", "t4", ()),
    ("15-nim-operator-nimcache-nimservice-llama3-8b-trtllm-tp1.yaml", "h100", "t4", ()),
]
SKIPPED = {
    "11-lws-triton-trtllm-llama-mpi-2nodes-pp8-tp2.yaml":
        "Triton server.py with an engine built by the image's install_model.sh: no model named in the manifest",
    "14-nim-kserve-isvc-llama3-70b-instruct-4xh100.yaml":
        "the InferenceService's NIM ServingRuntime is not in the file: the pod the engine reads is not in view",
}


def _check(tmp_path: Path, manifest: str, nodes: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    main(["check", "-o", "json", "-f", str(CORPUS / manifest), "--nodes", str(CORPUS / f"nodes-{nodes}.yaml")])
    results = json.loads(capsys.readouterr().out)["results"]
    return [r for r in results if r["kind"] not in ("ConfigMap", "Service", "ComputeDomain", "NIMCache",
                                                     "PersistentVolumeClaim") and r["role"] != "Frontend"]


def test_every_corpus_file_is_accounted_for() -> None:
    files = {p.name for p in CORPUS.glob("[0-9]*.yaml") if not p.name.endswith(".engine.yaml")}
    assert files == {c[0] for c in CASES} | set(SKIPPED)


@pytest.mark.parametrize("manifest,big,small,fit_small", CASES, ids=[c[0][:2] for c in CASES])
def test_corpus_admitted_on_its_gpus_rejected_on_small(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       manifest: str, big: str, small: str | None,
                                                       fit_small: tuple[str, ...]) -> None:
    results = _check(tmp_path, manifest, big, capsys)
    assert results
    for r in results:
        assert r["estimate"] is not None, (manifest, r["role"], r["message"])
        assert r["verdict"] == "admit", (manifest, r["role"], r["message"])
    if small is None:
        return
    for r in _check(tmp_path, manifest, small, capsys):
        want = "admit" if r["role"] in fit_small else "reject"
        assert r["verdict"] == want, (manifest, small, r["role"], r["message"])


# What each file without an estimate must say instead (never silence): the reason in its warnings.
SAYS = {
    "11-lws-triton-trtllm-llama-mpi-2nodes-pp8-tp2.yaml": "no model named anywhere in the pod",
    "14-nim-kserve-isvc-llama3-70b-instruct-4xh100.yaml": "is not visible in the files given",
}


@pytest.mark.parametrize("manifest", sorted(SKIPPED))
def test_corpus_files_without_an_estimate_say_why(manifest: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Not understood yet (SKIPPED says why): judged without an estimate, and a warning tells the user so."""
    main(["check", "-o", "json", "-f", str(CORPUS / manifest), "--nodes", str(CORPUS / "nodes-gb200.yaml")])
    every = json.loads(capsys.readouterr().out)["results"]
    results = [r for r in every if r["code"] != "no-gpu"]
    assert results
    assert all(r["estimate"] is None for r in results)
    warnings = [w for r in every for w in r["warnings"]]  # an object's warnings ride on its first result
    assert any(SAYS[manifest] in w for w in warnings), warnings
