"""TGI's warm-up peak by version: the prefill batch, its logits, Gemma 3's dense mask, and the KV pool it leaves."""

from __future__ import annotations

import pytest

from webhook.engines import estimate, tgi
from webhook.models.catalog import ModelSpec, builtin_catalog
from webhook.models.vram import EstimateRequest

GIB = 2**30


def _spec(name: str) -> ModelSpec:
    spec = builtin_catalog().lookup(name)
    assert spec is not None
    return spec


def _req(spec: ModelSpec, version: tuple[int, ...], **kw: object) -> EstimateRequest:
    base = EstimateRequest(params=spec.params, precision="bf16", spec=spec, engine="tgi", engine_version=version)
    return base.but(**kw)


def test_the_warmup_batch_splits_prefill_tokens_into_input_sized_requests() -> None:
    spec = _spec("mistralai/Mistral-7B-Instruct-v0.2")
    warm = tgi.warmup_batch(_req(spec, (2, 0, 0), context=8512, prefill_tokens=32768, input_tokens=8000), spec)
    # backends/v3/src/client/grpc_client.rs warmup: 8000 + 8000 + 8000 + 8000 + 768; each reserves max_total.
    assert (warm.tokens, warm.longest, warm.requests, warm.kv_tokens) == (32768, 8000, 5, 5 * 8512)


def test_default_prefill_follows_the_launcher_by_version() -> None:
    spec = _spec("meta-llama/Llama-3.1-8B-Instruct")
    assert tgi.warmup_batch(_req(spec, (1, 4, 0), context=2048), spec).tokens == 4096
    assert tgi.warmup_batch(_req(spec, (2, 2, 0), context=4096), spec).tokens == 4145  # the 2.2.0 log
    assert tgi.default_input_tokens((2, 2, 0), 8192, spec) == 4095  # positions capped at 4096


def test_prefill_logits_before_3_only() -> None:
    """2.x computes log-softmax over every warm-up token; 3.x only the last token's (REQUEST_LOGPROBS off)."""
    spec = _spec("meta-llama/Llama-3.1-8B-Instruct")
    one = 4145 * spec.vocab_size * 2
    warm = tgi.warmup_batch(_req(spec, (2, 2, 0), context=4096), spec)
    assert tgi.prefill_logits_bytes(_req(spec, (2, 2, 0), context=4096), spec, warm) == (2 * one, 2 * one)
    assert tgi.prefill_logits_bytes(_req(spec, (2, 2, 0), context=4096, gpus=2), spec, warm) == (2 * one, 3 * one)
    assert tgi.prefill_logits_bytes(_req(spec, (3, 0, 0), context=4096), spec, warm) == (0.0, 0.0)
    v2 = estimate(_req(spec, (2, 2, 0), context=4096))
    v3 = estimate(_req(spec, (3, 0, 0), context=4096, prefill_tokens=4145, input_tokens=4095))
    assert v2.low_per_gpu_mib - v3.low_per_gpu_mib == pytest.approx(2 * one / 2**20, abs=2)


def test_command_r_plus_10k_prefill_on_a30_is_no_longer_a_plain_admit() -> None:
    """others.yaml tgi-20-command-r-plus-eetq-8xa30-10k-warmup-oom: 10,000 tokens × 256,000 vocabulary."""
    spec = _spec("CohereForAI/c4ai-command-r-plus")
    est = estimate(_req(spec, (2, 0), precision="int8", context=11000, gpus=8, prefill_tokens=10000,
                        input_tokens=10000))
    usable = 24.0 * 0.99 * 1024
    assert est.low_per_gpu_mib <= usable < est.per_gpu_mib  # straddles: warned, not refused


def test_gemma3_dense_mask_only_on_3_2() -> None:
    """flash_gemma3_modeling.py@v3.2.1: the warm-up image makes prefill attention dense; 3.3 uses FlashInfer."""
    spec = _spec("google/gemma-3-27b-it")
    kw: dict[str, object] = {"context": 32000, "gpus": 4, "prefill_tokens": 31000, "input_tokens": 30000}
    warm = tgi.warmup_batch(_req(spec, (3, 2, 1), **kw), spec)
    assert (warm.requests, warm.longest) == (2, 30000)
    low, mid = tgi.dense_mask_bytes(_req(spec, (3, 2, 1), **kw), spec, warm)
    square = 2 * 30000**2 * 2  # [2, 1, S, S] in bf16; the math kernel's scores and softmax: 8 heads a shard each
    assert (low, mid) == (pytest.approx(square), pytest.approx(square * (1 + 2 * 8)))
    assert tgi.dense_mask_bytes(_req(spec, (3, 3, 0), **kw), spec, warm) == (0.0, 0.0)
    llama = _spec("meta-llama/Llama-3.1-8B-Instruct")
    assert tgi.dense_mask_bytes(_req(llama, (3, 2, 1), **kw), llama, warm) == (0.0, 0.0)
    est = estimate(_req(spec, (3, 2, 1), **kw))
    # issue #3130: it ran out of memory at warm-up; straddles (warned), the kernel choice is not certain.
    assert est.low_per_gpu_mib <= 79.15 * 1024 < est.per_gpu_mib
    assert any("attention mask and scores" in n for n in est.notes)


def test_pool_tokens_follow_the_warmup_peak() -> None:
    """others.yaml tgi-09x-llama2-7b-a10g-inferred-16224: 16,224 tokens on a 22.49 GiB A10G."""
    spec = _spec("meta-llama/Llama-2-7b-hf")
    req = _req(spec, (1, 0, 0), precision="fp16", context=4096, prefill_tokens=4096, input_tokens=4095)
    est = estimate(req)
    tokens = tgi.pool_tokens(est, est.kv_bytes_per_token, 22.49 * 1024, 1.0)
    assert tokens == pytest.approx(16224, rel=0.10)
    assert tgi.wiggle_room((1, 4, 0)) == 1.0 and tgi.wiggle_room((1, 4, 1)) == 0.95
