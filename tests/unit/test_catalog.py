"""The model catalog: data checks on every entry, name resolution for community checkpoints, `vramgate models`."""

import json
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from webhook.cli.main import main
from webhook.models.catalog import (
    Catalog,
    ModelSpec,
    builtin_catalog,
    computed_params,
    spec_from_mapping,
)

CAT = builtin_catalog()
SPECS = list(CAT)
TOLERANCE = 0.02


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# ---------------------------------------------------------------------------------------------
# Data checks


def test_at_least_180_entries() -> None:
    assert len(CAT) >= 180


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_architecture_reproduces_params(spec: ModelSpec) -> None:
    """Embeddings + attention + MLP/MoE (+ towers) land within 2 % of the stated total (and active) count."""
    if spec.params_exempt:
        # A documented exemption: the reason says which layers the formula cannot model.
        assert len(spec.params_exempt) > 20
        assert computed_params(spec) < spec.params * 1.02, "an exempt entry's modelled part cannot exceed its total"
        return
    total = computed_params(spec)
    assert abs(total / spec.params - 1) <= TOLERANCE, f"{spec.name}: computed {total / 1e9:.3f}B"
    if spec.experts:
        assert spec.active_params is not None and spec.experts_per_token, f"{spec.name}: MoE needs active numbers"
        active = computed_params(spec, active=True)
        assert abs(active / spec.active_params - 1) <= TOLERANCE, f"{spec.name}: active {active / 1e9:.3f}B"


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_entry_fields_are_consistent(spec: ModelSpec) -> None:
    assert spec.family, f"{spec.name}: family"
    assert spec.intermediate_size or spec.moe_intermediate_size
    assert spec.kv_heads <= spec.heads and spec.heads % spec.kv_heads == 0
    if spec.sliding_window_layers is not None:
        assert spec.sliding_window and 0 < spec.sliding_window_layers <= spec.layers
    if spec.chunked_layers is not None:
        assert spec.attention_chunk_size and spec.chunked_layers <= spec.layers
    if spec.kv_layers is not None:
        assert 0 <= spec.kv_layers <= spec.layers
    if spec.kv_lora_rank:
        assert spec.qk_rope_head_dim and spec.qk_nope_head_dim and spec.v_head_dim
    if spec.experts:
        assert spec.experts_per_token and spec.experts_per_token <= spec.experts
        assert spec.active_params is not None and spec.active_params < spec.params
    if spec.max_image_tokens:
        assert spec.vision_params
    assert spec.dtype in {"bf16", "fp16", "fp32", "fp8", "mxfp4", "int4"}
    assert spec.context >= 512


@pytest.mark.parametrize("spec", [s for s in SPECS if s.checkpoint_bytes], ids=lambda s: s.name)
def test_checkpoint_bytes_agree_with_params(spec: ModelSpec) -> None:
    assert spec.checkpoint_bytes is not None
    per_param = {"bf16": 2, "fp16": 2, "fp32": 4}.get(spec.dtype)
    if per_param:
        assert abs(spec.checkpoint_bytes / per_param / spec.params - 1) < TOLERANCE


def test_every_alias_resolves_to_its_own_entry() -> None:
    owners: dict[str, set[str]] = defaultdict(set)
    for spec in SPECS:
        for key in (spec.name, *spec.aliases):
            owners[key.lower()].add(spec.name)
    clashes = {k: v for k, v in owners.items() if len(v) > 1}
    assert not clashes
    for spec in SPECS:
        for key in (spec.name, *spec.aliases):
            found = CAT.resolve(key)
            assert found is not None and found.spec is spec, f"{key!r} resolves to {found and found.spec.name}"


def test_no_two_entries_claim_a_hub_id() -> None:
    seen: dict[str, str] = {}
    for spec in SPECS:
        for alias in spec.aliases:
            if "/" in alias:
                assert seen.setdefault(alias.lower(), spec.name) == spec.name, alias


def test_entry_names_are_unique() -> None:
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))


def test_every_entry_names_its_source() -> None:
    """Each entry is preceded by a `# name: source` comment in models.yaml."""
    text = (Path(__file__).resolve().parents[2] / "webhook/data/models.yaml").read_text()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("  - name: "):
            name = line.split(": ", 1)[1]
            j = i - 1
            while lines[j].startswith("  # note:"):
                j -= 1
            assert lines[j].startswith(f"  # {name}: "), f"{name}: no source comment"


def test_families_the_issue_names_are_present() -> None:
    families = {s.family for s in SPECS}
    wanted = [
        "llama2", "llama3", "llama3.1", "llama3.2", "llama3.3", "llama4", "llama3.2-vision", "mistral",
        "mistral-nemo", "mistral-small", "mistral-large", "mixtral", "ministral", "codestral", "devstral",
        "pixtral", "qwen1.5", "qwen2", "qwen2.5", "qwen3", "qwen3-moe", "qwen2.5-coder", "qwq", "qwen2-vl",
        "qwen2.5-vl", "qwen3-vl", "qwen2.5-omni", "qwen3-next", "gemma", "gemma2", "gemma3", "gemma3n",
        "phi3", "phi3.5-moe", "phi3-vision", "phi4", "deepseek-v2", "deepseek-v3", "deepseek-r1-distill",
        "gpt-oss", "kimi-k2", "glm4", "glm4.5", "minimax-m1", "minimax-m2", "command-r", "command-a",
        "granite3", "granite3-moe", "olmo2", "internvl", "minicpm-v", "llava", "llava-next",
        "llava-onevision", "falcon", "falcon3", "yi", "starcoder2", "bge", "e5", "gte", "nomic-embed",
        "nv-embed", "qwen3-embedding", "qwen3-reranker",
    ]
    for f in wanted:
        assert f in families, f


def test_issue_examples_are_known() -> None:
    scout = CAT.lookup("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert scout is not None and scout.params > 100e9 and scout.active_params is not None and scout.active_params < 20e9
    oss = CAT.lookup("openai/gpt-oss-120b")
    assert oss is not None and oss.dtype == "mxfp4" and oss.sliding_window_layers == oss.layers // 2
    for name in ("meta-llama/Llama-3.2-11B-Vision-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", "openbmb/MiniCPM-V-2_6",
                 "deepseek-ai/DeepSeek-Coder-V2-Lite-Instruct", "Qwen/Qwen2.5-Omni-7B"):
        spec = CAT.lookup(name)
        assert spec is not None, name
    assert CAT.resolve("google/gemma-7b-it-AWQ") is not None


def test_kv_per_token_of_hybrids_and_windows() -> None:
    nxt = CAT.lookup("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert nxt is not None and nxt.kv_elements_per_token() == 2 * 12 * 2 * 256
    gemma = CAT.lookup("google/gemma-3-27b-it")
    assert gemma is not None
    full, windowed = gemma.layers - 52, 52
    per_layer = 2 * gemma.kv_heads * gemma.head_dim
    assert gemma.kv_elements_for(100_000) == per_layer * (full * 100_000 + windowed * 1024)
    scout = CAT.lookup("llama-4-scout")
    assert scout is not None
    assert scout.kv_elements_for(65_536) == 2 * 8 * 128 * (12 * 65_536 + 36 * 8192)
    v3 = CAT.lookup("deepseek-ai/DeepSeek-V3")
    assert v3 is not None and v3.kv_elements_per_token() == 61 * (512 + 64)
    bge = CAT.lookup("BAAI/bge-m3")
    assert bge is not None and bge.task == "embed" and bge.kv_elements_per_token() == 0


def test_computed_params_counts_mla_and_shared_experts() -> None:
    v3 = CAT.lookup("deepseek-v3")
    assert v3 is not None
    assert computed_params(v3) == pytest.approx(671e9, rel=0.01)
    assert computed_params(v3, active=True) == pytest.approx(37e9, rel=0.02)


def test_plain_mlp_counts_two_matrices() -> None:
    base = {"name": "t", "params": 1, "layers": 1, "hidden_size": 10, "heads": 1, "vocab_size": 1, "context": 512,
            "intermediate_size": 40, "tie_embeddings": True}
    gated = spec_from_mapping(base)
    plain = spec_from_mapping({**base, "mlp": "plain"})
    assert computed_params(gated) - computed_params(plain) == 10 * 40


def test_bad_task_or_mlp_is_rejected() -> None:
    base = {"name": "t", "params": 1, "layers": 1, "hidden_size": 8, "heads": 1, "vocab_size": 1, "context": 512}
    with pytest.raises(ValueError):
        spec_from_mapping({**base, "task": "classify"})
    with pytest.raises(ValueError):
        spec_from_mapping({**base, "mlp": "swiglu"})


# ---------------------------------------------------------------------------------------------
# Community checkpoints: one test per pattern


def resolved(name: str) -> tuple[str, str | None, str]:
    found = CAT.resolve(name)
    assert found is not None, name
    return found.spec.name, found.quantization, found.how


def test_alias_has_no_quantization() -> None:
    assert resolved("meta-llama/Llama-3.1-8B-Instruct") == ("llama-3.1-8b-instruct", None, "alias")


def test_awq_repo() -> None:
    assert resolved("Qwen/Qwen2.5-7B-Instruct-AWQ")[:2] == ("qwen2.5-7b-instruct", "int4")
    assert resolved("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4")[:2] == ("llama-3.1-70b-instruct", "int4")


def test_gptq_int4_and_int8_repos() -> None:
    assert resolved("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4")[:2] == ("qwen2.5-7b-instruct", "int4")
    assert resolved("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8")[:2] == ("qwen2.5-7b-instruct", "int8")


def test_fp8_and_fp8_dynamic_repos() -> None:
    assert resolved("Qwen/Qwen3-8B-FP8")[:2] == ("qwen3-8b", "fp8")
    name, quant, how = resolved("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8")
    assert (name, quant, how) == ("llama-4-maverick-17b-128e-instruct", "fp8", "official quantized release")


def test_bnb_4bit_repo() -> None:
    assert resolved("unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit")[:2] == ("llama-3.1-8b-instruct", "nf4")


def test_unsloth_repos() -> None:
    assert resolved("unsloth/Qwen2.5-7B-Instruct-unsloth-bnb-4bit") == ("qwen2.5-7b-instruct", "nf4", "unsloth repo")
    assert resolved("unsloth/llama-3-8b-Instruct") == ("llama-3-8b-instruct", None, "unsloth repo")


def test_thebloke_repos() -> None:
    assert resolved("TheBloke/Llama-2-7B-Chat-GPTQ") == ("llama-2-7b-chat", "int4", "TheBloke community repo")
    assert resolved("TheBloke/Mistral-7B-Instruct-v0.2-AWQ")[:2] == ("mistral-7b-instruct-v0.2", "int4")


def test_gguf_repo_and_quant_tag() -> None:
    assert resolved("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF")[:2] == ("llama-3.1-8b-instruct", "q4_k_m")
    assert resolved("hf.co/bartowski/Qwen2.5-7B-Instruct-GGUF:Q8_0")[:2] == ("qwen2.5-7b-instruct", "q8_0")


def test_gguf_file_names() -> None:
    assert resolved("llama-2-7b-chat.Q4_K_M.gguf") == ("llama-2-7b-chat", "q4_k_m", "GGUF file name")
    assert resolved("qwen2.5-7b-instruct-q4_k_m.gguf")[:2] == ("qwen2.5-7b-instruct", "q4_k_m")
    assert resolved("/models/Meta-Llama-3.1-8B-Instruct-Q8_0.gguf")[:2] == ("llama-3.1-8b-instruct", "q8_0")
    split = "/data/qwen2.5-7b-instruct-q5_k_m-00001-of-00002.gguf"
    assert resolved(split)[:2] == ("qwen2.5-7b-instruct", "q5_k_m")


def test_redhat_and_neuralmagic_repos() -> None:
    assert resolved("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16")[:2] == ("llama-3.1-8b-instruct", "int4")
    assert resolved("RedHatAI/Qwen2.5-7B-Instruct-quantized.w8a8")[:2] == ("qwen2.5-7b-instruct", "int8")
    assert resolved("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8-dynamic")[:2] == ("llama-3.1-8b-instruct", "fp8")


def test_cortecs_repo() -> None:
    assert resolved("cortecs/Llama-3.3-70B-Instruct-FP8-Dynamic") == ("llama-3.3-70b-instruct", "fp8", "cortecs repo")


def test_cognitivecomputations_repo() -> None:
    assert resolved("cognitivecomputations/DeepSeek-R1-AWQ")[:2] == ("deepseek-r1", "int4")


def test_local_paths() -> None:
    assert resolved("/models/Meta-Llama-3-8B-Instruct") == ("llama-3-8b-instruct", None, "local path or volume")
    assert resolved("./weights/Qwen2.5-14B-Instruct-AWQ/")[:2] == ("qwen2.5-14b-instruct", "int4")


def test_hf_and_pvc_uris() -> None:
    assert resolved("hf://meta-llama/Llama-3.1-8B-Instruct")[:2] == ("llama-3.1-8b-instruct", None)
    assert resolved("pvc://models-pvc/llama/Meta-Llama-3.1-70B-Instruct")[:2] == ("llama-3.1-70b-instruct", None)
    assert resolved("s3://bucket/Qwen/Qwen3-8B-FP8")[:2] == ("qwen3-8b", "fp8")


def test_revision_is_ignored() -> None:
    assert resolved("meta-llama/Meta-Llama-3-8B-Instruct@main")[0] == "llama-3-8b-instruct"


def test_ollama_tags() -> None:
    assert resolved("qwen2.5:14b") == ("qwen2.5-14b-instruct", "q4_k_m", "Ollama tag (default Q4_K_M)")
    assert resolved("llama3.1:8b-instruct-q8_0") == ("llama-3.1-8b-instruct", "q8_0", "Ollama tag")
    assert resolved("llama3.1:latest")[:2] == ("llama-3.1-8b-instruct", "q4_k_m")
    assert resolved("llama3.1")[0] == "llama-3.1-8b-instruct"
    assert resolved("qwen3:30b-a3b-q8_0")[:2] == ("qwen3-30b-a3b", "q8_0")
    assert resolved("registry.ollama.ai/library/mistral:7b")[:2] == ("mistral-7b-instruct-v0.3", "q4_k_m")


def test_ollama_tag_that_is_also_an_alias_keeps_its_quantization() -> None:
    assert resolved("mistral:7b-instruct-v0.2-fp16")[:2] == ("mistral-7b-instruct-v0.2", "fp16")


def test_hugging_face_cache_paths() -> None:
    snap = "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B-Instruct-AWQ/snapshots/0123abcd"
    assert resolved(snap)[:2] == ("qwen2.5-7b-instruct", "int4")
    gguf = "/hf/models--bartowski--Meta-Llama-3.1-8B-Instruct-GGUF/snapshots/9f/Meta-Llama-3.1-8B-Instruct-Q6_K.gguf"
    assert resolved(gguf)[:2] == ("llama-3.1-8b-instruct", "q6_k")


def test_ollama_keeps_native_quantization() -> None:
    assert resolved("gpt-oss:20b")[:2] == ("gpt-oss-20b", "mxfp4")


def test_unknown_names() -> None:
    for name in ("", "nope", "acme/finetune-7b-AWQ", "/models/finetune", "qwen2.5:999b"):
        assert CAT.resolve(name) is None, name


def test_lookup_still_returns_the_spec() -> None:
    spec = CAT.lookup("TheBloke/Llama-2-7B-Chat-GGUF")
    assert spec is not None and spec.name == "llama-2-7b-chat"
    assert CAT.lookup("") is None


def test_config_entries_win_and_resolve() -> None:
    extra = CAT.with_entries([{"name": "acme-coder-7b", "aliases": ["acme/coder-7b"], "params": 7e9, "layers": 32,
                               "hidden_size": 4096, "heads": 32, "vocab_size": 32000, "context": 4096}])
    assert isinstance(extra, Catalog) and len(extra) == len(CAT) + 1
    assert resolved_in(extra, "acme/coder-7b-AWQ") == ("acme-coder-7b", "int4")


def resolved_in(cat: Catalog, name: str) -> tuple[str, str | None]:
    found = cat.resolve(name)
    assert found is not None
    return found.spec.name, found.quantization


# ---------------------------------------------------------------------------------------------
# vramgate models list | show | import


def test_models_list_table_and_family(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models", "list", "--family", "gpt-oss")
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].split()[:2] == ["NAME", "FAMILY"] and len(lines) == 3
    assert "gpt-oss-120b" in out and "mxfp4" in out


def test_models_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models", "list", "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert len(data) == len(CAT) and {"name", "family", "params", "context"} <= set(data[0])


def test_models_list_unknown_family_is_empty(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models", "list", "--family", "nope")
    assert code == 0 and "(no models)" in out


def test_models_show(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models", "show", "Qwen/Qwen2.5-7B-Instruct-AWQ")
    assert code == 0
    data = yaml.safe_load(out)
    assert data["name"] == "qwen2.5-7b-instruct" and data["matched"]["quantization"] == "int4"
    assert data["derived"]["kv_bytes_per_token_16bit"] == 2 * 28 * 4 * 128 * 2
    assert abs(data["derived"]["computed_params"] / data["params"] - 1) < 0.02


def test_models_show_unknown_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "models", "show", "acme/nothing")
    assert code == 2 and "not in the catalog" in err


LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
    "_name_or_path": "acme/llama-ft-8b",
}


def test_models_import_prints_an_entry(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16060522496}}))
    code, out, _ = run(capsys, "models", "import", str(tmp_path))
    assert code == 0
    entry = yaml.safe_load(out)["models"][0]
    assert entry["layers"] == 32 and entry["kv_heads"] == 8 and entry["head_dim"] == 128
    assert entry["context"] == 131072 and entry["dtype"] == "bf16" and entry["checkpoint_bytes"] == 16060522496
    assert abs(entry["params"] / 8.03e9 - 1) < 0.01
    spec = spec_from_mapping(entry)
    assert abs(computed_params(spec) / spec.params - 1) < 0.001


def test_models_import_moe_mla_and_quantization(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
        "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
        "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
        "torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8", "fmt": "e4m3"},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, _ = run(capsys, "models", "import", str(path))
    assert code == 0
    entry = yaml.safe_load(out)["models"][0]
    assert entry["dtype"] == "fp8" and entry["experts"] == 256 and entry["first_dense_layers"] == 3
    assert entry["context"] == 163840
    assert entry["params"] == pytest.approx(671e9, rel=0.01)
    assert entry["active_params"] == pytest.approx(37.5e9, rel=0.02)


def test_models_import_multimodal(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl", "hidden_size": 2048,
        "intermediate_size": 11008, "max_position_embeddings": 128000, "num_attention_heads": 16,
        "num_hidden_layers": 36, "num_key_value_heads": 2, "sliding_window": 32768, "use_sliding_window": False,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": 151936,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "out_hidden_size": 2048},
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 7509245952}}))
    code, out, _ = run(capsys, "models", "import", str(tmp_path), "--name", "Qwen/Qwen2.5-VL-3B-Instruct")
    assert code == 0
    entry = yaml.safe_load(out)["models"][0]
    assert entry["name"] == "qwen2.5-vl-3b-instruct" and entry["context"] == 128000
    assert "sliding_window" not in entry
    assert entry["vision_params"] == pytest.approx(0.67e9, rel=0.02)


def test_models_import_bad_input_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "models", "import", str(tmp_path / "missing"))
    assert code == 2 and "no config.json" in err
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    code, _, err = run(capsys, "models", "import", str(bad))
    assert code == 2 and "not JSON" in err
    bad.write_text(json.dumps({"model_type": "llama"}))
    code, _, err = run(capsys, "models", "import", str(bad))
    assert code == 2 and "hidden_size" in err


# ---------------------------------------------------------------------------------------------
# Every entry goes through `vramgate estimate --json`

@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_estimate_json_for_every_entry(spec: ModelSpec, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "estimate", "--model", spec.aliases[0] if spec.aliases else spec.name, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["model"] == spec.name and data["total_mib"] > 0 and data["architecture_known"]


def test_an_organisation_is_never_taken_for_a_model() -> None:
    # "Qwen/Qwen3.5-4B" once resolved through its organisation to Ollama's "qwen" (Qwen1.5-7B) and was
    # rejected on the L4s it runs on; a hub id's first part names who published it, not what.
    from webhook.engines.identity import identify

    catalog = builtin_catalog()
    assert catalog.lookup("qwen") is not None  # the Ollama tag exists: the trap is real
    assert identify(catalog, "Qwen/Qwen3.5-4B").spec is None
    found = identify(catalog, "/models/Qwen/Qwen2.5-7B-Instruct").spec
    assert found is not None and found.name == "qwen2.5-7b-instruct"  # a local path still tries each folder
