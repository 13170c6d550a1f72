"""vLLM's MXFP4 MoE weights per backend, and checkpoints that keep modules in 16-bit, against logged loads."""

from __future__ import annotations

import pytest

from webhook.engines import mxfp4
from webhook.engines import vllm as vllm_engine
from webhook.models.catalog import builtin_catalog, spec_from_mapping
from webhook.models.vram import EstimateRequest, shape_of, weights_bytes

CAT = builtin_catalog()
GIB = 1024**3


def _request(name: str, gpus: int = 1, product: str | None = None) -> EstimateRequest:
    spec = CAT.get(name)
    assert spec is not None
    return EstimateRequest(params=spec.params, precision=spec.dtype, spec=spec, gpus=gpus, engine="vllm",
                           gpu_product=product)


@pytest.mark.parametrize("name, gpus, layout, logged", [
    ("gpt-oss-20b", 1, mxfp4.MARLIN, 13.72),  # A100, 0.19.0 (myoceane.fr)
    ("gpt-oss-120b", 4, mxfp4.MARLIN, 17.2217),  # 4 × A100, 0.10.1.1 (dennislee22/vLLM-benchmarking)
    ("gpt-oss-120b", 1, mxfp4.MARLIN, 65.9651),  # H100 without triton_kernels (vllm#23278)
    ("gpt-oss-120b", 1, mxfp4.TRITON, 64.38),  # H100, 0.14.1, "Using Triton backend" (vllm#33155)
    ("gpt-oss-20b", 1, mxfp4.TRITON, 13.47),  # H100 (llm-d config_explorer)
])
def test_backend_layouts_reproduce_logged_loads(name: str, gpus: int, layout: mxfp4.Layout, logged: float) -> None:
    req = _request(name, gpus)
    assert req.spec is not None
    assert mxfp4.rank_bytes(req, req.spec, layout) / GIB == pytest.approx(logged, rel=0.01)


@pytest.mark.parametrize("product, version, expected", [
    ("NVIDIA A100-SXM4-80GB", (0, 19, 0), "marlin"),
    ("NVIDIA L40S", (0, 19, 0), "marlin"),
    ("NVIDIA H100 80GB HBM3", (0, 10, 1), "marlin"),
    ("NVIDIA-H100-80GB-HBM3", (0, 11, 1), "triton"),
    ("NVIDIA GH200 480GB", (0, 14, 1), "triton"),
    ("NVIDIA B200", (0, 14, 1), "marlin"),
    (None, (0, 14, 1), "marlin"),
])
def test_backend_by_gpu_and_release(product: str | None, version: tuple[int, ...], expected: str) -> None:
    assert mxfp4.layouts(product, version)[0].name == expected


def test_a_gpu_below_hopper_has_one_layout_and_an_unknown_one_the_widest_band() -> None:
    req = _request("gpt-oss-120b")
    assert req.spec is not None
    lo, mid, hi = mxfp4.band(req.but(gpu_product="NVIDIA A100 80GB"), req.spec, (0, 19, 0))
    assert lo == mid == hi
    lo, mid, hi = mxfp4.band(req, req.spec, (0, 19, 0))
    assert lo < mid < hi
    # The low end never rises above what a started Hopper deployment loaded (Triton, 64.38 GiB).
    assert lo / GIB < 64.38


def test_vllm_plan_uses_the_band_for_its_low_and_high_ends() -> None:
    req = _request("gpt-oss-120b").but(engine_version=(0, 14, 1), context=8192)
    on_a100 = vllm_engine.plan(req.but(gpu_product="NVIDIA A100 80GB", gpu_mib=80 * 1024.0), req.spec)
    unknown = vllm_engine.plan(req.but(gpu_mib=80 * 1024.0), req.spec)
    assert unknown.weights_mib == pytest.approx(on_a100.weights_mib)  # an unknown GPU expects Marlin
    assert unknown.low_per_gpu_mib < on_a100.low_per_gpu_mib
    assert unknown.high_per_gpu_mib > on_a100.high_per_gpu_mib


def test_meta_fp8_405b_keeps_attention_and_the_outer_mlps_in_bf16() -> None:
    meta = CAT.resolve("meta-llama/Meta-Llama-3.1-405B-Instruct-FP8")
    community = CAT.resolve("neuralmagic/Meta-Llama-3.1-405B-Instruct-FP8")
    assert meta is not None and community is not None
    assert meta.spec.name == "llama-3.1-405b-instruct-fp8" and meta.spec.dtype == "fp8"
    assert community.spec.name == "llama-3.1-405b-instruct" and community.quantization == "fp8"
    ours = weights_bytes(meta.spec.params, "fp8", shape_of(meta.spec, meta.spec.params), meta.spec)
    # vLLM 0.5.3 at TP 8 (vllm#6746): "Loading model weights took 57.7520 GB" on each rank.
    assert ours / 8 / GIB == pytest.approx(57.752, rel=0.02)
    everything_fp8 = weights_bytes(community.spec.params, "fp8", shape_of(community.spec, community.spec.params),
                                   community.spec)
    assert everything_fp8 < ours


def test_native_16bit_names_only_known_parts() -> None:
    entry = {"name": "x", "params": 1e9, "layers": 2, "hidden_size": 64, "heads": 4, "vocab_size": 10,
             "context": 128, "native_16bit": ["attention", "mlp.-1", "router"]}
    assert spec_from_mapping(entry).native_16bit == ("attention", "mlp.-1", "router")
    with pytest.raises(ValueError, match="native_16bit"):
        spec_from_mapping({**entry, "native_16bit": ["lm_head"]})
