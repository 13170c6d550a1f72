"""Weights an engine keeps in host memory: llama.cpp -ot/--cpu-moe/--n-cpu-moe, vLLM/SGLang --cpu-offload-gb (#37).

Published figures for Qwen3-30B-A3B at Q4_K_M (the GGUF most -ot exps=CPU guides use):

- the whole file on llama.cpp's buffers, https://github.com/ggml-org/llama.cpp/issues/13729 (build b5466,
  ``Qwen3-30B-A3B-Q4_K_M.gguf``, -ngl 30): ``CUDA0 model buffer size = 10750.86 MiB`` +
  ``CPU_Mapped model buffer size = 6940.48 MiB`` = 17691.34 MiB of weights;
- the same file's tensors by kind, https://github.com/paiml/aprender/issues/3714 (gguf-py over
  ``Qwen3-30B-A3B-Instruct-2507-Q4_K_M``): "18.55 GB tensors, of which 17.55 GB are experts"
  (``ffn_gate_exps``/``ffn_up_exps`` Q4_K, ``ffn_down_exps`` Q4_K ×24 + Q6_K ×24): 1.00 GB = 954 MiB is what
  ``-ot exps=CPU`` leaves for the GPU (attention, router, norms, ``output``; llama.cpp keeps ``token_embd`` on
  the CPU in any case, so its CUDA0 model buffer is that less the ~0.17 GiB embedding table, which vramgate
  still prices on the GPU).

No published log with both a ``CUDA0 model buffer size`` line and ``-ot exps=CPU`` for this model was found in
the corpus searched; the figures above are the nearest published measurements.
"""

from __future__ import annotations

from typing import Any

import pytest

from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.verdict import Judgement, judge
from webhook.engines import estimate
from webhook.models.catalog import builtin_catalog
from webhook.models.vram import MIB, EstimateRequest

from ..unit.helpers import container, gpu_node, pod

CFG = Config()
CATALOG = builtin_catalog()
GIB = 1024 * MIB
RTX_4090 = snapshot_from_nodes([gpu_node("rtx4090-0", gpus=1, mem=24564, product="NVIDIA-GeForce-RTX-4090")], CFG)
RTX_4070 = snapshot_from_nodes([gpu_node("rtx4070-0", gpus=1, mem=12282, product="NVIDIA-GeForce-RTX-4070")], CFG)

WHOLE_FILE_MIB = 10750.86 + 6940.48  # llama.cpp#13729: CUDA0 + CPU_Mapped model buffers
EXPERTS_MIB = 17.55e9 / MIB  # aprender#3714: the routed experts' tensors
NON_EXPERT_MIB = (18.55e9 - 17.55e9) / MIB  # what -ot exps=CPU leaves on the GPU (token_embd included)
MODEL = "/models/Qwen3-30B-A3B-Q4_K_M.gguf"


def _judge(*flags: str, snapshot: Any = RTX_4090, memory: str | None = None,
           env: dict[str, str] | None = None) -> Judgement:
    c = container(image="ghcr.io/ggml-org/llama.cpp:server-cuda", memory=memory, env=env,
                  args=["-m", MODEL, "-ngl", "99", "-c", "8192", *flags])
    return judge(pod(c), snapshot, CFG, CATALOG)


def _weights(j: Judgement) -> tuple[float, float]:
    """(weights per GPU, weights in host memory), MiB."""
    assert j.demand is not None and j.demand.estimate is not None
    est = j.demand.estimate
    return est.weights_mib / est.gpus, est.host_weights_mib


# ---------------------------------------------------------------------------------------------- llama.cpp


def test_without_a_flag_every_weight_is_on_the_gpu() -> None:
    j = _judge()
    gpu, host = _weights(j)
    assert host == 0
    assert gpu == pytest.approx(WHOLE_FILE_MIB, rel=0.02)


def test_ot_exps_cpu_keeps_the_experts_on_the_host_and_is_admitted_on_one_24gb_gpu() -> None:
    j = _judge("-ot", "exps=CPU")
    assert j.allowed and j.code == "fits"
    gpu, host = _weights(j)
    # The GPU keeps the non-expert tensors only: within 15 % of the published split.
    assert gpu == pytest.approx(NON_EXPERT_MIB, rel=0.15)
    assert host == pytest.approx(EXPERTS_MIB, rel=0.05)
    # Ignoring the flag would price all 17 GiB on the GPU.
    assert gpu < 0.1 * _weights(_judge())[0]
    assert j.demand is not None and "of weights in host memory" in j.demand.summary()
    assert j.demand.estimate is not None and any("host memory" in n for n in j.demand.estimate.notes)


def test_a_12gb_gpu_holds_it_only_with_the_experts_on_the_host() -> None:
    # The false rejection #37 is about: ~19 GiB priced on a 12 GB card without the offload.
    assert not _judge(snapshot=RTX_4070).allowed
    assert _judge("-ot", "exps=CPU", snapshot=RTX_4070).allowed
    assert _judge("--cpu-moe", snapshot=RTX_4070).allowed


@pytest.mark.parametrize("flags", [
    ("--cpu-moe",), ("-cmoe",), ("--n-cpu-moe", "48"), ("-ncmoe", "99"), ("-ot", r"\.ffn_.*_exps\.=CPU"),
    ("-ot", r".ffn_(up|down|gate)_exps.=CPU"), ("--override-tensor=exps=CPU",),
])
def test_every_spelling_of_all_experts_on_the_cpu_prices_the_same(flags: tuple[str, ...]) -> None:
    assert _weights(_judge(*flags)) == pytest.approx(_weights(_judge("-ot", "exps=CPU")))


def test_env_twins() -> None:
    ref = _weights(_judge("-ot", "exps=CPU"))
    assert _weights(_judge(env={"LLAMA_ARG_CPU_MOE": "1"})) == pytest.approx(ref)
    assert _weights(_judge(env={"LLAMA_ARG_OVERRIDE_TENSOR": "exps=CPU"})) == pytest.approx(ref)
    assert _weights(_judge(env={"LLAMA_ARG_N_CPU_MOE": "48"})) == pytest.approx(ref)


def test_n_cpu_moe_keeps_the_first_n_blocks_experts() -> None:
    _, all_host = _weights(_judge("--cpu-moe"))
    gpu, host = _weights(_judge("--n-cpu-moe", "24"))
    assert host == pytest.approx(all_host / 2, rel=1e-6)
    assert gpu == pytest.approx(WHOLE_FILE_MIB - host, rel=0.02)
    assert _weights(_judge("--n-cpu-moe", "0"))[1] == 0


def test_a_block_range_regex_moves_those_blocks_ffn() -> None:
    _, all_host = _weights(_judge("--cpu-moe"))
    _, host = _weights(_judge("-ot", r"blk\.(1[0-9]|2[0-9])\.ffn=CPU"))
    # Blocks 10–29: their experts (20/48 of them) plus their router and norms (a few MiB).
    assert host == pytest.approx(all_host * 20 / 48, rel=0.01) and host > all_host * 20 / 48


def test_repeated_ot_flags_add_up() -> None:
    one = _weights(_judge("-ot", r"blk\.[0-9]\.ffn_.*_exps=CPU"))[1]
    both = _weights(_judge("-ot", r"blk\.[0-9]\.ffn_.*_exps=CPU", "-ot", r"blk\.1[0-9]\.ffn_.*_exps=CPU"))[1]
    assert both == pytest.approx(2 * one)


def test_a_device_buffer_or_a_bad_pattern_moves_nothing() -> None:
    assert _weights(_judge("-ot", "exps=CUDA0"))[1] == 0
    assert _weights(_judge("-ot", "exps"))[1] == 0  # no '=': llama.cpp refuses it; priced on the GPU
    assert _weights(_judge("-ot", "(exps=CPU"))[1] == 0  # not a regex
    # The first matching pattern wins (src/llama-model.cpp): exps stay on CUDA0.
    assert _weights(_judge("-ot", "exps=CUDA0,ffn=CPU"))[1] < 0.01 * EXPERTS_MIB


def test_cuda_host_is_host_memory() -> None:
    assert _weights(_judge("-ot", "exps=CUDA_Host")) == pytest.approx(_weights(_judge("-ot", "exps=CPU")))


def test_partial_ngl_counts_only_the_gpu_blocks() -> None:
    # -ngl 24: the last 24 blocks on the GPU; --cpu-moe moves their experts, the others were on the CPU already.
    _, all_host = _weights(_judge("--cpu-moe"))
    c = container(image="ghcr.io/ggml-org/llama.cpp:server-cuda",
                  args=["-m", MODEL, "-ngl", "24", "-c", "8192", "--cpu-moe"])
    j = judge(pod(c), RTX_4090, CFG, CATALOG)
    gpu, host = _weights(j)
    assert host == pytest.approx(all_host / 2, rel=1e-6)
    # gpu_share prices half the file on the GPU; of that, the non-expert half stays.
    assert gpu == pytest.approx(_weights(_judge("--cpu-moe"))[0] / 2, rel=1e-6)


def test_a_dense_model_has_no_experts_to_move() -> None:
    c = container(image="ghcr.io/ggml-org/llama.cpp:server-cuda",
                  args=["-m", "/models/Qwen3-32B-Q4_K_M.gguf", "-ngl", "99", "--cpu-moe"])
    j = judge(pod(c), RTX_4090, CFG, CATALOG)
    assert _weights(j)[1] == 0


# ---------------------------------------------------------------------------------------------- host memory


def test_a_memory_limit_below_the_host_weights_warns() -> None:
    j = _judge("-ot", "exps=CPU", memory="8Gi")
    assert j.allowed
    assert any("keeps in host memory" in w for w in j.warnings), j.warnings
    roomy = _judge("-ot", "exps=CPU", memory="32Gi")
    assert not any("memory limit" in w for w in roomy.warnings), roomy.warnings
    # The same limit says nothing of host memory when the experts are on the GPU (its staging floor is 1.2×).
    assert not any("keeps in host memory" in w for w in _judge(memory="8Gi").warnings)


# ---------------------------------------------------------------------------------------------- --cpu-offload-gb


def _req(name: str, engine: str, **kw: Any) -> EstimateRequest:
    spec = CATALOG.get(name)
    assert spec is not None
    return EstimateRequest(params=spec.params, precision="bf16", spec=spec, engine=engine, context=4096, **kw)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("gpus", [1, 2])
def test_cpu_offload_gb_comes_off_each_gpu(engine: str, gpus: int) -> None:
    # vllm/config/cache.py cpu_offload_gb: "The space in GiB to offload to CPU, per GPU"; SGLang's OffloaderV1
    # gets cpu_offload_gb × 2**30 bytes in every rank.
    base = estimate(_req("qwen3-32b", engine, gpus=gpus))
    off = estimate(_req("qwen3-32b", engine, gpus=gpus, cpu_offload_gib=10.0))
    assert (base.weights_mib - off.weights_mib) / gpus == pytest.approx(10 * 1024)
    assert off.host_weights_mib == pytest.approx(10 * 1024 * gpus)
    assert base.per_gpu_mib - off.per_gpu_mib == pytest.approx(10 * 1024, abs=2)


def test_vllm_offload_with_pipeline_stages_is_per_gpu() -> None:
    # Each rank offloads its own stage's parameters: the heaviest stage's GPU loses exactly N GiB.
    base = estimate(_req("qwen3-32b", "vllm", gpus=2, pipeline=2))
    off = estimate(_req("qwen3-32b", "vllm", gpus=2, pipeline=2, cpu_offload_gib=4.0))
    assert (base.weights_mib - off.weights_mib) / 2 == pytest.approx(4 * 1024)


def test_offload_beyond_the_weights_leaves_none() -> None:
    off = estimate(_req("qwen3-32b", "vllm", cpu_offload_gib=500.0))
    assert off.weights_mib == 0
    assert off.host_weights_mib == pytest.approx(estimate(_req("qwen3-32b", "vllm")).weights_mib)


def test_sglang_reads_cpu_offload_gb() -> None:
    c = container(image="lmsysorg/sglang:v0.5.4", command=["python3", "-m", "sglang.launch_server"],
                  args=["--model-path", "Qwen/Qwen3-32B", "--cpu-offload-gb", "20"])
    j = judge(pod(c), RTX_4090, CFG, CATALOG)
    assert j.demand is not None and j.demand.estimate is not None
    assert j.demand.estimate.request.cpu_offload_gib == 20
    assert j.demand.estimate.host_weights_mib == pytest.approx(20 * 1024)
