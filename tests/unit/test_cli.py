"""The CLI: check, estimate, nodes, certs — arguments, output and exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from webhook.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_seed_rejected_on_small_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "-f", str(EX / "seed-deployment.yaml"), "--nodes",
                       str(EX / "cluster-small.yaml"))
    assert code == 1
    assert out.startswith("REJECT  deployment/llm-15b: needs ")
    assert "the largest GPU in the cluster has 4 GiB (gpu-" in out and "Try: " in out


def test_check_admits_on_sample_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "-f", str(EX / "llama3-8b-deployment.yaml"), str(EX / "seed-deployment.yaml"),
                       "--nodes", str(EX / "cluster.yaml"))
    assert code == 0 and out.count("ADMIT") == 2


def test_check_bad_input_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    assert run(capsys, "check", "-f", str(bad), "--nodes", str(EX / "cluster.yaml"))[0] == 2
    assert run(capsys, "check", "-f", str(tmp_path / "missing.yaml"), "--nodes", str(EX / "cluster.yaml"))[0] == 2
    code, _, err = run(capsys, "check", "-f", str(EX / "seed-deployment.yaml"), "--nodes",
                       str(EX / "seed-deployment.yaml"))
    assert code == 2 and "expected Node objects" in err


def test_check_malformed_annotation_is_a_rejection(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("""
apiVersion: v1
kind: Pod
metadata: {name: p, annotations: {vramgate.io/model-params: "lots"}}
spec:
  containers: [{name: a, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]
""")
    code, out, _ = run(capsys, "check", "-f", str(f), "--nodes", str(EX / "cluster.yaml"))
    assert code == 1 and "vramgate.io/model-params: 'lots' is not valid" in out


def test_estimate_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "estimate", "--model", "llama-3-8b-instruct", "--batch", "16", "--json")
    data = json.loads(out)
    assert code == 0 and data["gpus"] == 1 and data["total_mib"] == data["per_gpu_mib"]
    assert set(data["breakdown"]) >= {"weights_mib", "kv_cache_mib", "overhead_mib"}
    assert abs(data["breakdown"]["kv_cache_mib"] - 16384) < 1
    code, out, _ = run(capsys, "estimate", "--params", "15B", "--precision", "fp16", "--gpus", "2", "--json",
                       "--workload", "training")
    data = json.loads(out)
    assert data["per_gpu_mib"] * 2 >= data["total_mib"] - 2 and "optimizer_mib" in data["breakdown"]


def test_estimate_table_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "estimate", "--model", "meta-llama/Meta-Llama-3-8B-Instruct")
    assert code == 0 and "per GPU" in out and "weights" in out
    assert run(capsys, "estimate", "--model", "no-such-model")[0] == 2
    assert run(capsys, "estimate", "--params", "lots")[0] == 2
    assert run(capsys, "estimate", "--params", "7B", "--precision", "fp9")[0] == 2
    assert run(capsys, "estimate", "--params", "7B", "--context", "-5")[0] == 2


def test_nodes_table_shows_health_and_reason(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "nodes", "--nodes", str(EX / "cluster.yaml"))
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["NAME", "PRODUCT", "GPUS", "VRAM/GPU", "SOURCE", "FREE", "DRIVER",
                                              "HEALTH", "VENDOR", "LAYOUT", "REASON"]
    faulty = next(line for line in lines if line.startswith("gpu-a100-80-1"))
    assert "unhealthy" in faulty and "GpuMemWatch" in faulty
    assert "cpu-0" not in out


def test_certs_init_refuses_to_overwrite(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_dir = tmp_path / "c"
    code, out, _ = run(capsys, "certs", "init", "--service", "vramgate", "--namespace", "gpu", "--out", str(out_dir))
    assert code == 0 and (out_dir / "tls.key").exists() and len(out.strip()) > 100
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((out_dir / "tls.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert names == ["vramgate", "vramgate.gpu", "vramgate.gpu.svc", "vramgate.gpu.svc.cluster.local"]
    assert run(capsys, "certs", "init", "--service", "v", "--namespace", "n", "--out", str(out_dir))[0] == 1
    assert run(capsys, "certs", "init", "--service", "v", "--namespace", "n", "--out", str(out_dir), "--force")[0] == 0


def test_console_script_runs() -> None:
    exe = Path(sys.executable).parent / "vramgate"
    result = subprocess.run([str(exe), "check", "-f", str(EX / "seed-deployment.yaml"), "--nodes",
                             str(EX / "cluster-small.yaml")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "REJECT" in result.stdout
    help_text = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60).stdout
    for cmd in ("serve", "check", "estimate", "nodes", "certs"):
        assert cmd in help_text
