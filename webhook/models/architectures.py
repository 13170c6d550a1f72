"""Which config.json ``architectures`` vramgate has a memory model for, and of which kind."""

from __future__ import annotations

from collections.abc import Mapping

# A memory model is the layout of what an engine keeps per token and per sequence: the attention kind, the KV
# (or recurrent state) shape per layer, and which layers are linear, sliding or full. Each kind below names the
# config fields ``entry_from_hf_config`` reads for it; an architecture is listed only where those fields are
# the ones its engine implementation reads (vLLM 0.33.0 / SGLang 0.5.23 model files).
KINDS: Mapping[str, str] = {
    "attention": "softmax attention in every layer: num_key_value_heads (or its aliases) x head_dim per layer",
    "sliding": "softmax attention, some or all layers windowed: sliding_window with layer_types or the pattern",
    "chunked": "Llama 4: chunked local attention on 3 of 4 layers (attention_chunk_size, no_rope_layer_interval)",
    "mla": "multi-head latent attention: one kv_lora_rank + qk_rope_head_dim latent per token and layer",
    "hybrid": "attention in some layers, a fixed recurrent state (Mamba-1/2, Gated DeltaNet, KDA, LFM2 short"
              " convolutions) in the rest",
    "state": "attention-free Mamba: a fixed recurrent state in every layer, no KV cache (kv_layers 0)",
    "encoder": "bidirectional encoder: no KV cache (kv_layers 0), one pooled forward pass",
    "catalog": "a layout the catalog's hand-built entries carry (family named); config import does not derive it",
}

_ATTENTION = (
    # Llama and the names vLLM's registry routes to LlamaForCausalLM (or SGLang's llama.py subclasses)
    "LlamaForCausalLM", "LLaMAForCausalLM", "LlamaModel", "AquilaModel", "AquilaForCausalLM", "InternLMForCausalLM",
    "InternLM3ForCausalLM", "XverseForCausalLM", "CwmForCausalLM", "IQuestCoderForCausalLM", "TeleChat3ForCausalLM",
    "Fairseq2LlamaForCausalLM", "TorchNativeLlamaForCausalLM", "LlamaEmbeddingModel", "LlamaForClassification",
    "LlamaForSequenceClassification", "LlamaForSequenceClassificationWithNormal_Weights", "MistralModel",
    "ArceeForCausalLM", "ApertusForCausalLM", "SolarForCausalLM", "TeleFLMForCausalLM",
    # Qwen 1/2/3 dense and MoE, their pooling heads, and MiMo (Qwen2 shape + MTP)
    "QWenLMHeadModel", "Qwen2ForCausalLM", "Qwen2Model", "Qwen2ForRewardModel", "Qwen2ForSequenceClassification",
    "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3Model", "Qwen3ForRewardModel", "Qwen3ForSequenceClassification",
    "Qwen3MoeForCausalLM", "MiMoForCausalLM",
    # MoE shapes whose attention is plain GQA: experts change the weights, not the KV
    "MixtralForCausalLM", "QuantMixtralForCausalLM", "PhiMoEForCausalLM", "OlmoeForCausalLM", "ArcticForCausalLM",
    "Grok1ModelForCausalLM", "Grok1ForCausalLM", "DeepseekForCausalLM", "Dots1ForCausalLM", "Glm4MoeForCausalLM",
    "BailingMoeForCausalLM", "BailingMoEForCausalLM", "BailingMoeV2ForCausalLM", "Ernie4_5_MoeForCausalLM",
    "XverseMoeForCausalLM", "GraniteMoeForCausalLM", "MiniMaxM2ForCausalLM",
    "MiniCPMForCausalLM", "Param2MoEForCausalLM", "SarvamMoEForCausalLM",
    # vllm step1.py: num_attention_groups (else num_key_value_heads) of hidden/heads; hyperclovax.py: head_dim
    "Step1ForCausalLM", "HyperCLOVAXForCausalLM",
    # other dense decoders: every key they use (n_head, n_layer, multi_query_group_num, num_kv_heads, ...) is read
    "GPT2LMHeadModel", "GPTJForCausalLM", "GPTNeoXForCausalLM", "GPTBigCodeForCausalLM", "BloomForCausalLM",
    "FalconForCausalLM", "RWForCausalLM", "OPTForCausalLM", "BaiChuanForCausalLM", "BaichuanForCausalLM",
    "ChatGLMModel", "ChatGLMForConditionalGeneration", "InternLM2ForCausalLM", "InternLM2ForRewardModel",
    "OrionForCausalLM", "PersimmonForCausalLM", "StableLmForCausalLM", "StableLMEpochForCausalLM",
    "PhiForCausalLM", "Phi3ForCausalLM", "TorchNativePhi3ForCausalLM", "GemmaForCausalLM", "GlmForCausalLM",
    "Glm4ForCausalLM", "NemotronForCausalLM", "ExaoneForCausalLM", "Ernie4_5ForCausalLM", "Ernie4_5_ForCausalLM",
    "SeedOssForCausalLM", "TeleChat2ForCausalLM", "TeleChatForCausalLM", "JAISLMHeadModel", "OlmoForCausalLM",
    "Olmo2ForCausalLM", "CohereForCausalLM", "DbrxForCausalLM", "Step3TextForCausalLM",
    # Nemotron-NAS block_configs: which blocks attend and with how many KV heads (vllm nemotron_nas.py)
    "DeciLMForCausalLM",
    "ChameleonForConditionalGeneration",
    # vision/audio LMs whose language model sits in text_config, llm_config or language_config (or at the top)
    "LlavaForConditionalGeneration", "LlavaNextForConditionalGeneration", "LlavaNextVideoForConditionalGeneration",
    "LlavaOnevisionForConditionalGeneration", "LlavaLlamaForCausalLM", "LlavaMistralForCausalLM",
    "LlavaQwenForCausalLM", "LlavaVidForCausalLM", "YiVLForCausalLM", "MantisForConditionalGeneration",
    "Mistral3ForConditionalGeneration", "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
    "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration", "Qwen2AudioForConditionalGeneration", "Qwen2_5OmniModel",
    "Qwen2_5OmniForConditionalGeneration", "Qwen3OmniMoeForConditionalGeneration", "QwenVLForConditionalGeneration",
    "InternVLChatModel", "InternVLForConditionalGeneration", "InternS1ForConditionalGeneration", "H2OVLChatModel",
    "SkyworkR1VChatModel", "NVLM_D", "Llama_Nemotron_Nano_VL", "Idefics3ForConditionalGeneration",
    "SmolVLMForConditionalGeneration", "Phi3VForCausalLM", "Phi4MMForCausalLM", "AriaForConditionalGeneration",
    "Blip2ForConditionalGeneration", "FuyuForCausalLM", "GLM4VForCausalLM", "Glm4vForConditionalGeneration",
    "Glm4vMoeForConditionalGeneration", "MolmoForCausalLM", "MiniCPMV", "MiniCPMO", "Ovis", "Ovis2_5",
    "Ovis2_6ForCausalLM", "Ovis2_6_MoeForCausalLM", "KeyeForConditionalGeneration", "KeyeVL1_5ForConditionalGeneration",
    "GraniteSpeechForConditionalGeneration", "Step3VLForConditionalGeneration", "MultiModalityCausalLM",
    # vLLM 0.33.0 builds their language model as a named class: llava_onevision2.py and isaac.py Qwen3ForCausalLM,
    # kanana_v.py LlamaForCausalLM, opencua.py / dots_ocr.py / bagel.py (llm_config) Qwen2ForCausalLM,
    # phi4siglip.py Phi3ForCausalLM, moss_audio.py Qwen3ForCausalLM over language_config
    "LlavaOnevision2ForConditionalGeneration", "IsaacForConditionalGeneration", "KananaVForConditionalGeneration",
    "OpenCUAForConditionalGeneration", "DotsOCRForCausalLM", "BagelForConditionalGeneration", "Phi4ForCausalLMV",
    "MossAudioModel",
)

_SLIDING = (
    # Mistral v0.1 (all layers windowed), Gemma 2/3 (alternate / 5:1), Cohere2 (3:1), GPT-OSS (alternate, 128),
    # Starcoder2, Olmo 3, Gemma 3 embeddings and Gemma 2/3 wrappers, Aya Vision and Command A Vision (Cohere2 text)
    "MistralForCausalLM", "Gemma2ForCausalLM", "Gemma2Model", "Gemma2ForSequenceClassification", "Gemma3ForCausalLM",
    "Gemma3TextModel", "Gemma3ForConditionalGeneration", "PaliGemmaForConditionalGeneration", "Cohere2ForCausalLM",
    "GptOssForCausalLM", "Starcoder2ForCausalLM", "Olmo3ForCausalLM", "AyaVisionForConditionalGeneration",
    "Cohere2VisionForConditionalGeneration", "Ministral3ForCausalLM",
    # Granite's layer_types name sliding_attention layers (vllm granite.py); EXAONE 4 spells them "LLLG"
    "GraniteForCausalLM", "GraniteSWAForCausalLM", "GraniteMoeSharedForCausalLM", "GraniteMoeSWAForCausalLM",
    # Gemma 4: global_head_dim / num_global_key_value_heads on full layers, num_kv_shared_layers (vllm gemma4.py)
    "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration",
    "Exaone4ForCausalLM",
    # layer_types "sliding_attention" with one sliding_window (vllm afmoe.py, laguna.py, cohere2_moe.py)
    "AfmoeForCausalLM", "LagunaForCausalLM", "Cohere2MoeForCausalLM",
    "Exaone4_5_ForConditionalGeneration",  # vllm exaone4_5.py: Exaone4ForCausalLM over the text config
)

_CHUNKED = ("Llama4ForCausalLM", "Llama4ForConditionalGeneration")

_MLA = (
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "MiniCPM3ForCausalLM", "KimiVLForConditionalGeneration",
    "KimiK25ForConditionalGeneration", "SarvamMLAForCausalLM",
    # vllm glm4_moe_lite.py: MLA; a config with index_topk takes the DeepSeek-V3.2 path (GlmMoeDsa's reason)
    "Glm4MoeLiteForCausalLM",
)

_HYBRID = (
    "NemotronHForCausalLM", "NemotronH_Nano_VL_V2", "NemotronH_Nano_Omni_Reasoning_V3",
    "NemotronH_Omni_Reasoning_V3", "NemotronH_Super_Omni_Reasoning_V3",
    "GraniteMoeHybridForCausalLM", "FalconH1ForCausalLM",
    "BambaForCausalLM", "JambaForCausalLM", "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "KimiLinearForCausalLM",
    "Lfm2ForCausalLM", "Lfm2MoeForCausalLM", "Lfm2VlForConditionalGeneration",
)

_STATE = ("MambaForCausalLM", "FalconMambaForCausalLM", "Mamba2ForCausalLM")

_ENCODER = (
    "BertModel", "BertForMaskedLM", "BertForSequenceClassification", "RobertaModel", "RobertaForMaskedLM",
    "XLMRobertaModel", "XLMRobertaForSequenceClassification", "Contriever", "NomicBertModel", "GteModel",
    "GteNewModel", "ModernBertModel", "BgeM3EmbeddingModel", "BertSpladeSparseEmbeddingModel",
    # decoders run bidirectionally as embedders: vLLM builds EncoderOnlyAttention for them (llama.py, deepseek_v2.py
    # with is_causal false), which keeps no KV cache
    "LlamaBidirectionalModel", "DeepseekV3BidirectionalModel",
)

# Layouts entry_from_hf_config does not derive but the catalog's own entries carry (kind "catalog"): the family
# the test finds in webhook/data/models.yaml.
CATALOG_FAMILIES: Mapping[str, str] = {
    "Gemma3nForCausalLM": "gemma3n",  # KV shared by the last layers (num_kv_shared_layers)
    "Gemma3nForConditionalGeneration": "gemma3n",
    "MiniMaxText01ForCausalLM": "minimax-m1",  # lightning (linear) attention in 7 of 8 layers
    "MiniMaxM1ForCausalLM": "minimax-m1",
    "MiniMaxForCausalLM": "minimax-m1",
    "MllamaForConditionalGeneration": "llama3.2-vision",  # image tokens held in the cross-attention layers
    "PixtralForConditionalGeneration": "pixtral",  # Mistral-format params.json, not config.json
}

MEMORY_MODELS: Mapping[str, str] = {
    **{a: "attention" for a in _ATTENTION}, **{a: "sliding" for a in _SLIDING}, **{a: "chunked" for a in _CHUNKED},
    **{a: "mla" for a in _MLA}, **{a: "hybrid" for a in _HYBRID}, **{a: "state" for a in _STATE},
    **{a: "encoder" for a in _ENCODER},
    **{a: "catalog" for a in CATALOG_FAMILIES},
}


def memory_model(architecture: str) -> str | None:
    """The memory-model kind vramgate has for a config.json architecture, or None."""
    return MEMORY_MODELS.get(architecture)


def is_encoder(architecture: str) -> bool:
    """Whether the architecture is a bidirectional encoder (no KV cache)."""
    return MEMORY_MODELS.get(architecture) == "encoder"
