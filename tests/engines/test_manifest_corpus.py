"""The published-manifest corpus read field by field: model, engine, version, precision, context, GPUs, TP×PP, group.

Expected readings are in tests/fixtures/manifests/expected.yaml, written from each manifest and the
engine's documentation. Where vramgate cannot reach the value, the gap is listed below with its reason
(never a changed expectation).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .corpus import HERE, Reading, expected, readings

READINGS = readings()
# Values that live where vramgate does not read (a Python file inside a Ray image, a job submitted later).
KNOWN_GAPS = {
    ("22-eks-rayservice-custom-vllm-deepseek-r1-distill-8b.yaml", "worker"): "custom Ray Serve app from a "
                                                                              "ConfigMap script",
    ("28-kserve-isvc-multinode-hf-runtime-llama3-8b-pp2.yaml", "predictor"): "the runtime passes the model as "
                                                                              "${MODEL_DIR}, filled by the storage "
                                                                              "initializer",
    ("28-kserve-isvc-multinode-hf-runtime-llama3-8b-pp2.yaml", "worker"): "same as the predictor",
    ("36-sglang-docs-lws-pd-decode-deepseek-r1-0528.yaml", "leader"): "--model-path /work/models names no model",
    ("36-sglang-docs-lws-pd-decode-deepseek-r1-0528.yaml", "worker"): "same as the leader",
    ("42-ollama-helm-otwld-rendered-poststart-pull.yaml", "main"): "Ollama tags uploaded before Dec 2024 may default "
                                                                    "to Q4_0; vramgate assumes Q4_K_M (errs high)",
    ("45-own-llamacpp-server-llama-arg-env-gguf-file.yaml", "main"): "a file name (l3.1-8B-F16.gguf) the catalog "
                                                                      "cannot tie to a model",
    ("49-aws-raycluster-verl-rlvr-placeholders.yaml", "worker"): "a bare RayCluster: the training job is "
                                                                  "submitted later",
    ("50-gke-raycluster-verl-gpu.yaml", "worker"): "a bare RayCluster: the training job is submitted later",
}


def test_corpus_size_and_sources() -> None:
    files = sorted(p for p in HERE.glob("*.yaml") if p.name != "expected.yaml")
    assert len(files) >= 40
    for path in files:
        head = Path(path).read_text().splitlines()[:6]
        assert any(line.startswith("# source:") for line in head), path.name
    assert set(expected()) == {p.name for p in files}


@pytest.mark.parametrize("reading", READINGS, ids=lambda r: f"{r.file}:{r.role}")
def test_reading_matches_the_manifest(reading: Reading) -> None:
    gap = KNOWN_GAPS.get((reading.file, reading.role))
    problems = reading.mismatches()
    if "_error" in reading.want:
        problems.append(f"error: {reading.want['_error']}")
    if "_missing_role" in reading.want:
        problems.append(f"role not found: {reading.want['_missing_role']}")
    if gap is not None:
        assert problems, f"known gap no longer a gap ({gap}): remove it from KNOWN_GAPS"
        return
    assert not problems


def test_most_roles_are_read() -> None:
    assert len(READINGS) - len(KNOWN_GAPS) >= 0.75 * len(READINGS)
