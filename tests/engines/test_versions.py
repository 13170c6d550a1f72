"""Each engine's defaults and allocation rules, version by version, as read from its source.

Every expectation cites the file and release it comes from (docs/engine-sources-vllm.md and
docs/engine-sources-others.md quote the lines).
"""

from __future__ import annotations

import pytest

from webhook.engines import estimate, llamacpp, ollama, sglang, tgi
from webhook.engines import vllm as v
from webhook.engines.layers import KVLayout
from webhook.models.catalog import builtin_catalog
from webhook.models.vram import EstimateRequest


@pytest.mark.parametrize(("version", "env", "want"), [
    ((0, 6, 3), None, False),   # V0 only up to 0.6 (vllm/envs.py has no VLLM_USE_V1)
    ((0, 7, 3), None, False),   # V1 opt-in in 0.7
    ((0, 8, 0), None, True),    # VLLM_USE_V1 defaults to "1" from 0.8.0
    ((0, 9, 2), "0", False),    # and can still be turned off
    ((0, 10, 2), "0", True),    # V0 removed: the env no longer matters
    (None, None, True),         # newest
])
def test_vllm_engine_generation(version: tuple[int, ...] | None, env: str | None, want: bool) -> None:
    assert v.is_v1(version, env) is want


@pytest.mark.parametrize(("version", "v1", "context", "gpu_gib", "product", "want"), [
    ((0, 6, 3), False, 8192, 80, None, (256, 8192)),          # V0: no chunked prefill below 32k
    ((0, 6, 3), False, 65536, 80, None, (256, 512)),          # chunked prefill past 32k: 512 up to 0.6.4
    ((0, 6, 6), False, 65536, 80, None, (256, 2048)),         # 2048 from 0.6.5
    ((0, 8, 2), True, 8192, 80, None, (1024, 8192)),          # 0.8.0–0.8.4: H100 tier
    ((0, 8, 5), True, 8192, 24, None, (256, 2048)),           # 0.8.5: small GPUs
    ((0, 9, 1), True, 8192, 80, "NVIDIA-A100-SXM4-80GB", (256, 2048)),  # 0.9–0.27: ≥ 70 GiB and not A100
    ((0, 9, 1), True, 8192, 80, "NVIDIA-H100-80GB-HBM3", (1024, 8192)),
    ((0, 28, 0), True, 8192, 141, None, (1024, 8192)),
    ((0, 28, 0), True, 8192, 180, None, (1024, 16384)),       # 0.28+: ≥ 160 GiB
])
def test_vllm_default_batch_sizes(version: tuple[int, ...], v1: bool, context: int, gpu_gib: int,
                                  product: str | None, want: tuple[int, int]) -> None:
    # vllm/engine/arg_utils.py EngineArgs._set_default_args_v1 (V1) and create_engine_config (V0).
    assert v.defaults(version, v1, context, gpu_gib * 1024, product) == want


def test_vllm_utilization_default_by_version() -> None:
    assert v.default_utilization((0, 19, 0)) == 0.9 and v.default_utilization((0, 20, 0)) == 0.92


def test_vllm_sliding_window_layers_by_version() -> None:
    # Gemma-3-27B: 52 of 62 layers use a 1024-token window; the hybrid KV manager (0.9.1) sizes them at
    # min(window − 1 + max_num_batched_tokens, L) + one block; before, every layer holds L.
    layout = KVLayout(bytes_per_token_layer=1.0, full_layers=10, window=1024, window_layers=52)
    old = v._kv_for_sequence(layout, 131072, 8192, (0, 9, 0))
    new = v._kv_for_sequence(layout, 131072, 8192, (0, 9, 1))
    assert old == 62 * 131072
    assert new == 10 * 131072 + 52 * (1024 - 1 + 8192 + 16)


def test_vllm_chunked_local_layers_from_0_14() -> None:
    layout = KVLayout(bytes_per_token_layer=1.0, full_layers=12, chunk=8192, chunk_layers=36)
    assert v._kv_for_sequence(layout, 65536, 8192, (0, 13, 0)) == 48 * 65536
    assert v._kv_for_sequence(layout, 65536, 8192, (0, 14, 0)) == 12 * 65536 + 36 * (8192 + 16)


def test_vllm_cuda_graphs_counted_from_0_20_and_not_with_enforce_eager() -> None:
    spec = builtin_catalog().lookup("meta-llama/Llama-3.1-8B-Instruct")
    assert spec is not None
    req = EstimateRequest(params=spec.params, precision="bf16", spec=spec, context=8192, engine="vllm")
    before = estimate(req.but(engine_version=(0, 19, 0)))
    after = estimate(req.but(engine_version=(0, 20, 0)))
    eager = estimate(req.but(engine_version=(0, 20, 0), enforce_eager=True))
    assert after.overhead_mib > before.overhead_mib > 0
    assert eager.overhead_mib == before.overhead_mib


@pytest.mark.parametrize(("version", "env", "installed", "want"), [
    ((0, 8, 5), None, True, None),     # 0.8 turned it off with FlashInfer >= 0.2.3
    ((0, 10, 2), None, False, None),   # pip: FlashInfer an extra; on only where it is installed
    ((0, 10, 2), None, True, True),    # the vllm/vllm-openai image carries it
    ((0, 11, 0), "0", True, False),
    ((0, 12, 0), None, True, False),   # opt-in only, 0.12–0.20
    ((0, 20, 0), "1", False, True),
    ((0, 21, 0), None, False, True),   # on by default again
    ((0, 22, 1), "0", False, False),
])
def test_vllm_flashinfer_sampler_by_version(version: tuple[int, ...], env: str | None, installed: bool,
                                            want: bool | None) -> None:
    assert v.flashinfer_sampler(version, env, installed) is want


def test_vllm_flashinfer_sampler_prices_fewer_bytes_per_vocab_entry() -> None:
    assert v.sampler_bytes((0, 10, 2), True, None) == v.SAMPLER_BYTES
    assert v.sampler_bytes((0, 10, 2), True, True) == v.FLASHINFER_SAMPLER_BYTES
    assert v.sampler_bytes((0, 17, 0), True, None) == v.TRITON_SAMPLER_BYTES
    assert v.sampler_bytes((0, 22, 1), True, None) == v.FLASHINFER_SAMPLER_BYTES
    assert v.sampler_bytes((0, 22, 1), False, True) == v.V0_SAMPLER_BYTES


def test_vllm_reads_the_flashinfer_sampler_from_env_and_image() -> None:
    s = v.read("vllm/vllm-openai:v0.10.2", [], {"VLLM_USE_FLASHINFER_SAMPLER": "0"})
    assert s is not None and s.value("flashinfer_sampler") == "0" and s.flag("flashinfer_installed")


def test_vllm_vision_encoder_peak_is_not_added_to_the_llm_peak() -> None:
    # Qwen2-VL-2B, 0.10.2, 16 GB card: one 16384-token image (65536 patches) is profiled before the LLM.
    spec = builtin_catalog().lookup("Qwen/Qwen2-VL-2B-Instruct")
    assert spec is not None
    req = EstimateRequest(params=spec.params, precision="bf16", spec=spec, context=4096, engine="vllm",
                          engine_version=(0, 10, 2), gpu_mib=16 * 1024)
    peak, kept = v._vision_profile(req, spec, 2048, 256, True, 1, (0, 10, 2))
    assert peak == pytest.approx(65536 * v.encoder_bytes_per_patch(float(spec.vision_params or 0), 1))
    assert kept < peak
    assert v.with_encoder(1.0e9, peak, kept) == peak
    assert v.with_encoder(4.0e9, peak, kept) == 4.0e9 + kept
    text_only = estimate(req.but(mm_items=0)).activations_mib
    assert estimate(req).activations_mib == pytest.approx(peak / 2**20)
    assert text_only < estimate(req).activations_mib


def test_vllm_qwen3_vl_profiles_a_video_and_0_11_to_0_12_widen_its_cached_output() -> None:
    # Qwen3-VL-30B-A3B, TP 2, 8192 batched tokens: a 153600-token video item (12288 rows of 4 × 2048).
    spec = builtin_catalog().lookup("Qwen/Qwen3-VL-30B-A3B-Instruct")
    assert spec is not None
    req = EstimateRequest(params=spec.params, precision="bf16", spec=spec, context=65536, gpus=2, engine="vllm")
    per_patch = v.encoder_bytes_per_patch(float(spec.vision_params or 0), 2)
    pixels = 49152 * v.VISION_PIXEL_BYTES
    for version, rows in (((0, 12, 0), 153600), ((0, 13, 0), 12288)):
        peak, kept = v._vision_profile(req, spec, 8192, 256, True, 2, version)
        assert peak == pytest.approx(49152 * per_patch)
        assert kept == pytest.approx(rows * 2048 * 4 * 2 + pixels)


@pytest.mark.parametrize(("model", "patches_per_token"), [
    ("google/gemma-3-27b-it", 16), ("llava-hf/llava-1.5-7b-hf", 1), ("Qwen/Qwen2.5-VL-7B-Instruct", 4)])
def test_vllm_vision_patches_per_token_by_family(model: str, patches_per_token: int) -> None:
    spec = builtin_catalog().lookup(model)
    assert spec is not None and spec.max_image_tokens and spec.vision_params
    req = EstimateRequest(params=spec.params, precision="bf16", spec=spec, context=32768, engine="vllm")
    tokens = spec.max_image_tokens  # one item: a budget of exactly one item's tokens
    peak, _ = v._vision_profile(req, spec, tokens, 256, True, 1, (0, 10, 2))
    per_patch = v.encoder_bytes_per_patch(float(spec.vision_params), 1)
    assert peak == pytest.approx(tokens * patches_per_token * per_patch)


@pytest.mark.parametrize(("product", "tp", "want"), [
    ("NVIDIA H100 80GB HBM3", 4, True), ("NVIDIA-H200", 8, True), ("NVIDIA H100 80GB HBM3", 2, False),
    ("NVIDIA H100 PCIe", 4, False), ("NVIDIA H100 NVL", 4, False), ("NVIDIA A100 80GB", 8, False), (None, 8, False)])
def test_vllm_nvls_buffers_only_past_two_nvswitch_hopper_gpus(product: str | None, tp: int, want: bool) -> None:
    assert v.nvls_buffers(product, tp) is want


def test_tgi_defaults_by_version() -> None:
    # launcher/src/main.rs: max_total_tokens 2048 in 1.x, min(model, 4096) in 2.x (the 2.2.0 log in
    # tests/fixtures/accuracy/others.yaml: "Default `max_total_tokens` to 4096"); 3.x derives it after warm-up.
    assert tgi.default_context((1, 4, 0)) == 2048 and tgi.default_context((2, 4, 0)) == 4096
    assert tgi.default_context((3, 0, 0)) is None
    # max_batch_prefill_tokens: 4096 in 1.x; max_input_tokens + 50 in 2.x (4095 + 50 = 4145 in that log).
    assert tgi.default_prefill_tokens((1, 4, 0), 1023) == 4096 and tgi.default_prefill_tokens((2, 4, 0), 4095) == 4145
    assert tgi.default_prefill_tokens((3, 1, 0), 8191) == 8192


def test_sglang_static_fraction_by_tp() -> None:
    # python/sglang/srt/server_args.py (0.3–0.4.5): 0.88, 0.87, 0.85, 0.81, 0.79.
    assert [sglang.default_mem_fraction(tp) for tp in (1, 2, 4, 8, 16)] == [0.88, 0.87, 0.85, 0.81, 0.79]


def test_ollama_context_default_by_version() -> None:
    # envconfig/config.go: 2048 up to 0.6.x, 4096 after.
    assert ollama.default_context((0, 5, 7)) == 2048 and ollama.default_context((0, 6, 8)) == 4096


def test_llamacpp_share_on_gpu() -> None:
    assert llamacpp.gpu_share(None, 32) == 1.0 and llamacpp.gpu_share(16, 32) == 0.5
    assert llamacpp.gpu_share(99, 32) == 1.0 and llamacpp.gpu_share(-1, 32) == 1.0


def test_quantized_checkpoints_keep_towers_and_embeddings_16bit() -> None:
    spec = builtin_catalog().lookup("Qwen/Qwen2.5-VL-7B-Instruct")
    assert spec is not None and spec.vision_params
    awq = estimate(EstimateRequest(params=spec.params, precision="int4", spec=spec, context=4096, engine="vllm"))
    kept = spec.vision_params + spec.vocab_size * spec.hidden_size * (1 if spec.tie_embeddings else 2)
    want = (spec.params - kept) * 4.16 / 8 + kept * 2
    assert awq.weights_mib * 2**20 == pytest.approx(want, rel=1e-6)
