"""Fine-tuning launchers and trainers: what torchrun/accelerate/TRL/PEFT/LLaMA-Factory users write, and its memory.

Per GPU: frozen weights (16-bit, or 4-bit under QLoRA) or the full model; gradients and Adam states for
what is trained (adapters of rank r on every linear layer, or every parameter); activations — with
gradient checkpointing (the default of PEFT's ``prepare_model_for_kbit_training``, TRL, LLaMA-Factory
and Unsloth) only each layer's input is kept plus one layer being recomputed, without it every layer's
34·s·b·h bytes (Korthikanti et al. 2022); fp32 logits and their gradient. DDP replicates all of it;
FSDP / ZeRO-3 shard weights, gradients and optimizer over the world, ZeRO-2 gradients and optimizer,
ZeRO-1 the optimizer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ..models.catalog import ModelSpec
from ..models.vram import MIB, Estimate, EstimateRequest, priced, shape_of, weights_bytes
from ..units.precision import PRECISIONS
from .base import Found, Setting, Settings, read_settings, yaml_mapping
from .cmdline import Command, OptionTable, parse_argv
from .engine import Engine

NAME = "trainer"
_LAUNCHERS = ("torchrun", "accelerate", "deepspeed", "llamafactory-cli", "tune", "axolotl", "trl")
_LAUNCH_MODULES = ("axolotl.cli.train", "torch.distributed.run", "torch.distributed.launch", "llamafactory",
                   "accelerate.commands.launch", "trl", "torchtune")
# Env a training script reads (GKE's and HF's fine-tuning samples pass their knobs this way).
_TRAINER_ENVS = ("LORA_R", "LORA_RANK", "MAX_SEQ_LENGTH", "MAX_SEQ_LEN", "TRAIN_BATCH_SIZE",
                 "PER_DEVICE_TRAIN_BATCH_SIZE", "GRADIENT_ACCUMULATION_STEPS", "NUM_TRAIN_EPOCHS")
# torchtune recipe configs name the model: llama3_1/8B_lora, qwen2_5/1.5B_full, gemma2/2B_qlora.
_TUNE_CONFIG = re.compile(r"(llama3_[123]|llama3|llama2|qwen2_5|qwen2|qwen3|gemma2|gemma|mistral|phi3|phi4|code_llama2)"
                          r"/(\d+(?:\.\d+)?)B", re.IGNORECASE)
_TUNE_FAMILY = {"llama3_1": "llama-3.1", "llama3_2": "llama-3.2", "llama3_3": "llama-3.3", "llama3": "llama-3",
                "llama2": "llama-2", "qwen2_5": "qwen2.5", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma-2",
                "gemma": "gemma", "mistral": "mistral", "phi3": "phi-3", "phi4": "phi-4", "code_llama2": "codellama"}
_SCRIPT = re.compile(r"(train|sft|finetune|fine_tune|dpo|lora|qlora)[\w-]*\.py$", re.IGNORECASE)

_FLAGS = ("--use_peft", "--load_in_4bit", "--load_in_8bit", "--bf16", "--fp16", "--use_fsdp", "--multi_gpu",
          "--enable_fsdp",
          "--use_deepspeed", "--gradient_checkpointing", "--packing", "--do_train", "--standalone")
OPTIONS = OptionTable(
    names=frozenset((
        "--model_name_or_path", "--model_name", "--model_id", "--base_model", "--model", "--max_seq_length",
        "--max_length", "--cutoff_len", "--model_max_length", "--seq_len", "--sequence_len", "--max_seq_len",
        "--per_device_train_batch_size", "--micro_batch_size", "--gradient_checkpointing", "--use_peft", "--lora_r",
        "--lora_rank", "--finetuning_type", "--adapter", "--load_in_4bit", "--load_in_8bit", "--quantization_bit",
        "--fsdp", "--deepspeed", "--optim", "--nproc_per_node", "--nproc-per-node", "--nnodes", "--num_processes",
        "--num_machines", "--use_fsdp", "--enable_fsdp", "--zero_stage", "--num_gpus", "--config", "--config_file",
        "--bf16",
        "--fp16", "--mixed_precision", "--output_dir", "--num_train_epochs", "--learning_rate", "--dataset",
        "--dataset_name", "--torch_dtype", "--stage", "--template", "--multi_gpu", "--use_deepspeed",
        "--lora_alpha", "--lora_dropout", "--lora_target_modules", "--attn_implementation", "--dataset_text_field",
        "--gradient_accumulation_steps", "--logging_steps", "--save_strategy", "--max_steps", "--report_to",
        "--master_addr", "--master_port", "--node_rank", "--rdzv_endpoint", "--rdzv_backend", "--rdzv_id",
    )),
    aliases={"--nproc-per-node": "--nproc_per_node"},
    flags=frozenset(_FLAGS),
    underscores=False,
)
SETTINGS: Mapping[str, Setting] = {
    "model": Setting(("--model_name_or_path", "--model_name", "--model_id", "--base_model", "--model")),
    "context": Setting(("--max_seq_length", "--max_length", "--cutoff_len", "--model_max_length", "--seq_len",
                        "--sequence_len", "--max_seq_len")),
    "micro_batch": Setting(("--per_device_train_batch_size", "--micro_batch_size")),
    "gradient_checkpointing": Setting(("--gradient_checkpointing",)),
    "use_peft": Setting(("--use_peft",)),
    "lora_r": Setting(("--lora_r", "--lora_rank")),
    "finetuning_type": Setting(("--finetuning_type", "--adapter")),
    "load_in_4bit": Setting(("--load_in_4bit",)),
    "load_in_8bit": Setting(("--load_in_8bit",)),
    "quantization_bit": Setting(("--quantization_bit",)),
    # llama-recipes' finetuning.py says --enable_fsdp (meta-llama/llama-cookbook configs/training.py).
    "fsdp": Setting(("--fsdp", "--use_fsdp", "--enable_fsdp")),
    "deepspeed": Setting(("--deepspeed", "--use_deepspeed")),
    "zero_stage": Setting(("--zero_stage",)),
    "optim": Setting(("--optim",)),
    "nproc": Setting(("--nproc_per_node", "--num_processes", "--num_gpus")),
    "nnodes": Setting(("--nnodes", "--num_machines")),
    "dtype": Setting(("--torch_dtype",)),
    # Env twins that training scripts read.
    "env_model": Setting((), ("MODEL_NAME", "MODEL_ID", "BASE_MODEL")),
    "env_lora_r": Setting((), ("LORA_R", "LORA_RANK")),
    "env_context": Setting((), ("MAX_SEQ_LENGTH", "MAX_SEQ_LEN", "SEQ_LEN")),
    "env_batch": Setting((), ("PER_DEVICE_TRAIN_BATCH_SIZE", "TRAIN_BATCH_SIZE")),
}


def is_launch(commands: Sequence[Command]) -> bool:
    """Whether the commands start a training run (a launcher, a training script or trainer flags)."""
    for cmd in commands:
        program = cmd.program.split(" ", 1)[0]  # `command: ["tune run"]` as some samples write it
        if program in _LAUNCHERS or any(_SCRIPT.search(w) for w in cmd.words[:4]):
            return True
        if program.startswith("python") and any(
                w == "-m" and i + 1 < len(cmd.words) and cmd.words[i + 1].startswith(_LAUNCH_MODULES)
                for i, w in enumerate(cmd.words)):
            return True
        if any(w.startswith(("--per_device_train_batch_size", "--num_train_epochs", "--finetuning_type"))
               for w in cmd.words):
            return True
    return False


def read(image: str, commands: Sequence[Command], env: Mapping[str, str],
         pod_commands: Sequence[Command] = ()) -> Settings | None:
    """The trainer's settings from every command of the container, or None when none trains."""
    if not is_launch(commands) and not any(env.get(n) for n in _TRAINER_ENVS):
        return None
    settings = Settings(NAME, None, "launcher")
    if not commands:
        read_settings(settings, SETTINGS, None, env)
    for cmd in commands:
        read_settings(settings, SETTINGS, parse_argv(cmd.words[1:], OPTIONS), env)
        for w in cmd.words:
            if w.endswith((".yaml", ".yml")) and "config" not in settings.values:
                settings.put("config", w, "arg (config file)")
            if w.startswith("model.lora_rank="):
                settings.put("lora_r", w.split("=", 1)[1], "torchtune override model.lora_rank")
            if (m := _TUNE_CONFIG.search(w)) and "model" not in settings.values:
                name = f"{_TUNE_FAMILY[m.group(1).lower()]}-{m.group(2)}b-instruct"
                settings.put("model", name, f"torchtune config {w}")
                if "lora" in w.lower():
                    kind = "qlora" if "qlora" in w.lower() else "lora"
                    settings.put("finetuning_type", kind, f"torchtune config {w}")
                elif "full" in w.lower():
                    settings.put("finetuning_type", "full", f"torchtune config {w}")
    for key, twin in (("model", "env_model"), ("lora_r", "env_lora_r"), ("context", "env_context"),
                      ("micro_batch", "env_batch")):
        found = settings.get(twin)
        if found is not None:
            settings.put(key, found.value, found.source)
    return settings


# A trainer's YAML config (axolotl, LLaMA-Factory): keys → settings, the first key present winning.
_CONFIG_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model", ("base_model", "model_name_or_path")),
    ("finetuning_type", ("adapter", "finetuning_type")),
    ("load_in_4bit", ("load_in_4bit",)),
    ("load_in_8bit", ("load_in_8bit",)),
    ("quantization_bit", ("quantization_bit",)),
    ("lora_r", ("lora_r", "lora_rank")),
    ("context", ("sequence_len", "cutoff_len", "max_seq_length")),
    ("micro_batch", ("micro_batch_size", "per_device_train_batch_size")),
    ("gradient_checkpointing", ("gradient_checkpointing",)),
    ("deepspeed", ("deepspeed",)),
    ("fsdp", ("fsdp", "fsdp_config")),
)


def read_config_file(settings: Settings, text: str, source: str) -> bool:
    """Fill ``settings`` from a trainer's YAML config (what the command line left unsaid); whether it was YAML."""
    doc = yaml_mapping(text, source)
    if doc is None:
        return False
    for key, names in _CONFIG_KEYS:
        for name in names:
            value = doc.get(name)
            if value is None or value == "" or value is False or value == []:
                continue
            text_value = "true" if value is True else (name if isinstance(value, dict | list) else str(value))
            settings.put(key, text_value, f"{source} {name}")
            break
    return True


def finetune_of(settings: Settings) -> str | None:
    """full, lora or qlora, from PEFT/TRL/LLaMA-Factory flags; None when nothing says."""
    ft = (settings.value("finetuning_type") or "").lower()
    four_bit = settings.flag("load_in_4bit") or settings.value("quantization_bit") == "4"
    lora = settings.flag("use_peft") or ft in ("lora", "qlora") or settings.get("lora_r") is not None
    if ft == "qlora" or (lora and four_bit) or (four_bit and ft != "full"):
        return "qlora"
    if lora:
        return "lora"
    if ft in ("full", "freeze"):
        return "full"
    return None


def parallelism_of(settings: Settings) -> str | None:
    """fsdp, zero1–3 or None (DDP), from ``--fsdp``, ``--deepspeed`` configs and accelerate flags."""
    if settings.get("fsdp") is not None and settings.value("fsdp") not in ("", "false", "False"):
        return "fsdp"
    stage = settings.value("zero_stage")
    ds = (settings.value("deepspeed") or "").lower()
    for n in ("3", "2", "1"):
        if stage == n or f"zero{n}" in ds or f"zero_{n}" in ds or f"z{n}" in ds.rsplit("/", 1)[-1]:
            return f"zero{n}"
    return "zero2" if ds and ds != "true" else None


def adapter_params(spec: ModelSpec | None, hidden: int, layers: int, rank: int) -> float:
    """LoRA parameters of rank ``rank`` on q, k, v, o, gate, up and down of every layer."""
    kv_dim = (spec.kv_heads * spec.head_dim) if spec else hidden // 4
    inter = float(getattr(spec, "intermediate_size", None) or 3.5 * hidden)
    return float(rank * layers * (9 * hidden + 2 * kv_dim + 3 * inter))


def plan(req: EstimateRequest, spec: ModelSpec | None) -> Estimate:
    """Per-GPU training memory for ``req`` (``req.gpus`` is the world the states are sharded over)."""
    g = max(req.gpus, 1)
    shape = shape_of(spec, req.params)
    h, layers = shape.hidden_size, shape.layers
    quantized = PRECISIONS[req.precision].quantized
    ft = req.finetune or ("qlora" if quantized else "full")
    eight_bit = req.optimizer_bits != 32
    if ft == "full":
        weights = req.params * (4 if req.precision == "fp32" else 2)
        trainable = req.params
        # Mixed precision keeps fp32 masters and Adam moments (4 + 8 B); pure bf16 training (torchtune,
        # LLaMA-Factory pure_bf16, HF on a bf16-loaded model) keeps bf16 moments and no master (4 B);
        # paged 8-bit Adam with the step fused into backward leaves almost nothing on the GPU.
        grad_b = 4 if req.precision == "fp32" else 2
        state_b = 8 if req.precision == "fp32" else (6 if eight_bit else 12)
        grad_lo, state_lo = (0.0, 0.5) if eight_bit else (float(grad_b), 4.0)
    else:
        weights = weights_bytes(req.params, req.precision if ft == "qlora" or quantized else "bf16", shape, spec)
        trainable = adapter_params(spec, h, layers, req.lora_rank)
        weights += trainable * 4
        grad_b, state_b = 4, (2 if eight_bit else 8)
        grad_lo, state_lo = float(grad_b), float(state_b)
    gradients, optimizer = trainable * grad_b, trainable * state_b
    gradients_lo, optimizer_lo = trainable * grad_lo, trainable * state_lo
    par = req.parallelism
    if par in ("fsdp", "zero3"):
        weights, gradients, optimizer = weights / g, gradients / g, optimizer / g
        gradients_lo, optimizer_lo = gradients_lo / g, optimizer_lo / g
    elif par == "zero2":
        gradients, optimizer = gradients / g, optimizer / g
        gradients_lo, optimizer_lo = gradients_lo / g, optimizer_lo / g
    elif par == "zero1":
        optimizer, optimizer_lo = optimizer / g, optimizer_lo / g
    s, b = req.context, req.batch
    vocab = spec.vocab_size if spec else 128_000
    logits = s * b * vocab * 4 * 2  # fp32 logits and their gradient (HF's loss upcasts)
    layer = 34.0 * s * b * h  # one layer's activations with flash attention (Korthikanti et al. 2022)
    if req.gradient_checkpointing:
        kept = 2.0 * s * b * h * layers  # each layer's input
        acts, acts_lo = kept + layer + logits, layer  # low: inputs offloaded (Unsloth), chunked loss (torchtune)
    else:
        acts, acts_lo = layer * layers + logits, 0.5 * layer * layers
    fixed = 512 * MIB + 0.08 * (weights + gradients + optimizer)
    mid = weights + gradients + optimizer + acts + fixed
    low = weights + gradients_lo + optimizer_lo + acts_lo + 256 * MIB
    # PyTorch's caching allocator grows into a larger GPU: peaks on a 48 GB card run ~2x those on a 24 GB one.
    high = mid * 1.4 + 1024 * MIB
    if not shape.known:
        low = weights + 0.7 * (low - weights)
        high *= 1.25
    notes = [f"{ft} fine-tune, {par}, gradient checkpointing {'on' if req.gradient_checkpointing else 'off'}, "
             f"{s} tokens × {b} per GPU"]
    return priced(req, weights=weights, kv=0.0, overhead=fixed, activations=acts, gradients=gradients,
                  optimizer=optimizer, mid=mid, low=low, high=high, kv_bytes_per_token=0.0, shape_known=shape.known,
                  engine=f"trainer ({ft})", notes=notes)


def training_quantization(s: Settings) -> Found | None:
    """The precision ``--load_in_4bit`` / ``--quantization_bit`` load the base weights in (bitsandbytes)."""
    if s.flag("load_in_4bit") or s.value("quantization_bit") == "4":
        four = s.get("load_in_4bit")
        return Found("nf4", four.source if four else "arg --quantization_bit")
    if s.flag("load_in_8bit") or s.value("quantization_bit") == "8":
        return Found("int8", "arg --load_in_8bit")
    return None


ENGINE = Engine(
    name=NAME, read=read, plan=plan, settings=SETTINGS, aliases=("trainers", "training"),
    suggestions={"context": "--max_seq_length {n}"}, serves=False, trains=True,
    read_config_file=read_config_file, training_quantization=training_quantization,
    finetune_of=finetune_of, parallelism_of=parallelism_of,
)
