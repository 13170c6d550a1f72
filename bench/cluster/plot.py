"""Render a bench-cluster results file (bench/out/cluster-*.json) as the PNG in docs/scaling.md.

``.venv/bin/python -m bench.cluster.plot bench/out/cluster-<time>.json docs/img/scaling.png``.
Matplotlib is a bench-only extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

LABELS = {
    "default": "kube-scheduler alone",
    "native": "native (kube-scheduler, pods as vramgate mutates them)",
    "extender-cache": "+ vramgate extender (nodeCacheCapable: true)",
    "extender-filter": "+ vramgate extender, filter only (prioritize: false)",
    "extender-nodelist": "+ vramgate extender (nodeCacheCapable: false)",
}


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.6))
    sched = results["scheduler"]
    for config, label in LABELS.items():
        rows = sorted((r for r in sched if r["config"] == config), key=lambda r: r["nodes"])
        if not rows:
            continue
        xs = [r["nodes"] for r in rows]
        ax1.plot(xs, [r["pods_per_s"] for r in rows], marker="o", label=label)
        ax2.plot(xs, [r["p99_ms"] for r in rows], marker="o", label=f"{label}, p99")
        ax2.plot(xs, [r["p50_ms"] for r in rows], marker=".", linestyle=":", color=ax2.lines[-1].get_color())
    ax1.set(title="Scheduling throughput (backlog)", xlabel="KWOK nodes", ylabel="pods bound / s")
    ax1.set_ylim(bottom=0)
    ax2.set(title="Create → bind latency (paced; dotted: p50)", xlabel="KWOK nodes", ylabel="ms (log)")
    ax2.set_yscale("log")
    adm = results["admission"]
    for kind in ("Pod", "Deployment"):
        for on in (False, True):
            rows = sorted((a for a in adm if a["kind"] == kind and a["webhooks"] is on), key=lambda a: a["nodes"])
            if rows:
                ax3.plot([a["nodes"] for a in rows], [a["p99_ms"] for a in rows], marker="o",
                         linestyle="-" if on else "--", label=f"{kind}, webhooks {'on' if on else 'off'}")
    # A later re-run (merged into the results file by hand as "admission_after", e.g. after a fix).
    for a in results.get("admission_after", []):
        ax3.plot([a["nodes"]], [a["p99_ms"]], marker="*" if a["webhooks"] else "x", markersize=11,
                 linestyle="none", label=f"{a['kind']}, webhooks {'on' if a['webhooks'] else 'off'}, "
                 f"{results.get('after_label', 're-run')}")
    title = "API server create latency p99" + (" (lines: first run)" if results.get("admission_after") else "")
    ax3.set(title=title, xlabel="KWOK nodes", ylabel="ms (log)")
    ax3.set_yscale("log")
    for ax in (ax1, ax2, ax3):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"vramgate in a real control plane with a KWOK fleet ({results['machine']}, {results['started']})",
                 fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    plot(json.loads(Path(args[0]).read_text()), Path(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
