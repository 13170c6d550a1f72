"""The 2026 flagships (issue 39): Gemma 4, Mistral Large 3, Llama-Nemotron Ultra/Super, against their cards and engines.

Card figures are the publishers' (sources beside each); layer geometry is re-derived here from the configs the way
the engine builds it, so an entry or a catalog formula that drifts from either fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.cli.main import main
from webhook.engines import vllm as vllm_engine
from webhook.models.catalog import ModelSpec, builtin_catalog, computed_params
from webhook.models.vram import EstimateRequest

CAT = builtin_catalog()
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# Total parameters on each card, and where they were read.
CARD_PARAMS = {
    # Gemma 4 card table (as transcribed on huggingface.co/zeromodels/gemma-4-e4b-it from google/gemma-4-*):
    # "2.3B effective (5.1B with embeddings)", "4.5B effective (8B with embeddings)", "11.95B", "30.7B".
    "gemma-4-e2b-it": 5.1e9,
    "gemma-4-e4b-it": 8.0e9,
    "gemma-4-12b-it": 11.95e9,
    "gemma-4-31b-it": 30.7e9,
    # fairseq2 gemma4 docs (facebookresearch.github.io/fairseq2 ... fairseq2.models.gemma4): 26B-A4B "25.2B".
    "gemma-4-26b-a4b-it": 25.2e9,
    # build.nvidia.com/mistralai/mistral-large-3-675b-instruct-2512/modelcard: "Total Parameters: 675B".
    "mistral-large-3-675b-instruct-2512": 675e9,
    # huggingface.co/nvidia/Llama-3_1-Nemotron-Ultra-253B-v1 and -Super-49B-v1 cards (the names' 253B and 49B).
    "llama-3.1-nemotron-ultra-253b-v1": 253e9,
    "llama-3.3-nemotron-super-49b-v1": 49e9,
}


@pytest.mark.parametrize("name", sorted(CARD_PARAMS))
def test_total_params_within_3_percent_of_the_card(name: str) -> None:
    spec = CAT.get(name)
    assert spec is not None, name
    card = CARD_PARAMS[name]
    assert abs(spec.params / card - 1) <= 0.03, f"{name}: {spec.params / 1e9:.2f}B vs card {card / 1e9:.2f}B"
    if not spec.params_exempt:
        # The architecture alone lands there too, not only the stated number.
        assert abs(computed_params(spec) / card - 1) <= 0.03, f"{name}: computed {computed_params(spec) / 1e9:.2f}B"


def test_mistral_large_3_language_model_active_params_match_the_card() -> None:
    # Card: "Active Parameters: 41B (39B language model active)"; the catalog's active count includes the 2.5B tower.
    spec = CAT.get("mistral-large-3-675b-instruct-2512")
    assert spec is not None and spec.active_params and spec.vision_params
    assert abs((computed_params(spec, active=True) - spec.vision_params) / 39e9 - 1) <= 0.03


@pytest.mark.parametrize(("ref", "name", "quant"), [
    ("google/gemma-4-E2B-it", "gemma-4-e2b-it", None),
    ("google/gemma-4-E4B-it", "gemma-4-e4b-it", None),
    ("google/gemma-4-12B-it", "gemma-4-12b-it", None),
    ("google/gemma-4-26B-A4B-it", "gemma-4-26b-a4b-it", None),
    ("google/gemma-4-31B-it", "gemma-4-31b-it", None),
    ("cyankiwi/gemma-4-31B-it-AWQ-4bit", "gemma-4-31b-it", "int4"),
    ("mistralai/Mistral-Large-3-675B-Instruct-2512", "mistral-large-3-675b-instruct-2512", None),
    ("mistralai/Mistral-Large-3-675B-Instruct-2512-NVFP4", "mistral-large-3-675b-instruct-2512", "nvfp4"),
    ("mistralai/Mistral-Large-3-675B-Base-2512", "mistral-large-3-675b-base-2512", None),
    ("mistral-large-3-675b-instruct", "mistral-large-3-675b-instruct-2512", None),  # KAITO's preset name
    ("nvidia/Llama-3_1-Nemotron-Ultra-253B-v1", "llama-3.1-nemotron-ultra-253b-v1", None),
    ("nvidia/Llama-3_1-Nemotron-Ultra-253B-v1-FP8", "llama-3.1-nemotron-ultra-253b-v1", "fp8"),
    ("nvidia/Llama-3_3-Nemotron-Super-49B-v1", "llama-3.3-nemotron-super-49b-v1", None),
])
def test_hub_ids_resolve(ref: str, name: str, quant: str | None) -> None:
    found = CAT.resolve(ref)
    assert found is not None and found.spec.name == name
    assert found.quantization == quant


# ---------------------------------------------------------------------------------------------
# KV per token, re-derived from the configs as the engines build their caches.


def _gemma4_kv(layer_types: list[str], kv: int, head: int, global_kv: int, global_head: int, k_eq_v: bool,
               shared: int, window: int, tokens: int) -> tuple[int, int]:
    """(values per token at full length, values for ``tokens``) as vllm gemma4.py builds the cache.

    vllm@001cabc1be16a59a70d720ed61a13b678c060a18:vllm/model_executor/models/gemma4.py Gemma4DecoderLayer: a
    full_attention layer uses global_head_dim, and num_global_key_value_heads when attention_k_eq_v; Gemma4Attention:
    the last num_kv_shared_layers point kv_sharing_target_layer_name at an earlier layer (no cache of their own),
    sliding layers pass per_layer_sliding_window.
    """
    per_token = for_tokens = 0
    for i, kind in enumerate(layer_types):
        if i >= len(layer_types) - shared:
            continue
        full = kind == "full_attention"
        width = 2 * (global_kv if full and k_eq_v else kv) * (global_head if full else head)
        per_token += width
        for_tokens += width * (tokens if full else min(tokens, window))
    return per_token, for_tokens


@pytest.mark.parametrize(("name", "types", "kv", "global_kv", "k_eq_v", "shared", "window"), [
    # convert_gemma4_weights.py _VARIANTS (transformers@0f3f0632): E2B [s x4, f] x 7, 1 KV head, 20 shared layers.
    ("gemma-4-e2b-it", (["sliding_attention"] * 4 + ["full_attention"]) * 7, 1, None, False, 20, 512),
    ("gemma-4-e4b-it", (["sliding_attention"] * 5 + ["full_attention"]) * 7, 2, None, False, 18, 512),
    ("gemma-4-26b-a4b-it", (["sliding_attention"] * 5 + ["full_attention"]) * 5, 8, 2, True, 0, 1024),
    ("gemma-4-31b-it", (["sliding_attention"] * 5 + ["full_attention"]) * 10, 16, 4, True, 0, 1024),
])
def test_gemma4_kv_per_token_as_vllm_builds_it(name: str, types: list[str], kv: int, global_kv: int | None,
                                               k_eq_v: bool, shared: int, window: int) -> None:
    spec = CAT.get(name)
    assert spec is not None
    per_token, for_context = _gemma4_kv(types, kv, 256, global_kv or kv, 512, k_eq_v, shared, window, spec.context)
    assert spec.kv_elements_per_token() == per_token
    assert spec.kv_elements_for(spec.context) == for_context


def test_mistral_large_3_kv_is_the_mla_latent() -> None:
    # DeepseekV3ForCausalLM's MLA cache (vllm mistral_large_3.py subclasses it): one kv_lora_rank + qk_rope_head_dim
    # latent per layer and token, from params.json kv_lora_rank 512, qk_rope_head_dim 64, n_layers 61.
    spec = CAT.get("mistral-large-3-675b-instruct-2512")
    assert spec is not None and spec.mla
    assert spec.kv_elements_per_token() == 61 * (512 + 64)


# nvidia/Llama-3_1-Nemotron-Ultra-253B-v1 config.json block_configs (NVIDIA/NeMo@8cfedd72
# nemo/collections/llm/gpt/model/llama_nemotron_config.py), run-length: (attention n_heads_in_group or None for no_op,
# ffn_mult or None for no_op, blocks).
ULTRA_BLOCKS = [
    (16, 0.4875, 1), (16, 0.975, 1), (16, 1.4625, 6), (16, 1.95, 1), (None, None, 4), (16, 1.95, 3), (16, 4.875, 2),
    (None, None, 6), (16, 4.875, 3), (None, None, 5), (16, 4.875, 3), (16, 2.4375, 1), (None, None, 3),
    (16, 1.95, 3), (None, 1.95, 1), (16, 4.875, 1), (None, 4.875, 1), (None, None, 5), (16, 4.875, 4),
    (None, None, 5), (16, 4.875, 4), (None, None, 5), (16, 4.875, 4), (None, None, 5), (16, 4.875, 4),
    (None, None, 5), (16, 4.875, 1), (16, 3.4125, 3), (None, None, 2), (16, 2.925, 1), (16, 2.4375, 3),
    (None, 2.4375, 2), (16, 2.4375, 1), (None, None, 1), (None, 2.4375, 7), (16, 2.4375, 1), (None, None, 5),
    (16, 2.925, 1), (16, 4.875, 1), (None, 4.875, 1), (16, 4.875, 1), (None, None, 8), (None, 36.5625, 1),
    (None, None, 8), (None, 39.0, 1), (None, None, 8), (None, 31.40625, 1), (None, None, 5), (None, 27.5625, 1),
    (None, 1.95, 1), (16, 1.95, 1), (16, 2.4375, 1), (None, None, 1), (16, 2.4375, 2), (16, 3.4125, 1),
    (16, 4.875, 4), (16, 2.4375, 1),
]


def _ffn_width(mult: float, hidden: int) -> int:
    # vllm nemotron_nas.py _ffn_mult_to_intermediate_size: int(2 · mult · hidden / 3), rounded up to 256.
    width = int(2 * mult * hidden / 3)
    return width if width % 256 == 0 else width + 256 - width % 256


def test_nemotron_ultra_layers_as_vllm_builds_them() -> None:
    """vllm@00bd1493b3e82d6c13c68ee8a0e1c5a96707e190 nemotron_nas.py DeciLMDecoderLayer: attention (and its KV cache,
    num_kv_heads = heads // n_heads_in_group) only where not no_op, an MLP only where the ffn is not no_op."""
    spec = CAT.get("llama-3.1-nemotron-ultra-253b-v1")
    assert spec is not None
    blocks = [(group, mult) for group, mult, count in ULTRA_BLOCKS for _ in range(count)]
    assert len(blocks) == spec.layers == 162
    head = spec.hidden_size // spec.heads
    kv = sum(2 * (spec.heads // group) * head for group, _ in blocks if group)
    widths = [_ffn_width(mult, spec.hidden_size) for _, mult in blocks if mult]
    assert spec.kv_elements_per_token() == kv
    assert spec.attention_layers == spec.cache_layers == sum(1 for group, _ in blocks if group)
    assert spec.mlp_layers == len(widths) and spec.mlp_width_total == sum(widths)
    assert spec.intermediate_size == max(widths)


# ---------------------------------------------------------------------------------------------
# The fields these entries added, on a toy model, and what the engine does with them.


def _toy(**fields: object) -> ModelSpec:
    base: dict[str, object] = {"name": "toy", "params": 1e9, "layers": 6, "hidden_size": 64, "heads": 4,
                               "kv_heads": 2, "head_dim": 16, "vocab_size": 100, "context": 4096,
                               "intermediate_size": 128}
    return ModelSpec(**{**base, **fields})  # type: ignore[arg-type]


def test_global_layers_keep_their_own_kv_width_and_weights() -> None:
    plain = _toy(sliding_window=8, sliding_window_layers=4)
    gemma = _toy(sliding_window=8, sliding_window_layers=4, global_head_dim=32, global_kv_heads=1)
    assert plain.kv_elements_per_token() == 6 * 2 * 2 * 16
    assert gemma.kv_elements_per_token() == 4 * 2 * 2 * 16 + 2 * 2 * 1 * 32
    assert gemma.kv_elements_for(100) == 4 * 2 * 2 * 16 * 8 + 2 * 2 * 1 * 32 * 100
    # Two full layers at 32-wide heads: Q and O of 4 heads, K and V of 1 head, against the sliding layers' 16.
    extra = 2 * (2 * 64 * (4 + 1) * 32 - (2 * 64 * 4 * 16 + 2 * 64 * 2 * 16))
    assert computed_params(gemma) - computed_params(plain) == extra


def test_attention_layers_and_mlp_width_total_drive_the_parameter_count() -> None:
    dense = _toy()
    nas = _toy(attention_layers=2, kv_layers=2, mlp_layers=3, mlp_width_total=300)
    attention = 2 * 64 * 4 * 16 + 2 * 64 * 2 * 16
    assert computed_params(dense) - computed_params(nas) == 4 * attention + 3 * 64 * (6 * 128 - 300)
    assert nas.attention_params() == 2 * attention


def test_vllm_splits_fewer_global_kv_heads_over_fewer_ranks() -> None:
    # gemma-4-31b-it at TP 8: a sliding layer's 16 KV heads give each rank 2; a full layer's 4 give each rank
    # max(1, 4 // 8) = 1 (gemma4.py Gemma4Attention num_kv_heads), so full layers split over 4 ranks, not 8.
    spec = CAT.get("gemma-4-31b-it")
    assert spec is not None
    req = EstimateRequest(params=spec.params, precision="bf16", spec=spec, context=spec.context, gpus=8)
    layout, shards = vllm_engine.kv_geometry(req, spec, 8)
    per_rank = layout.bytes_per_token() / shards
    assert per_rank == 50 * 2 * 2 * 256 * 2 + 10 * 2 * 1 * 512 * 2


@pytest.mark.parametrize(("fixture", "nodes"), [
    ("distributed/50-kuberay-rayservice-gemma4-e2b-dp8-b200.yaml", "distributed/nodes/b200x8.yaml"),
    ("corpus2026/07-kaito-workspace-mistral-large-3-675b-6x-nc80.yaml", "corpus2026/nodes-h100.yaml"),
])
def test_the_fixtures_naming_them_are_admitted_with_a_catalog_estimate(
        fixture: str, nodes: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "-f", str(FIXTURES / fixture), "--nodes", str(FIXTURES / nodes)]) == 0
    out = capsys.readouterr().out
    assert "not in the catalog" not in out and "no VRAM estimate" not in out


# ---------------------------------------------------------------------------------------------
# `vramgate models import` reads the same fields from the configs.


def _gemma4_config(**text: object) -> dict[str, object]:
    """A Gemma4ForConditionalGeneration config.json with configuration_gemma4.py's defaults filled in."""
    base: dict[str, object] = {"model_type": "gemma4_text", "vocab_size": 262144, "head_dim": 256,
                               "global_head_dim": 512, "max_position_embeddings": 131072, "sliding_window": 512,
                               "tie_word_embeddings": True, "num_attention_heads": 8}
    return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
            "text_config": {**base, **text}}


@pytest.mark.parametrize(("name", "text"), [
    # convert_gemma4_weights.py _VARIANTS (transformers@0f3f0632), the text configs it writes.
    ("gemma-4-e2b-it", {"hidden_size": 1536, "intermediate_size": 6144, "num_hidden_layers": 35,
                        "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 7,
                        "num_key_value_heads": 1, "num_kv_shared_layers": 20}),
    ("gemma-4-26b-a4b-it", {"hidden_size": 2816, "intermediate_size": 2112, "num_hidden_layers": 30,
                            "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5,
                            "num_attention_heads": 16, "num_key_value_heads": 8, "num_global_key_value_heads": 2,
                            "attention_k_eq_v": True, "enable_moe_block": True, "num_experts": 128,
                            "moe_intermediate_size": 704, "top_k_experts": 8, "sliding_window": 1024,
                            "max_position_embeddings": 262144}),
    ("gemma-4-31b-it", {"hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 60,
                        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10,
                        "num_attention_heads": 32, "num_key_value_heads": 16, "num_global_key_value_heads": 4,
                        "attention_k_eq_v": True, "sliding_window": 1024, "max_position_embeddings": 262144}),
])
def test_import_reads_gemma4_geometry(name: str, text: dict[str, object]) -> None:
    from webhook.models.catalog import entry_from_hf_config, spec_from_mapping

    imported = spec_from_mapping(entry_from_hf_config(_gemma4_config(**text), name=name))
    spec = CAT.get(name)
    assert spec is not None
    for field in ("global_head_dim", "global_kv_heads", "kv_layers", "sliding_window", "sliding_window_layers",
                  "experts", "experts_per_token", "shared_experts", "shared_expert_intermediate_size", "context"):
        assert getattr(imported, field) == getattr(spec, field), field
    assert imported.kv_elements_for(imported.context) == spec.kv_elements_for(spec.context)


def test_import_reads_nemotron_nas_block_configs() -> None:
    from webhook.models.catalog import entry_from_hf_config, spec_from_mapping

    blocks = [{"attention": {"no_op": group is None, "n_heads_in_group": group},
               "ffn": {"no_op": mult is None, "ffn_mult": mult}}
              for group, mult, count in ULTRA_BLOCKS for _ in range(count)]
    config = {"architectures": ["DeciLMForCausalLM"], "model_type": "nemotron-nas", "hidden_size": 16384,
              "num_hidden_layers": 162, "num_attention_heads": 128, "num_key_value_heads": None,
              "intermediate_size": None, "vocab_size": 128256, "max_position_embeddings": 131072,
              "rope_scaling": {"rope_type": "llama3", "factor": 16.0}, "tie_word_embeddings": False,
              "block_configs": blocks}
    imported = spec_from_mapping(entry_from_hf_config(config, name="nvidia/Llama-3_1-Nemotron-Ultra-253B-v1"))
    spec = CAT.get("llama-3.1-nemotron-ultra-253b-v1")
    assert spec is not None
    for field in ("kv_heads", "attention_layers", "kv_layers", "mlp_layers", "mlp_width_total", "intermediate_size",
                  "context"):
        assert getattr(imported, field) == getattr(spec, field), field
    assert computed_params(imported) == pytest.approx(spec.params, rel=0.001)
