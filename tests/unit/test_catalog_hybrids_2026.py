"""The Granite-4.0-H, Falcon-H1 and Nemotron-H entries (issue 39): card sizes, and the layout import derives."""

from typing import Any

import pytest

from webhook.models.catalog import builtin_catalog, entry_from_hf_config

CAT = builtin_catalog()

# (entry, the card's total parameter count) — where each figure was read is in the entry's YAML comment.
CARDS = [
    ("granite-4.0-h-small", 32e9),  # IBM Granite docs table: "32B total parameters 9B activated parameters"
    ("granite-4.0-h-tiny", 7e9),  # model card: "a 7B parameter long-context instruct model"
    ("granite-4.0-h-1b", 1.5e9),  # hashneo/nano-vllm-go GRANITE_GUIDE.md: "Granite 4.0-H-1B ... 1.5B"
    ("falcon-h1-34b-instruct", 34e9),  # the checkpoint's name; Falcon-H1 report: "Falcon-H1-34B"
    ("nemotron-h-8b-base-8k", 8e9),  # Megatron-Bridge docs/models/llm/nemotronh.md: "Parameters: 8B"
    ("nemotron-h-47b-base-8k", 47e9),  # same page: "Parameters: 47B"
    ("nemotron-h-56b-base-8k", 56e9),  # same page: "Parameters: 56B"
    ("nvidia-nemotron-nano-12b-v2", 12e9),  # same page: "Nemotron Nano 12B v2 ... Parameters: 12B"
]


@pytest.mark.parametrize("name,card", CARDS, ids=[c[0] for c in CARDS])
def test_params_within_3_percent_of_the_card(name: str, card: float) -> None:
    spec = CAT.get(name)
    assert spec is not None, f"{name} is not in the catalog"
    assert abs(spec.params / card - 1) <= 0.03, f"{name}: {spec.params / 1e9:.2f}B vs card {card / 1e9:.1f}B"


_GRANITE_TYPES = (["mamba"] * 5 + ["attention"] + ["mamba"] * 9 + ["attention"] + ["mamba"] * 9 + ["attention"]
                  + ["mamba"] * 9 + ["attention"] + ["mamba"] * 4)
_GRANITE = {"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "num_hidden_layers": 40,
            "vocab_size": 100352, "max_position_embeddings": 131072, "tie_word_embeddings": True, "mamba_d_state": 128,
            "mamba_n_groups": 1, "mamba_expand": 2, "mamba_d_conv": 4, "layer_types": _GRANITE_TYPES}


def _nemotron(hidden: int, pattern: str, heads: int, inter: int, mamba_heads: int, mamba_dim: int, state: int,
              context: int) -> dict[str, Any]:
    return {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": hidden,
            "num_hidden_layers": len(pattern), "num_attention_heads": heads, "num_key_value_heads": 8, "head_dim": 128,
            "intermediate_size": inter, "vocab_size": 131072, "max_position_embeddings": context,
            "hybrid_override_pattern": pattern, "ssm_state_size": state, "conv_kernel": 4, "n_groups": 8,
            "mamba_num_heads": mamba_heads, "mamba_head_dim": mamba_dim}


# The config fields each entry's comment cites, as config.json spells them.
CONFIGS: dict[str, dict[str, Any]] = {
    "granite-4.0-h-small": {**_GRANITE, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                            "num_local_experts": 72, "num_experts_per_tok": 10, "intermediate_size": 768,
                            "shared_intermediate_size": 1536, "mamba_n_heads": 128, "mamba_d_head": 64},
    "granite-4.0-h-tiny": {**_GRANITE, "hidden_size": 1536, "num_attention_heads": 12, "num_key_value_heads": 4,
                           "num_local_experts": 64, "num_experts_per_tok": 6, "intermediate_size": 512,
                           "shared_intermediate_size": 1024, "mamba_n_heads": 48, "mamba_d_head": 64},
    "granite-4.0-h-1b": {**_GRANITE, "hidden_size": 1536, "num_attention_heads": 12, "num_key_value_heads": 4,
                         "num_local_experts": 0, "num_experts_per_tok": 0, "intermediate_size": 4096,
                         "shared_intermediate_size": 4096, "mamba_n_heads": 48, "mamba_d_head": 64},
    "falcon-h1-34b-instruct": {"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "hidden_size": 5120,
                               "num_hidden_layers": 72, "num_attention_heads": 20, "num_key_value_heads": 4,
                               "head_dim": 128, "intermediate_size": 21504, "vocab_size": 261120,
                               "max_position_embeddings": 262144, "attn_layer_indices": None, "mamba_d_conv": 4,
                               "mamba_d_head": 128, "mamba_d_ssm": 4096, "mamba_d_state": 256, "mamba_expand": 2,
                               "mamba_n_groups": 2, "mamba_n_heads": 32, "tie_word_embeddings": False},
    "nemotron-h-8b-base-8k": _nemotron(4096, "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", 32, 21504, 128,
                                       64, 128, 8192),
    "nemotron-h-47b-base-8k": _nemotron(
        8192, "M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-M-M---MM---M-M*-M-M-M-M-M-",
        64, 30720, 256, 64, 256, 8192),
    "nemotron-h-56b-base-8k": _nemotron(
        8192, "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
        "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", 64, 32768, 256, 64, 256, 8192),
    "nvidia-nemotron-nano-12b-v2": _nemotron(5120, "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-", 40,
                                             20480, 128, 80, 128, 131072),
}
_LAYOUT = ("layers", "hidden_size", "heads", "kv_heads", "head_dim", "vocab_size", "context", "tie_embeddings",
           "intermediate_size", "mlp", "experts", "experts_per_token", "shared_experts",
           "shared_expert_intermediate_size", "kv_layers", "state_layers", "mlp_layers", "conv_state", "ssm_state",
           "ssm_dtype")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_entry_is_what_models_import_makes_of_its_config(name: str) -> None:
    spec = CAT.get(name)
    assert spec is not None, f"{name} is not in the catalog"
    imported = entry_from_hf_config(CONFIGS[name], name=name)
    entry = {"mlp": "gated", "experts": None, "experts_per_token": None, "shared_experts": None,
             "shared_expert_intermediate_size": None, "mlp_layers": None, "ssm_dtype": None, **imported}
    for key in _LAYOUT:
        assert getattr(spec, key) == entry[key], f"{name}.{key}: catalog {getattr(spec, key)} vs import {entry[key]}"


def test_falcon_h1_keeps_a_state_and_a_kv_cache_in_every_layer() -> None:
    falcon = CAT.get("falcon-h1-34b-instruct")
    assert falcon is not None and falcon.kv_layers == falcon.state_layers == falcon.layers == 72


def test_import_tells_falcon_h1s_gated_mlp_from_falcons_plain_one() -> None:
    falcon = {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 256,
              "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000}
    assert entry_from_hf_config(falcon, name="acme/falcon")["mlp"] == "plain"
    hybrid = entry_from_hf_config(CONFIGS["falcon-h1-34b-instruct"], name="acme/falcon-h1")
    assert "mlp" not in hybrid
    nemotron = entry_from_hf_config(CONFIGS["nemotron-h-8b-base-8k"], name="acme/nemotron-h")
    assert nemotron["mlp"] == "plain"
