"""`vramgate fit`: the planner's numbers agree with `estimate`, the engine model, and admission's verdict."""

import json
from pathlib import Path

import pytest
import yaml

from webhook.advise.fit import COMMON_GPUS, common_kinds, plan, request_for, tp_sizes
from webhook.cli.main import main
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.verdict import judge
from webhook.engines import estimate, max_context
from webhook.engines.vllm import kv_pool
from webhook.kube.manifests import load_nodes
from webhook.models.catalog import builtin_catalog

from .helpers import container, deployment, gpu_node

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_builtin_list_has_the_common_gpus_with_gfd_figures() -> None:
    kinds = {k.product: k for k in common_kinds()}
    assert len(kinds) == len(COMMON_GPUS) == 9
    assert kinds["Tesla-T4"].vram_mib == 15360 and kinds["NVIDIA-H100-80GB-HBM3"].vram_mib == 81559
    assert kinds["NVIDIA-H200"].vram_mib == 143771 and kinds["NVIDIA-B200"].vram_mib == 183359
    assert all(k.source.startswith("built-in: ") for k in kinds.values())


def test_qwen3_32b_at_32k_json_agrees_with_the_engine_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "--model", "Qwen/Qwen3-32B", "--context", "32768", "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert data["model"] == "qwen3-32b" and data["context"] == 32768 and data["engine"] == "vllm"
    spec = builtin_catalog().resolve("Qwen/Qwen3-32B").spec  # type: ignore[union-attr]
    req, util, _ = request_for(builtin_catalog(), "Qwen/Qwen3-32B", Config(), context="32768")
    rows = {r["product"]: r for r in data["gpus"]}
    assert rows["NVIDIA-H200"]["gpus"] == 1 and rows["NVIDIA-H100-80GB-HBM3"]["gpus"] == 2
    for row in data["gpus"]:
        assert row["fits"]
        g = row["gpus"]
        at = req.but(gpus=g, gpu_mib=row["vram_mib"], gpu_product=row["product"])
        assert row["per_gpu_mib"] == estimate(at).per_gpu_mib <= row["vram_mib"] * util
        # the fewest: every smaller split the heads allow needs more than one GPU's usable share
        for smaller in (s for s in tp_sizes(spec, "vllm", g) if s < g):
            assert estimate(at.but(gpus=smaller)).per_gpu_mib > row["vram_mib"] * util
        assert row["max_context"] == max_context(at.but(context=spec.context), row["vram_mib"] * util)
        pool, _, conc = kv_pool(at, spec, row["vram_mib"], util)
        assert row["concurrency"] == round(conc, 2) and row["kv_pool_gib"] == round(pool, 2)
        assert spec.heads % g == 0
        assert row["flags"] == (f"--tensor-parallel-size {g} " if g > 1 else "") + "--max-model-len 32768"


def test_per_gpu_agrees_with_vramgate_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    # B200 (≥ 160 GiB) gets the same vLLM defaults as estimate's "a large GPU".
    for model, ctx in (("Qwen/Qwen3-32B", "32768"), ("llama-3.1-8b-instruct", "8192"), ("gpt-oss-120b", "65536")):
        run(capsys, "fit", "--model", model, "--context", ctx, "-o", "json")
        code, out, _ = run(capsys, "fit", "--model", model, "--context", ctx, "-o", "json")
        b200 = next(r for r in json.loads(out)["gpus"] if r["product"] == "NVIDIA-B200")
        code, out, _ = run(capsys, "estimate", "--model", model, "--context", ctx, "--gpus", str(b200["gpus"]),
                           "--engine", "vllm", "--json")
        assert code == 0 and json.loads(out)["per_gpu_mib"] == b200["per_gpu_mib"]


def test_what_fit_prints_admission_admits() -> None:
    """Launching with fit's flags on each kind it says fits is admitted on a node of that kind."""
    config, catalog = Config(), builtin_catalog()
    req, util, _ = request_for(catalog, "Qwen/Qwen3-32B", config, context="32768")
    result = plan(req, common_kinds(), util, "qwen3-32b", "test")
    for row in result.rows:
        assert row.fits and row.gpus is not None
        snap = snapshot_from_nodes([gpu_node("n", gpus=8, mem=row.kind.vram_mib, product=row.kind.product)], config)
        args = ["serve", "Qwen/Qwen3-32B", *row.flags.split()]
        obj = deployment(container(gpus=row.gpus, image="vllm/vllm-openai:latest", args=args))
        verdict = judge(obj, snap, config, catalog)
        assert verdict.allowed, (row.kind.product, verdict.message)


def test_inventory_kinds_and_what_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "--model", "Qwen/Qwen3-32B", "--context", "32768", "--nodes", str(CLUSTER))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("qwen3-32b: 32.8B parameters, bf16, vllm newest, context 32768")
    assert lines[1].split()[:4] == ["GPU", "VRAM", "NODES", "FITS"]
    t4 = next(line for line in lines if line.startswith("Tesla-T4"))
    assert " no " in t4 and "before any KV cache" in t4  # the sample's T4 node has one GPU
    h100 = next(line for line in lines if line.startswith("NVIDIA-H100"))
    assert "--tensor-parallel-size 2 --max-model-len 32768" in h100


def test_precision_and_quantized_ids(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "fit", "--model", "Qwen/Qwen3-32B-AWQ", "--context", "8192", "-o", "json")
    data = json.loads(out)
    assert data["precision"] == "int4"
    l40s = next(r for r in data["gpus"] if r["product"] == "NVIDIA-L40S")
    assert l40s["fits"] and l40s["gpus"] == 1  # bf16 needs 2
    _, out, _ = run(capsys, "fit", "--model", "qwen3-32b", "--precision", "fp8", "--context", "8192", "-o", "json")
    assert json.loads(out)["precision"] == "fp8"


def test_other_engines_name_their_own_flags(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "fit", "--model", "llama-3.1-8b-instruct", "--engine", "sglang", "--context", "8192",
                    "-o", "json")
    rows = json.loads(out)["gpus"]
    assert next(r for r in rows if r["product"] == "NVIDIA-H100-80GB-HBM3")["flags"] == "--context-length 8192"
    _, out, _ = run(capsys, "fit", "--model", "llama-3.1-8b-instruct", "--engine", "ollama", "--context", "8192",
                    "-o", "json")
    rows = json.loads(out)["gpus"]
    assert all(r["gpus"] in (1, None) for r in rows)


@pytest.mark.parametrize("argv, message", [
    (["--model", "no-such-model-xyz"], "unknown model 'no-such-model-xyz'"),
    (["--model", "qwen3-32b", "--context", "0"], "--context"),
    (["--model", "qwen3-32b", "--context", "lots"], "--context"),
    (["--model", "qwen3-32b", "--precision", "fp7"], "--precision"),
    (["--model", "qwen3-32b", "--engine", "trainer"], "--engine"),
    (["--model", "qwen3-32b", "--engine-version", "x"], "--engine-version"),
    (["--model", "qwen3-32b", "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    (["--model", "qwen3-32b", "--nodes", "/nonexistent.yaml"], ""),
])
def test_bad_input_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = run(capsys, "fit", *argv)
    assert code == 2 and out == ""
    assert err.startswith("vramgate fit: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize("doc", ["README.md", "docs/fit.md"])
def test_documented_outputs_are_real_runs(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                         doc: str) -> None:
    """Every `$ vramgate fit …` block in the docs is what the command prints now."""
    import re
    import shlex

    monkeypatch.chdir(ROOT)
    text = (ROOT / doc).read_text()
    blocks = re.findall(r"```\n\$ vramgate (fit [^\n]*)\n(.*?)```", text, flags=re.S)
    assert blocks
    for argv, shown in blocks:
        code, out, _ = run(capsys, *shlex.split(argv))
        assert code == 0 and out == shown, f"{doc}: `vramgate {argv}` prints something else now"


DIST = ROOT / "tests" / "fixtures" / "distributed" / "nodes"


def _lws(model: str, flags: str, per_pod: int, pods: int, image: str = "vllm/vllm-openai:latest") -> dict:
    c = container("engine", per_pod, image=image, command=["sh", "-c", f"exec vllm serve {model} {flags}"])
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "big", "namespace": "ml"},
            "spec": {"leaderWorkerTemplate": {"size": pods, "workerTemplate": {"spec": {"containers": [c]}}}}}


@pytest.mark.parametrize("model, nodes, pods, layout", [
    ("deepseek-ai/DeepSeek-R1", "h100x8", 2, "DP 16 × EP"),  # MoE: the wide-EP layout first
    ("meta-llama/Llama-3.1-405B-Instruct", "h100x8", 2, "TP 8 × PP 2"),  # dense: TP in a node, PP across
])
def test_when_one_node_is_not_enough_fit_plans_over_several(capsys: pytest.CaptureFixture[str], model: str,
                                                           nodes: str, pods: int, layout: str) -> None:
    code, out, _ = run(capsys, "fit", "--model", model, "--context", "32768", "--nodes", str(DIST / f"{nodes}.yaml"),
                       "-o", "json")
    assert code == 0
    [row] = json.loads(out)["gpus"]
    assert row["fits"] and row["pods"] == pods and row["layout"] == layout and row["gpus"] == 8 * pods
    assert f"(LeaderWorkerSet size {pods})" in row["flags"]
    # What fit prints, deployed as an LWS of that size, is admitted on those nodes.
    flags = row["flags"].split(" (LeaderWorkerSet")[0]
    obj = _lws(model, flags, 8, pods)
    snap = snapshot_from_nodes(load_nodes(DIST / f"{nodes}.yaml"), Config())
    verdict = judge(obj, snap, Config(), builtin_catalog())
    assert verdict.allowed, verdict.message
    role = verdict.roles[-1].judgement if verdict.roles else verdict
    # Admission prices the band without the GPU's size (fit sizes vLLM's batch defaults to it): close, not equal.
    assert role.demand is not None and role.demand.per_gpu_mib == pytest.approx(row["per_gpu_mib"], rel=0.1)


def test_a_layout_needs_as_many_nodes_as_the_inventory_has(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    one = tmp_path / "one-h100.yaml"
    one.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        gpu_node("h", gpus=8, mem=81559, product="NVIDIA-H100-80GB-HBM3")]}))
    code, out, _ = run(capsys, "fit", "--model", "meta-llama/Llama-3.1-405B-Instruct", "--context", "32768",
                       "--nodes", str(one))
    assert code == 0 and "LeaderWorkerSet" not in out and " no " in out


def test_sglang_rows_use_sglangs_own_share_of_each_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang sets mem_fraction_static by the GPU and the TP size: each row is judged with that share."""
    from webhook.engines.sglang import NEWEST, StaticFraction

    code, out, _ = run(capsys, "fit", "--model", "Qwen/Qwen3-32B", "--context", "32768", "--engine", "sglang",
                       "-o", "json")
    assert code == 0
    data = json.loads(out)
    spec = builtin_catalog().resolve("Qwen/Qwen3-32B").spec  # type: ignore[union-attr]
    req, _, _ = request_for(builtin_catalog(), "Qwen/Qwen3-32B", Config(), context="32768", engine="sglang")
    for row in data["gpus"]:
        assert row["fits"]
        g, vram = row["gpus"], row["vram_mib"]
        share = StaticFraction(NEWEST, g)(vram)
        at = req.but(gpus=g, gpu_mib=vram, gpu_product=row["product"])
        assert row["per_gpu_mib"] == estimate(at).per_gpu_mib <= vram * share
        for smaller in (s for s in tp_sizes(spec, "sglang", g) if s < g):
            assert estimate(at.but(gpus=smaller)).per_gpu_mib > vram * StaticFraction(NEWEST, smaller)(vram)
    # A share the user gives is the share on every GPU.
    code, out, _ = run(capsys, "fit", "--model", "Qwen/Qwen3-32B", "--context", "32768", "--engine", "sglang",
                       "--gpu-memory-utilization", "0.85")
    assert code == 0 and "0.85 of each GPU usable" in out.splitlines()[0]
