"""Reading what a workload declares: annotations, env, engine args, image tags, and their errors."""

import pytest

from webhook.config import Config
from webhook.decide.demand import DeclarationError, Demand, read_demand
from webhook.engines import read_container
from webhook.kinds import pod_view
from webhook.models.catalog import Catalog, ModelSpec, params_from_name
from webhook.units.declaration import quant_in_model_id

from .helpers import container, deployment, pod

CFG = Config()
LLAMA3 = ModelSpec(
    name="llama-3-8b-instruct", aliases=("meta-llama/Meta-Llama-3-8B-Instruct", "llama3-8b"), params=8.03e9,
    layers=32, hidden_size=4096, heads=32, kv_heads=8, head_dim=128, vocab_size=128256, context=8192, dtype="bf16",
)
QWEN = ModelSpec(
    name="qwen2.5-7b-instruct", aliases=("Qwen/Qwen2.5-7B-Instruct",), params=7.62e9, layers=28, hidden_size=3584,
    heads=28, kv_heads=4, head_dim=128, vocab_size=152064, context=32768, dtype="bf16",
)
CAT = Catalog([LLAMA3, QWEN])


def demand_of(obj: dict, config: Config = CFG) -> Demand | None:
    view = pod_view(obj)
    assert view is not None
    return read_demand(view, config, CAT)


def test_no_gpu_means_no_demand() -> None:
    assert demand_of(pod(container(gpus=None))) is None
    assert demand_of(pod(container(gpus=0))) is None


def test_gpu_count_sums_app_containers_and_takes_max_init() -> None:
    d = demand_of(pod(container("a", 2), container("b", 1), init=[container("i", 4)],
                      annotations={"vramgate.io/vram": "10Gi"}))
    assert d is not None and d.gpus == 4 and d.per_gpu_mib == 2560


def test_requests_without_limits_count() -> None:
    c = {"name": "a", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "2"}}}
    d = demand_of(pod(c))
    assert d is not None and d.gpus == 2


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "CronJob"])
def test_every_workload_kind(kind: str) -> None:
    d = demand_of(deployment(container(env={"MODEL_NAME": "llama-3-8b-instruct"}), kind=kind))
    assert d is not None and d.spec is LLAMA3
    assert d.tier == ("batch" if kind in ("Job", "CronJob") else "production")


def test_seed_env_model_and_batch() -> None:
    # vLLM's image: MAX_BATCH_SIZE is not a vLLM setting, and concurrency reserves nothing (CONTRACT §3).
    d = demand_of(pod(container(env={"MODEL_NAME": "llama-3-8b-instruct", "MAX_BATCH_SIZE": "16"})))
    assert d is not None and d.estimate is not None
    req = d.estimate.request
    assert (req.context, req.batch, req.precision, d.engine) == (8192, 1, "bf16", "vllm")
    assert d.utilization == 0.9
    # An engine vramgate does not model: MAX_BATCH_SIZE is read as the reservation it names.
    other = demand_of(pod(container(image="acme/server:1", env={"MODEL_NAME": "llama-3-8b-instruct",
                                                                 "MAX_BATCH_SIZE": "16"})))
    assert other is not None and other.estimate is not None and other.estimate.request.batch == 16


def test_annotations_win_over_env_and_args() -> None:
    ann = {"vramgate.io/model": "llama3-8b", "vramgate.io/context-length": "4096", "vramgate.io/batch-size": "2",
           "vramgate.io/precision": "fp8", "vramgate.io/gpu-memory-utilization": "0.8"}
    c = container(env={"MODEL_NAME": "qwen2.5-7b-instruct", "MAX_BATCH_SIZE": "9"},
                  args=["--max-model-len", "1000", "--dtype", "half"])
    d = demand_of(pod(c, annotations=ann))
    assert d is not None and d.spec is LLAMA3 and d.estimate is not None
    assert (d.estimate.request.context, d.estimate.request.batch, d.estimate.request.precision) == (4096, 2, "fp8")
    assert d.utilization == 0.8


def test_vllm_serve_positional_and_flags() -> None:
    c = container(command=["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct-AWQ"],
                  args=["--max-model-len=16384", "--max-num-seqs", "4", "--kv-cache-dtype", "fp8",
                        "--gpu-memory-utilization", "0.95"])
    d = demand_of(pod(c))
    assert d is not None and d.spec is QWEN and d.estimate is not None
    r = d.estimate.request
    assert (r.precision, r.context, r.batch, r.kv_cache_dtype, d.utilization) == ("int4", 16384, 1, "fp8", 0.95)
    assert r.max_num_seqs == 4  # a cap on concurrency, not a reservation


def test_shell_script_command_is_tokenized() -> None:
    c = container(command=["/bin/sh", "-c"], args=["exec python3 -m vllm.entrypoints.openai.api_server "
                                                   "--model meta-llama/Meta-Llama-3-8B-Instruct --max-model-len 2048"])
    d = demand_of(pod(c))
    assert d is not None and d.spec is LLAMA3 and d.estimate is not None and d.estimate.request.context == 2048


def test_quantization_flag_beats_dtype() -> None:
    c = container(args=["--model", "llama3-8b", "--dtype", "half", "--quantization", "awq"])
    d = demand_of(pod(c))
    assert d is not None and d.estimate is not None and d.estimate.request.precision == "int4"


def test_tgi_and_llamacpp_flags() -> None:
    tgi = container(image="ghcr.io/huggingface/text-generation-inference:2.4",
                    args=["--model-id", "Qwen/Qwen2.5-7B-Instruct", "--max-total-tokens", "8192", "--quantize", "fp8"])
    d = demand_of(pod(tgi))
    assert d is not None and d.engine == "tgi" and d.estimate is not None
    assert (d.estimate.request.context, d.estimate.request.precision) == (8192, "fp8")
    lcpp = container(image="ghcr.io/ggerganov/llama.cpp:server",
                     args=["-m", "/models/llama3-8b.Q4_K_M.gguf", "-c", "4096"])
    d2 = demand_of(pod(lcpp, annotations={"vramgate.io/model-params": "8B"}))
    assert d2 is not None and d2.engine == "llama.cpp" and d2.estimate is not None
    assert (d2.estimate.request.precision, d2.estimate.request.context) == ("q4_k_m", 4096)


def test_explicit_vram_skips_estimation() -> None:
    d = demand_of(pod(container(gpus=2, env={"MODEL_NAME": "llama3-8b"}), annotations={"vramgate.io/vram": "40Gi"}))
    assert d is not None and d.estimate is None and d.total_mib == 40960 and d.per_gpu_mib == 20480


def test_params_override_catalog_and_unknown_model_guess() -> None:
    d = demand_of(pod(container(), annotations={"vramgate.io/model": "llama3-8b", "vramgate.io/model-params": "9B"}))
    assert d is not None and d.estimate is not None and d.estimate.request.params == 9e9
    guess = demand_of(pod(container(env={"MODEL_ID": "acme/coder-13b-chat"})))
    assert guess is not None and guess.estimate is not None and guess.estimate.request.params == 13e9
    assert any("not in the catalog" in w for w in guess.warnings)
    nothing = demand_of(pod(container(env={"MODEL": "/models/finetune"})))
    assert nothing is not None and nothing.estimate is None and nothing.per_gpu_mib is None
    assert nothing.warnings


@pytest.mark.parametrize(
    ("annotations", "where"),
    [({"vramgate.io/model-params": "lots"}, "vramgate.io/model-params"),
     ({"vramgate.io/vram": "big"}, "vramgate.io/vram"),
     ({"vramgate.io/precision": "fp9", "vramgate.io/model-params": "7B"}, "vramgate.io/precision"),
     ({"vramgate.io/context-length": "-1", "vramgate.io/model-params": "7B"}, "vramgate.io/context-length"),
     ({"vramgate.io/batch-size": "x", "vramgate.io/model-params": "7B"}, "vramgate.io/batch-size"),
     ({"vramgate.io/gpu-memory-utilization": "1.5", "vramgate.io/vram": "1Gi"}, "vramgate.io/gpu-memory-utilization"),
     ({"vramgate.io/workload": "gaming"}, "vramgate.io/workload"),
     ({"vramgate.io/tier": "gold"}, "vramgate.io/tier"),
     ({"vramgate.io/cuda": "twelve"}, "vramgate.io/cuda"),
     ({"vramgate.io/placement": "random"}, "vramgate.io/placement"),
     ({"vramgate.io/model": "no-such-model"}, "vramgate.io/model"),
     ({"vramgate.io/kv-cache-dtype": "int3", "vramgate.io/model-params": "7B"}, "vramgate.io/kv-cache-dtype")],
)
def test_malformed_values_name_annotation_value_and_accepted(annotations: dict[str, str], where: str) -> None:
    with pytest.raises(DeclarationError) as info:
        demand_of(pod(container(), annotations=annotations))
    message = str(info.value)
    assert message.startswith(where) and repr(annotations[where]) in message and ("use" in message or "set" in message)


def test_malformed_arg_names_the_arg() -> None:
    with pytest.raises(DeclarationError, match="arg --max-model-len"):
        demand_of(pod(container(args=["--model", "llama3-8b", "--max-model-len", "lots"])))


def test_bad_gpu_quantity() -> None:
    c = {"name": "a", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "two"}}}
    with pytest.raises(DeclarationError, match=r"nvidia\.com/gpu"):
        demand_of(pod(c))


def test_cuda_from_annotation_image_and_env() -> None:
    one = {"vramgate.io/vram": "1Gi"}
    d = demand_of(pod(container(image="nvidia/cuda:12.2.0-runtime-ubuntu22.04"), annotations=one))
    assert d is not None and d.cuda == (12, 2)
    d = demand_of(pod(container(image="pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"),
                      annotations={"vramgate.io/vram": "1Gi"}))
    assert d is not None and d.cuda == (12, 1)
    d = demand_of(pod(container(image="x", env={"CUDA_VERSION": "11.8.0"}), annotations={"vramgate.io/vram": "1Gi"}))
    assert d is not None and d.cuda == (11, 8)
    d = demand_of(pod(container(image="nvidia/cuda:12.2.0-base"), annotations={"vramgate.io/vram": "1Gi",
                                                                               "vramgate.io/cuda": "13.0"}))
    assert d is not None and d.cuda == (13, 0)


def test_tensor_parallel_mismatch_warns() -> None:
    d = demand_of(pod(container(gpus=2, args=["--model", "llama3-8b", "--tensor-parallel-size", "4"])))
    assert d is not None and any("tensor-parallel-size=4" in w for w in d.warnings)


def test_training_workload() -> None:
    d = demand_of(pod(container(), annotations={"vramgate.io/model": "llama3-8b", "vramgate.io/workload": "training"}))
    assert d is not None and d.estimate is not None and d.workload == "training"
    assert d.estimate.optimizer_mib > 0 and d.estimate.request.context == 2048 and d.utilization == 1.0


def test_job_pod_is_batch_tier_through_owner() -> None:
    p = pod(container(), annotations={"vramgate.io/vram": "1Gi"})
    p["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "j", "controller": True, "apiVersion": "batch/v1",
                                         "uid": "1"}]
    d = demand_of(p)
    assert d is not None and d.tier == "batch"


def test_token_and_id_helpers() -> None:
    shell = read_container({"command": ["bash", "-c", "vllm serve m --max-model-len 1"]})
    assert shell.commands[0].words == ("vllm", "serve", "m", "--max-model-len", "1")
    assert shell.settings is not None and shell.settings.value("model") == "m"
    assert shell.settings.value("context") == "1"
    flags = read_container({"image": "vllm/vllm-openai:v0.8.5", "args": ["--max-model-len=1", "--dtype", "half"]})
    assert flags.settings is not None and flags.settings.value("dtype") == "half"
    assert read_container({"command": ["/usr/bin/vllm", "serve", "m"]}).settings.value("model") == "m"  # type: ignore[union-attr]
    module = read_container({"command": ["python3", "-m", "vllm.entrypoints.openai.api_server"]})
    assert module.engine == "vllm" and module.settings is not None and module.settings.get("model") is None
    assert quant_in_model_id("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4") == "int4"
    assert quant_in_model_id("TheBloke/Llama-2-7B-AWQ") == "awq"
    assert quant_in_model_id("neuralmagic/Meta-Llama-3-8B-Instruct-FP8") == "fp8"
    assert quant_in_model_id("llama-3-8b.Q8_0.gguf") == "q8_0"
    assert quant_in_model_id("meta-llama/Meta-Llama-3-8B") is None
    assert params_from_name("mistralai/Mixtral-8x7B-v0.1") is None
    assert params_from_name("acme/thing-1.5B") == 1.5e9


def test_catalog_lookup_ignores_case_org_and_quant_suffix() -> None:
    assert CAT.lookup("META-LLAMA/meta-llama-3-8b-instruct") is LLAMA3
    assert CAT.lookup("Meta-Llama-3-8B-Instruct") is LLAMA3
    assert CAT.lookup("Qwen/Qwen2.5-7B-Instruct-AWQ") is QWEN
    assert CAT.lookup("nope") is None and CAT.lookup("") is None
