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
