"""Published AMD Instinct manifests (issue 38; tests/fixtures/amd/corpus, README.md there): each is read (a model, an
estimate, amd.com/gpu and its GPU count per pod), admitted on the AMD GPUs it was written for, and judged on 64 GB
MI210s and on an MI300X in CPX mode (24 GB partitions): rejected where its need is larger, naming the AMD product and
its memory; where the model is small enough to fit anywhere, that is asserted instead, with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from webhook.cli.main import main
from webhook.config import Config
from webhook.decide.demand import read_demand
from webhook.kinds import Context, roles
from webhook.kube.manifests import load_file
from webhook.models.catalog import builtin_catalog

AMD = Path(__file__).resolve().parents[1] / "fixtures" / "amd"
CORPUS = AMD / "corpus"
FILES = sorted(CORPUS.glob("[0-9][0-9]-*.yaml"))
HEADER = ("# source:", "# licence:", "# gpu:", "# nodes:")
CFG = Config()
MI210 = ("AMD_Instinct_MI210", "64 GiB")
CPX = ("AMD_Instinct_MI300X", "24 GiB")


@dataclass(frozen=True)
class Role:
    """What one role of a file asks, and its verdict on MI210s and on a CPX-partitioned MI300X."""

    model: str | None  # the catalog entry it resolves to (None: not read, see ``why``)
    gpus: int  # amd.com/gpu per pod
    mi210: str  # "admit" / "reject"
    cpx: str
    why: str = ""  # where a verdict is "admit" on a small GPU, or no estimate: the reason


EXPECT: dict[str, dict[str, Role]] = {
    "01-rocm-device-plugin-vllm-mistral-7b.yaml": {
        # Mistral-7B-v0.3 (base) is read as the catalog's Mistral-7B-Instruct-v0.3: the same architecture and size.
        "mistral-7b": Role("mistral-7b-instruct-v0.3", 1, "admit", "admit",
                           "Mistral-7B in bf16 at its 32768-token context is ~19 GiB: a 24 GB CPX partition holds it"),
    },
    "02-kserve-llmisvc-qwen25-7b-amd.yaml": {
        "qwen2-7b-instruct-amd": Role("qwen2.5-7b-instruct", 1, "admit", "admit",
                                      "Qwen2.5-7B in bf16 (GQA, 4 KV heads) is ~19 GiB at 32768 tokens: it fits 24 GB"),
    },
    "03-kubeai-deepseek-r1-mi300x-tp8.yaml": {
        "deepseek-r1-mi300x": Role("deepseek-r1", 8, "reject", "reject"),
    },
    "04-kubeai-llama31-405b-fp8-mi300x-tp8.yaml": {
        "llama-3.1-405b-instruct-fp8-mi300x": Role("llama-3.1-405b-instruct", 8, "reject", "reject"),
    },
    "05-kubeai-llama31-70b-fp8-mi300x-1gpu.yaml": {
        "llama-3.1-70b-instruct-fp8-mi300x": Role("llama-3.1-70b-instruct", 1, "reject", "reject"),
    },
    "06-llm-d-pd-amd-llama33-70b-fp8-kv-prefill-decode.yaml": {
        "pd-disaggregation-rocm-vllm-prefill": Role("llama-3.3-70b-instruct", 1, "reject", "reject"),
        # TP 4 splits 70B in FP8 to ~17 GiB of weights per GPU: four MI210s hold it, and so do four 24 GB
        # partitions once priced on them (vLLM's smaller batch defaults below 70 GiB, placement.on_gpu).
        "pd-disaggregation-rocm-vllm-decode": Role("llama-3.3-70b-instruct", 4, "admit", "admit",
                                                   "TP 4: ~23 GiB per GPU, within an MI210 and a 24 GB partition"),
    },
    "07-llm-d-optimized-baseline-amd-vllm-qwen3-32b-tp2.yaml": {
        "optimized-baseline-rocm-vllm-decode": Role("qwen3-32b", 2, "admit", "reject",
                                                    "TP 2: ~40 GiB per GPU, within a 64 GB MI210"),
    },
    "08-llm-d-optimized-baseline-amd-sglang-qwen3-32b-tp2-mi35x.yaml": {
        "optimized-baseline-rocm-sglang-decode": Role("qwen3-32b", 2, "admit", "reject",
                                                      "TP 2: ~36 GiB per GPU, within a 64 GB MI210"),
    },
    "09-llm-d-optimized-baseline-amd-atom-qwen3-32b-tp8.yaml": {
        # ROCm's ATOM engine is not one vramgate models: its flags are not read, and the warning says so.
        "optimized-baseline-rocm-atom-decode": Role(None, 8, "admit", "admit",
                                                    "an engine vramgate does not model: its flags"),
    },
    "10-llm-d-wide-ep-amd-deepseek-v3-decode-lws-mi355x.yaml": {
        "wide-ep-lws-amd-gpu-vllm-deepseek-v3-decode": Role("deepseek-v3", 8, "reject", "reject"),
    },
}


def _header(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        for key in HEADER:
            if line.startswith(key):
                out[key] = line[len(key):].strip()
    return out


def _check(path: Path, nodes: str, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    code = main(["check", "-f", str(path), "--nodes", str(AMD / f"{nodes}.yaml"), "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    results = {r["name"]: r for r in out["results"]}
    assert code == (1 if any(r["verdict"] == "reject" for r in results.values()) else 0)
    return results


def test_the_corpus_is_ten_published_files_each_saying_where_it_comes_from() -> None:
    assert len(FILES) >= 10
    assert {p.name for p in FILES} == set(EXPECT)
    readme = (CORPUS / "README.md").read_text()
    for path in FILES:
        header = _header(path)
        assert set(header) == set(HEADER), f"{path.name}: header lacks {set(HEADER) - set(header)}"
        assert (AMD / f"{header['# nodes:']}.yaml").is_file(), path.name
        assert path.name in readme, f"{path.name} is not listed in corpus/README.md"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_read_as_amd_pods_with_their_model_and_gpus(path: Path) -> None:
    catalog = builtin_catalog()
    seen: dict[str, Any] = {}
    for doc in load_file(path):
        found = roles(doc, Context(None, None, CFG.labels.gpu_resource))
        assert found is not None, path.name
        for role in found.roles:
            demand = read_demand(role.view, CFG, catalog)
            assert demand is not None, (path.name, role.view.ref)
            seen[str(doc["metadata"]["name"])] = demand
    assert set(seen) == set(EXPECT[path.name])
    for name, want in EXPECT[path.name].items():
        d = seen[name]
        assert (d.vendor, d.gpu_resource, d.gpus) == ("amd", "amd.com/gpu", want.gpus), name
        assert (d.spec.name if d.spec else None) == want.model, name
        assert (d.estimate is not None) == (want.model is not None), name


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_admitted_on_the_amd_gpus_it_was_written_for(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, r in _check(path, _header(path)["# nodes:"], capsys).items():
        assert r["verdict"] == "admit", (name, r["message"])
        want = EXPECT[path.name][name]
        if want.model is None:
            assert r["estimate"] is None and any(want.why in w for w in r["warnings"]), r["warnings"]


@pytest.mark.parametrize("gpu", ["mi210", "cpx"])
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_judged_on_smaller_amd_gpus(path: Path, gpu: str, capsys: pytest.CaptureFixture[str]) -> None:
    product, memory = MI210 if gpu == "mi210" else CPX
    results = _check(path, "nodes-mi210" if gpu == "mi210" else "nodes-cpx", capsys)
    for name, want in EXPECT[path.name].items():
        r, verdict = results[name], getattr(want, gpu)
        assert r["verdict"] == verdict, (name, gpu, r["message"])
        if verdict == "reject":
            # The message a developer reads names the AMD GPU and its memory, and the fixes ask amd.com/gpu.
            assert product in r["message"] and f"largest GPU in the cluster has {memory}" in r["message"], r["message"]
            assert "nvidia.com" not in r["message"], r["message"]
        else:
            assert want.why, f"{name} admitted on {gpu}: say why in EXPECT"

