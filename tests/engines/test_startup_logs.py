"""Each engine's start-up log lines read the published logs of the accuracy corpus back to the figures their
records quote (issue 40: the parsers the observer will run on a pod's log)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.engines import engine_named

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted((ROOT / "tests" / "fixtures" / "accuracy").glob("*.yaml"))
RECORDS: list[dict[str, Any]] = [r for path in CORPUS for r in yaml.safe_load(path.read_text())["measurements"]]
# The figures each engine's lines must read from every record of the corpus that quotes them, at least this many
# times (so a pattern that stops matching fails here, not silently in a cluster).
LEAST = {
    "vllm": {"weights_gib": 44, "kv_cache_gib": 47, "kv_cache_tokens": 40, "max_concurrency": 46,
             "cuda_graph_gib": 18, "non_torch_gib": 13, "activation_peak_gib": 12, "gpu_blocks": 5},
    "sglang": {"weights_gib": 2, "kv_cache_tokens": 2, "k_size_gib": 3, "v_size_gib": 3, "max_total_num_tokens": 3,
               "max_running_requests": 3, "cuda_graph_gib": 3, "avail_mem_after_load_gib": 3,
               "avail_mem_after_pool_gib": 3, "avail_mem_after_pool_gib_gpu1": 1},
    "tgi": {"max_batch_total_tokens": 2},
    "llama.cpp": {"layers_offloaded": 2, "kv_self_mib": 1, "kv_buffer_mib": 2, "kv_buffer_mib_gpu1": 1,
                  "model_buffer_mib_gpu1": 1, "compute_buffer_mib_gpu": 2, "host_compute_buffer_mib": 2},
    "ollama": {"layers_model": 10, "layers_offload": 10, "required_full_gib": 9, "required_partial_gib": 9,
               "required_kv_gib": 6, "required_kv_mib": 3, "weights_total_gib": 8, "graph_full_mib": 6,
               "available_gib": 6, "kv_self_mib": 2, "compute_buffer_mib_gpu1": 1},
    "trtllm": {"kv_cache_tokens": 5, "kv_cache_gib": 2, "kv_cache_bytes": 2, "engine_context_gpu_mib": 3,
               "execution_context_mib": 2, "decoder_gb": 1, "window_size": 1},
}


def _close(parsed: float, quoted: float) -> bool:
    # The record keeps the most precise figure its log prints; another line of the same log may round it
    # (vLLM V0: "took 5.2032 GB" and "model weights take 5.20GiB").
    return abs(parsed - quoted) <= max(0.011, abs(quoted) * 0.002)


@pytest.mark.parametrize("engine", sorted(LEAST))
def test_every_figure_read_is_the_one_the_record_quotes(engine: str) -> None:
    parse = engine_named(engine).parse_log  # type: ignore[union-attr]
    assert parse is not None, f"{engine} has no start-up log lines"
    read: Counter[str] = Counter()
    wrong: list[str] = []
    for r in (r for r in RECORDS if r["engine"] == engine):
        figures = parse(str(r.get("quote") or ""))
        for key, quoted in (r.get("reported") or {}).items():
            if key not in figures or not isinstance(quoted, int | float):
                continue
            read[key] += 1
            if not _close(figures[key], float(quoted)):
                wrong.append(f"{r['id']}: {key} read {figures[key]}, quoted {quoted}")
    assert not wrong, "\n".join(wrong)
    short = {k: (read[k], n) for k, n in LEAST[engine].items() if read[k] < n}
    assert not short, f"{engine}: figures read fewer times than the corpus quotes them (read, least): {short}"


def test_a_log_without_the_lines_reads_nothing() -> None:
    for name in LEAST:
        parse = engine_named(name).parse_log  # type: ignore[union-attr]
        assert parse is not None and parse("INFO: Started server process [1]\nUvicorn running on :8000") == {}
