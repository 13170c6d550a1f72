"""NVIDIA NIM for LLMs: the model in the image name, ``NIM_*`` env, and the profile naming precision and TP.

A NIM runs TensorRT-LLM or vLLM inside; which one depends on the profile it selects at start, so
vramgate prices it as vLLM with a wider band.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..models.catalog import ModelSpec
from ..models.vram import Estimate, EstimateRequest
from . import vllm
from .base import Setting, Settings, read_settings
from .cmdline import Command
from .engine import Engine
from .nim_image import NIM_IMAGE, image_model

NAME = "nim"
_PROFILE_TP = re.compile(r"(?:^|[-_])tp(\d+)(?:$|[-_])")
_PROFILE_PRECISION = re.compile(r"(?:^|[-_])(bf16|fp16|fp8|int4_awq|int8_wo|int4|nvfp4|mxfp4)(?:$|[-_])")

SETTINGS: Mapping[str, Setting] = {
    # NIM_MODEL_PATH: NIM 2.x's model-free container (model-free-nim.html above); NIM_MODEL_NAME: 1.x.
    "model": Setting((), ("NIM_MODEL_NAME", "NIM_MODEL_PATH")),
    "context": Setting((), ("NIM_MAX_MODEL_LEN",)),
    "tp": Setting((), ("NIM_TENSOR_PARALLEL_SIZE",)),
    "pp": Setting((), ("NIM_PIPELINE_PARALLEL_SIZE",)),
    "profile": Setting((), ("NIM_MODEL_PROFILE",)),
    "util": Setting((), ("NIM_GPU_MEMORY_UTILIZATION",)),
}


def read(image: str, commands: Sequence[Command], env: Mapping[str, str],
         pod_commands: Sequence[Command] = ()) -> Settings | None:
    """NIM's settings, or None when the image is not a NIM."""
    named = image_model(image)
    if named is None and not NIM_IMAGE.search(image.lower()) and not any(k.startswith("NIM_") for k in env):
        return None
    settings = Settings(NAME, None, "NIM")
    read_settings(settings, SETTINGS, None, env)
    if named is not None:
        settings.put("model", named, f"image name {image}")
    profile = settings.value("profile")
    if profile:
        if m := _PROFILE_TP.search(profile.lower()):
            settings.put("tp", m.group(1), "env NIM_MODEL_PROFILE")
        if m := _PROFILE_PRECISION.search(profile.lower()):
            settings.put("quantization", m.group(1).split("_")[0], "env NIM_MODEL_PROFILE")
    return settings


def plan(req: EstimateRequest, spec: ModelSpec | None) -> Estimate:
    """As vLLM's newest, with the band widened for the backend NIM may pick instead."""
    est = vllm.plan(req.but(engine_version=None), spec)
    return replace(est, engine="nim (priced as vLLM)",
                   low_per_gpu_mib=int(est.low_per_gpu_mib * 0.9), high_per_gpu_mib=int(est.high_per_gpu_mib * 1.15))


ENGINE = Engine(
    name=NAME, read=read, plan=plan, settings=SETTINGS,
    suggestions={"context": "NIM_MAX_MODEL_LEN={n}", "tp": "NIM_TENSOR_PARALLEL_SIZE={n}"},
    # NIM's vLLM backend: its own NIM_GPU_MEMORY_UTILIZATION default is 0.9, whatever the NIM version.
    tensor_parallel=True, config_utilization=True, default_utilization=lambda version, tp: 0.9,
    kv_pool=vllm.kv_pool,
    fix_adds={"context": ("env", "NIM_MAX_MODEL_LEN", "{n}"), "tp": ("env", "NIM_TENSOR_PARALLEL_SIZE", "{n}")},
)
