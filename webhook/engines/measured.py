"""The measured chance that a workload fits: vramgate's error against published start-up logs, per engine.

``webhook/data/measured.yaml`` holds, per engine, the signed relative error of everything the engine keeps
before its KV pool (weights, activation peak, non-torch memory, CUDA graphs), one per published log
(`python -m bench.accuracy --write-measured`). When the expected need straddles a GPU, the share of those
residuals under which the true need would still fit is the chance this workload starts there.
"""

from __future__ import annotations

from functools import lru_cache

from ..units.data import packaged_yaml


@lru_cache(maxsize=1)
def residuals() -> dict[str, tuple[float, ...]]:
    """Per engine, the measured residuals (sorted)."""
    data = packaged_yaml("measured.yaml") or {}
    return {str(engine): tuple(sorted(float(v) for v in entry.get("residuals") or ()))
            for engine, entry in data.items() if isinstance(entry, dict)}


def chance_to_fit(engine: str | None, expected_mib: float, kv_mib: float, usable_mib: float
                  ) -> tuple[float, int] | None:
    """The share of published logs whose error, applied to this estimate, leaves it fitting ``usable_mib``;
    and how many logs that is. None where the engine has no measurements.

    The KV part is exact (the engine sizes it from the model's shape); the rest is vramgate's figure with
    error e = (vramgate − truth) / truth, so the truth is ``kv + rest / (1 + e)``.
    """
    measured = residuals().get((engine or "").split(" ")[0])
    rest = expected_mib - kv_mib
    if not measured or rest <= 0:
        return None
    if usable_mib <= kv_mib:
        return 0.0, len(measured)
    threshold = rest / (usable_mib - kv_mib) - 1
    return sum(1 for e in measured if e >= threshold) / len(measured), len(measured)
