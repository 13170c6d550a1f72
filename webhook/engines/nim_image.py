"""The model a NIM's image name names, for the NIM reader and for vLLM's, which leaves such images to it."""

from __future__ import annotations

import re

NIM_IMAGE = re.compile(r"(?:^|/)nim/([^:@]+)")
# NGC's model-specific NIMs are `nvcr.io/nim/<org>/<model>` (docs.nvidia.com/nim/large-language-models quickstart:
# nvcr.io/nim/meta/llama-3.1-8b-instruct). Builds of a NIM on one backend name the model after the backend and
# the NIM's version instead: `…/vllm-oss-nim-llm-4-devel-llama3.1-8b-instruct` (NVIDIA/k8s-nim-operator
# config/samples/nim/serving/advanced/epp/nimservice.yaml). The model is what follows; nothing else is guessed.
_BACKEND_NIM_IMAGE = re.compile(
    r"(?:^|/)(?:vllm|sglang|trtllm|tensorrt-llm)(?:-oss)?-nim-llm(?:-\d+)?(?:-(?:devel|dev|rc))?-"
    r"(?P<model>[a-z0-9][a-z0-9._-]*?)(?::[^/]*)?(?:@.*)?$")
# The model-free NIMs serve whatever NIM_MODEL_NAME / NIM_MODEL_PATH or their argument names (1.x multi-LLM
# `nvcr.io/nim/nvidia/llm-nim`; docs.nvidia.com/nim/large-language-models/latest/deployment/model-free-nim.html):
# their image names no model.
_MODEL_FREE = frozenset({"llm-nim", "nim-llm", "vllm-nim", "sglang-nim"})


def image_model(image: str) -> str | None:
    """The model a NIM's image name names (``meta/llama-3.1-8b-instruct``), or None: not a NIM, or a model-free
    one whose model is set at run time."""
    text = image.lower().strip()
    if (m := _BACKEND_NIM_IMAGE.search(text)) is not None:
        return m.group("model")
    if (m := NIM_IMAGE.search(text)) is None:
        return None
    model = m.group(1).strip("/")
    return None if model.rsplit("/", 1)[-1] in _MODEL_FREE else model


def is_backend_nim(image: str) -> bool:
    """A NIM built on one backend (``vllm-oss-nim-llm-…``): a NIM, whatever backend its name starts with."""
    return _BACKEND_NIM_IMAGE.search(image.lower().strip()) is not None
