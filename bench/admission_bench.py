"""Admission under load: vramgate's /validate and /mutate against a floor app on the same stack.

Both servers run as real processes over HTTPS, pinned to CPU 0 (one core); the load generator is
pinned to CPU 1. wrk measures throughput at a fixed concurrency, vegeta latency at a fixed rate.
The result that holds on a noisy machine is the ratio to the floor measured in the same run.
``.venv/bin/python -m bench.admission_bench [--duration 8] [--rate 500]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson

from webhook.tls.certs import make_bundle, write_bundle

from .payloads import PAYLOADS

ROOT = Path(__file__).resolve().parents[1]
VEGETA = ROOT / ".cache" / "bin" / "vegeta"
CASES = [("deployment", "validate"), ("gpu-pod", "validate"), ("gpu-pod", "mutate"), ("cpu-pod", "mutate")]


@dataclass
class Result:
    case: str
    server: str
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    rate_p50_ms: float = 0.0
    rate_p99_ms: float = 0.0
    rate_success: float = 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pin(cpu: int) -> list[str]:
    return ["taskset", "-c", str(cpu)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []


def _wait_ready(port: int, ca: Path, timeout: float = 30) -> None:
    ctx = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"server on {port} not ready")


@contextmanager
def _server(cmd: list[str], port: int, ca: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        _wait_ready(port, ca)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    if not m:
        return float("nan")
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


def wrk(url: str, body: Path, duration: int, connections: int) -> tuple[float, float, float, int]:
    script = body.with_suffix(".lua")
    script.write_text(
        'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f'local f = io.open("{body}", "rb")\nwrk.body = f:read("*a")\nf:close()\n'
    )
    out = subprocess.run(
        [*_pin(1), "wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script), url],
        capture_output=True, text=True, check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"\s50%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"\s99%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = int(non2xx.group(1)) if non2xx else 0
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if sock:
        errors += sum(int(x) for x in sock.groups())
    return rps, p50, p99, errors


def vegeta(url: str, body: Path, rate: int, duration: int) -> tuple[float, float, float]:
    targets = body.with_suffix(".targets")
    targets.write_text(f"POST {url}\nContent-Type: application/json\n@{body}\n")
    attack = subprocess.run(
        [*_pin(1), str(VEGETA), "attack", f"-targets={targets}", f"-rate={rate}", f"-duration={duration}s",
         "-insecure", "-keepalive=true"],
        capture_output=True, check=True,
    ).stdout
    report = subprocess.run([str(VEGETA), "report", "-type=json"], input=attack, capture_output=True,
                            check=True).stdout
    data = json.loads(report)
    lat = data["latencies"]
    return lat["50th"] / 1e6, lat["99th"] / 1e6, float(data["success"])


def run(duration: int, rate: int, connections: int) -> list[Result]:
    if not shutil.which("wrk") or not VEGETA.exists():
        subprocess.run(["bash", str(ROOT / "bench" / "install_tools.sh")], check=True)
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        write_bundle(make_bundle(["localhost", "127.0.0.1"]), tmp)
        ca = tmp / "ca.crt"
        bodies = {}
        for name, build in PAYLOADS.items():
            bodies[name] = tmp / f"{name}.json"
            bodies[name].write_bytes(orjson.dumps(build()))
        vport, fport = _free_port(), _free_port()
        exe = str(Path(sys.executable).parent / "vramgate")
        vramgate_cmd = [*_pin(0), exe, "serve", "--role", "webhook", "--nodes", "examples/cluster.yaml",
                        "--host", "127.0.0.1", "--port", str(vport), "--tls-cert", str(tmp / "tls.crt"),
                        "--tls-key", str(tmp / "tls.key")]
        floor_cmd = [*_pin(0), sys.executable, "-m", "bench.floor", "--port", str(fport),
                     "--tls-cert", str(tmp / "tls.crt"), "--tls-key", str(tmp / "tls.key")]
        for server, cmd, port in (("vramgate", vramgate_cmd, vport), ("floor", floor_cmd, fport)):
            with _server(cmd, port, ca):
                for payload, verb in CASES:
                    url = f"https://127.0.0.1:{port}/{verb}"
                    wrk(url, bodies[payload], 2, connections)  # warm-up
                    rps, p50, p99, errors = wrk(url, bodies[payload], duration, connections)
                    r50, r99, success = vegeta(url, bodies[payload], rate, duration)
                    results.append(Result(f"{payload} /{verb}", server, rps, p50, p99, errors, r50, r99, success))
    return results


def table(results: list[Result], rate: int, connections: int) -> str:
    floor = {r.case: r for r in results if r.server == "floor"}
    lines = [
        f"| case | server | req/s (c={connections}) | p50 ms | p99 ms | errors | p50 ms @{rate}/s | p99 ms @{rate}/s "
        "| floor req/s ÷ vramgate req/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ratio = floor[r.case].rps / r.rps if r.server == "vramgate" and r.rps else 1.0
        lines.append(f"| {r.case} | {r.server} | {r.rps:,.0f} | {r.p50_ms:.2f} | {r.p99_ms:.2f} | {r.errors} | "
                     f"{r.rate_p50_ms:.2f} | {r.rate_p99_ms:.2f} | {ratio:.2f}× |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    results = run(args.duration, args.rate, args.connections)
    print(table(results, args.rate, args.connections))


if __name__ == "__main__":
    main()
