"""The estimator: formulas on known architectures, and monotonicity as properties."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.models.catalog import ModelSpec
from webhook.models.vram import (
    CUDA_CONTEXT_MIB,
    MIB,
    EstimateRequest,
    estimate,
    fallback_shape,
    max_context,
    round_context,
)
from webhook.units.precision import PRECISIONS, canonical, kv_bytes

LLAMA3_8B = ModelSpec(
    name="llama-3-8b-instruct", params=8.03e9, layers=32, hidden_size=4096, heads=32, kv_heads=8, head_dim=128,
    vocab_size=128256, context=8192, dtype="bf16",
)
LLAMA2_7B = ModelSpec(
    name="llama-2-7b", params=6.74e9, layers=32, hidden_size=4096, heads=32, kv_heads=32, head_dim=128,
    vocab_size=32000, context=4096, dtype="fp16",
)
DSV3 = ModelSpec(
    name="deepseek-v3", params=671e9, layers=61, hidden_size=7168, heads=128, kv_heads=128, head_dim=128,
    vocab_size=129280, context=163840, dtype="fp8", kv_lora_rank=512, qk_rope_head_dim=64,
)


def test_llama3_8b_kv_per_token_is_131072_bytes() -> None:
    est = estimate(EstimateRequest(params=LLAMA3_8B.params, precision="bf16", spec=LLAMA3_8B, context=8192))
    assert est.kv_bytes_per_token == 131072


def test_full_mha_multiplies_kv_cache() -> None:
    mha = estimate(EstimateRequest(params=LLAMA2_7B.params, precision="fp16", spec=LLAMA2_7B, context=4096))
    assert mha.kv_bytes_per_token == 4 * 131072
    assert mha.kv_cache_mib == pytest.approx(2048)  # 512 KiB × 4096 tokens


def test_mla_caches_one_latent_per_layer() -> None:
    est = estimate(EstimateRequest(params=DSV3.params, precision="fp8", spec=DSV3, context=1000, gpus=8))
    assert est.kv_bytes_per_token == 61 * 576 * 2
    # replicated on every rank: the per-GPU share of KV is the whole cache
    assert est.kv_cache_mib / 8 == pytest.approx(61 * 576 * 2 * 1000 / MIB)


def test_weights_and_breakdown_sum_to_total() -> None:
    est = estimate(EstimateRequest(params=LLAMA3_8B.params, precision="bf16", spec=LLAMA3_8B, context=8192, batch=16))
    assert est.weights_mib == pytest.approx(8.03e9 * 2 / MIB)
    assert est.kv_cache_mib == pytest.approx(131072 * 8192 * 16 / MIB)
    parts = est.breakdown()
    assert sum(parts.values()) == pytest.approx(est.total_mib, abs=1)
    assert est.overhead_mib > CUDA_CONTEXT_MIB


def test_quantized_keeps_embeddings_16bit() -> None:
    int4 = estimate(EstimateRequest(params=LLAMA3_8B.params, precision="int4", spec=LLAMA3_8B, context=1))
    emb = 2 * 128256 * 4096
    expected = ((8.03e9 - emb) * 4.16 / 8 + emb * 2) / MIB
    assert int4.weights_mib == pytest.approx(expected)
    gguf = estimate(EstimateRequest(params=LLAMA3_8B.params, precision="q4_k_m", spec=LLAMA3_8B, context=1))
    assert gguf.weights_mib == pytest.approx(8.03e9 * 4.89 / 8 / MIB)


def test_kv_dtype_override_halves_cache() -> None:
    base = EstimateRequest(params=LLAMA3_8B.params, precision="bf16", spec=LLAMA3_8B, context=8192)
    assert estimate(base.but(kv_cache_dtype="fp8")).kv_cache_mib == pytest.approx(estimate(base).kv_cache_mib / 2)
    assert kv_bytes("fp32", None) == 4 and kv_bytes("int4", None) == 2 and kv_bytes("bf16", "fp8") == 1


def test_training_adam_is_16_bytes_per_param_plus_activations() -> None:
    est = estimate(EstimateRequest(params=1e9, precision="bf16", context=2048, workload="training"))
    states = est.weights_mib + est.gradients_mib + est.optimizer_mib
    assert states == pytest.approx(16e9 / MIB)
    assert est.activations_mib > 0 and est.kv_cache_mib == 0


def test_tensor_parallel_replicates_kv_past_kv_heads() -> None:
    req = EstimateRequest(params=LLAMA3_8B.params, precision="bf16", spec=LLAMA3_8B, context=8192, gpus=16)
    est = estimate(req)
    one = estimate(req.but(gpus=1))
    assert est.kv_cache_mib / 16 == pytest.approx(one.kv_cache_mib / 8)


def test_fallback_shape_is_llama_like() -> None:
    shape = fallback_shape(8e9)
    assert 4096 <= shape.hidden_size <= 4608 and 32 <= shape.layers <= 36
    assert shape.kv_elements_per_token * 2 == pytest.approx(131072, rel=0.15)


def test_max_context() -> None:
    req = EstimateRequest(params=LLAMA3_8B.params, precision="bf16", spec=LLAMA3_8B, context=8192, batch=1)
    room = 20 * 1024
    ctx = max_context(req, room)
    assert ctx is not None and 8192 >= ctx > 1000
    assert estimate(req.but(context=ctx)).per_gpu_mib <= room
    if ctx < 8192:
        assert estimate(req.but(context=ctx + 1)).per_gpu_mib > room
    assert max_context(req, 1024) is None
    assert round_context(37_000) == 36_864 and round_context(1_500) == 1_280 and round_context(300) == 300


def test_precision_aliases() -> None:
    assert canonical("half") == "fp16" and canonical("bfloat16") == "bf16" and canonical("AWQ") == "int4"
    assert canonical("Q4_K_M") == "q4_k_m" and canonical("gptq") == "int4" and canonical("fp9") is None
    assert PRECISIONS["q8_0"].bits == 8.5


_precisions = st.sampled_from(sorted(PRECISIONS))
_specs = st.sampled_from([None, LLAMA3_8B, LLAMA2_7B, DSV3])
_workloads = st.sampled_from(["inference", "training"])


@settings(max_examples=300, deadline=None)
@given(
    params=st.floats(min_value=1e6, max_value=1e12), extra=st.floats(min_value=0, max_value=1e11),
    precision=_precisions, context=st.integers(1, 200_000), batch=st.integers(1, 64), gpus=st.integers(1, 16),
    workload=_workloads, spec=_specs,
)
def test_more_params_never_need_less(params: float, extra: float, precision: str, context: int, batch: int,
                                     gpus: int, workload: str, spec: ModelSpec | None) -> None:
    req = EstimateRequest(params=params, precision=precision, spec=spec, context=context, batch=batch, gpus=gpus,
                          workload=workload)  # type: ignore[arg-type]
    a, b = estimate(req), estimate(req.but(params=params + extra))
    assert b.total_mib >= a.total_mib and b.per_gpu_mib >= a.per_gpu_mib


@settings(max_examples=300, deadline=None)
@given(
    params=st.floats(min_value=1e6, max_value=1e12), precision=_precisions, context=st.integers(1, 200_000),
    more=st.integers(0, 100_000), batch=st.integers(1, 64), more_batch=st.integers(0, 64), gpus=st.integers(1, 16),
    workload=_workloads, spec=_specs,
)
def test_more_context_or_batch_never_need_less(params: float, precision: str, context: int, more: int, batch: int,
                                               more_batch: int, gpus: int, workload: str,
                                               spec: ModelSpec | None) -> None:
    req = EstimateRequest(params=params, precision=precision, spec=spec, context=context, batch=batch, gpus=gpus,
                          workload=workload)  # type: ignore[arg-type]
    base = estimate(req)
    assert estimate(req.but(context=context + more)).per_gpu_mib >= base.per_gpu_mib
    assert estimate(req.but(batch=batch + more_batch)).per_gpu_mib >= base.per_gpu_mib


@settings(max_examples=300, deadline=None)
@given(
    params=st.floats(min_value=1e6, max_value=1e12), precision=_precisions, context=st.integers(1, 200_000),
    batch=st.integers(1, 64), gpus=st.integers(1, 15), more=st.integers(1, 16), workload=_workloads, spec=_specs,
)
def test_more_gpus_never_need_more_per_gpu(params: float, precision: str, context: int, batch: int, gpus: int,
                                           more: int, workload: str, spec: ModelSpec | None) -> None:
    req = EstimateRequest(params=params, precision=precision, spec=spec, context=context, batch=batch, gpus=gpus,
                          workload=workload)  # type: ignore[arg-type]
    assert estimate(req.but(gpus=gpus + more)).per_gpu_mib <= estimate(req).per_gpu_mib


def test_estimate_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        estimate(EstimateRequest(params=0, precision="bf16"))
