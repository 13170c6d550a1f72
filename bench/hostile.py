"""Hostile reviews (issue #44): how long each blocks the decision, and whether it reaches the internal-error path.

``python -m bench.hostile`` prints one row per case: the seconds ``decide`` took in-process (the event loop is
blocked for as long), the answer and its first warning. The same cases are the regression tests in
``tests/admission/test_hostile.py``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
_BIG = "9" * 4300  # Python's own int-to-str limit is 4,300 digits: the longest literal int() takes
_GPU = {"limits": {"nvidia.com/gpu": 1}}


def _pod(command: list[str], *, args: list[str] | None = None, volumes: list[dict[str, Any]] | None = None,
         mounts: list[dict[str, Any]] | None = None, image: str = "vllm/vllm-openai:v0.8.5") -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "image": image, "command": command, "resources": _GPU}
    if args is not None:
        c["args"] = args
    if mounts:
        c["volumeMounts"] = mounts
    spec: dict[str, Any] = {"containers": [c]}
    if volumes:
        spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hostile", "namespace": "ml"}, "spec": spec}


def _vllm_script(script: str) -> dict[str, Any]:
    return _pod(["sh", "-c", script])


def arithmetic_huge(factors: int = 20) -> dict[str, Any]:
    """``$(( (<4,300 digits>**64) * … ))``: 20 factors make an 87 KB pod (past the script bound); 3 stay under it."""
    expr = " * ".join(f"({_BIG}**64)" for _ in range(factors))
    return _vllm_script(f"vllm serve meta-llama/Llama-3.1-8B --max-model-len $(( {expr} ))")


def arithmetic_overflow() -> dict[str, Any]:
    return _vllm_script("vllm serve meta-llama/Llama-3.1-8B --max-model-len $(( (2**64)**64 ))")


def arithmetic_unary() -> dict[str, Any]:
    return _vllm_script(f"vllm serve meta-llama/Llama-3.1-8B --max-model-len $(( {'-' * 5000}1 ))")


def huge_script() -> dict[str, Any]:
    """A 2.9 MB ``sh -c`` script."""
    line = "echo preparing the model cache for serving; \n"
    return _vllm_script(line * (2_900_000 // len(line)) + "vllm serve meta-llama/Llama-3.1-8B")


def many_flags() -> dict[str, Any]:
    """100,000 flags vLLM does not know."""
    return _pod(["vllm", "serve", "meta-llama/Llama-3.1-8B"], args=[f"--unknown-flag-{i}" for i in range(100_000)])


def _nested_yaml(depth: int) -> str:
    return "[" * depth + "]" * depth


def _ray(name: str) -> dict[str, Any]:
    text = (ROOT / "tests" / "fixtures" / name).read_text(encoding="utf-8")
    return next(d for d in yaml.safe_load_all(text) if d)


def ray_serve_deep() -> dict[str, Any]:
    obj = _ray("kinds/rayservice-llm.yaml")
    obj["spec"]["serveConfigV2"] = "applications: " + _nested_yaml(10_000)
    return obj


def ray_runtime_env_deep() -> dict[str, Any]:
    obj = _ray("operators/63-kuberay-rayjob-runtimeenvyaml-text-classifier-gpu.yaml")
    obj["metadata"]["name"] = "rayjob"
    obj["spec"]["runtimeEnvYAML"] = "env_vars: " + _nested_yaml(10_000)
    return obj


def json_deep(depth: int = 900) -> dict[str, Any]:
    """An object nested ``depth`` deep (a custom resource that keeps unknown fields may carry anything)."""
    inner: Any = {}
    for _ in range(depth):
        inner = {"x": inner}
    obj = _vllm_script("vllm serve meta-llama/Llama-3.1-8B")
    obj["spec"]["containers"][0]["x-extra"] = inner
    return obj


def _trainer_pod() -> dict[str, Any]:
    return _pod(["axolotl", "train", "/config/qlora.yml"], image="axolotlai/axolotl:main-latest",
                mounts=[{"name": "cfg", "mountPath": "/config"}],
                volumes=[{"name": "cfg", "configMap": {"name": "axolotl-cfg"}}])


def configmap(text: str, version: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "axolotl-cfg", "namespace": "ml", "resourceVersion": version},
            "data": {"qlora.yml": text}}


_AXOLOTL = "base_model: meta-llama/Llama-3.1-8B\nadapter: qlora\nload_in_4bit: true\nsequence_len: 4096\n"


def configmap_deep() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return _trainer_pod(), [configmap(_AXOLOTL + "extra: " + _nested_yaml(10_000) + "\n")]


def configmap_big(size: int = 950_000) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A 0.95 MB YAML config: a real one with a long list of dataset entries after it."""
    row = "  - {path: tatsu-lab/alpaca, type: alpaca, split: train}\n"
    return _trainer_pod(), [configmap(_AXOLOTL + "datasets:\n" + row * (size // len(row)))]


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], Any]  # an object, or (object, ConfigMaps the review reads)
    webhook: str = "validate"


CASES = (
    Case("arithmetic: (4,300 digits ** 64) x 20", arithmetic_huge),
    Case("arithmetic: (4,300 digits ** 64) x 3", lambda: arithmetic_huge(3)),
    Case("arithmetic: (2**64)**64", arithmetic_overflow),
    Case("arithmetic: 5,000 unary minus", arithmetic_unary),
    Case("sh -c script of 2.9 MB", huge_script),
    Case("100,000 unknown flags", many_flags),
    Case("serveConfigV2 YAML 10,000 deep", ray_serve_deep),
    Case("runtimeEnvYAML 10,000 deep", ray_runtime_env_deep),
    Case("mounted ConfigMap YAML 10,000 deep", configmap_deep),
    Case("JSON 900 deep at /mutate", json_deep, "mutate"),
    Case("mounted ConfigMap YAML of 0.95 MB", configmap_big),
    Case("mounted ConfigMap YAML of 60 KB", lambda: configmap_big(60_000)),
)


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    """An AdmissionReview v1 as kube-apiserver sends it."""
    kind = str(obj.get("kind"))
    api = str(obj.get("apiVersion"))
    group, _, version = api.rpartition("/")
    meta = obj.get("metadata") or {}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()), "kind": {"group": group, "version": version, "kind": kind},
                        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
                        "namespace": meta.get("namespace") or "ml", "name": meta.get("name") or "",
                        "operation": operation, "object": obj}}


def built(case: Case) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    made = case.build()
    return (made if isinstance(made, tuple) else (made, []))


def run_case(case: Case, repeat: int = 1) -> list[tuple[float, Any]]:
    """Each repetition's seconds in ``decide`` and its answer, against the bundled sample inventory."""
    from webhook.cluster.snapshot import FixedInventory, snapshot_from_nodes
    from webhook.config import Config
    from webhook.kinds import Runtimes
    from webhook.kube.manifests import load_nodes
    from webhook.serve.admission.decision import decide
    from webhook.serve.state import AppState

    state = AppState(Config(), FixedInventory(snapshot_from_nodes(load_nodes(ROOT / "examples" / "cluster.yaml"),
                                                                 Config(), revision=1)))
    out = []
    for _ in range(repeat):
        obj, cms = built(case)  # built again each time: an object too deep for copy.deepcopy is a case here
        req = review(obj)["request"]
        runtimes = Runtimes.of(cms) if cms else None
        start = time.perf_counter()
        answer = decide(state, req, case.webhook, runtimes)  # type: ignore[arg-type]
        out.append((time.perf_counter() - start, answer))
    return out


def main(argv: list[str] | None = None) -> None:
    import logging
    import sys

    logging.getLogger("vramgate.admission").disabled = True
    only = (sys.argv[1:] if argv is None else argv)
    print(f"{'case':<40} {'seconds':>8}  {'answer':<22} first warning")
    for case in CASES:
        if only and not any(o in case.name for o in only):
            continue
        for seconds, answer in run_case(case, repeat=2 if "ConfigMap YAML of" in case.name else 1):
            verdict = "INTERNAL ERROR" if answer.error else ("allowed" if answer.allowed else "denied")
            first = (answer.warnings[0] if answer.warnings else answer.message)[:70]
            print(f"{case.name:<40} {seconds:8.3f}  {verdict + ' ' + answer.reason:<22} {first}")


if __name__ == "__main__":
    main()
