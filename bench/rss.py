"""Resident memory of `vramgate serve` holding a 10,000-node inventory (the extender's and admission's view)."""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from webhook.tls.certs import make_bundle, write_bundle

from .admission_bench import _free_port, _wait_ready
from .extender_bench import node_object

ROOT = Path(__file__).resolve().parents[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def measure(nodes: int) -> float:
    """VmRSS in MiB of a serving process after loading ``nodes`` realistic Node objects."""
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        write_bundle(make_bundle(["127.0.0.1"]), tmp)
        items = [node_object(f"node-{i:05d}", rng) for i in range(nodes)]
        (tmp / "nodes.json").write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        del items
        port = _free_port()
        exe = str(Path(sys.executable).parent / "vramgate")
        proc = subprocess.Popen(
            [exe, "serve", "--role", "all", "--nodes", str(tmp / "nodes.json"), "--host", "127.0.0.1",
             "--port", str(port), "--tls-cert", str(tmp / "tls.crt"), "--tls-key", str(tmp / "tls.key")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
        )
        try:
            _wait_ready(port, tmp / "ca.crt", timeout=120)
            time.sleep(1)
            return rss_mib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def table(sizes: tuple[int, ...] = (0, 1000, 10000)) -> str:
    lines = ["| nodes in inventory | RSS MiB |", "|---|---|"]
    for n in sizes:
        lines.append(f"| {n:,} | {measure(n):.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
