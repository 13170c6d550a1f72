"""GPU shares a pod states to a GPU-sharing system (HAMi, Volcano vGPU, KAI-Scheduler), judged against its model.

Each system makes the user type the memory number, and most users guess. A stated share is a declaration of
the pod's budget on one GPU; vramgate still prices the model the pod runs and compares:

- **HAMi** (Project-HAMi/HAMi): ``nvidia.com/gpumem`` (MiB per GPU) or ``nvidia.com/gpumem-percentage`` in a
  container's limits, beside ``nvidia.com/gpu`` (vGPUs; HAMi's webhook adds 1 when only memory is asked).
  HAMi-core caps the process's device memory at the share: the engine sees a GPU of that size, and vLLM takes
  its ``--gpu-memory-utilization`` of the share.
- **Volcano vGPU** (volcano-sh/volcano ``pkg/scheduler/plugins/vgpupredicates/vgpuutil/config.go``:
  ``volcano.sh/vgpu-number``, ``volcano.sh/vgpu-memory`` in MiB): the same HAMi-core cap.
- **KAI-Scheduler** (NVIDIA/KAI-Scheduler ``docs/gpu-sharing/README.md``): the pod annotation ``gpu-fraction``
  (of one GPU's memory) or ``gpu-memory`` (MiB), with no GPU resource. KAI "does not enforce memory allocation
  limit": the engine sees the whole GPU, so an engine that sizes itself by the GPU (vLLM, SGLang, TRT-LLM) takes
  its usual share of all of it unless told otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..config import Config
from ..kinds.view import PodView
from ..units.declaration import DeclarationError
from ..units.quantity import QuantityError, parse_whole

HAMI_PERCENT = "nvidia.com/gpumem-percentage"
VOLCANO_NUMBER = "volcano.sh/vgpu-number"
VOLCANO_MEMORY = "volcano.sh/vgpu-memory"
VOLCANO_CORES = "volcano.sh/vgpu-cores"
KAI_FRACTION = "gpu-fraction"
KAI_MEMORY = "gpu-memory"
# Engines that size their pool as a share of the GPU they see (the others allocate what the model needs).
FRACTION_ENGINES = {"vllm": "--gpu-memory-utilization", "nim": "--gpu-memory-utilization",
                    "sglang": "--mem-fraction-static", "trtllm": "free_gpu_memory_fraction"}


@dataclass(frozen=True)
class Share:
    """What one pod states it may use of each GPU it gets."""

    system: str  # "HAMi", "Volcano vGPU", "KAI"
    gpus: int  # GPUs (vGPUs) the share is of
    mib: int | None  # per GPU, when stated in MiB
    fraction: float | None  # of each GPU's memory, when stated as a fraction or a percentage
    source: str  # where it is stated: "resource nvidia.com/gpumem", "annotation gpu-fraction"
    enforced: bool  # the device's memory is capped at the share (HAMi-core); KAI's is not
    container: str  # the container that states it (KAI: the pod's first)

    def said(self) -> str:
        """The share as the user wrote it: ``nvidia.com/gpumem 8000 MiB``, ``gpu-fraction 0.5``."""
        name = self.source.split(" ", 1)[1]
        if self.mib is not None:
            return f"{name} {self.mib} MiB"
        assert self.fraction is not None
        return f"{name} {self.fraction * 100:g} %" if name == HAMI_PERCENT else f"{name} {self.fraction:g}"


def _whole(raw: Any, where: str, accepted: str = "use a whole number") -> int:
    text = str(raw).strip()
    if text.endswith("i"):  # 10Gi counts 10737418240 of the unit (MiB here), not 10 GiB: never what was meant
        raise DeclarationError(where, text, accepted)
    try:
        return parse_whole(text)  # a resource amount arrives in canonical form: 8000 as "8k"
    except QuantityError:
        raise DeclarationError(where, text, accepted) from None


def mib_amount(raw: Any, where: str) -> int:
    """A resource amount that counts MiB (HAMi's ``nvidia.com/gpumem``, Volcano's ``volcano.sh/vgpu-memory``)."""
    return _whole(raw, where, "use a whole number of MiB")


def _limits(c: dict[str, Any]) -> dict[str, Any]:
    resources = c.get("resources")
    out: dict[str, Any] = {}
    for section in ("requests", "limits"):  # limits win, as the device plugins read them
        amounts = resources.get(section) if isinstance(resources, dict) else None
        if isinstance(amounts, dict):
            out.update(amounts)
    return out


def share_of(view: PodView, config: Config) -> Share | None:
    """The share the pod states, or None (nearly every pod: no sharing system's field is there).

    Raises DeclarationError for a value the system itself would refuse (a fraction above 1, a negative size).
    """
    containers = view.containers(include_init=False)
    hami_memory = tuple(config.labels.gpu_memory_resources)
    for c in containers:
        limits = _limits(c)
        name = str(c.get("name", "?"))
        where = f"container {name}"
        gpus_raw = limits.get(config.labels.gpu_resource)
        for key in hami_memory:
            if key in limits:
                mib = mib_amount(limits[key], f"{where} {key}")
                gpus = _whole(gpus_raw, f"{where} {config.labels.gpu_resource}") if gpus_raw is not None else 1
                return Share("HAMi", max(gpus, 1), mib, None, f"resource {key}", True, name)
        if HAMI_PERCENT in limits:
            pct = _whole(limits[HAMI_PERCENT], f"{where} {HAMI_PERCENT}", "use a whole percentage, 1 to 100")
            if not 1 <= pct <= 100:
                raise DeclarationError(f"{where} {HAMI_PERCENT}", str(pct), "use a whole percentage, 1 to 100")
            gpus = _whole(gpus_raw, f"{where} {config.labels.gpu_resource}") if gpus_raw is not None else 1
            return Share("HAMi", max(gpus, 1), None, pct / 100, f"resource {HAMI_PERCENT}", True, name)
        if VOLCANO_MEMORY in limits or VOLCANO_NUMBER in limits:
            number = _whole(limits.get(VOLCANO_NUMBER, 1), f"{where} {VOLCANO_NUMBER}")
            if VOLCANO_MEMORY not in limits:
                return None  # whole vGPUs: the device's memory (nothing stated to judge)
            mib = mib_amount(limits[VOLCANO_MEMORY], f"{where} {VOLCANO_MEMORY}")
            return Share("Volcano vGPU", max(number, 1), mib, None, f"resource {VOLCANO_MEMORY}", True, name)
    annotations = view.annotations
    if not containers or any(config.labels.gpu_resource in _limits(c) for c in containers):
        return None  # KAI's annotations stand for the GPU resource; with one, the pod asks whole GPUs
    first = str(containers[0].get("name", "?"))
    if KAI_MEMORY in annotations:
        mib = mib_amount(annotations[KAI_MEMORY], f"annotation {KAI_MEMORY}")
        return Share("KAI", 1, mib, None, f"annotation {KAI_MEMORY}", False, first)
    if KAI_FRACTION in annotations:
        raw = annotations[KAI_FRACTION]
        try:
            fraction = float(raw)
        except ValueError:
            fraction = -1.0
        if not 0 < fraction <= 1 or not math.isfinite(fraction):
            raise DeclarationError(f"annotation {KAI_FRACTION}", raw,
                                   "use a fraction of one GPU, above 0 and at most 1")
        return Share("KAI", 1, None, fraction, f"annotation {KAI_FRACTION}", False, first)
    return None


def as_whole_gpus(view: PodView, share: Share, resource: str, memory_resources: tuple[str, ...]) -> PodView:
    """The pod as if it asked ``share.gpus`` whole GPUs: what its model needs, priced without the share."""
    drop = {*memory_resources, HAMI_PERCENT, VOLCANO_NUMBER, VOLCANO_MEMORY, VOLCANO_CORES, "nvidia.com/gpucores"}
    containers = []
    for c in view.spec.get("containers") or []:
        if not isinstance(c, dict):
            continue
        if str(c.get("name", "?")) != share.container:
            containers.append(c)
            continue
        raw = c.get("resources")
        res: dict[str, Any] = raw if isinstance(raw, dict) else {}
        new_res = {section: {k: v for k, v in amounts.items() if k not in drop and k != resource}
                   for section, amounts in res.items() if isinstance(amounts, dict)}
        new_res.setdefault("limits", {})[resource] = share.gpus
        containers.append({**c, "resources": new_res})
    return replace(view, spec={**view.spec, "containers": containers})


@dataclass(frozen=True)
class ShareFinding:
    """What the share means for the model: the demand to place it by, a denial, and warnings."""

    demand_changes: dict[str, Any]  # fields of the model's Demand to place the pod by
    denial: str | None
    warnings: tuple[str, ...]


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


def judge_share(share: Share, low_mib: int | None, high_mib: int | None, utilization: float,
                engine: str | None, engine_util_declared: bool, model: str | None, ref: str,
                largest_mib: int | None = None) -> ShareFinding:
    """The share against the model's band per GPU (``low_mib``–``high_mib``, None when the model is unknown).

    ``largest_mib``: the cluster's largest GPU, which bounds the share a suggestion names.

    Enforced (HAMi-core): the engine sees a GPU of the share's size and uses ``utilization`` of it, so a share
    below the band's low end cannot start: denied, with the size that holds the band's high end; the pod is
    placed by its share. KAI: the engine sees the whole GPU, so the pod is placed as its model needs on whole
    GPUs (it may well start), and a share smaller than that need is a warning: it takes memory the pods sharing
    its GPU were promised, and fails to start when they hold it first.
    """
    said = share.said()
    field_name = share.source.split(" ", 1)[1]
    what = f"{model} on {engine}" if model and engine else model or "the model"
    band = f"{_gib(low_mib)}–{_gib(high_mib or low_mib)}" if low_mib is not None else ""
    if share.enforced:
        if share.mib is not None:
            # Placed by the share as by a declared need (a GPU that can grant it); the model's band is judged here.
            changes: dict[str, Any] = {"explicit_vram_mib": share.mib * share.gpus, "utilization": 1.0,
                                       "util_rule": None, "estimate": None}
            if low_mib is not None and low_mib > share.mib * utilization:
                fits = math.ceil((high_mib or low_mib) / utilization)
                if largest_mib and math.ceil(low_mib / utilization) <= largest_mib < fits:
                    fits = largest_mib  # the whole of the largest GPU, which still holds the band's low end
                return ShareFinding(changes, (
                    f"{ref} asks {share.system} for {said} of each GPU, but {what} needs {band} per GPU and "
                    f"{share.system} caps the device at the share"
                    + (f" (the engine uses {utilization:g} of it)" if utilization < 1 else "")
                    + f". Try: {field_name}: {fits} (or a smaller context or batch)"), ())
            return ShareFinding(changes, None, ())
        assert share.fraction is not None
        return ShareFinding({"utilization": share.fraction * utilization, "util_rule": None}, None, ())
    warnings: list[str] = []
    budget = float(share.mib) if share.mib is not None else (
        share.fraction * largest_mib if share.fraction is not None and largest_mib else None)
    if low_mib is not None and budget is not None and low_mib > budget:
        on = "" if share.mib is not None else f" ({_gib(budget)} of the largest GPU here)"
        ask = math.ceil((high_mib or low_mib) / 1024) * 1024
        warnings.append(f"{ref} asks {share.system} for {said}{on}, but {what} needs {band} per GPU: {share.system} "
                        "does not cap device memory, so it takes memory the pods sharing its GPU were promised "
                        f"(and cannot start where they hold it first); ask {KAI_MEMORY}: {ask}")
    knob = FRACTION_ENGINES.get(engine or "")
    if knob and not engine_util_declared and engine is not None:
        portion = f"{share.fraction:g}" if share.fraction is not None else f"{share.mib} MiB ÷ the GPU's memory"
        warnings.append(f"{ref}: {share.system} does not cap GPU memory; {engine} takes {utilization:g} of the GPU: "
                        f"set {knob} {portion}")
    return ShareFinding({}, None, tuple(warnings))


def larger_fraction(share: Share, low_mib: int, utilization: float, largest_mib: int) -> str:
    """For an enforced fraction no GPU holds the pod in: the fraction of the largest GPU that would, the engine
    using ``utilization`` of it ("" when none does)."""
    needed = math.ceil(low_mib / utilization / largest_mib * 20) / 20  # to the next 5 %
    if needed > 1:
        return ""  # no share of one GPU here holds it: the other suggestions (fewer bytes, more GPUs) stand
    said = f"{needed * 100:g}" if share.source.endswith(HAMI_PERCENT) else f"{needed:g}"
    return f"{share.source.split(' ', 1)[1]}: {said} (asked {share.said()})"
