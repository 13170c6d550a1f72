"""`vramgate check --explain` names where the model finder found the model, on each naming shape of issue 39.

One published manifest per shape (tests/fixtures: corpus2026, operators, trtllm, manifests, kinds/aibrix), run
through the CLI as a user runs it; the one shape no published manifest was found for has its own minimal file
(tests/fixtures/finder). An ambiguous name is never guessed, and an unknown model's warning names the command that
makes it known.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.cli.main import main
from webhook.engines.nim_image import image_model

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"
CORPUS_H100 = FIXTURES / "corpus2026" / "nodes-h100.yaml"
CORPUS_GKE = FIXTURES / "corpus2026" / "nodes-gke.yaml"

# shape → (files, inventory, the whole `input: model:` line --explain must print)
SHAPES: dict[str, tuple[tuple[str, ...], Path, str]] = {
    "NIM image name, a NIM built on vLLM": (
        ("corpus2026/32-nim-operator-nimservice-epp-vllm-oss-llama31-8b.yaml",), CORPUS_H100,
        "input: model: image name nvcr.io/nvstaging/nim-internal/vllm-oss-nim-llm-4-devel-llama3.1-8b-instruct:"
        "2.0.0-rc.20260203175658-38778af4c5e1fc45 → catalog llama-3.1-8b-instruct"),
    "NIM image name, NGC's nvcr.io/nim/<org>/<model>": (
        ("manifests/21-eks-nimservice-llama31-8b-a10g.yaml",), EXAMPLES,
        "input: model: image name nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3 → catalog llama-3.1-8b-instruct"),
    "Ray Serve runtime_env.env_vars": (
        ("corpus2026/26-gke-rayservice-vllm-gemma-2b-it-l4.yaml",), CORPUS_GKE,
        "input: model: RayService serveConfigV2 applications[0].runtime_env.env_vars.MODEL_ID → catalog gemma-2b-it"),
    "Ray Serve LLM model_loading_config": (
        ("manifests/18-kuberay-rayservice-llm-serve-qwen25-7b.yaml",), EXAMPLES,
        "input: model: RayService serveConfigV2 applications[0].args.llm_configs[0].model_loading_config.model_source"
        " → catalog qwen2.5-7b-instruct"),
    "shell variable whose value sits in a ConfigMap key (own file: none published found)": (
        ("finder/own-shell-variable-from-configmap.yaml",), EXAMPLES,
        "input: model: arg vllm serve <model> (via env SERVED_MODEL, ConfigMap serving-settings key model, "
        "command 3 of 3 of its shell script: vllm serve …) → catalog qwen2.5-7b-instruct"),
    "engine command deep inside a long setup script": (
        ("trtllm/12-aibrix-deployment-trtllm-serve-qwen3-8b-1gpu.yaml",), FIXTURES / "trtllm" / "nodes-h100.yaml",
        "input: model: arg trtllm-serve <model> (command 13 of 13 of its shell script: trtllm-serve serve …) → "
        "catalog qwen3-8b"),
    "--served-model-name beside a local --model-path": (
        ("trtllm/01-dynamo-deepseek-r1-nvfp4-agg-b200-tp8-ep8-adp.yaml",), FIXTURES / "trtllm" / "nodes-b200.yaml",
        "input: model: arg --served-model-name, beside arg --model-path /model-cache/deepseek-r1-fp4, a local "
        "checkpoint → catalog deepseek-r1"),
    "a claim object: AIBrix ModelClaim on a warm pool Deployment that names no model": (
        ("kinds/aibrix/modelclaim-qwen2-7b.yaml", "kinds/aibrix/warm-runtime-pool.yaml"), EXAMPLES,
        "input: model: ModelClaim qwen2-7b-sample spec.artifactURL huggingface://Qwen/Qwen2-7B-Instruct (its "
        "podSelector pool.aibrix.ai/name=b300-pool-a picks this pool) → catalog qwen2-7b-instruct"),
    "engine flag": (
        ("corpus2026/24-gke-vllm-llama4-scout-17b-16e-h100x8.yaml",), CORPUS_GKE,
        "input: model: arg --model → catalog llama-4-scout-17b-16e-instruct"),
    "engine env": (
        ("corpus2026/27-gke-tgi-gemma2-9b-it-l4.yaml",), CORPUS_GKE,
        "input: model: env MODEL_ID → catalog gemma-2-9b-it"),
    "config file mounted from a ConfigMap": (
        ("manifests/14-gke-job-axolotl-gemma3-4b-qlora-a100.yaml",), EXAMPLES,
        "input: model: ConfigMap axolotl-config key gemma3-melanoma.yaml (mounted at "
        "/workspace/configs/gemma3-melanoma.yaml) base_model → catalog gemma-3-4b-it"),
    "operator field: KAITO preset": (
        ("corpus2026/04-kaito-workspace-phi4-mini-throughput-a100.yaml",), CORPUS_H100,
        "input: model: Workspace inference.preset.name phi-4-mini-instruct → catalog phi-4-mini-instruct"),
    "operator field: LLMInferenceService spec.model.uri": (
        ("corpus2026/12-kserve-llmisvc-qwen25-7b-kv-offloading.yaml",), CORPUS_H100,
        "input: model: LLMInferenceService spec.model.uri hf://Qwen/Qwen2.5-7B-Instruct → catalog qwen2.5-7b-instruct"),
    "operator field: production-stack VLLMRuntime": (
        ("operators/26-prodstack-vllmruntime-sample.yaml",), EXAMPLES,
        "input: model: VLLMRuntime spec.model.modelURL → catalog llama-3.1-8b-instruct"),
    "storage URI (KServe storageUri, fetched by its storage-initializer)": (
        ("operators/51-kserve-isvc-s3-llama31-8b-hf-runtime-g5.yaml",), EXAMPLES,
        "input: model: the model an init container downloads → storage-initializer "
        "s3://${bucket}/models/meta-llama--Meta-Llama-3.1-8B-Instruct → catalog llama-3.1-8b-instruct"),
}


def _explain(capsys: pytest.CaptureFixture[str], files: tuple[str, ...], nodes: Path) -> str:
    main(["check", "--explain", "-f", *(str(FIXTURES / f) for f in files), "--nodes", str(nodes)])
    return capsys.readouterr().out


@pytest.mark.parametrize("shape", list(SHAPES))
def test_explain_names_the_finders_source(shape: str, capsys: pytest.CaptureFixture[str]) -> None:
    files, nodes, line = SHAPES[shape]
    out = _explain(capsys, files, nodes)
    assert f"  {line}\n" in out, out


def test_a_model_free_nim_image_names_no_model() -> None:
    # NIM's multi-LLM / model-free containers serve what their env or argument names: the image is not a model.
    assert image_model("nvcr.io/nim/nvidia/llm-nim:1.12") is None
    assert image_model("nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3") == "meta/llama-3.1-8b-instruct"
    assert image_model("vllm/vllm-openai:v0.11.0") is None


def test_a_model_free_nim_takes_its_model_from_env(capsys: pytest.CaptureFixture[str]) -> None:
    out = _explain(capsys, ("operators/71-nim-nimservice-multi-llm-hf-llama32-1b.yaml",), EXAMPLES)
    assert "  input: model: env NIM_MODEL_NAME → catalog llama-3.2-1b-instruct\n" in out, out
    assert "llm-nim" not in out.split("input: model:", 1)[1].split("\n", 1)[0]


def test_several_claims_on_one_pool_are_not_guessed(capsys: pytest.CaptureFixture[str]) -> None:
    out = _explain(capsys, ("kinds/aibrix/modelclaims-two-on-one-pool.yaml", "kinds/aibrix/warm-runtime-pool.yaml"),
                   EXAMPLES)
    pool = out[out.index("deployment/warm-runtime-pool-b300"):]
    assert "input: model:" not in pool, pool
    assert "2 ModelClaims attach to this pool (qwen3-0-6b, qwen25-0-5b): which model a pod serves is not guessed" \
        in pool


def test_a_claim_on_another_pool_gives_this_one_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = (FIXTURES / "kinds/aibrix/modelclaim-qwen2-7b.yaml").read_text().replace("b300-pool-a", "other-pool")
    path = tmp_path / "claim.yaml"
    path.write_text(claim)
    main(["check", "--explain", "-f", str(path), str(FIXTURES / "kinds/aibrix/warm-runtime-pool.yaml"),
          "--nodes", str(EXAMPLES)])
    out = capsys.readouterr().out
    assert "ModelClaim qwen2-7b-sample spec.artifactURL" not in out
    assert "no model named anywhere in the pod" in out


UNKNOWN = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: unknown}
spec:
  selector: {matchLabels: {app: unknown}}
  template:
    metadata: {labels: {app: unknown}ANNOTATIONS}
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.11.0
        args: ["vllm", "serve", "acme-labs/zephyr-unreleased"]
        resources: {limits: {nvidia.com/gpu: "1"}}
"""
MAKE_KNOWN = ("to make it known, add to the models file the entry `vramgate models import <its config.json> --name "
              "acme-labs/zephyr-unreleased` prints; `vramgate check --hub` reads it from the hub")


def test_an_unknown_model_warning_gives_the_command_that_makes_it_known(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "unknown.yaml"
    path.write_text(UNKNOWN.replace("ANNOTATIONS", ""))
    assert main(["check", "-f", str(path), "--nodes", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert "model 'acme-labs/zephyr-unreleased' (arg vllm serve <model>) is not in the catalog" in out
    assert MAKE_KNOWN in out, out


def test_an_unknown_annotated_model_is_refused_with_the_command(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "unknown.yaml"
    path.write_text(UNKNOWN.replace("ANNOTATIONS", ", annotations: {vramgate.io/model: acme-labs/zephyr-unreleased}"))
    assert main(["check", "-f", str(path), "--nodes", str(EXAMPLES)]) == 1
    out = capsys.readouterr().out
    assert "REJECT" in out and MAKE_KNOWN in out, out


def test_a_name_guess_says_how_to_make_it_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "guess.yaml"
    path.write_text(UNKNOWN.replace("ANNOTATIONS", "").replace("zephyr-unreleased", "zephyr-7B"))
    main(["check", "-f", str(path), "--nodes", str(EXAMPLES)])
    out = capsys.readouterr().out
    assert "assumed 7B parameters from its name" in out
    assert "--name acme-labs/zephyr-7B` prints" in out


def test_a_pool_pod_without_the_enabled_label_is_no_candidate(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    pool = (FIXTURES / "kinds/aibrix/warm-runtime-pool.yaml").read_text().replace(
        'pool.aibrix.ai/enabled: "true"', 'pool.aibrix.ai/enabled: "false"')
    path = tmp_path / "pool.yaml"
    path.write_text(pool)
    main(["check", "--explain", "-f", str(FIXTURES / "kinds/aibrix/modelclaim-qwen2-7b.yaml"), str(path),
          "--nodes", str(EXAMPLES)])
    out = capsys.readouterr().out
    assert "ModelClaim qwen2-7b-sample spec.artifactURL" not in out
