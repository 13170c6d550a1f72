"""DeepSeek-V4-Pro and -Flash (issue 39): sizes against the model cards, hub ids, and the compressed KV cache."""

import json
import math
from pathlib import Path

import pytest

from webhook.cli.main import main
from webhook.engines.vllm import compressed_prefill_workspace, compressed_window_bytes
from webhook.models.catalog import ModelSpec, builtin_catalog, computed_params, entry_from_hf_config, spec_from_mapping
from webhook.models.vram import EstimateRequest, shape_of, weights_bytes, weights_per_gpu
from webhook.units.precision import kv_bytes

CAT = builtin_catalog()
GIB = 1024**3

# (entry, the card's total parameters). huggingface.co/deepseek-ai/DeepSeek-V4-Pro and -Flash model cards:
# "DeepSeek-V4-Pro with 1.6T parameters (49B activated) and DeepSeek-V4-Flash with 284B parameters (13B
# activated)"; the Base cards give the same sizes.
CARDS = [
    ("deepseek-v4-pro", 1.6e12),
    ("deepseek-v4-pro-base", 1.6e12),
    ("deepseek-v4-flash", 284e9),
    ("deepseek-v4-flash-base", 284e9),
]

# Layers by compression ratio, as config.json's compress_ratios lists them for the main layers (the last entry
# of the list is the MTP layer's): Pro [128, 128] + [4, 128] x 29 + [4]; Flash [0, 0] + [4, 128] x 20 + [4].
LAYERS_BY_RATIO = {
    "deepseek-v4-pro": {4: 30, 128: 31, 0: 0},
    "deepseek-v4-flash": {4: 21, 128: 20, 0: 2},
}


def _spec(name: str) -> ModelSpec:
    spec = CAT.get(name)
    assert spec is not None, f"{name} is not in the catalog"
    return spec


@pytest.mark.parametrize("name,card", CARDS, ids=[c[0] for c in CARDS])
def test_params_within_3_percent_of_the_card(name: str, card: float) -> None:
    spec = _spec(name)
    assert abs(spec.params / card - 1) <= 0.03, f"{name}: {spec.params / 1e9:.1f}B vs card {card / 1e9:.1f}B"
    assert abs(computed_params(spec) / card - 1) <= 0.03


def test_the_hub_ids_resolve() -> None:
    for ref, name in (("deepseek-ai/DeepSeek-V4-Pro", "deepseek-v4-pro"),
                      ("deepseek-ai/DeepSeek-V4-Flash", "deepseek-v4-flash"),
                      ("deepseek-ai/DeepSeek-V4-Pro-Base", "deepseek-v4-pro-base"),
                      ("deepseek-ai/DeepSeek-V4-Flash-Base", "deepseek-v4-flash-base"),
                      ("hf://deepseek-ai/DeepSeek-V4-Flash", "deepseek-v4-flash"),
                      ("/raid/models/deepseek-ai/DeepSeek-V4-Flash", "deepseek-v4-flash")):
        found = CAT.resolve(ref)
        assert found is not None and found.spec.name == name and found.quantization is None, ref
    # SGLang's FP8 repack for Hopper keeps the experts in fp8: sized as the fp8-expert checkpoint, not the fp4 one.
    found = CAT.resolve("sgl-project/DeepSeek-V4-Flash-FP8")
    assert found is not None and found.spec.name == "deepseek-v4-flash-base" and found.spec.expert_dtype is None
    # A requantization (NVIDIA ModelOpt's naming) is the same model at the precision its name says.
    found = CAT.resolve("nvidia/DeepSeek-V4-Pro-NVFP4")
    assert found is not None and found.spec.name == "deepseek-v4-pro" and found.quantization == "nvfp4"


@pytest.mark.parametrize("name", sorted(LAYERS_BY_RATIO))
def test_layers_by_compression_ratio_are_the_configs(name: str) -> None:
    spec = _spec(name)
    ratios = spec.compress_ratios
    assert len(ratios) == spec.layers
    for ratio, count in LAYERS_BY_RATIO[name].items():
        assert sum(1 for r in ratios if r == ratio) == count, ratio


def test_one_compressed_entry_and_one_indexer_key_in_vllms_bytes() -> None:
    # vLLM's fp8_ds_mla entry for V4: "448B NoPE + 128B RoPE + 8B fp8 scale = 584B"; the indexer key "128 fp8 +
    # 4 fp32 scale = 132" (v1/kv_cache_interface.py, model_executor/layers/deepseek_v4_attention.py).
    for name in LAYERS_BY_RATIO:
        assert _spec(name).compressed_entry_bytes() == (584, 132)


@pytest.mark.parametrize("name", sorted(LAYERS_BY_RATIO))
def test_kv_per_token_is_what_vllm_allocates(name: str) -> None:
    """Each ratio-m layer keeps one 584-byte entry per m tokens, ratio-4 layers a 132-byte indexer key too."""
    spec, layers = _spec(name), LAYERS_BY_RATIO[name]
    per_token = layers[4] * (584 + 132) / 4 + layers[128] * 584 / 128
    assert spec.kv_elements_per_token() == math.ceil(per_token)
    tokens = 1 << 20
    assert spec.kv_elements_for(tokens) == int(per_token * tokens)
    # Fewer tokens than a ratio: still one entry (vLLM's pages hold whole entries).
    assert spec.kv_elements_for(1) == layers[4] * (584 + 132) + layers[128] * 584


def test_the_pro_cache_at_1m_tokens_in_bf16_is_the_released_figure() -> None:
    # The release notes: the 1M-token KV cache is "9.62 GiB/sequence (in bf16)". In bf16 an entry is 512 values
    # and an indexer key 128, two bytes each: the layer counts must give that figure.
    ratios = _spec("deepseek-v4-pro").compress_ratios
    tokens = 1_048_576
    bf16 = sum(tokens // r * (512 + (128 if r == 4 else 0)) * 2 for r in ratios if r > 1)
    assert round(bf16 / GIB, 2) == 9.62


def test_an_unstated_kv_dtype_is_fp8_for_v4_only() -> None:
    v4, v3 = _spec("deepseek-v4-flash"), _spec("deepseek-v3.2-exp")
    assert EstimateRequest(params=v4.params, precision="fp8", spec=v4).kv_cache_dtype == "fp8"
    assert EstimateRequest(params=v4.params, precision="fp8", spec=v4, kv_cache_dtype="bf16").kv_cache_dtype == "bf16"
    assert EstimateRequest(params=v3.params, precision="fp8", spec=v3).kv_cache_dtype is None


def test_vllms_fp8_ds_mla_kv_dtype_is_an_fp8_cache() -> None:
    assert kv_bytes("fp8", "fp8_ds_mla") == 1.0


def test_weights_price_the_experts_at_mxfp4_and_the_rest_at_fp8() -> None:
    pro, base = _spec("deepseek-v4-pro"), _spec("deepseek-v4-pro-base")
    total = weights_bytes(pro.params, "fp8", shape_of(pro, pro.params), pro)
    # The checkpoint's tensors (64 safetensors, "805.33 GB" = GiB) less its mtp.0 tensors (13.01 GiB summed from
    # the same list; vLLM loads them only for MTP drafting): the main model's bytes, within 2 %.
    assert abs(total / GIB / (805.33 - 13.01) - 1) <= 0.02
    routed = pro.routed_expert_params()
    rest = pro.params - routed - pro.embedding_params
    expected = routed * 4.25 / 8 + rest + pro.embedding_params * 2
    assert total == pytest.approx(expected)
    # Flash: "~160 GB" on disk with its MTP layer (ai-dynamo/dynamo recipes/deepseek-v4-pro/README.md, "~865 GB vs.
    # ~160 GB"); its MTP layer is 1/43 of its layers.
    flash = _spec("deepseek-v4-flash")
    flash_total = weights_bytes(flash.params, "fp8", shape_of(flash, flash.params), flash)
    assert abs(flash_total * 44 / 43 / 160e9 - 1) <= 0.05
    # The Base checkpoint keeps its experts in fp8: about twice the bytes.
    assert weights_bytes(base.params, "fp8", shape_of(base, base.params), base) / total > 1.6
    # Another precision asked for (a requantization) prices every weight at it.
    nvfp4 = weights_bytes(pro.params, "nvfp4", shape_of(pro, pro.params), pro)
    assert nvfp4 == pytest.approx((pro.params - pro.embedding_params) * 4.5 / 8 + pro.embedding_params * 2)


def test_expert_parallel_ranks_hold_their_share_of_the_mxfp4_experts() -> None:
    flash = _spec("deepseek-v4-flash")
    req = EstimateRequest(params=flash.params, precision="fp8", spec=flash, gpus=1, expert_split=4)
    total = weights_bytes(flash.params, "fp8", shape_of(flash, flash.params), flash)
    experts = flash.routed_expert_params() * 4.25 / 8
    assert weights_per_gpu(req, total, flash) == pytest.approx(total - experts + experts / 4)


def test_compressed_kv_rounds_entries_up_and_checks_its_fields() -> None:
    base = {"name": "tiny-v4", "params": 1e9, "layers": 3, "hidden_size": 256, "heads": 4, "kv_heads": 1,
            "head_dim": 128, "qk_rope_head_dim": 64, "index_head_dim": 128, "vocab_size": 1000, "context": 4096,
            "moe_intermediate_size": 64, "compress_ratios": [0, 4, 128]}
    spec = spec_from_mapping(base)
    entry, index = spec.compressed_entry_bytes()
    assert (entry, index) == (64 + 128 + 1 + 1, 132)
    assert spec.kv_elements_for(130) == 33 * (entry + index) + 2 * entry
    with pytest.raises(ValueError, match="compress_ratios"):
        spec_from_mapping({**base, "compress_ratios": [0, 4]})
    with pytest.raises(ValueError, match="expert_dtype"):
        spec_from_mapping({**base, "expert_dtype": "fp8"})


# DeepSeek-V4-Flash's config.json, the keys the import reads (as the catalog entry's comment cites it).
FLASH_CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "_name_or_path": "deepseek-ai/DeepSeek-V4-Flash",
    "hidden_size": 4096, "num_hidden_layers": 43, "num_attention_heads": 64, "num_key_value_heads": 1,
    "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 6, "moe_intermediate_size": 2048,
    "num_hash_layers": 3, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512, "sliding_window": 128,
    "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0], "vocab_size": 129280, "max_position_embeddings": 1048576,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536},
    "num_nextn_predict_layers": 1, "expert_dtype": "fp4", "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
}


def test_importing_the_flash_config_gives_the_catalog_entry() -> None:
    imported = spec_from_mapping(entry_from_hf_config(FLASH_CONFIG))
    flash = _spec("deepseek-v4-flash")
    for field in ("layers", "hidden_size", "heads", "kv_heads", "head_dim", "vocab_size", "context", "dtype",
                  "experts", "experts_per_token", "shared_experts", "moe_intermediate_size", "q_lora_rank",
                  "qk_rope_head_dim", "o_lora_rank", "o_groups", "index_head_dim", "index_n_heads",
                  "compress_ratios", "expert_dtype", "mtp_layers", "sliding_window", "intermediate_size"):
        assert getattr(imported, field) == getattr(flash, field), field
    assert imported.params == pytest.approx(flash.params, rel=0.01)
    assert imported.kv_elements_per_token() == flash.kv_elements_per_token()
    base = spec_from_mapping(entry_from_hf_config({**FLASH_CONFIG, "expert_dtype": "fp8"}))
    assert base.expert_dtype is None


def test_models_show_gives_the_fp8_layouts_bytes_not_a_16bit_figure(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "show", "deepseek-ai/DeepSeek-V4-Pro"]) == 0
    out = capsys.readouterr().out
    spec = _spec("deepseek-v4-pro")
    assert f"kv_bytes_per_token_fp8_ds_mla: {spec.kv_elements_per_token()}" in out
    assert "kv_bytes_per_token_16bit" not in out


PRO_ON_8_H200 = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: dsv4-pro-h200-dep8}
spec:
  selector: {matchLabels: {app: dsv4}}
  template:
    metadata: {labels: {app: dsv4}}
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:deepseekv4-cu130
        args: [deepseek-ai/DeepSeek-V4-Pro, --trust-remote-code, --kv-cache-dtype, fp8, --block-size, "256",
               --enable-expert-parallel, --data-parallel-size, "8", --max-model-len, "800000"]
        resources: {limits: {nvidia.com/gpu: 8}}
"""


def test_the_published_pro_dp8_ep_on_8_h200_at_800k_is_admitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # vllm-project/recipes#381: DP 8 + EP with --max-model-len 800000 on one 8 x H200 node; it started after
    # vllm af483b8 (recipes#832). Each rank holds all of the attention and 1/8 of the experts: ~122 GiB of weights
    # of 129 GiB usable. Priced at 4.6 bits an expert weight (gpt-oss's MXFP4) it would be rejected.
    manifest = tmp_path / "pro.yaml"
    manifest.write_text(PRO_ON_8_H200)
    nodes = Path(__file__).resolve().parents[1] / "fixtures" / "corpus2026" / "nodes-h200.yaml"
    code = main(["check", "-f", str(manifest), "--nodes", str(nodes), "-o", "json"])
    results = json.loads(capsys.readouterr().out)["results"]
    assert code == 0, results
    [result] = [r for r in results if r.get("estimate")]
    assert result["verdict"] == "admit"
    assert "deepseek-v4-pro" in result["sources"]["model"]


def test_vllm_keeps_a_window_cache_in_every_v4_layer() -> None:
    # sparse_swa.py: a SlidingWindowMLASpec of window 128 in blocks of 64 tokens, 584 bytes a token, per layer.
    pro = _spec("deepseek-v4-pro")
    blocks = -(-(128 - 1 + 8192) // 64) + 1
    assert compressed_window_bytes(pro, 1 << 20, 8192) == 61 * blocks * 64 * 584
    assert compressed_window_bytes(pro, 100, 8192) == 61 * (-(-100 // 64) + 1) * 64 * 584
    assert compressed_window_bytes(_spec("deepseek-v3.2-exp"), 1 << 20, 8192) == 0.0
    # The window does not cap the compressed caches anywhere an estimate reads the shape.
    assert shape_of(pro, pro.params).sliding_window is None


def test_vllm_reserves_the_v4_prefill_gather_workspace() -> None:
    # deepseek_v4_attention.py: 4 requests x (max_model_len / 4 compressed entries + batched tokens) x 512 bf16.
    pro, v3 = _spec("deepseek-v4-pro"), _spec("deepseek-v3.2-exp")
    assert compressed_prefill_workspace(pro, 1 << 20, 8192) == 4 * ((1 << 20) // 4 + 8192) * 512 * 2
    assert compressed_prefill_workspace(pro, 1 << 20, 8192) > compressed_prefill_workspace(pro, 1 << 16, 8192)
    assert compressed_prefill_workspace(v3, 1 << 20, 8192) == 0.0
