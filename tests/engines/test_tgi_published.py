"""TGI's warm-up arithmetic beside published logs (tests/fixtures/published_engine_measurements.yaml)."""

from __future__ import annotations

import pytest

from webhook.engines import estimate
from webhook.models.catalog import builtin_catalog
from webhook.models.vram import EstimateRequest

from .published import entries

BY_ID = {e["id"]: e for e in entries()}


def test_mistral7b_a100_total_tokens_within_10_percent() -> None:
    """TGI 2.0.0, Mistral-7B, --max-batch-prefill-tokens 32768, max total 8512, A100-80GB (79.15 GiB).

    The router logs "Setting max batch total tokens to 425472": the KV blocks fit after the weights and one
    prefill of 32768 tokens, out of the memory TGI 2.0 lets itself use (0.95 wiggle room,
    flash_causal_lm.py warmup).
    """
    entry = BY_ID["tgi-mistral7b-a100-80g-v200-warmup"]
    spec = builtin_catalog().lookup("mistralai/Mistral-7B-Instruct-v0.2")
    assert spec is not None
    est = estimate(EstimateRequest(params=spec.params, precision="bf16", spec=spec, context=8512, engine="tgi",
                                   engine_version=(2, 0, 0), prefill_tokens=32768))
    non_kv = est.per_gpu_mib * 2**20 - est.kv_cache_mib * 2**20
    tokens = (79.15 * 0.95 * 2**30 - non_kv) / est.kv_bytes_per_token
    assert tokens == pytest.approx(entry["reported"]["max_batch_total_tokens"], rel=0.10)
    assert est.low_per_gpu_mib <= 79.15 * 1024  # it started


def test_llama31_70b_on_two_a100s_is_admitted() -> None:
    spec = builtin_catalog().lookup("meta-llama/Llama-3.1-70B")
    assert spec is not None
    est = estimate(EstimateRequest(params=spec.params, precision="bf16", spec=spec, context=4096, gpus=2,
                                   engine="tgi", engine_version=(2, 2, 0), prefill_tokens=10049))
    assert est.low_per_gpu_mib <= 79.15 * 1024 * 0.98
