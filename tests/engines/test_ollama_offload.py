"""Ollama's layer placement (llm/memory.go EstimateGPULayers) and the KV its estimate prints."""

from __future__ import annotations

import pytest

from webhook.engines import estimate, ollama
from webhook.models.catalog import builtin_catalog
from webhook.models.vram import MIB, EstimateRequest

GIB = 1024 * MIB


def _req(name: str, precision: str = "q4_k_m", **kw: object) -> EstimateRequest:
    spec = builtin_catalog().get(name)
    assert spec is not None
    return EstimateRequest(params=spec.params, precision=precision, spec=spec, engine="ollama", **kw)  # type: ignore[arg-type]


def test_everything_fits_on_a_large_gpu() -> None:
    p = ollama.offload([1 * GIB] * 32, 0.5 * GIB, [80 * GIB], (0.7 * GIB, 0.6 * GIB))
    assert p.full and p.per_gpu == (33,) and p.graph_bytes == 0.6 * GIB


def test_a_small_gpu_takes_what_fits_after_graph_minimum_and_a_spare_layer() -> None:
    # 10 GiB free − 1 GiB graph − 457 MiB minimum − one spare 1 GiB layer: 7 blocks, no output.
    p = ollama.offload([1 * GIB] * 32, 0.5 * GIB, [10 * GIB], (1 * GIB, 0.5 * GIB))
    assert p.per_gpu == (7,) and not p.full and p.graph_bytes == 1 * GIB


def test_a_gpu_without_room_for_graph_and_two_layers_takes_none() -> None:
    p = ollama.offload([1 * GIB] * 32, 0.5 * GIB, [20 * GIB, 3 * GIB], (1 * GIB, 1 * GIB))
    assert p.per_gpu[1] == 0 and p.per_gpu[0] > 0


def test_layers_go_round_robin_over_gpus() -> None:
    p = ollama.offload([1 * GIB] * 80, 1 * GIB, [22 * GIB] * 4, (8 * GIB, 8 * GIB))
    assert p.per_gpu == (12, 12, 12, 12)  # each GPU: 22 − 8 graph − 0.45 minimum − 1 spare


def test_num_gpu_caps_the_layers() -> None:
    assert ollama.offload([1 * GIB] * 32, 0.5 * GIB, [80 * GIB], (1 * GIB, 1 * GIB), num_gpu=10).layers == 10


def test_deepseek_kv_is_stored_per_head_uncompressed() -> None:
    # #8447: memory.required.kv = 9.5 GiB for deepseek-r1:671b at num_ctx 2048.
    kv = ollama.kv_total_bytes(_req("deepseek-r1", context=2048), builtin_catalog().get("deepseek-r1"))
    assert kv / GIB == pytest.approx(9.5, rel=0.01)


def test_gemma3_local_layers_keep_window_plus_batch() -> None:
    # #8430: memory.required.kv = 2.0 GiB for gemma3:12b at num_ctx 24576 (40 local layers at 1024 + 512).
    req = _req("gemma-3-12b-it", context=24576)
    assert ollama.kv_total_bytes(req, req.spec) / GIB == pytest.approx(2.0, rel=0.03)


def test_deepseek_on_a_24gb_gpu_places_five_layers_but_they_outweigh_the_gpu() -> None:
    # #8447: 5/62 layers on 23.3 GiB free; llama.cpp puts the last (MoE) blocks there, ~28 GiB, and fails.
    est = estimate(_req("deepseek-r1", context=2048, gpu_mib=24 * 1024))
    assert any("5/62 layers" in n for n in est.notes)
    assert est.per_gpu_mib > 24 * 1024 and est.low_per_gpu_mib < 1024


def test_partial_offload_of_a_dense_model_fits_its_gpu() -> None:
    est = estimate(_req("qwen3-32b", precision="q6_k", context=32768, gpu_mib=24 * 1024))
    assert est.per_gpu_mib <= 24 * 1024 and any("layers on this GPU" in n for n in est.notes)


def test_without_a_gpu_every_layer_is_charged() -> None:
    req = _req("qwen3-32b", context=4096)
    est = estimate(req)
    assert est.weights_mib == pytest.approx(ollama.weights_total_bytes(req, req.spec) / MIB)


def test_a_model_that_fits_one_gpu_goes_on_one() -> None:
    # server/sched.go pickBestFullFitByLibrary: a single GPU first; the whole model on it, not split.
    one = estimate(_req("qwen3-32b", context=4096, gpu_mib=80 * 1024))
    two = estimate(_req("qwen3-32b", context=4096, gpu_mib=80 * 1024, gpus=2))
    assert two.per_gpu_mib == one.per_gpu_mib


def test_a_model_too_large_for_one_gpu_spreads_over_all() -> None:
    one = estimate(_req("qwen3-32b", precision="q6_k", context=32768, gpu_mib=24 * 1024))
    three = estimate(_req("qwen3-32b", precision="q6_k", context=32768, gpu_mib=24 * 1024, gpus=3))
    assert three.per_gpu_mib < one.per_gpu_mib and not any("layers on" in n for n in three.notes)
