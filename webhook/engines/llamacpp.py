"""llama.cpp server: its flags and ``LLAMA_ARG_*`` env twins, GGUF weights, layers offloaded, one shared context.

``llama-server`` (tools/server, common/arg.cpp) allocates the KV cache for ``--ctx-size`` tokens in
total, shared by the ``--parallel`` slots; ``--n-gpu-layers`` decides how many layers (and their
KV) live on the GPU; a CUDA allocation that fails at start-up ends the process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..models.catalog import ModelSpec
from ..models.vram import Estimate, EstimateRequest, shape_of
from .base import Setting, Settings, find_command, read_settings
from .cmdline import Command, OptionTable, parse_argv
from .serving import Costs
from .serving import plan as serving_plan

NAME = "llama.cpp"
IMAGE_REPOS = ("llama.cpp", "llama-cpp")
# llama-server's default --ctx-size (common/common.h n_ctx) before 0 came to mean "the model's".
DEFAULT_CONTEXT = 4096

_VALUES = (
    "--model", "--hf-repo", "--hf-file", "--ctx-size", "--n-gpu-layers", "--parallel", "--cache-type-k",
    "--cache-type-v", "--batch-size", "--ubatch-size", "--host", "--port", "--threads", "--alias", "--tensor-split",
    "--split-mode", "--main-gpu", "--flash-attn", "--n-predict", "--rope-scaling", "--chat-template", "--api-key",
    "--model-url", "--lora", "--override-tensor", "--jinja",
)
_FLAGS = ("--mlock", "--no-mmap", "--cont-batching", "--embedding", "--embeddings", "--metrics", "--kv-unified",
          "--no-kv-offload", "--jinja", "--verbose")
OPTIONS = OptionTable(
    names=frozenset(_VALUES + _FLAGS),
    aliases={"-m": "--model", "-hf": "--hf-repo", "-hfr": "--hf-repo", "-hff": "--hf-file", "-c": "--ctx-size",
             "-ngl": "--n-gpu-layers", "--gpu-layers": "--n-gpu-layers", "-np": "--parallel",
             "-ctk": "--cache-type-k", "-ctv": "--cache-type-v", "-b": "--batch-size", "-ub": "--ubatch-size",
             "-t": "--threads", "-a": "--alias", "-ts": "--tensor-split", "-sm": "--split-mode", "-fa": "--flash-attn",
             "-mu": "--model-url", "-ot": "--override-tensor", "-kvu": "--kv-unified", "-nkvo": "--no-kv-offload"},
    flags=frozenset(_FLAGS), abbreviations=False, underscores=False,
)
SETTINGS: Mapping[str, Setting] = {
    "model": Setting(("--model", "--hf-repo", "--model-url"), ("LLAMA_ARG_MODEL", "LLAMA_ARG_HF_REPO")),
    "context": Setting(("--ctx-size",), ("LLAMA_ARG_CTX_SIZE",)),
    "gpu_layers": Setting(("--n-gpu-layers",), ("LLAMA_ARG_N_GPU_LAYERS",)),
    "parallel": Setting(("--parallel",), ("LLAMA_ARG_N_PARALLEL",)),
    "kv_dtype": Setting(("--cache-type-k",), ("LLAMA_ARG_CACHE_TYPE_K",)),
    "batched_tokens": Setting(("--ubatch-size",), ("LLAMA_ARG_UBATCH",)),
}


def read(image: str, commands: Sequence[Command], env: Mapping[str, str]) -> Settings | None:
    """llama.cpp's settings, or None when the container does not run llama-server."""
    i = find_command(commands, ("llama-server", "server", "llama-cli"))
    if i is not None and (commands[i].program != "server" or any(r in image.lower() for r in IMAGE_REPOS)):
        words = list(commands[i].words[1:])
    elif any(r in image.lower() for r in IMAGE_REPOS) and len(commands) <= 1:
        words = list(commands[0].words) if commands else []
    else:
        return None
    settings = Settings(NAME, None, "image")
    read_settings(settings, SETTINGS, parse_argv(words, OPTIONS), env)
    hf_file = parse_argv(words, OPTIONS).get("--hf-file")
    if hf_file and "model" in settings.values and "gguf" not in settings.values["model"].value.lower():
        settings.values["model"] = type(settings.values["model"])(
            f"{settings.values['model'].value}/{hf_file}", settings.values["model"].source + " + --hf-file")
    return settings


def gpu_share(gpu_layers: int | None, layers: int) -> float:
    """Share of the layers on the GPU; ``-ngl`` of the layer count or more offloads all (and the output)."""
    if gpu_layers is None or gpu_layers < 0:
        return 1.0
    return min(1.0, gpu_layers / max(layers, 1))


def plan(req: EstimateRequest, spec: ModelSpec | None) -> Estimate:
    """GGUF weights and the KV of ``--ctx-size`` on the GPU for the offloaded layers, plus compute buffers."""
    layers = shape_of(spec, req.params).layers
    share = gpu_share(req.gpu_layers, layers)
    notes = [f"llama.cpp: {req.context} tokens of KV shared by all slots; {share:.0%} of the layers on the GPU"]
    # With -ngl unset older releases keep every layer on the CPU: the low end cannot assume offload.
    low_share = 0.0 if req.gpu_layers is None else share
    return serving_plan(req, spec, Costs("llama.cpp", activation_bytes_per_token_hidden=0.0, fixed_mib=512.0,
                                         gpu_share=share, low_gpu_share=low_share, high_extra_mib=512.0,
                                         low_factor=0.5), 0, notes)
