"""vLLM's MLA KV layout by version: expanded per-head K and V before 0.7.1 (or with MLA off), the latent after."""

from __future__ import annotations

import pytest

from webhook.engines import vllm as vllm_engine
from webhook.models.catalog import ModelSpec, builtin_catalog
from webhook.models.vram import EstimateRequest

from .test_reading import demand, env, gpu, pod

H100_MIB = 79.1 * 1024


def _spec(name: str) -> ModelSpec:
    spec = builtin_catalog().get(name)
    assert spec is not None
    return spec


def _req(spec: ModelSpec, version: tuple[int, ...], **changes: object) -> EstimateRequest:
    req = EstimateRequest(params=spec.params, precision="bf16", spec=spec, context=8192, engine="vllm",
                          engine_version=version, gpu_mib=H100_MIB)
    return req.but(**changes) if changes else req


@pytest.mark.parametrize(("version", "per_layer"), [
    ((0, 6, 3), 2 * 16 * 256 * 2),  # get_head_size's 192 → 256 padding, 16 heads of K and V
    ((0, 7, 0), 2 * 16 * 192 * 2),  # unpadded: nope 128 + rope 64, V padded to the same 192
    ((0, 7, 1), (512 + 64) * 2),  # the latent
    ((0, 10, 0), (512 + 64) * 2),
])
def test_deepseek_v2_lite_bytes_per_token_by_version(version: tuple[int, ...], per_layer: int) -> None:
    spec = _spec("deepseek-v2-lite-chat")
    est = vllm_engine.plan(_req(spec, version), spec)
    assert est.kv_bytes_per_token == per_layer * 27


def test_the_pre_mla_figure_matches_vllm_10927() -> None:
    # 35.42 GiB of KV in 5373 blocks of 16 tokens: 442,368 B per token (DeepSeek-V2-Lite-Chat, Dec 2024 main).
    spec = _spec("deepseek-v2-lite-chat")
    est = vllm_engine.plan(_req(spec, (0, 6, 4)), spec)
    assert est.kv_bytes_per_token * 5373 * 16 / 1024**3 == pytest.approx(35.42, abs=0.01)


def test_expanded_kv_splits_over_tp_and_the_latent_does_not() -> None:
    spec = _spec("deepseek-v2-lite-chat")
    old = vllm_engine.plan(_req(spec, (0, 6, 3), gpus=2), spec)
    new = vllm_engine.plan(_req(spec, (0, 8, 5), gpus=2), spec)
    assert old.kv_cache_mib / 2 == pytest.approx(442368 * 8192 / 2 / 2**20, rel=1e-3)
    assert new.kv_cache_mib / 2 == pytest.approx(31104 * 8192 / 2**20, rel=1e-3)


def test_mla_disable_expands_on_any_version() -> None:
    spec = _spec("deepseek-r1")
    on = vllm_engine.plan(_req(spec, (0, 10, 0), gpus=8), spec)
    off = vllm_engine.plan(_req(spec, (0, 10, 0), gpus=8, mla_disabled=True), spec)
    assert off.kv_bytes_per_token / on.kv_bytes_per_token == pytest.approx(2 * 128 * 192 / 576)
    assert any("VLLM_MLA_DISABLE" in n for n in off.notes)


@pytest.mark.parametrize(("precision", "version", "latent"), [
    ("int4", (0, 7, 1), False),  # 0.7.1–0.7.2: "MLA is not supported with awq quantization"
    ("fp8", (0, 7, 2), True),
    ("int4", (0, 7, 3), True),
])
def test_quantized_weights_turned_mla_off_before_073(precision: str, version: tuple[int, ...], latent: bool) -> None:
    spec = _spec("deepseek-v2-lite-chat")
    assert vllm_engine.caches_latent(_req(spec, version, precision=precision), spec) is latent


def test_kimi_k2_caches_the_latent_from_0_10() -> None:
    spec = _spec("kimi-k2-instruct")
    assert not vllm_engine.caches_latent(_req(spec, (0, 9, 2)), spec)
    assert vllm_engine.caches_latent(_req(spec, (0, 10, 0)), spec)


def test_gqa_models_are_untouched() -> None:
    spec = _spec("llama-3.1-8b-instruct")
    layout, shards = vllm_engine.kv_geometry(_req(spec, (0, 6, 3), gpus=4), spec, 4)
    assert layout.bytes_per_token() == 2 * 32 * 8 * 128 * 2
    assert shards == 4


@pytest.mark.parametrize(("value", "off"), [("1", True), ("0", False), (None, False), ("yes", False), ("2", True)])
def test_mla_disable_reads_like_vllm_envs(value: str | None, off: bool) -> None:
    assert vllm_engine.mla_disabled(value) is off


def test_the_pool_counts_latent_tokens_once_per_rank() -> None:
    spec = _spec("deepseek-v2-lite-chat")
    req = _req(spec, (0, 8, 5), gpus=2, context=32768)
    pool_gib, tokens, _ = vllm_engine.kv_pool(req, spec, H100_MIB, 0.9)
    assert tokens == pytest.approx(pool_gib * 1024**3 / 31104, rel=1e-3)


def test_vllm_mla_disable_in_the_pod_reaches_the_estimate() -> None:
    args = ["--model", "deepseek-ai/DeepSeek-V2-Lite-Chat", "--max-model-len", "8192", "--trust-remote-code"]
    on = demand(pod(gpu("vllm/vllm-openai:v0.8.5", args=args)))
    off = demand(pod(gpu("vllm/vllm-openai:v0.8.5", args=args, env=env(VLLM_MLA_DISABLE="1"))))
    assert on.estimate is not None and off.estimate is not None
    assert not on.estimate.request.mla_disabled and off.estimate.request.mla_disabled
    assert off.estimate.kv_cache_mib > 10 * on.estimate.kv_cache_mib
