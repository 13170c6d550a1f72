"""Peak RSS of the extender under its largest bodies, one and several at once (docs/reliability.md's figures).

``python -m bench.extender_memory --names 455000 --at-once 4 --memory-limit 536870912``: a ``NodeNames`` body of
that many unknown names (the worst shape) against a server told its container limit; ``--nodes`` sends a NodeList
of realistic Node objects instead.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import ssl
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import orjson

from webhook.tls.certs import make_bundle, write_bundle

from .admission_bench import _free_port, _wait_ready
from .extender_bench import node_object

ROOT = Path(__file__).resolve().parents[1]
POD = {"metadata": {"name": "p", "namespace": "ml", "uid": "u", "resourceVersion": "1"},
       "spec": {"containers": [{"name": "c", "image": "vllm/vllm-openai:v0.11.0",
                                "command": ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"],
                                "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


def status_mib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key}")


def body_of(names: int, nodes: int) -> bytes:
    if nodes:
        rng = random.Random(7)
        items = [node_object(f"node-{i:06d}", rng) for i in range(nodes)]
        return orjson.dumps({"Pod": POD, "Nodes": {"items": items}})
    return orjson.dumps({"Pod": POD, "NodeNames": [f"node-{i:08d}" for i in range(names)]})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", type=int, default=455_000, help="unknown node names in a NodeNames body")
    parser.add_argument("--nodes", type=int, default=0, help="send a NodeList of this many Node objects instead")
    parser.add_argument("--at-once", type=int, default=4, help="concurrent requests in the second round")
    parser.add_argument("--memory-limit", type=int, default=0, help="container limit in bytes told to the server")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    if args.memory_limit:
        env["VRAMGATE_MEMORY_LIMIT_BYTES"] = str(args.memory_limit)
    body = body_of(args.names, args.nodes)
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp)
        write_bundle(make_bundle(["127.0.0.1"]), certs)
        port = _free_port()
        proc = subprocess.Popen(
            [str(ROOT / ".venv/bin/vramgate"), "serve", "--role", "extender", "--nodes",
             str(ROOT / "examples/cluster.yaml"), "--host", "127.0.0.1", "--port", str(port),
             "--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key")],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_ready(port, certs / "ca.crt", timeout=60)
            context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
            answers: list[tuple[int, int]] = []

            def post() -> None:
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=300)
                conn.request("POST", "/scheduler/filter", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                answers.append((response.status, len(response.read())))

            print(f"body {len(body) / 1e6:.1f} MB; RSS at start {status_mib(proc.pid, 'VmRSS:'):.0f} MiB")
            post()
            print(f"one: status {answers[0][0]}, answer {answers[0][1] / 1e6:.1f} MB, "
                  f"peak {status_mib(proc.pid, 'VmHWM:'):.0f} MiB")
            answers.clear()
            threads = [threading.Thread(target=post) for _ in range(args.at_once)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            print(f"{args.at_once} at once: statuses {sorted({s for s, _ in answers})}, "
                  f"peak {status_mib(proc.pid, 'VmHWM:'):.0f} MiB")
            time.sleep(5)
            print(f"5 s later: RSS {status_mib(proc.pid, 'VmRSS:'):.0f} MiB")
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
