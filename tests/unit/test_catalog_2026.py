"""The 2026 flagships added for issue 39: each entry's total parameters within 3 % of its model card's figure."""

import pytest

from webhook.models.catalog import builtin_catalog, computed_params

CAT = builtin_catalog()

# (entry, the card's total parameter count, where the card figure was read)
CARDS = [
    # Kimi-K2.5 model card summary table: "Total Parameters 1T, Activated Parameters 32B, Vision Encoder
    # MoonViT 400M" (the same table heads the K2.x cards); sgl-project docs, Kimi-K2.5 usage:
    # "a 1T-parameter model (32B active)".
    ("kimi-k2.5", 1.0e12),
    # Qwen3.5-397B-A17B model card and the name: "397B total parameters, 17B activated" (the block-level note
    # transcribed from its config.json: "params 397BA17B ... Matches the verified model card").
    ("qwen3.5-397b-a17b", 397e9),
]


@pytest.mark.parametrize("name,card", CARDS, ids=[c[0] for c in CARDS])
def test_params_within_3_percent_of_the_card(name: str, card: float) -> None:
    spec = CAT.get(name)
    assert spec is not None, f"{name} is not in the catalog"
    assert abs(spec.params / card - 1) <= 0.03, f"{name}: {spec.params / 1e9:.1f}B vs card {card / 1e9:.1f}B"
    if not spec.params_exempt:
        assert abs(computed_params(spec) / card - 1) <= 0.03


def test_nvfp4_checkpoints_resolve_to_the_base_model_in_nvfp4() -> None:
    for ref, name in (("nvidia/Kimi-K2.5-NVFP4", "kimi-k2.5"), ("nvidia/DeepSeek-R1-NVFP4", "deepseek-r1")):
        found = CAT.resolve(ref)
        assert found is not None and found.spec.name == name and found.quantization == "nvfp4", ref
    found = CAT.resolve("moonshotai/Kimi-K2.5")
    assert found is not None and found.spec.name == "kimi-k2.5" and found.quantization is None


def test_kimi_k25_is_the_kimi_k2_shape_plus_a_tower() -> None:
    k25, k2 = CAT.get("kimi-k2.5"), CAT.get("kimi-k2-thinking")
    assert k25 is not None and k2 is not None
    for field in ("layers", "hidden_size", "heads", "vocab_size", "experts", "experts_per_token", "kv_lora_rank",
                  "q_lora_rank", "moe_intermediate_size", "first_dense_layers", "context", "dtype"):
        assert getattr(k25, field) == getattr(k2, field), field
    assert k25.vision_params and 0.4e9 <= k25.vision_params <= 0.5e9
    assert k25.kv_elements_per_token() == 61 * (512 + 64)


def test_qwen35_is_a_hybrid_with_kv_in_a_quarter_of_its_layers() -> None:
    spec = CAT.get("qwen3.5-397b-a17b")
    assert spec is not None and spec.kv_layers == 15
    assert spec.linear_state_bytes == 45 * (64 * 128 * 128 + 3 * 12288) * 2
    assert spec.kv_elements_per_token() == 2 * 15 * 2 * 256


# Hybrid entries (issue 39): the card's total, and where the card figure was read.
HYBRID_CARDS = [
    # Qwen3.6-35B-A3B card architecture block: "35B in total and 3B activated" (mera.a-ai.ru transcription).
    ("qwen3.6-35b-a3b", 35e9),
    # transformers docs qwen3_5_moe.md: "Qwen/Qwen3.5-35B-A3B (35B total/3B active)".
    ("qwen3.5-35b-a3b", 35e9),
    # The model name and the MoE note: 122B total / 10B active.
    ("qwen3.5-122b-a10b", 122e9),
    # The model name: 27B.
    ("qwen3.5-27b", 27e9),
    # Qwen3-Next-80B-A3B card: "80B parameters in total and 3B activated".
    ("qwen3-next-80b-a3b-instruct", 80e9),
    # NVIDIA-Nemotron-Nano-9B-v2: the name (9B).
    ("nvidia-nemotron-nano-9b-v2", 9e9),
    # Kimi-Linear-48B-A3B: "48B total parameters, 3B activated".
    ("kimi-linear-48b-a3b-instruct", 48e9),
    # Jamba-v0.1 card: "52B total available parameters, 12B active".
    ("jamba-v0.1", 52e9),
]


@pytest.mark.parametrize("name,card", HYBRID_CARDS, ids=[c[0] for c in HYBRID_CARDS])
def test_hybrid_params_within_3_percent_of_the_card(name: str, card: float) -> None:
    spec = CAT.get(name)
    assert spec is not None, f"{name} is not in the catalog"
    assert abs(spec.params / card - 1) <= 0.03, f"{name}: {spec.params / 1e9:.1f}B vs card {card / 1e9:.1f}B"
    assert spec.hybrid and spec.state_layers and spec.cache_layers < spec.layers


def test_hybrid_state_shapes_follow_vllm() -> None:
    # vLLM's MambaStateShapeCalculator per layer and sequence (vllm==0.33.0 mamba_utils.py).
    nemotron = CAT.get("nvidia-nemotron-nano-9b-v2")
    assert nemotron is not None
    assert nemotron.conv_state == (128 * 80 + 2 * 8 * 128) * 3 and nemotron.ssm_state == 128 * 80 * 128
    assert nemotron.state_bytes_per_layer(1) == nemotron.conv_state * 2 + nemotron.ssm_state * 4  # fp32 ssm
    jamba = CAT.get("jamba-v0.1")
    assert jamba is not None and jamba.state_bytes_per_layer(2) == (8192 // 2) * 3 * 2 + (8192 // 2) * 16 * 2


def test_models_import_reads_the_recurrent_state_of_a_hybrid_config() -> None:
    from webhook.models.catalog import entry_from_hf_config

    nemotron = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "num_hidden_layers": 8,
                "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                "vocab_size": 1000, "intermediate_size": 512, "hybrid_override_pattern": "M-M*M-M-",
                "ssm_state_size": 16, "conv_kernel": 4, "n_groups": 2, "mamba_num_heads": 8, "mamba_head_dim": 32}
    e = entry_from_hf_config(nemotron, name="acme/tiny-nemotron-h")
    assert (e["kv_layers"], e["state_layers"], e["mlp_layers"]) == (1, 4, 3)
    assert e["conv_state"] == (8 * 32 + 2 * 2 * 16) * 3 and e["ssm_state"] == 8 * 32 * 16 and e["ssm_dtype"] == "fp32"
    gdn = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_hidden_layers": 8,
           "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000,
           "intermediate_size": 512, "full_attention_interval": 4, "linear_num_key_heads": 2,
           "linear_num_value_heads": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
           "linear_conv_kernel_dim": 4, "mamba_ssm_dtype": "float32"}
    e = entry_from_hf_config(gdn, name="acme/tiny-next")
    assert (e["kv_layers"], e["state_layers"]) == (2, 6)
    assert e["conv_state"] == (2 * 2 * 32 + 4 * 32) * 3 and e["ssm_state"] == 4 * 32 * 32 and e["ssm_dtype"] == "fp32"
    jamba = {"architectures": ["JambaForCausalLM"], "model_type": "jamba", "num_hidden_layers": 8, "hidden_size": 256,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 512,
             "attn_layer_period": 4, "attn_layer_offset": 2, "mamba_d_state": 16, "mamba_d_conv": 4,
             "mamba_expand": 2}
    e = entry_from_hf_config(jamba, name="acme/tiny-jamba")
    assert (e["kv_layers"], e["state_layers"], e["conv_state"], e["ssm_state"]) == (2, 6, 512 * 3, 512 * 16)
    dense = entry_from_hf_config({**gdn, "linear_num_key_heads": None, "full_attention_interval": None},
                                 name="acme/plain")
    assert "state_layers" not in dense


def test_models_import_reads_a_modelopt_quant_algo() -> None:
    from webhook.models.catalog import entry_from_hf_config

    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
            "num_attention_heads": 4, "vocab_size": 1000, "intermediate_size": 512}
    nvfp4 = entry_from_hf_config({**base, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}})
    assert nvfp4["dtype"] == "nvfp4" and nvfp4["quant_algo"] == "NVFP4"
    fp8 = entry_from_hf_config({**base, "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}})
    assert fp8["dtype"] == "fp8" and fp8["quant_algo"] == "FP8"
