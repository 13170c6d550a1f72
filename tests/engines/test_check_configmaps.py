"""`vramgate check -f` resolves env from ConfigMaps in the same files; Secrets and missing maps stay unknown."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.cli.main import main

NODES = Path(__file__).parents[2] / "examples" / "cluster.yaml"
MANIFEST = """
apiVersion: v1
kind: ConfigMap
metadata: {name: llm-config}
data: {MODEL_ID: meta-llama/Llama-3.1-70B-Instruct, MAX_LEN: "8192"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: llm}
spec:
  selector: {matchLabels: {app: llm}}
  template:
    metadata: {labels: {app: llm}}
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.10.1
        command: ["/bin/sh", "-c", "vllm serve $MODEL_ID --max-model-len $(MAX_LEN)"]
        env:
        - name: MAX_LEN
          valueFrom: {configMapKeyRef: {name: llm-config, key: MAX_LEN}}
        envFrom:
        - configMapRef: {name: llm-config}
        - secretRef: {name: hf-token}
        resources: {limits: {nvidia.com/gpu: "1"}}
"""


def test_env_from_a_configmap_in_the_same_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "llm.yaml"
    path.write_text(MANIFEST)
    code = main(["check", "-f", str(path), "--nodes", str(NODES)])
    out = capsys.readouterr().out
    assert code == 1, out  # 70B in bf16 on one GPU: the model came from the ConfigMap
    assert "70.6B" in out or "70.5B" in out or "131" in out
    assert "8192 tokens" in out
    assert "secretRef hf-token" in out  # what stays unknown is named


def test_without_the_configmap_the_model_is_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "llm.yaml"
    path.write_text(MANIFEST.split("---", 1)[1])
    code = main(["check", "-f", str(path), "--nodes", str(NODES)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ConfigMap or Secret vramgate cannot read" in out


def test_explain_names_every_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "llm.yaml"
    path.write_text(MANIFEST)
    main(["check", "--explain", "-f", str(path), "--nodes", str(NODES)])
    out = capsys.readouterr().out
    assert ("input: model: arg vllm serve <model> (via env MODEL_ID, ConfigMap llm-config key MODEL_ID by envFrom)"
            " → catalog llama-3.1-70b-instruct") in out
    assert "input: context: arg --max-model-len" in out
    assert "engine: vLLM 0.10.1 V1: the KV pool must hold one 8192-token sequence" in out


def test_a_secret_the_engine_does_not_read_is_not_worth_a_warning(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "llm.yaml"
    token = "        - name: HF_TOKEN\n          valueFrom: {secretKeyRef: {name: hf, key: t}}\n"
    path.write_text(MANIFEST.replace("        - secretRef: {name: hf-token}\n", "").replace(
        "        env:\n", "        env:\n" + token))
    main(["check", "-f", str(path), "--nodes", str(NODES)])
    out = capsys.readouterr().out
    assert "HF_TOKEN" not in out
