"""Each engine's context flag, read through the Engine seam as the engine's own parser reads it (issue 37).

The rows are the per-engine grammar tables (tests/fixtures/grammar/<engine>.yaml, each citing the engine's
argparse or clap definition). Here every context-flag row goes through a pod the engine recognises and
``read_demand``: a value the engine accepts is priced with the meaning the engine gives it, a value it refuses
is a declaration error quoting its rule. Where vramgate deliberately admits what a release might refuse (the
worst failure is rejecting a working deployment), DEVIATIONS says why, and the row must carry a warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.config import Config
from webhook.decide.demand import DeclarationError, Demand, read_demand
from webhook.engines import engine_named, parse_version
from webhook.kinds import pod_view
from webhook.models.catalog import builtin_catalog

GRAMMAR = Path(__file__).resolve().parents[1] / "fixtures" / "grammar"
CFG = Config()
CATALOG = builtin_catalog()
MODEL_CONTEXT = 40960  # Qwen3-8B's max_position_embeddings: no row is clipped below it by accident


def _vllm(value: str, version: str | None) -> dict[str, Any]:
    return {"image": f"vllm/vllm-openai:v{version or '0.19.0'}",
            "args": ["--model=Qwen/Qwen3-8B", f"--max-model-len={value}"]}


def _sglang(value: str, version: str | None) -> dict[str, Any]:
    return {"image": "lmsysorg/sglang:v0.5.7",
            "command": ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",
                        f"--context-length={value}"]}


def _tgi(value: str, version: str | None) -> dict[str, Any]:
    return {"image": "ghcr.io/huggingface/text-generation-inference:3.3.0",
            "args": ["--model-id", "Qwen/Qwen3-8B", f"--max-total-tokens={value}"]}


def _llamacpp(value: str, version: str | None) -> dict[str, Any]:
    return {"image": "ghcr.io/ggml-org/llama.cpp:server",
            "args": ["-hf", "Qwen/Qwen3-8B-GGUF:Q4_K_M", "-c", value]}


def _ollama(value: str, version: str | None) -> dict[str, Any]:
    return {"image": f"ollama/ollama:{version or '0.13.0'}", "command": ["ollama", "run", "qwen3:8b"],
            "env": [{"name": "OLLAMA_CONTEXT_LENGTH", "value": value}]}


# engine → (grammar table, the context flag's rows, the container that speaks it)
ENGINES = {
    "vllm": ("vllm.yaml", "--max-model-len", _vllm),
    "sglang": ("sglang.yaml", "--context-length", _sglang),
    "tgi": ("tgi.yaml", "--max-total-tokens", _tgi),
    "llama.cpp": ("llamacpp.yaml", "-c", _llamacpp),
    "ollama": ("ollama.yaml", "OLLAMA_CONTEXT_LENGTH", _ollama),
}
# (engine, value, version): admitted with a warning although that engine release may refuse it, and why.
DEVIATIONS = {
    ("vllm", "auto", "0.13.0"): "the v0.14.0 boundary is read from release notes, not proven per patch release",
    ("vllm", "-1", "0.13.0"): "the v0.14.0 boundary is read from release notes, not proven per patch release",
    ("sglang", "32k", None): "SGLang's newest main reads a human-readable integer; the release that took it is "
                             "not pinned",
}


def _rows() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for engine, (table, flag, _) in ENGINES.items():
        for row in yaml.safe_load((GRAMMAR / table).read_text())["rows"]:
            if row["flag"] == flag and row.get("value") is not None and not row.get("human_readable"):
                out.append((engine, row))
    return out


ROWS = _rows()


def _demand(engine: str, row: dict[str, Any]) -> Demand:
    _, _, container = ENGINES[engine]
    c = {"name": "main", **container(str(row["value"]), row.get("version")),
         "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    view = pod_view({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [c]}})
    assert view is not None
    d = read_demand(view, CFG, CATALOG)
    assert d is not None and d.engine == engine, (d.engine if d else None, d.warnings if d else None)
    return d


def test_every_engine_has_context_rows_and_a_grammar_on_its_engine() -> None:
    for engine in ENGINES:
        assert sum(1 for e, _ in ROWS if e == engine) >= 4, engine
        found = engine_named(engine)
        assert found is not None and found.read_context is not None, engine


@pytest.mark.parametrize("engine, row", ROWS, ids=[f"{e}:{r['value']!r}@{r.get('version') or 'newest'}"
                                                  for e, r in ROWS])
def test_the_context_flag_means_what_the_engine_reads(engine: str, row: dict[str, Any]) -> None:
    deviation = DEVIATIONS.get((engine, str(row["value"]), row.get("version")))
    if not row["accepted"] and deviation is None:
        with pytest.raises(DeclarationError) as exc:
            _demand(engine, row)
        assert exc.value.value == str(row["value"]) and str(exc.value.accepted), exc.value
        return
    d = _demand(engine, row)
    assert d.estimate is not None
    context = d.estimate.request.context
    means = row.get("means")
    if deviation is not None:
        assert d.warnings, f"admitted against the engine's rule ({deviation}) without a warning"
    if means == "auto" or (deviation is not None and engine == "vllm"):
        assert d.auto_context and context == 16
    elif means == "model":
        assert context == MODEL_CONTEXT
    elif row.get("fell_back") or means == "vram-tier":
        # Ollama ignores what it cannot read (or 0) and uses its default: never a rejection.
        assert ("context", "Ollama default OLLAMA_CONTEXT_LENGTH") in d.sources
        version = parse_version(row.get("version") or "0.13.0")
        assert version is not None
        assert context == min(MODEL_CONTEXT, 4096 if version >= (0, 6, 4) else 2048)
        if row.get("fell_back"):
            assert any("Ollama cannot read it" in w for w in d.warnings)
    elif deviation is not None:
        assert context == 32000
    else:
        assert isinstance(means, int)
        assert context == means
