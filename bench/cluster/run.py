"""Scale inside the real control plane: a KWOK fleet of GPU nodes, kube-scheduler with and without the
vramgate extender, and API-server create latency with and without vramgate's webhooks.

One run, one machine, one control plane (the e2e harness's etcd + kube-apiserver +
kube-controller-manager), grown 1k → 2k → 5k nodes. At each size:

- **scheduler throughput**, three configurations on the same pods: (a) kube-scheduler alone
  (``default-scheduler``), (b) the chart's second scheduler ``vramgate-scheduler`` with the extender,
  ``nodeCacheCapable: true``, (c) the same with ``false`` (full NodeLists). Each gets a backlog of
  ``--pods`` GPU pods created while it is stopped, then starts: pods/s from its first to its last
  binding. Then, with it running, ``--paced`` pods at ``--rate`` a second: p50/p99 from the create
  request to the binding seen on a watch.
- **admission**: GPU Pods and Deployments created at ``--admission-rate`` a second, client-side
  latency of the POST over a kept-alive connection, without and then with the chart's webhooks.

vramgate (``serve --role all``) runs the whole time, watching the fleet, as it would in a cluster;
the webhooks are registered only for the "with" half of the admission phase, so scheduling is
measured on the same pods for all three configurations. Schedulers run with client QPS/burst 5,000
(see docs/scaling.md: at kube-scheduler's default 50 QPS every configuration is capped at ~50 binds/s).

``.venv/bin/python -m bench.cluster.run [--sizes 1000,2000,5000] [--pods 500]``; results go to
``bench/out/cluster-<time>.json`` and the plot to ``--plot`` (docs/img/scaling.png by ``make bench-cluster``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.cluster import fleet
from bench.cluster.kube import Api, PodWatch, paced, percentile
from tests.e2e.harness import REPO_ROOT, ControlPlane, Process, free_port
from tests.e2e.vramgate_fixture import NAMESPACE, Vramgate

KWOK_VERSION = "v0.8.0"
KWOK_DIR = REPO_ROOT / ".cache" / "kwok" / KWOK_VERSION
BENCH_NS = "bench"
OUT_DIR = REPO_ROOT / "bench" / "out"
CONFIGS = ("default", "extender-cache", "extender-nodelist")
SCHEDULER_QPS = 5000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- processes


def start_kwok(cp: ControlPlane) -> Process:
    """KWOK managing the nodes annotated ``kwok.x-k8s.io/node: fake`` with its module's fast stages."""
    binary = KWOK_DIR / "bin" / "kwok"
    stages = KWOK_DIR / "stages.yaml"
    if not binary.exists() or not stages.exists():
        raise SystemExit(f"kwok missing in {KWOK_DIR}: run bash bench/cluster/build_kwok.sh")
    argv = [
        str(binary), f"--kubeconfig={cp.kubeconfig}", f"--config={stages}",
        "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={fleet.KWOK_ANNOTATION}=fake",
        # No node-lifecycle controller runs (see the e2e harness), so Leases would only be load.
        "--node-lease-duration-seconds=0",
        "--server-address=", "--cidr=100.127.0.1/16", "--node-ip=127.0.0.1",
    ]
    proc = Process("kwok", argv, cp.logs_dir / "kwok.log", cp.tmpdir)
    time.sleep(1.0)
    if not proc.alive():
        raise SystemExit(f"kwok exited at once; see {cp.logs_dir / 'kwok.log'}")
    return proc


@contextlib.contextmanager
def scheduler(cp: ControlPlane, name: str, extenders: list[dict[str, Any]] | None) -> Iterator[Process]:
    """kube-scheduler with one profile ``name`` (and the extenders), started and stopped around the block."""
    cfg = cp.scheduler_config(extenders)
    cfg["profiles"] = [{"schedulerName": name}]
    cfg["clientConnection"].update({"qps": SCHEDULER_QPS, "burst": SCHEDULER_QPS})
    path = cp.tmpdir / f"{name}-config.yaml"
    path.write_text(json.dumps(cfg, indent=2))
    kc = cp.tmpdir / "kube-scheduler.kubeconfig"
    port = free_port()
    argv = [
        str(cp.bin_dir / "kube-scheduler"), f"--config={path}", f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}", "--bind-address=127.0.0.1", f"--secure-port={port}",
        f"--cert-dir={cp.tmpdir / 'scheduler-certs'}", "--v=1",
    ]
    proc = Process(name, argv, cp.logs_dir / f"{name}.log", cp.tmpdir)
    try:
        cp.wait_for(f"{name} ready", lambda: cp._component_healthz(port, "/readyz"), timeout=120)
        yield proc
    finally:
        proc.stop()


# --------------------------------------------------------------------------- results


@dataclass
class SchedResult:
    nodes: int
    config: str
    pods: int
    bound: int
    unschedulable: int
    pods_per_s: float
    paced_rate: float
    paced_bound: int
    p50_ms: float
    p99_ms: float
    create_s: float
    ext_filter_ms: float = float("nan")
    ext_prioritize_ms: float = float("nan")
    ext_calls: int = 0


@dataclass
class AdmissionResult:
    nodes: int
    webhooks: bool
    kind: str
    samples: int
    p50_ms: float
    p99_ms: float
    mean_ms: float


@dataclass
class Results:
    started: str
    machine: str
    sizes: list[int]
    scheduler: list[SchedResult] = field(default_factory=list)
    admission: list[AdmissionResult] = field(default_factory=list)
    fleet_seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- the bench


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cp = ControlPlane()
        self.kwok: Process | None = None
        self.gate: Vramgate | None = None
        self.api: Api
        self.nodes = 0
        self.gpu_nodes = 0
        self.existing = 0

    def __enter__(self) -> Bench:
        t0 = time.monotonic()
        self.cp.start()
        default = self.cp.procs.pop("kube-scheduler")  # the bench starts its own, one at a time
        default.stop()
        self.api = Api(self.cp.ports["apiserver"], self.cp.ssl_context())
        self.kwok = start_kwok(self.cp)
        for ns in (NAMESPACE, BENCH_NS):
            self.api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": ns}})
        self.cp.wait_for("default SA in bench", lambda: self.api.call(
            "GET", f"/api/v1/namespaces/{BENCH_NS}/serviceaccounts/default")[0] == 200, timeout=60)
        self.gate = Vramgate(self.cp)
        self.gate.apply(self.gate.priority_classes())
        self.gate.start(timeout=60)
        log(f"control plane, kwok and vramgate up in {time.monotonic() - t0:.1f}s (logs {self.cp.logs_dir})")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.gate is not None:
            with contextlib.suppress(Exception):
                self.gate.unregister()
            self.gate.stop()
        if self.kwok is not None:
            self.kwok.stop()
        self.cp.stop()

    # ----------------------------------------------------------------- fleet

    def grow(self, size: int) -> float:
        """Create nodes up to ``size`` and the GPU pods already running on a share of them; wait until
        KWOK made every node Ready and vramgate's inventory holds every GPU node."""
        t0 = time.perf_counter()
        new = [fleet.node_object(i) for i in range(self.nodes, size)]
        self.api.create_many(new, lambda o: "/api/v1/nodes", threads=self.args.threads)
        gpu = [n for n in new if fleet.gpu_devices(n)]
        occupied = [n for k, n in enumerate(gpu) if (k * 7919) % 100 < fleet.OCCUPIED_SHARE * 100]
        pods = [fleet.existing_pod(n, self.existing + k) for k, n in enumerate(occupied)]
        self.api.create_many(pods, lambda o: f"/api/v1/namespaces/{BENCH_NS}/pods", threads=self.args.threads)
        self.nodes, self.gpu_nodes, self.existing = size, self.gpu_nodes + len(gpu), self.existing + len(pods)
        created = time.perf_counter() - t0

        def ready_count() -> int:
            _, body, _ = self.api.call("GET", "/api/v1/nodes", query={"labelSelector": "type=kwok"})
            return sum(1 for n in body["items"] for c in n.get("status", {}).get("conditions") or []
                       if c["type"] == "Ready" and c["status"] == "True")

        self.cp.wait_for(f"{size} nodes Ready (KWOK)", lambda: ready_count() == size, timeout=600, interval=2)
        assert self.gate is not None
        self.cp.wait_for(f"vramgate inventory of {self.gpu_nodes} GPU nodes",
                         lambda: len(self.gate.inventory()["nodes"]) == self.gpu_nodes if self.gate else False,
                         timeout=300, interval=2)
        took = time.perf_counter() - t0
        log(f"fleet {size}: {len(new)} nodes + {len(pods)} running GPU pods created in {created:.1f}s, "
            f"Ready and in vramgate's inventory after {took:.1f}s")
        return took

    # ----------------------------------------------------------------- scheduling

    def extenders(self, node_cache: bool) -> list[dict[str, Any]]:
        assert self.gate is not None
        return [{**self.gate.extender(), "nodeCacheCapable": node_cache}]

    def ext_stats(self) -> dict[str, tuple[float, float]]:
        assert self.gate is not None
        m = self.gate.metrics()
        out = {}
        for verb in ("filter", "prioritize"):
            s = sum(v for (n, ls), v in m.items() if n == "vramgate_extender_duration_seconds_sum"
                    and ("verb", verb) in ls)
            c = sum(v for (n, ls), v in m.items() if n == "vramgate_extender_duration_seconds_count"
                    and ("verb", verb) in ls)
            out[verb] = (s, c)
        return out

    def delete_run(self, run: str) -> None:
        self.api.call("DELETE", f"/api/v1/namespaces/{BENCH_NS}/pods",
                      query={"labelSelector": f"{fleet.BENCH_LABEL}={run}", "gracePeriodSeconds": "0"})
        self.cp.wait_for(f"pods of {run} gone", lambda: not self.api.call(
            "GET", f"/api/v1/namespaces/{BENCH_NS}/pods",
            query={"labelSelector": f"{fleet.BENCH_LABEL}={run}", "limit": "1"})[1]["items"], timeout=120)

    def schedule(self, size: int, config: str) -> SchedResult:
        name = "default-scheduler" if config == "default" else "vramgate-scheduler"
        exts = None if config == "default" else self.extenders(config == "extender-cache")
        path = f"/api/v1/namespaces/{BENCH_NS}/pods"
        ctx = self.cp.ssl_context()

        # Backlog: all pods created while no scheduler serves them, then the scheduler starts.
        run = f"n{size}-{config}-bl"
        pods = fleet.bench_pods(self.args.pods, name, run)
        watch = PodWatch(self.cp.ports["apiserver"], ctx, BENCH_NS, f"{fleet.BENCH_LABEL}={run}").start()
        create_s = self.api.create_many(pods, lambda o: path, threads=self.args.threads)
        before = self.ext_stats() if exts else {}
        names = [p["metadata"]["name"] for p in pods]
        with scheduler(self.cp, name, exts):
            self.cp.wait_for(f"{run} settled", lambda: watch.settled(names), timeout=self.args.timeout, interval=0.5)
            watch.stop()
            stamps = sorted(watch.bound.values())
            rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else float("nan")
            after = self.ext_stats() if exts else {}
            bound, unsched = len(watch.bound), len(watch.unschedulable)

            # Paced: the scheduler running, pods arriving at a fixed rate.
            prun = f"n{size}-{config}-pc"
            ppods = fleet.bench_pods(self.args.paced, name, prun, seed=11)
            pwatch = PodWatch(self.cp.ports["apiserver"], ctx, BENCH_NS, f"{fleet.BENCH_LABEL}={prun}").start()
            sent = paced(self.api, ((path, p) for p in ppods), self.args.rate)
            pnames = [p["metadata"]["name"] for p in ppods]
            self.cp.wait_for(f"{prun} settled", lambda: pwatch.settled(pnames), timeout=self.args.timeout,
                             interval=0.5)
            pwatch.stop()
        lat = [(pwatch.bound[n] - t) * 1000 for n, t, _ in sent if n in pwatch.bound]
        res = SchedResult(size, config, len(pods), bound, unsched, rate, self.args.rate, len(lat),
                          percentile(lat, 50), percentile(lat, 99), create_s)
        if exts:
            for verb in ("filter", "prioritize"):
                ds, dc = after[verb][0] - before[verb][0], after[verb][1] - before[verb][1]
                setattr(res, f"ext_{verb}_ms", ds / dc * 1000 if dc else float("nan"))
            res.ext_calls = int(after["filter"][1] - before["filter"][1])
        log(f"  {config:18s} {rate:7.1f} pods/s ({bound} bound, {unsched} unschedulable; backlog created in "
            f"{create_s:.1f}s)  paced {self.args.rate}/s: p50 {res.p50_ms:.0f} ms p99 {res.p99_ms:.0f} ms"
            + (f"  extender filter {res.ext_filter_ms:.2f} ms prioritize {res.ext_prioritize_ms:.2f} ms"
               if exts else ""))
        self.delete_run(run)
        self.delete_run(prun)
        return res

    # ----------------------------------------------------------------- admission

    def webhooks_active(self) -> bool:
        obj = fleet.admission_pod(0, "probe")
        status, body, _ = self.api.call("POST", f"/api/v1/namespaces/{BENCH_NS}/pods", obj, query={"dryRun": "All"})
        return status == 201 and "vramgate.io/estimate" in (body["metadata"].get("annotations") or {})

    def admission(self, size: int) -> list[AdmissionResult]:
        assert self.gate is not None
        out = []
        for webhooks in (False, True):
            if webhooks:
                self.gate.register()
                self.cp.wait_for("webhooks in effect", self.webhooks_active, timeout=30, interval=0.5)
            else:
                self.gate.unregister()
                self.cp.wait_for("webhooks gone", lambda: not self.webhooks_active(), timeout=30, interval=0.5)
            run = f"n{size}-adm-{'on' if webhooks else 'off'}"
            objs: list[tuple[str, dict[str, Any]]] = []
            for i in range(self.args.admission):
                objs.append((f"/api/v1/namespaces/{BENCH_NS}/pods", fleet.admission_pod(i, run)))
                objs.append((f"/apis/apps/v1/namespaces/{BENCH_NS}/deployments", fleet.admission_deployment(i, run)))
            sent = paced(self.api, objs, self.args.admission_rate, threads=4)
            warm = 20  # the first calls open connections (apiserver → webhook TLS)
            for kind, prefix in (("Pod", "/api/"), ("Deployment", "/apis/")):
                names = {o["metadata"]["name"] for p, o in objs if p.startswith(prefix)}
                lat = [took * 1000 for n, t, took in sorted(sent, key=lambda s: s[1]) if n in names][warm:]
                r = AdmissionResult(size, webhooks, kind, len(lat), percentile(lat, 50), percentile(lat, 99),
                                    statistics.fmean(lat))
                out.append(r)
                log(f"  create {kind:10s} webhooks {'on ' if webhooks else 'off'}: p50 {r.p50_ms:.2f} ms "
                    f"p99 {r.p99_ms:.2f} ms ({r.samples} at {self.args.admission_rate / 2:.0f}/s)")
            self.delete_run(run)
            self.api.call("DELETE", f"/apis/apps/v1/namespaces/{BENCH_NS}/deployments",
                          query={"labelSelector": f"{fleet.BENCH_LABEL}={run}"})
        self.gate.unregister()
        return out


# --------------------------------------------------------------------------- report


def table(res: Results) -> str:
    lines = ["", "Scheduler: backlog throughput and paced create→bind latency (same pods, same run)", ""]
    lines.append("| nodes | configuration | pods/s | ÷ default | bound | unschedulable | paced p50 ms | paced p99 ms "
                 "| extender filter ms | extender prioritize ms |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    by = {(r.nodes, r.config): r for r in res.scheduler}
    for r in res.scheduler:
        base = by.get((r.nodes, "default"))
        ratio = r.pods_per_s / base.pods_per_s if base and base.pods_per_s else float("nan")
        ext = (f"{r.ext_filter_ms:.2f} | {r.ext_prioritize_ms:.2f}" if r.config != "default" else "– | –")
        lines.append(f"| {r.nodes:,} | {r.config} | {r.pods_per_s:.1f} | {ratio:.2f} | {r.bound} | {r.unschedulable} "
                     f"| {r.p50_ms:.0f} | {r.p99_ms:.0f} | {ext} |")
    lines += ["", "API server create latency (client side, kept-alive HTTPS, paced)", ""]
    lines.append("| nodes | kind | webhooks | samples | p50 ms | p99 ms | mean ms | p99 added ms |")
    lines.append("|---|---|---|---|---|---|---|---|")
    adm = {(a.nodes, a.kind, a.webhooks): a for a in res.admission}
    for a in res.admission:
        off = adm.get((a.nodes, a.kind, False))
        added = f"{a.p99_ms - off.p99_ms:+.1f}" if a.webhooks and off else "–"
        lines.append(f"| {a.nodes:,} | {a.kind} | {'on' if a.webhooks else 'off'} | {a.samples} | {a.p50_ms:.2f} "
                     f"| {a.p99_ms:.2f} | {a.mean_ms:.2f} | {added} |")
    return "\n".join(lines)


def final_line(res: Results) -> str:
    size = max(res.sizes)
    by = {(r.nodes, r.config): r for r in res.scheduler}
    base, ext = by.get((size, "default")), by.get((size, "extender-cache"))
    ratio = ext.pods_per_s / base.pods_per_s if base and ext and base.pods_per_s else float("nan")
    adm = {(a.nodes, a.kind, a.webhooks): a for a in res.admission}
    on, off = adm.get((size, "Pod", True)), adm.get((size, "Pod", False))
    added = on.p99_ms - off.p99_ms if on and off else float("nan")
    return f"bench-cluster: {size} nodes: extender/default throughput {ratio:.2f}, webhook create p99 {added:+.1f} ms"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,2000,5000", help="fleet sizes, ascending (the fleet grows)")
    p.add_argument("--pods", type=int, default=500, help="backlog pods per configuration")
    p.add_argument("--paced", type=int, default=150, help="paced pods per configuration")
    p.add_argument("--rate", type=float, default=15.0, help="paced pods a second")
    p.add_argument("--admission", type=int, default=200, help="Pods and Deployments each, per webhook state")
    p.add_argument("--admission-rate", type=float, default=40.0, help="creates a second (Pods + Deployments)")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for one configuration's pods to settle")
    p.add_argument("--plot", default="", help="write the PNG plot here")
    p.add_argument("--json", default="", help="results JSON (default bench/out/cluster-<time>.json)")
    args = p.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    res = Results(time.strftime("%Y-%m-%d %H:%M:%S"), f"{os.cpu_count()} CPUs, {os.uname().machine}", sizes)
    out = Path(args.json) if args.json else OUT_DIR / f"cluster-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        out.write_text(json.dumps(asdict(res), indent=2))

    try:
        with Bench(args) as bench:
            for size in sizes:
                res.fleet_seconds[str(size)] = bench.grow(size)
                for config in CONFIGS:
                    res.scheduler.append(bench.schedule(size, config))
                    save()
                res.admission += bench.admission(size)
                save()
    except (Exception, KeyboardInterrupt) as exc:  # report what was measured before the failure
        res.notes.append(f"stopped early: {type(exc).__name__}: {str(exc)[:500]}")
        log(res.notes[-1])
        save()
        if not res.scheduler:
            raise
    print(table(res))
    print(f"\nresults: {out.relative_to(REPO_ROOT) if out.is_relative_to(REPO_ROOT) else out}")
    if args.plot:
        from bench.cluster.plot import plot

        plot(asdict(res), Path(args.plot))
        print(f"plot: {args.plot}")
    print(final_line(res))
    return 0 if not res.notes else 1


if __name__ == "__main__":
    sys.exit(main())
