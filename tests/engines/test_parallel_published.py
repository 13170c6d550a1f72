"""Per-rank weights of published distributed start-ups (DP × EP, TP × EP, DP of a dense model, TP × PP) against
the layout arithmetic of docs/parallelism.md: within 5 %.

The figures and their sources are in tests/fixtures/published_parallel_weights.yaml (vLLM "Model loading took X
GiB" on one rank, SGLang "mem usage"). A model the catalog does not hold is listed, not silently passed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.engines import estimate
from webhook.engines.identity import identify
from webhook.models.catalog import builtin_catalog
from webhook.models.vram import EstimateRequest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "published_parallel_weights.yaml"
ENTRIES: list[dict[str, Any]] = yaml.safe_load(FIXTURE.read_text())["entries"]
# Models newer than the catalog: their figure waits for a catalog entry.
NOT_IN_CATALOG = {"sgl-project/DeepSeek-V4-Flash-FP8"}


def _rank_weights_gib(entry: dict[str, Any]) -> float:
    catalog = builtin_catalog()
    found = identify(catalog, entry["model"], entry["engine"])
    spec = found.spec
    assert spec is not None, entry["model"]
    tp, pp, dp = int(entry["tp"]), int(entry.get("pp") or 1), int(entry.get("dp") or 1)
    fields: dict[str, int] = {}
    if entry["engine"] == "vllm" and spec.is_moe and dp > 1:
        fields["expert_split"] = dp * tp * pp
    if entry["engine"] == "sglang" and entry.get("dp_attention") and dp > 1:
        fields["attention_split"] = max(1, tp // dp)
    req = EstimateRequest(params=spec.params, precision=found.quantization or spec.dtype, spec=spec, gpus=tp * pp,
                          pipeline=pp, engine=entry["engine"], **fields)
    per_gpu = estimate(req).weights_mib / (tp * pp) / 1024
    if pp > 1:
        # The log is the first stage's (global rank 0); vramgate prices the heaviest stage.
        shares = spec.stage_shares(pp)
        per_gpu *= shares[0] / max(shares)
    return per_gpu


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e["model"] not in NOT_IN_CATALOG],
                         ids=lambda e: f"{e['model']}-tp{e['tp']}-pp{e.get('pp') or 1}-dp{e.get('dp') or 1}")
def test_weights_per_rank_within_5_percent(entry: dict[str, Any]) -> None:
    ours = _rank_weights_gib(entry)
    assert ours == pytest.approx(float(entry["weights_gib"]), rel=0.05), (entry["source"], ours)


def test_the_fixture_covers_dp_ep_and_pipeline_and_lists_what_it_cannot_check() -> None:
    layouts = {(e["engine"], bool(e.get("ep")), (e.get("dp") or 1) > 1, (e.get("pp") or 1) > 1) for e in ENTRIES}
    assert ("vllm", True, True, False) in layouts  # DP × EP
    assert any(pp for *_, pp in layouts)  # a pipeline
    assert {e["model"] for e in ENTRIES} >= NOT_IN_CATALOG
    assert all(e.get("source") and e.get("log") for e in ENTRIES)
