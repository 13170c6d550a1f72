"""Hybrid models on vLLM: KV in the attention layers only, recurrent states in the pool, ModelOpt's quant_algo."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from webhook.cli.main import main
from webhook.config import Config
from webhook.decide.demand import read_demand
from webhook.engines import hybrid, vllm
from webhook.engines.precision import modelopt_precision, resolve_precision
from webhook.kinds import pod_view
from webhook.models.catalog import builtin_catalog, spec_from_mapping
from webhook.models.vram import EstimateRequest

CAT = builtin_catalog()
HERE = Path(__file__).parents[1] / "fixtures" / "hybrid"
GIB = 1024**3


def test_the_published_qwen36_nvfp4_deployment_on_one_rtx5090_is_admitted(capsys: pytest.CaptureFixture[str]) -> None:
    # noonghunna/club-3090#612: it started and served; vramgate used to reject it at 50.3 GiB per GPU
    # (full attention on all 40 layers, and `--quantization modelopt` read as fp8).
    code = main(["check", "-f", str(HERE / "qwen36-35b-a3b-nvfp4-rtx5090.yaml"),
                 "--nodes", str(HERE / "nodes-rtx5090.yaml")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith("ADMIT"), out
    assert "nvfp4" in out


def _qwen36_request() -> EstimateRequest:
    spec = CAT.get("qwen3.6-35b-a3b")
    assert spec is not None
    # The log's non-default args carry 'enable_prefix_caching': True (0.24 leaves it off for hybrids).
    return EstimateRequest(params=spec.params, precision="nvfp4", spec=spec, context=131072, engine="vllm",
                           engine_version=(0, 24, 0), max_num_seqs=1, batched_tokens=8192, kv_cache_dtype="fp8",
                           gpu_product="NVIDIA GeForce RTX 5090", gpu_mib=32607, prefix_caching=True)


def test_block_geometry_reproduces_the_logged_token_count() -> None:
    # The log's pool (5.98 GiB) through vLLM's arithmetic must give its printed figures: 567,978 tokens, 4.33x.
    req = _qwen36_request()
    assert req.spec is not None
    pool = vllm.hybrid_pool(req, req.spec, tp=1)
    assert pool is not None
    # One GDN state: 3 × 8192 bf16 conv values + 32 × 128 × 128 fp32 → 2,146,304 B; an fp8 attention token in
    # one layer: 2 × 2 × 256 B; so 2096-token blocks, 10 attention + 30 state layers in 4 groups of 10.
    assert req.spec.state_bytes_per_layer(1) == 3 * 8192 * 2 + 32 * 128 * 128 * 4
    assert (pool.block_size, pool.group_size, pool.attention_groups, pool.state_groups) == (2096, 10, 1, 3)
    assert pool.blocks_per_request(131072) == 63 + 3 * 2
    logged_pool = 5.98 * GIB
    assert pool.num_blocks(logged_pool) == 299
    assert pool.tokens(logged_pool, 131072, (0, 24, 0)) == 567978
    assert round(pool.concurrency(logged_pool, 131072), 2) == 4.33


def test_hybrid_kv_need_is_a_fraction_of_full_attention() -> None:
    req = _qwen36_request()
    est = vllm.plan(req, req.spec)
    # 70 blocks of 10 × 2 MiB pages: about 1.4 GiB for one 131072-token sequence (all 40 layers: ~5 GiB at fp8).
    assert 1.2 <= est.kv_cache_mib / 1024 <= 1.6
    assert any("hybrid" in n for n in est.notes)


def test_group_size_follows_vllm() -> None:
    assert hybrid.group_size(10, 30) == 10
    assert hybrid.group_size(4, 27) == 4  # Nemotron-H 9B: 4 attention, 27 Mamba → 7 padded state groups
    assert hybrid.group_size(12, 13) == 13  # within 1.5×: the larger, padded
    assert hybrid.group_size(0, 64) == 64


def test_printed_tokens_before_021_are_blocks_per_group() -> None:
    pool = hybrid.HybridPool(block_size=2096, page_bytes=2146304, group_size=10, attention_groups=1, state_groups=3)
    assert pool.tokens(299 * pool.bytes_per_block, 131072, (0, 13, 0)) == 299 // 4 * 2096


def test_printed_tokens_are_derived_from_the_concurrency_from_0201() -> None:
    # noonghunna/club-3090#91, "Initializing a V1 LLM engine (v0.20.1)": Qwen3.6-27B AutoRound int4, TP 2,
    # fp8_e5m2 KV, prefix caching, MTP n=3 at 262,144: "GPU KV cache size: 619,479 tokens", "Maximum concurrency
    # for 262,144 tokens per request: 2.36x". 1600-token blocks, 179 a request: 619,479 = int(423 / 179 × 262144),
    # not a multiple of 1600 (blocks per group would print 423 // 4 × 1600 = 168,000).
    spec = CAT.get("Qwen/Qwen3.6-27B")  # Lorbus/Qwen3.6-27B-int4-AutoRound (club-3090 scripts/setup.sh)
    assert spec is not None
    req = EstimateRequest(params=spec.params, precision="int4", spec=spec, context=262144, gpus=2, engine="vllm",
                          engine_version=(0, 20, 1), kv_cache_dtype="fp8_e5m2", speculative_tokens=3,
                          draft_attention_layers=1, prefix_caching=True)
    pool = vllm.hybrid_pool(req, spec, tp=2)
    assert pool is not None and (pool.block_size, pool.blocks_per_request(262144)) == (1600, 179)
    logged = 423 * pool.bytes_per_block
    assert pool.tokens(logged, 262144, (0, 20, 1)) == 619479
    assert round(pool.concurrency(logged, 262144), 2) == 2.36
    assert pool.tokens(logged, 262144, (0, 20, 0)) == 423 // 4 * 1600


def test_hybrids_cache_prefixes_by_default_only_from_028() -> None:
    # vllm-project/vllm#40691 (vLLM 0.19.0): `vllm serve Qwen3.5-27B --max-model-len 32768 --max-num-seqs 16
    # --max-num-batched-token 16384`, no prefix-caching flag: "GPU KV cache size: 290,864 tokens", "Maximum
    # concurrency for 32,768 tokens per request: 33.04x". 784-token blocks in 4 groups: 290,864 = 371 × 784, so
    # 1484–1487 blocks; 33.04x needs 45 blocks a request (42 attention + 3 × 1 state); with two state blocks a
    # request takes 48 and 1487 blocks give 30.98x. vllm#50991 (in 0.28.0) made prefix caching the hybrid default.
    spec = CAT.get("Qwen/Qwen3.5-27B")
    assert spec is not None
    req = EstimateRequest(params=spec.params, precision="bf16", spec=spec, context=32768, engine="vllm",
                          engine_version=(0, 19, 0), max_num_seqs=16, batched_tokens=16384)
    pool = vllm.hybrid_pool(req, spec, tp=1)
    assert pool is not None and (pool.block_size, pool.groups, pool.state_blocks) == (784, 4, 1)
    assert pool.blocks_per_request(32768) == 45
    logged = 1487 * pool.bytes_per_block
    assert pool.tokens(logged, 32768, (0, 19, 0)) == 290864
    assert round(pool.concurrency(logged, 32768), 2) == 33.04
    flagged = vllm.hybrid_pool(req.but(prefix_caching=True), spec, tp=1)
    assert flagged is not None and flagged.blocks_per_request(32768) == 48
    for version, blocks in (((0, 27, 1), 1), ((0, 28, 0), 2)):
        at = vllm.hybrid_pool(req.but(engine_version=version), spec, tp=1)
        assert at is not None and at.state_blocks == blocks, version


@pytest.mark.parametrize("algo, expected", [("NVFP4", "nvfp4"), ("W4A16_NVFP4", "nvfp4"), ("FP8", "fp8"),
                                            ("MIXED_PRECISION", "nvfp4"), ("FP8_PB_WO", "fp8"), ("INT4_AWQ", None)])
def test_modelopt_quant_algo(algo: str, expected: str | None) -> None:
    assert modelopt_precision(algo) == expected


def test_quantization_modelopt_reads_the_checkpoint() -> None:
    base = CAT.get("qwen3.6-35b-a3b")
    assert base is not None
    entry = {f: getattr(base, f) for f in ("name", "params", "layers", "hidden_size", "heads", "kv_heads",
                                            "head_dim", "vocab_size", "context")}
    nvfp4 = spec_from_mapping({**entry, "dtype": "nvfp4", "quant_algo": "NVFP4"})
    fp8 = spec_from_mapping({**entry, "dtype": "fp8", "quant_algo": "FP8"})
    flag = [("modelopt", "arg --quantization")]
    assert resolve_precision(flag, nvfp4, "inference", "vllm")[0] == "nvfp4"
    assert resolve_precision(flag, fp8, "inference", "vllm")[0] == "fp8"
    # Nothing says which: ModelOpt's FP8 (vLLM's `modelopt` method itself).
    assert resolve_precision(flag, base, "inference", "vllm")[0] == "fp8"
    # A model id naming its quantization says more than the format flag.
    assert resolve_precision([*flag, ("nvfp4", "model id")], base, "inference", "vllm") == ("nvfp4", "model id")
    # modelopt_fp4 names NVFP4 itself.
    assert resolve_precision([("modelopt_fp4", "arg --quantization")], base, "inference", "vllm")[0] == "nvfp4"


def test_sglang_splits_the_rest_by_its_mamba_ratio() -> None:
    # 19 GiB left, 100 MiB of state per request: 9 GiB to states (r / (1 + r) at 0.9), the rest to KV.
    states, kv = hybrid.sglang_pools(19 * GIB, 100 * 2**20)
    assert states == int((19 * GIB * 0.9 / 1.9 - 100 * 2**20) // (100 * 2**20))
    assert kv == 19 * GIB - (states + 1) * 100 * 2**20
    assert hybrid.sglang_pools(19 * GIB, 100 * 2**20, max_states=8) == (8, 19 * GIB - 9 * 100 * 2**20)
    assert hybrid.sglang_pools(GIB, 0) == (0, GIB)


def test_mtp_speculative_decoding_widens_states_and_adds_the_mtp_attention_layer() -> None:
    # noonghunna/club-3090#295: Qwen3.6-27B AutoRound on 2 × RTX 3090 (TP 2), fp8_e5m2 KV, prefix caching,
    # speculative_config {'method': 'mtp', 'num_speculative_tokens': 3}: "Add 3 padding layers",
    # "GPU KV cache size: 620,944 tokens", "Maximum concurrency for 262,144 tokens per request: 2.37x".
    spec = CAT.get("Qwen/Qwen3.6-27B")
    assert spec is not None
    drafted = vllm.speculative("{'method': 'mtp', 'num_speculative_tokens': 3}", spec)
    assert drafted == (3, 1)
    req = EstimateRequest(params=spec.params, precision="int4", spec=spec, context=262144, gpus=2, engine="vllm",
                          engine_version=(0, 22, 0), kv_cache_dtype="fp8_e5m2", speculative_tokens=3,
                          draft_attention_layers=1, prefix_caching=True)
    pool = vllm.hybrid_pool(req, spec, tp=2)
    assert pool is not None
    # 17 attention layers (16 + the MTP layer) and 48 GDN: groups of 17, 3 state groups (51: 3 padding layers);
    # a request: cdiv(262144, 1600) attention blocks + 3 × (2 + 3) state blocks.
    assert (pool.block_size, pool.group_size, pool.attention_groups, pool.state_groups) == (1600, 17, 1, 3)
    assert pool.blocks_per_request(262144) == 164 + 15
    # 2.37x × 179 blocks ≈ 424 blocks in the pool; vLLM prints int(424 / 179 × 262144).
    assert pool.tokens(424 * pool.bytes_per_block, 262144, (0, 22, 0)) == 620944
    assert vllm.speculative('{"method": "ngram", "num_speculative_tokens": 4}', spec) == (4, 0)
    assert vllm.speculative("not json", spec) is None


def test_without_prefix_caching_a_request_keeps_one_state_block() -> None:
    req = _qwen36_request()
    on = vllm.hybrid_pool(req, req.spec, tp=1)
    off = vllm.hybrid_pool(req.but(prefix_caching=False), req.spec, tp=1)
    assert on is not None and off is not None
    assert (on.state_blocks, off.state_blocks) == (2, 1)
    # The flag as a manifest writes it reaches the request admission prices.
    text = (HERE / "qwen36-35b-a3b-nvfp4-rtx5090.yaml").read_text()
    view = pod_view(yaml.safe_load(text.replace('"--enable-prefix-caching"', '"--no-enable-prefix-caching"')))
    assert view is not None
    demand = read_demand(view, Config(), CAT)
    assert demand is not None and demand.estimate is not None
    assert demand.estimate.request.prefix_caching is False
    view = pod_view(yaml.safe_load(text))
    assert view is not None
    demand = read_demand(view, Config(), CAT)
    assert demand is not None and demand.estimate is not None and demand.estimate.request.prefix_caching is True


def test_mtp_layers_add_weights_above_the_low_end() -> None:
    req = _qwen36_request()
    plain = vllm.plan(req, req.spec)
    mtp = vllm.plan(req.but(speculative_tokens=3, draft_attention_layers=1), req.spec)
    layer_gib = (mtp.weights_mib - plain.weights_mib) / 1024
    # One of 40 decoder layers of ~33.6B non-embedding parameters at NVFP4's 4.5 bits: ~0.44 GiB.
    assert 0.3 <= layer_gib <= 0.6
    # The low end grows by the pool's need only (wider states, 5 state blocks, the MTP layer's KV), not the layer.
    kv_growth = mtp.kv_cache_mib - plain.kv_cache_mib
    assert kv_growth > 0
    assert abs((mtp.low_per_gpu_mib - plain.low_per_gpu_mib) - kv_growth) < 2
