"""What each engine's users write, read into one demand: flags, env twins, images, launchers."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.config import Config
from webhook.decide.demand import DeclarationError, Demand, read_demand
from webhook.kinds import pod_view
from webhook.models.catalog import builtin_catalog

CFG = Config()


def pod(*containers: dict[str, Any], annotations: dict[str, str] | None = None,
        init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    return {"kind": "Pod", "metadata": {"name": "p", "annotations": annotations or {}}, "spec": spec}


def gpu(image: str, gpus: int = 1, **fields: Any) -> dict[str, Any]:
    return {"name": "main", "image": image, "resources": {"limits": {"nvidia.com/gpu": gpus}}, **fields}


def env(**values: str) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def demand(obj: dict[str, Any]) -> Demand:
    view = pod_view(obj)
    assert view is not None
    d = read_demand(view, CFG, builtin_catalog())
    assert d is not None
    return d


def reading(d: Demand) -> tuple[Any, ...]:
    assert d.estimate is not None, d.warnings
    r = d.estimate.request
    return d.engine, r.engine_version, d.spec.name if d.spec else None, r.precision, r.context, r.gpus


def test_vllm_flags_every_spelling() -> None:
    d = demand(pod(gpu("vllm/vllm-openai:v0.8.5", 2, args=[
        "--model=Qwen/Qwen2.5-7B-Instruct-AWQ", "--max_model_len", "16384", "-tp", "2", "--max-num-seq", "64",
        "--kv-cache-dtype", "fp8", "--enforce-eager", "--gpu-memory-utilization=0.85"])))
    assert reading(d) == ("vllm", (0, 8, 5), "qwen2.5-7b-instruct", "int4", 16384, 2)
    r = d.estimate.request  # type: ignore[union-attr]
    assert (r.max_num_seqs, r.kv_cache_dtype, r.enforce_eager, r.batch, d.utilization) == (64, "fp8", True, 1, 0.85)
    assert ("context", "arg --max_model_len") in d.sources


def test_vllm_python_module_in_a_shell_script_with_env() -> None:
    d = demand(pod(gpu("vllm/vllm-openai:latest", command=["/bin/bash", "-c"], args=[
        "set -ex\npython3 -m vllm.entrypoints.openai.api_server \\\n  --model $MODEL_NAME \\\n"
        "  --max-model-len ${MAX_LEN:-4096} --dtype half"], env=env(MODEL_NAME="meta-llama/Llama-3.1-8B-Instruct"))))
    assert reading(d) == ("vllm", None, "llama-3.1-8b-instruct", "fp16", 4096, 1)


def test_vllm_use_v1_and_v0_defaults() -> None:
    d = demand(pod(gpu("vllm/vllm-openai:v0.9.2", args=["--model", "meta-llama/Llama-3.1-8B-Instruct",
                                                         "--max-model-len", "8192"], env=env(VLLM_USE_V1="0"))))
    assert d.estimate is not None and d.estimate.request.legacy_engine
    assert "V0" in d.estimate.notes[0]


def test_tgi_env_twins_and_quantization_by_env() -> None:
    d = demand(pod(gpu("ghcr.io/huggingface/text-generation-inference:2.4.0", env=env(
        MODEL_ID="Qwen/Qwen2.5-7B-Instruct", QUANTIZE="awq", MAX_TOTAL_TOKENS="8192", MAX_INPUT_TOKENS="7168",
        MAX_BATCH_PREFILL_TOKENS="8242", NUM_SHARD="1"))))
    assert reading(d) == ("tgi", (2, 4, 0), "qwen2.5-7b-instruct", "int4", 8192, 1)
    assert d.estimate is not None and d.estimate.request.prefill_tokens == 8242
    assert ("precision", "env QUANTIZE") in d.sources


def test_tgi_flags_win_over_env_and_default_context_by_version() -> None:
    d = demand(pod(gpu("ghcr.io/huggingface/text-generation-inference:1.4", args=[
        "--model-id", "meta-llama/Llama-3.1-8B-Instruct", "--num-shard", "1"], env=env(MODEL_ID="other/model"))))
    assert reading(d)[2:5] == ("llama-3.1-8b-instruct", "bf16", 2048)


def test_sglang_launch_server() -> None:
    d = demand(pod(gpu("lmsysorg/sglang:v0.4.6.post1-cu124", 4, command=["python3", "-m", "sglang.launch_server"],
                       args=["--model-path", "Qwen/Qwen2.5-72B-Instruct", "--tp", "4", "--context-length", "32768",
                             "--mem-fraction-static", "0.8"])))
    assert reading(d) == ("sglang", (0, 4, 6), "qwen2.5-72b-instruct", "bf16", 32768, 4)
    assert d.utilization == 0.8


def test_sglang_default_fraction_by_tp() -> None:
    d = demand(pod(gpu("lmsysorg/sglang:latest", 8, command=["python3", "-m", "sglang.launch_server", "--model",
                                                                "Qwen/Qwen2.5-72B-Instruct", "--tp-size", "8"])))
    assert d.utilization == 0.81


def test_llamacpp_gguf_file_and_env() -> None:
    d = demand(pod(gpu("ghcr.io/ggml-org/llama.cpp:server-cuda", args=[
        "-m", "/models/qwen2.5-7b-instruct-q4_k_m.gguf", "-c", "16384", "-ngl", "99", "-np", "4"])))
    # -c 16384 shared by -np 4 slots: 4096 tokens per sequence, 16384 of KV in all.
    assert reading(d) == ("llama.cpp", None, "qwen2.5-7b-instruct", "q4_k_m", 4096, 1)
    assert d.estimate is not None and d.estimate.request.gpu_layers == 99 and d.estimate.request.slots == 4
    e = demand(pod(gpu("ghcr.io/ggml-org/llama.cpp:server-cuda", env=env(
        LLAMA_ARG_HF_REPO="bartowski/Meta-Llama-3.1-8B-Instruct-GGUF:Q8_0", LLAMA_ARG_CTX_SIZE="8192",
        LLAMA_ARG_N_GPU_LAYERS="999"))))
    assert reading(e)[2:5] == ("llama-3.1-8b-instruct", "q8_0", 8192)


def test_ollama_model_from_a_lifecycle_hook_and_env() -> None:
    c = gpu("ollama/ollama:0.6.8", env=env(OLLAMA_CONTEXT_LENGTH="8192", OLLAMA_NUM_PARALLEL="2"),
            lifecycle={"postStart": {"exec": {"command": ["/bin/sh", "-c", "sleep 5; ollama pull qwen2.5:14b"]}}})
    d = demand(pod(c))
    assert reading(d) == ("ollama", (0, 6, 8), "qwen2.5-14b-instruct", "q4_k_m", 8192, 1)
    assert d.estimate is not None and d.estimate.request.slots == 2
    assert d.estimate.low_per_gpu_mib < d.estimate.per_gpu_mib / 2  # Ollama spills to the CPU


def test_ollama_model_from_an_init_container() -> None:
    init = [{"name": "pull", "image": "ollama/ollama:0.5.7", "command": ["ollama", "pull", "llama3.1:8b"]}]
    d = demand(pod(gpu("ollama/ollama:0.5.7"), init=init))
    assert reading(d)[:5] == ("ollama", (0, 5, 7), "llama-3.1-8b-instruct", "q4_k_m", 2048)


def test_nim_image_names_the_model() -> None:
    d = demand(pod(gpu("nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3", env=env(NIM_MAX_MODEL_LEN="16384"))))
    assert reading(d)[0:5] == ("nim", None, "llama-3.1-8b-instruct", "bf16", 16384)
    p = demand(pod(gpu("nvcr.io/nim/meta/llama-3.1-70b-instruct:1.3.3", 2, env=env(
        NIM_MODEL_PROFILE="tensorrt_llm-h100-fp8-tp2-throughput"))))
    assert reading(p)[3] == "fp8"


def test_trainers_qlora_with_torchrun() -> None:
    d = demand(pod(gpu("pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime", 2, command=["torchrun"], args=[
        "--nproc_per_node", "2", "sft.py", "--model_name_or_path", "meta-llama/Llama-3.1-8B-Instruct",
        "--use_peft", "--lora_r", "32", "--load_in_4bit", "--max_seq_length", "4096",
        "--per_device_train_batch_size", "2", "--gradient_checkpointing", "True"])))
    assert d.workload == "training"
    assert reading(d) == ("trainer", None, "llama-3.1-8b-instruct", "nf4", 4096, 2)
    r = d.estimate.request  # type: ignore[union-attr]
    assert (r.finetune, r.lora_rank, r.batch, r.gradient_checkpointing) == ("qlora", 32, 2, True)


def test_llamafactory_and_deepspeed_zero3() -> None:
    d = demand(pod(gpu("hiyouga/llamafactory:latest", 8, command=["llamafactory-cli", "train"], args=[
        "--model_name_or_path", "Qwen/Qwen2.5-7B-Instruct", "--finetuning_type", "full",
        "--deepspeed", "examples/deepspeed/ds_z3_config.json", "--cutoff_len", "2048"])))
    r = d.estimate.request  # type: ignore[union-attr]
    assert (r.finetune, r.parallelism, r.context) == ("full", "zero3", 2048)


def test_annotations_for_engine_and_training_knobs() -> None:
    d = demand(pod(gpu("acme/trainer:1"), annotations={
        "vramgate.io/model": "llama-3.1-8b-instruct", "vramgate.io/workload": "training",
        "vramgate.io/finetune": "lora", "vramgate.io/parallelism": "fsdp",
        "vramgate.io/gradient-checkpointing": "false"}))
    r = d.estimate.request  # type: ignore[union-attr]
    assert (r.finetune, r.parallelism, r.gradient_checkpointing) == ("lora", "fsdp", False)
    with pytest.raises(DeclarationError, match=r"vramgate\.io/engine"):
        demand(pod(gpu("x"), annotations={"vramgate.io/engine": "warp-drive", "vramgate.io/model-params": "7B"}))
    with pytest.raises(DeclarationError, match=r"vramgate\.io/finetune"):
        demand(pod(gpu("x"), annotations={"vramgate.io/model-params": "7B", "vramgate.io/workload": "training",
                                            "vramgate.io/finetune": "partial"}))


def test_engine_version_annotation_beats_the_image() -> None:
    d = demand(pod(gpu("vllm/vllm-openai:latest", args=["--model", "meta-llama/Llama-3.1-8B-Instruct"]),
                   annotations={"vramgate.io/engine-version": "0.6.3"}))
    assert reading(d)[1] == (0, 6, 3)


@pytest.mark.parametrize("reference", [
    "hf://meta-llama/Llama-3.1-8B-Instruct", "pvc://models-pvc/llama/Meta-Llama-3.1-8B-Instruct",
    "/models/Meta-Llama-3.1-8B-Instruct", "s3://bucket/path/Llama-3.1-8B-Instruct/",
])
def test_model_uris_and_paths(reference: str) -> None:
    d = demand(pod(gpu("vllm/vllm-openai:v0.10.1", command=["vllm", "serve", reference])))
    assert d.spec is not None and d.spec.name == "llama-3.1-8b-instruct"


def test_unknown_model_gets_one_warning_naming_the_annotation() -> None:
    d = demand(pod(gpu("vllm/vllm-openai:v0.10.1", command=["vllm", "serve", "/models/my-finetune"])))
    assert d.estimate is None
    assert [w for w in d.warnings if "vramgate.io/model" in w]
    nothing = demand(pod(gpu("vllm/vllm-openai:v0.10.1")))
    assert any("set the vramgate.io/model annotation" in w for w in nothing.warnings)


def test_unknown_engine_kv_dtype_is_a_warning_not_a_rejection() -> None:
    d = demand(pod(gpu("vllm/vllm-openai:v0.10.1", args=["--model", "meta-llama/Llama-3.1-8B-Instruct",
                                                          "--kv-cache-dtype", "fp8_inc"])))
    assert any("fp8_inc" in w for w in d.warnings)


def test_vllm_on_several_gpus_without_tp_is_priced_on_one() -> None:
    # vLLM's tensor_parallel_size defaults to 1 (vllm/config.py ParallelConfig): the model sits on one GPU.
    d = demand(pod(gpu("vllm/vllm-openai:v0.10.1", 2, args=["--model", "meta-llama/Llama-3.1-8B-Instruct"])))
    assert any("--tensor-parallel-size 2" in w for w in d.warnings)
    assert d.estimate is not None and d.estimate.request.gpus == 1 and d.gpus == 2
    # KServe's Hugging Face server and bare images may set it where vramgate cannot see: split as requested.
    hf = demand(pod(gpu("kserve/huggingfaceserver:v0.15.0", 2, args=[
        "--model_name=llama", "--model_id=meta-llama/Llama-3.1-8B-Instruct", "--max_model_len", "8192"])))
    assert hf.engine == "vllm" and hf.estimate is not None and hf.estimate.request.gpus == 2
    assert hf.spec is not None and hf.spec.name == "llama-3.1-8b-instruct"
