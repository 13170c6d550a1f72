"""`vramgate` as a pre-commit hook or CI step runs it: whole processes, start-up included, beside bare Python.

    python -m bench.cli [--runs 7]

Each figure is the median wall time of ``--runs`` whole processes, after one warm-up run that writes the
bytecode and the packaged tables' parse cache, as an installed package has them (pip compiles on install; this
environment may set PYTHONDONTWRITEBYTECODE, so it is unset here). The baseline, ``python -c pass``, is measured
in the same run; the targets are issue #43's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEPLOYMENT = (ROOT / "examples" / "llama3-8b-deployment.yaml").read_text(encoding="utf-8")
NODES = str(ROOT / "examples" / "cluster.yaml")


def _many(n: int) -> str:
    docs = [DEPLOYMENT.replace("name: llama3-8b", f"name: llama3-8b-{i}", 1) for i in range(n)]
    return "\n---\n".join(docs)


def _time(argv: list[str], runs: int) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    subprocess.run(argv, env=env, capture_output=True, check=False)  # warm: bytecode and table cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def table(runs: int = 7) -> str:
    vg = [sys.executable, "-m", "webhook.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        many = Path(tmp) / "deployments.yaml"
        many.write_text(_many(1000), encoding="utf-8")
        rows = [
            ("python -c pass (baseline)", [sys.executable, "-c", "pass"], None),
            ("vramgate --help", [*vg, "--help"], 0.10),
            ("vramgate check, one Deployment",
             [*vg, "check", "-f", str(ROOT / "examples" / "llama3-8b-deployment.yaml"),
              "--nodes", NODES], 0.15),
            ("vramgate check, 1,000 Deployments", [*vg, "check", "-f", str(many), "--nodes", NODES], 1.5),
        ]
        measured = [(label, _time(argv, runs), target) for label, argv, target in rows]
    base = measured[0][1]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [f"median of {runs} whole processes; load average {load:.2f}", "",
             "| command | wall s | × bare Python | target s | met |", "|---|---|---|---|---|"]
    for label, secs, target in measured:
        met = "-" if target is None else ("yes" if secs <= target else "no")
        lines.append(f"| {label} | {secs:.3f} | {secs / base:.1f} | {target if target is not None else '-'} | {met} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    print(table(parser.parse_args(argv).runs))


if __name__ == "__main__":
    main()
