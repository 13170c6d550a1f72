"""`make bench`: every benchmark, one table each — accuracy, CLI, micro, extender, memory, admission under load."""

from __future__ import annotations

import os
import platform
import time

from . import accuracy, admission_bench, cli, extender_bench, micro, request_path, rss


def main() -> None:
    print(f"# vramgate benchmarks — {time.strftime('%Y-%m-%d %H:%M')} — {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}\n")
    print("## Accuracy against published start-up logs (python -m bench.accuracy)\n")
    found, outcomes, _, _ = accuracy.collect()
    print(accuracy.table(found, by_band=False), "\n")
    print(accuracy.outcome_table(outcomes), "\n")
    print("## The CLI as a pre-commit hook runs it: whole processes, start-up included (python -m bench.cli)\n")
    print(cli.table(), "\n")
    print("## Decision core (in-process)\n")
    print(micro.table(), "\n")
    print("## Scheduler extender: server time per call (in-process, raw bytes in → bytes out)\n")
    extender_bench.main([])
    print("\n## The request path: hot routes beside FastAPI's stack (in-process ASGI, CPU per request)\n")
    print(request_path.table(), "\n")
    print("\n## Memory\n")
    print(rss.table(), "\n")
    print("## Admission under load (HTTPS, server pinned to one core, load generator on another)\n")
    results = admission_bench.run(duration=8, rate=500, connections=16)
    print(admission_bench.table(results, 500, 16))


if __name__ == "__main__":
    main()
