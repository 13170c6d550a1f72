"""CUDA runtime versions from images and env, and the minimum driver each CUDA major needs."""

from __future__ import annotations

import re

# Minimum Linux driver for each CUDA major under minor-version compatibility (NVIDIA CUDA
# Compatibility guide, "Minor Version Compatibility" table: CUDA 11.x ≥ 450.80.02, 12.x ≥ 525.60.13,
# 13.x ≥ 580). Only the driver major is published by GFD, so the comparison is on majors.
MIN_DRIVER_MAJOR: dict[int, int] = {10: 410, 11: 450, 12: 525, 13: 580}

_VERSION_RE = re.compile(r"^\s*v?(\d{1,2})(?:\.(\d{1,2}))?(?:\.\d+)?\s*$")
# nvidia/cuda:12.2.0-runtime-ubuntu22.04, pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime,
# nvcr.io/nvidia/pytorch:24.01-py3 is not matched (no CUDA in the tag).
_IMAGE_CUDA_RE = re.compile(r"(?:^|[:/_-])cuda[-_]?v?(\d{1,2})\.(\d{1,2})(?:\.\d+)?", re.IGNORECASE)
_NVIDIA_CUDA_IMAGE_RE = re.compile(r"(?:^|/)nvidia/cuda:(\d{1,2})\.(\d{1,2})", re.IGNORECASE)

CudaVersion = tuple[int, int]


def parse_cuda(value: str) -> CudaVersion | None:
    """Parse ``12.2``, ``12.2.0`` or ``12`` into (major, minor)."""
    match = _VERSION_RE.match(value)
    if not match:
        return None
    major = int(match.group(1))
    if not 7 <= major <= 20:
        return None
    return major, int(match.group(2) or 0)


def cuda_from_image(image: str) -> CudaVersion | None:
    """The CUDA version an image tag names, if it names one."""
    for pattern in (_NVIDIA_CUDA_IMAGE_RE, _IMAGE_CUDA_RE):
        match = pattern.search(image)
        if match:
            return int(match.group(1)), int(match.group(2))
    return None


def min_driver_major(cuda: CudaVersion) -> int | None:
    """The oldest driver major that runs this CUDA runtime, or None when the major is unknown."""
    return MIN_DRIVER_MAJOR.get(cuda[0])


def format_cuda(cuda: CudaVersion) -> str:
    return f"{cuda[0]}.{cuda[1]}"
