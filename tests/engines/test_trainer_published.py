"""The trainer model beside published fine-tuning peaks (torchtune, Unsloth, HF+FA2 tables).

Every published run that fit its GPU must be admitted (the low end fits); every published peak must lie
below the band's high end. Source and quoted table rows are in tests/fixtures/published_engine_measurements.yaml.
"""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engines import estimate
from webhook.engines.identity import identify
from webhook.models.catalog import builtin_catalog
from webhook.models.vram import Estimate, EstimateRequest

from .published import entries

# GiB of the GPUs these tables name (marketing sizes; the tables state them).
GPU_GIB = {"4090": 24.0, "a6000": 48.0, "a100": 80.0, "24 gb": 24.0, "80 gb": 80.0, "48 gb": 48.0, "8 gb": 8.0}


def _gpu_gib(entry: dict[str, Any]) -> float | None:
    product = str((entry.get("gpu") or {}).get("product") or "").lower()
    return next((v for k, v in GPU_GIB.items() if k in product), None)


def _estimate(entry: dict[str, Any], context: int | None = None) -> Estimate | None:
    config = entry["config"]
    spec = identify(builtin_catalog(), str(entry["model"])).spec
    if spec is None:
        return None
    method = config.get("method")
    ckpt = config.get("gradient_checkpointing")
    return estimate(EstimateRequest(
        params=spec.params, precision="nf4" if method == "qlora" else "bf16", spec=spec,
        context=context or int(config.get("seq_len") or 2048), batch=int(config.get("batch") or 1),
        gpus=int(config.get("gpus") or 1), workload="training", engine="trainer", finetune=method,
        parallelism="fsdp" if config.get("parallelism") == "fsdp" else "ddp",
        gradient_checkpointing=bool(ckpt) and ckpt is not False, lora_rank=int(config.get("lora_rank") or 16),
        optimizer_bits=8 if "8bit" in str(config.get("optimizer", "")).lower() else 32,
    ))


TRAINING = [e for e in entries() if e["engine"] == "trainer" and _gpu_gib(e) is not None
            and identify(builtin_catalog(), str(e["model"])).spec is not None]


def test_enough_training_measurements() -> None:
    assert len(TRAINING) >= 15


@pytest.mark.parametrize("entry", [e for e in TRAINING if e["outcome"] == "started"], ids=lambda e: e["id"])
def test_published_runs_that_fit_are_admitted(entry: dict[str, Any]) -> None:
    context = entry["reported"].get("max_seq_len_fit")
    est = _estimate(entry, int(context) if context else None)
    assert est is not None
    assert est.low_per_gpu_mib / 1024 <= _gpu_gib(entry)  # type: ignore[operator]


@pytest.mark.parametrize("entry", [e for e in TRAINING if any(k.startswith("peak") for k in e["reported"])],
                         ids=lambda e: e["id"])
def test_published_peaks_lie_under_the_high_end(entry: dict[str, Any]) -> None:
    est = _estimate(entry)
    assert est is not None
    peak = next(v for k, v in entry["reported"].items() if k.startswith("peak"))
    assert peak <= est.high_per_gpu_mib / 1024
