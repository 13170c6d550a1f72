"""llama.cpp's compute buffer (the worst-case graph it reserves) against published start-up logs."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.config import Config
from webhook.decide.demand import read_demand
from webhook.engines import estimate, llamacpp
from webhook.kinds import pod_view
from webhook.models.catalog import ModelSpec, builtin_catalog
from webhook.models.vram import EstimateRequest

MIB = 2**20


def spec(name: str) -> ModelSpec:
    found = builtin_catalog().get(name)
    assert found is not None
    return found


def request(name: str, context: int, **fields: Any) -> EstimateRequest:
    s = spec(name)
    return EstimateRequest(params=s.params, precision="q4_k_m", spec=s, context=context, engine="llama.cpp",
                           **fields)


@pytest.mark.parametrize(("name", "context", "logged_mib"), [
    # fedora-copr/logdetective#106: Mistral 7B, flash_attn = 0, n_ubatch 512, before and after -c 32768.
    ("mistral-7b-instruct-v0.2", 2048, 164.0),
    ("mistral-7b-instruct-v0.2", 32768, 2144.0),
    # Llama 3 8B Q4_K_M, flash_attn = 0: the logits (128256 × 512 f32) outweigh the scores at 512 tokens,
    # the scores (8192 × 512 × 32 heads f32) at 8192.
    ("llama-3-8b-instruct", 512, 258.5),
    ("llama-3-8b-instruct", 8192, 560.0),
])
def test_compute_buffer_without_flash_attention_matches_the_logs(name: str, context: int, logged_mib: float) -> None:
    req = request(name, context)
    assert llamacpp.compute_buffer_bytes(req.spec, req, flash=False) / MIB == pytest.approx(logged_mib, abs=0.5)


def test_flash_attention_drops_the_scores_matrix() -> None:
    req = request("mistral-7b-instruct-v0.2", 32768)
    with_fa = llamacpp.compute_buffer_bytes(req.spec, req, flash=True) / MIB
    assert with_fa < 200  # the f16 mask and the logits, not 2 GiB of scores
    assert with_fa >= 32000 * 512 * 4 / MIB  # the logits stay


def test_slots_share_one_cache_and_ubatch_scales_the_buffer() -> None:
    one = request("llama-3-8b-instruct", 8192)
    four = request("llama-3-8b-instruct", 2048, slots=4)  # -c 8192 -np 4: the graph still spans 8192 cells
    assert llamacpp.compute_buffer_bytes(four.spec, four, False) == llamacpp.compute_buffer_bytes(one.spec, one, False)
    big = one.but(batched_tokens=2048)
    assert llamacpp.compute_buffer_bytes(big.spec, big, False) == pytest.approx(
        4 * llamacpp.compute_buffer_bytes(one.spec, one, False), rel=0.01)


def test_unset_flash_attention_prices_the_scores_in_the_middle_not_the_low_end() -> None:
    unset = estimate(request("mistral-7b-instruct-v0.2", 32768, gpu_layers=99))
    off = estimate(request("mistral-7b-instruct-v0.2", 32768, gpu_layers=99, flash_attention=False))
    on = estimate(request("mistral-7b-instruct-v0.2", 32768, gpu_layers=99, flash_attention=True))
    assert unset.per_gpu_mib == off.per_gpu_mib > on.per_gpu_mib + 1900
    assert unset.low_per_gpu_mib == on.low_per_gpu_mib < off.low_per_gpu_mib
    assert off.activations_mib == pytest.approx(2144.0, abs=1)


@pytest.mark.parametrize(("value", "expected"), [
    ("on", True), ("", True), ("1", True), ("off", False), ("0", False), ("auto", None), (None, None)])
def test_flash_attn_values(value: str | None, expected: bool | None) -> None:
    assert llamacpp.flash_attention(value) is expected


def test_the_flag_reaches_the_request() -> None:
    container = {"name": "main", "image": "ghcr.io/ggml-org/llama.cpp:server-cuda",
                 "resources": {"limits": {"nvidia.com/gpu": 1}},
                 "args": ["-m", "/models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", "-c", "32768", "-ngl", "99",
                          "-fa", "on"]}
    pod = {"kind": "Pod", "metadata": {"name": "p", "annotations": {}}, "spec": {"containers": [container]}}
    view = pod_view(pod)
    assert view is not None
    d = read_demand(view, Config(), builtin_catalog())
    assert d is not None and d.estimate is not None and d.estimate.request.flash_attention is True
