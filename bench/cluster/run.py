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
  latency of the POST over a kept-alive connection, webhooks off and on in alternating rounds.

vramgate (``serve --role all``, the chart's config) runs the whole time, watching the fleet, as it
would in a cluster; the webhooks are registered only for the "on" rounds of the admission phase, so
scheduling is measured on the same pods for all three configurations. The extender is a second process,
``serve --role extender``, as the chart runs it (the vramgate-scheduler pod's sidecar), so its calls
share a GIL with its own inventory watch only, not with the controller, the audit or the webhooks.
Schedulers run with client QPS/burst 5,000 so that their client rate limiter (default 50 QPS) is not
what is measured.

``.venv/bin/python -m bench.cluster.run [--sizes 1000,2000,5000] [--pods 400] [--profile]``; results go
to ``bench/out/cluster-<time>.json`` and the plot to ``--plot`` (docs/img/scaling.png by
``make bench-cluster``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.cluster import bound, fleet
from bench.cluster.kube import Api, PodWatch, paced, percentile
from tests.chart.render import one
from tests.e2e.harness import REPO_ROOT, ControlPlane, Process, free_port
from tests.e2e.vramgate_fixture import NAMESPACE, Vramgate

KWOK_VERSION = "v0.8.0"
KWOK_DIR = REPO_ROOT / ".cache" / "kwok" / KWOK_VERSION
BENCH_NS = "bench"
OUT_DIR = REPO_ROOT / "bench" / "out"
# default: kube-scheduler alone, pods as written. native: the same scheduler, pods as vramgate's webhooks leave
# them (VRAM affinity, toleration, priority class; what validation rejects is never created): the chart's
# default mode. extender-*: vramgate-scheduler with the extender: node cache on (the chart's), filter only
# (scheduler.extender.prioritize=false: one call per cycle), full NodeLists.
CONFIGS = ("default", "native", "extender-cache", "extender-filter", "extender-nodelist")
# Not run unless asked (--configs): selector, the default pods pinned by hand to the GPU products that hold
# them (fleet.hand_placed: what native costs beside any correct placement); native-plain, native without the
# provisioner terms (admission.provisioner_affinity=false).
EXTRA_CONFIGS = ("selector", "native-plain")
SCHEDULER_QPS = 5000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def until(what: str, ready: Callable[[], bool], timeout: float, interval: float = 0.5) -> None:
    """Poll ``ready()`` until true; its exceptions propagate (unlike the harness's wait_for)."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


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
def scheduler(cp: ControlPlane, name: str, extenders: list[dict[str, Any]] | None) -> Iterator[int]:
    """kube-scheduler with one profile ``name`` (and the extenders), started and stopped around the block;
    yields its secure port (``/metrics`` readable without a token)."""
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
        # /metrics without a token: the bench reads where the scheduling cycle spends its time.
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
    ]
    proc = Process(name, argv, cp.logs_dir / f"{name}.log", cp.tmpdir)
    try:
        cp.wait_for(f"{name} ready", lambda: cp._component_healthz(port, "/readyz"), timeout=120)
        yield port
    finally:
        proc.stop()


# kube-scheduler's own histograms (sum, count) read after a backlog: where its cycle spends the time.
# Filter has no per-cycle histogram (it runs per node); algorithm − PreFilter − PreScore − Score is the
# filter pass plus the extender calls.
SCHED_HISTOGRAMS = {
    "attempt": ("scheduler_scheduling_attempt_duration_seconds", {"result": "scheduled"}),
    "algorithm": ("scheduler_scheduling_algorithm_duration_seconds", {}),
    "prefilter": ("scheduler_framework_extension_point_duration_seconds", {"extension_point": "PreFilter"}),
    "prescore": ("scheduler_framework_extension_point_duration_seconds", {"extension_point": "PreScore"}),
    "score": ("scheduler_framework_extension_point_duration_seconds", {"extension_point": "Score"}),
}


def scheduler_metrics(port: int) -> dict[str, tuple[float, float]]:
    """(sum seconds, count) of each SCHED_HISTOGRAMS entry from kube-scheduler's /metrics (empty on failure)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=10) as resp:
            text = resp.read().decode()
    except OSError as exc:
        log(f"  kube-scheduler /metrics unreadable: {exc}")
        return {}
    return parse_scheduler_metrics(text)


def histogram_totals(text: str, keys_of: Callable[[str, dict[str, str]], Iterable[str]],
                     keys: Iterable[str] = ()) -> dict[str, tuple[float, float]]:
    """(sum seconds, count) per key of the histograms in a Prometheus text exposition; ``keys_of(histogram name,
    labels)`` names the keys a series counts toward (``keys`` start at zero even when nothing counts)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, list[float]] = {k: [0.0, 0.0] for k in keys}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for suffix, slot in (("_sum", 0), ("_count", 1)):
                if sample.name.endswith(suffix):
                    for key in keys_of(sample.name.removesuffix(suffix), sample.labels):
                        totals.setdefault(key, [0.0, 0.0])[slot] += sample.value
    return {k: (v[0], v[1]) for k, v in totals.items()}


def parse_scheduler_metrics(text: str) -> dict[str, tuple[float, float]]:
    """(sum seconds, count) of each SCHED_HISTOGRAMS entry in a Prometheus text exposition."""

    def keys_of(histogram: str, labels: dict[str, str]) -> Iterable[str]:
        return [key for key, (name, want) in SCHED_HISTOGRAMS.items()
                if histogram == name and all(labels.get(k) == v for k, v in want.items())]

    return histogram_totals(text, keys_of, SCHED_HISTOGRAMS)


WEBHOOK_HISTOGRAM = "apiserver_admission_webhook_admission_duration_seconds"


def webhook_call_stats(text: str) -> dict[str, tuple[float, float]]:
    """(sum seconds, count) per webhook name of kube-apiserver's webhook call histogram (admit and validate)."""
    return histogram_totals(text, lambda histogram, labels: (
        [labels.get("name", "")] if histogram == WEBHOOK_HISTOGRAM else []))


def per_cycle_ms(stats: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Mean ms per scheduled attempt of each part, and the filter pass + extenders as the remainder."""
    cycles = stats.get("algorithm", (0.0, 0.0))[1]
    if not cycles:
        return {}
    out = {k: s / cycles * 1000 for k, (s, _) in stats.items() if k != "attempt"}
    attempts = stats.get("attempt", (0.0, 0.0))
    out["attempt"] = attempts[0] / attempts[1] * 1000 if attempts[1] else float("nan")
    out["filter+extenders"] = out["algorithm"] - out["prefilter"] - out["prescore"] - out["score"]
    return out


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
    load: float = float("nan")
    # kube-scheduler's mean ms per cycle in the backlog: attempt, algorithm, prefilter, prescore, score,
    # filter+extenders (see SCHED_HISTOGRAMS).
    cycle_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class AdmissionResult:
    nodes: int
    webhooks: bool
    kind: str
    samples: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    review_ms: float = float("nan")  # vramgate's own mean time per AdmissionReview (its metrics)
    review_cpu_ms: float = float("nan")  # vramgate's CPU time in the round ÷ reviews (watches included)
    load: float = float("nan")  # the machine's 1-minute load average as the phase started
    # kube-apiserver's own mean ms per call of each vramgate webhook (round trip as the API server times it)
    webhook_call_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class Results:
    started: str
    machine: str
    sizes: list[int]
    scheduler: list[SchedResult] = field(default_factory=list)
    admission: list[AdmissionResult] = field(default_factory=list)
    fleet_seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    profiles: dict[str, dict[str, float]] = field(default_factory=dict)
    # size → nodes kube-scheduler's filter pass visits per pod (bench/cluster/bound.py): as written, placed, ratio
    bounds: dict[str, dict[str, float]] = field(default_factory=dict)


# --------------------------------------------------------------------------- the bench



def own_metrics_port(config: dict[str, Any], gate: Vramgate) -> dict[str, Any]:
    """The chart's config with this process's own metrics port (two processes on one host), read without a token:
    the bench reads /inventory and /metrics between runs, never while it measures."""
    server = {**config.get("server", {}), "metrics_port": gate.metrics_port, "metrics_auth": False}
    return {**config, "server": server}

class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cp = ControlPlane()
        self.kwok: Process | None = None
        self.gate: Vramgate | None = None
        self.ext: Vramgate | None = None  # the extender sidecar's process (--role extender)
        self.api: Api
        self.nodes = 0
        self.gpu_nodes = 0
        self.existing = 0
        self.profiles: dict[str, dict[str, float]] = {}
        self.node_objects: list[dict[str, Any]] = []
        self.used: dict[str, int] = {}  # GPUs the already-running pods take, per node

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
        # The chart's config as shipped: the e2e fixture's fast test timings (a controller reconcile
        # every 0.2 s) would be load that a real install does not have.
        config = yaml.safe_load(one(self.gate.chart, "ConfigMap", "vramgate-config")["data"]["config.yaml"])
        config.get("admission", {}).pop("scheduler_name", None)
        self.gate.config = own_metrics_port(config, self.gate)
        self.gate.config_path.write_text(yaml.safe_dump(self.gate.config))
        self.gate.apply(self.gate.priority_classes())
        self.gate.start(timeout=60)
        self.ext = Vramgate(self.cp, role="extender")
        self.ext.config = own_metrics_port(config, self.ext)
        self.ext.config_path.write_text(yaml.safe_dump(self.ext.config))
        self.ext.start(timeout=60)
        log(f"control plane, kwok and vramgate up in {time.monotonic() - t0:.1f}s (logs {self.cp.logs_dir})")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.ext is not None:
            self.ext.stop()
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
        self.node_objects += new
        self.api.create_many(new, lambda o: "/api/v1/nodes", threads=self.args.threads)
        gpu = [n for n in new if "nvidia.com/gpu" in n["status"]["capacity"]]
        occupied = [n for k, n in enumerate(gpu)
                    if fleet.gpu_devices(n) and (k * 7919) % 100 < fleet.OCCUPIED_SHARE * 100]
        pods = [fleet.existing_pod(n, self.existing + k) for k, n in enumerate(occupied)]
        for pod in pods:
            gpus = pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]
            self.used[pod["spec"]["nodeName"]] = int(gpus)
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
        ext = self.ext
        if ext is not None:
            self.cp.wait_for(f"the extender's inventory of {self.gpu_nodes} GPU nodes",
                             lambda: len(ext.inventory()["nodes"]) == self.gpu_nodes, timeout=300, interval=2)
        # The controller labels every new GPU node (health, memory): thousands of Node updates the scheduler
        # must digest. Measuring during that burst slows whichever configuration runs first after a growth.
        def labelled() -> int:
            _, body, _ = self.api.call("GET", "/api/v1/nodes",
                                       query={"labelSelector": "type=kwok,vramgate.io/gpu-health"})
            return len(body["items"])

        self.cp.wait_for(f"the controller's labels on {self.gpu_nodes} GPU nodes", lambda: labelled() >= self.gpu_nodes,
                         timeout=600, interval=2)
        time.sleep(5)  # let the scheduler's informers catch up with the last updates
        took = time.perf_counter() - t0
        log(f"fleet {size}: {len(new)} nodes + {len(pods)} running GPU pods created in {created:.1f}s, "
            f"Ready and in vramgate's inventory after {took:.1f}s")
        return took

    # ----------------------------------------------------------------- scheduling

    def extenders(self, node_cache: bool, prioritize: bool = True) -> list[dict[str, Any]]:
        assert self.ext is not None
        entry = {**self.ext.extender(), "nodeCacheCapable": node_cache}
        if not prioritize:
            entry = {k: v for k, v in entry.items() if k not in ("prioritizeVerb", "weight")}
        return [entry]

    def ext_stats(self) -> dict[str, tuple[float, float]]:
        assert self.ext is not None
        m = self.ext.metrics()
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

    def shaped(self, config: str, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The pods as ``config`` creates them."""
        if config == "selector":
            return [fleet.hand_placed(p) for p in pods]
        if config.startswith("native"):
            return self.admitted(pods, provisioner=config == "native")
        return pods

    def admitted(self, pods: list[dict[str, Any]], provisioner: bool = True) -> list[dict[str, Any]]:
        """The pods as the webhooks leave them in native mode: mutated, and the rejected ones never created.

        Judged in-process with the webhook's own functions against this fleet (what /validate and /mutate
        answer), so the scheduling phase measures the scheduler, not the webhook's latency (the admission
        phase measures that)."""
        import jsonpatch

        from webhook.cluster.snapshot import snapshot_from_nodes
        from webhook.config import Config
        from webhook.decide.mutation import mutation
        from webhook.decide.verdict import judge
        from webhook.models.catalog import builtin_catalog

        assert self.gate is not None
        cfg = Config.model_validate(self.gate.config)
        if not provisioner:
            cfg = cfg.model_copy(update={"admission": cfg.admission.model_copy(update={"provisioner_affinity": False})})
        snap = snapshot_from_nodes(self.node_objects, cfg)
        catalog = builtin_catalog()
        out = []
        for pod in pods:
            pod = {**pod, "metadata": {**pod["metadata"], "namespace": BENCH_NS}}
            verdict = judge(pod, snap, cfg, catalog, namespace=BENCH_NS)
            if verdict.allowed:
                ops, _ = mutation(pod, verdict, cfg)
                out.append(jsonpatch.apply_patch(pod, ops) if ops else pod)
        return out

    def schedule(self, size: int, config: str) -> SchedResult:
        name = "vramgate-scheduler" if config.startswith("extender") else "default-scheduler"
        exts = (self.extenders(config != "extender-nodelist", prioritize=config != "extender-filter")
                if config.startswith("extender") else None)
        path = f"/api/v1/namespaces/{BENCH_NS}/pods"
        ctx = self.cp.ssl_context()

        # Backlog: all pods created while no scheduler serves them, then the scheduler starts.
        run = f"n{size}-{config}-bl"
        count = min(self.args.pods, self.args.nodelist_pods) if config == "extender-nodelist" else self.args.pods
        pods = fleet.bench_pods(count, name, run)
        pods = self.shaped(config, pods)
        watch = PodWatch(self.cp.ports["apiserver"], ctx, BENCH_NS, f"{fleet.BENCH_LABEL}={run}").start()
        create_s = self.api.create_many(pods, lambda o: path, threads=self.args.threads)
        before = self.ext_stats() if exts else {}
        names = [p["metadata"]["name"] for p in pods]
        prof = self.start_profile(size, config)
        load = os.getloadavg()[0]
        with scheduler(self.cp, name, exts) as sched_port:
            until(f"{run} settled", lambda: watch.settled(names), self.args.timeout)
            watch.stop()
            cycle = per_cycle_ms(scheduler_metrics(sched_port))
            self.stop_profile(prof, size, config)
            stamps = sorted(watch.bound.values())
            rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else float("nan")
            after = self.ext_stats() if exts else {}
            bound, unsched = len(watch.bound), len(watch.unschedulable)

            # Paced: the scheduler running, pods arriving at a fixed rate.
            prun = f"n{size}-{config}-pc"
            ppods = fleet.bench_pods(self.args.paced, name, prun, seed=11)
            ppods = self.shaped(config, ppods)
            pwatch = PodWatch(self.cp.ports["apiserver"], ctx, BENCH_NS, f"{fleet.BENCH_LABEL}={prun}").start()
            sent = paced(self.api, ((path, p) for p in ppods), self.args.rate)
            pnames = [p["metadata"]["name"] for p in ppods]
            until(f"{prun} settled", lambda: pwatch.settled(pnames), self.args.timeout)
            pwatch.stop()
        lat = [(pwatch.bound[n] - t) * 1000 for _, n, t, _ in sent if n in pwatch.bound]
        res = SchedResult(size, config, len(pods), bound, unsched, rate, self.args.rate, len(lat),
                          percentile(lat, 50), percentile(lat, 99), create_s, load=load, cycle_ms=cycle)
        if exts:
            for verb in ("filter", "prioritize"):
                ds, dc = after[verb][0] - before[verb][0], after[verb][1] - before[verb][1]
                setattr(res, f"ext_{verb}_ms", ds / dc * 1000 if dc else float("nan"))
            res.ext_calls = int(after["filter"][1] - before["filter"][1])
        log(f"  {config:18s} {rate:7.1f} pods/s ({bound} bound, {unsched} unschedulable; backlog created in "
            f"{create_s:.1f}s)  paced {self.args.rate}/s: p50 {res.p50_ms:.0f} ms p99 {res.p99_ms:.0f} ms"
            + (f"  extender filter {res.ext_filter_ms:.2f} ms prioritize {res.ext_prioritize_ms:.2f} ms"
               if exts else "") + f" (load average {load:.1f})"
            + (f"\n    kube-scheduler per cycle: attempt {cycle['attempt']:.2f} ms, algorithm {cycle['algorithm']:.2f}"
               f" (filter+extenders {cycle['filter+extenders']:.2f}, score {cycle['score']:.2f})" if cycle else ""))
        self.delete_run(run)
        self.delete_run(prun)
        return res

    # ----------------------------------------------------------------- profile

    def start_profile(self, size: int, config: str) -> subprocess.Popen[bytes] | None:
        """py-spy on vramgate while an extender configuration drains its backlog (``--profile``)."""
        spy = REPO_ROOT / ".venv" / "bin" / "py-spy"
        target = self.ext if config.startswith("extender") else self.gate
        if not self.args.profile or config == "default" or target is None or target.proc is None:
            return None
        if not spy.exists():
            log("  --profile: py-spy not installed (pip install -e '.[bench]')")
            return None
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        path = OUT_DIR / f"profile-n{size}-{config}.txt"
        # --gil: only what holds the GIL, i.e. what the event loop waits behind.
        return subprocess.Popen([str(spy), "record", "-r", "200", "-f", "raw", "-o", str(path), "--nonblocking",
                                 "--gil", "--threads", "--pid", str(target.proc.popen.pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop_profile(self, prof: subprocess.Popen[bytes] | None, size: int, config: str) -> None:
        if prof is None:
            return
        prof.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            prof.wait(60)
        path = OUT_DIR / f"profile-n{size}-{config}.txt"
        if path.exists():
            top = summarize_profile(path.read_text())
            self.profiles[f"{size}/{config}"] = top
            log(f"  profile of vramgate ({path.name}), inclusive share of samples: "
                + ", ".join(f"{k} {v:.0%}" for k, v in list(top.items())[:8]))

    # ----------------------------------------------------------------- admission

    def webhooks_active(self) -> bool:
        obj = fleet.admission_pod(0, "probe")
        status, body, _ = self.api.call("POST", f"/api/v1/namespaces/{BENCH_NS}/pods", obj, query={"dryRun": "All"})
        return status == 201 and "vramgate.io/estimate" in (body["metadata"].get("annotations") or {})

    def cpu_seconds(self) -> float:
        """CPU seconds vramgate's process has used (user + system), immune to a busy machine."""
        assert self.gate is not None and self.gate.proc is not None
        fields = Path(f"/proc/{self.gate.proc.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def admission_seconds(self) -> tuple[float, float]:
        """vramgate's own time answering AdmissionReviews so far: (seconds, reviews), all webhooks."""
        assert self.gate is not None
        m = self.gate.metrics()
        s = sum(v for (n, _), v in m.items() if n == "vramgate_admission_duration_seconds_sum")
        c = sum(v for (n, _), v in m.items() if n == "vramgate_admission_duration_seconds_count")
        return s, c

    def webhook_calls(self) -> dict[str, tuple[float, float]]:
        """kube-apiserver's webhook call histogram so far (empty when /metrics is unreadable)."""
        status, text, _ = self.api.call("GET", "/metrics")
        return webhook_call_stats(text) if status == 200 and isinstance(text, str) else {}

    def admission(self, size: int) -> list[AdmissionResult]:
        """Creates at a fixed rate, webhooks off and on in alternating rounds (the machine's drift hits
        both alike); the first creates of each round are dropped (connections being opened)."""
        assert self.gate is not None
        lat: dict[tuple[str, bool], list[float]] = {}
        server: dict[bool, list[float]] = {False: [0.0, 0.0, 0.0], True: [0.0, 0.0, 0.0]}
        calls: dict[str, list[float]] = {}  # webhook name → [seconds, calls] over the rounds with webhooks on
        load = os.getloadavg()[0]
        kinds = {"/api/v1/namespaces/bench/pods": "Pod", "/apis/apps/v1/namespaces/bench/deployments": "Deployment"}
        per_round = max(1, self.args.admission // self.args.admission_rounds)
        for rnd in range(self.args.admission_rounds):
            for webhooks in (False, True):
                if webhooks:
                    self.gate.register()
                    self.cp.wait_for("webhooks in effect", self.webhooks_active, timeout=30, interval=0.5)
                else:
                    self.gate.unregister()
                    self.cp.wait_for("webhooks gone", lambda: not self.webhooks_active(), timeout=30, interval=0.5)
                run = f"n{size}-adm{rnd}-{'on' if webhooks else 'off'}"
                objs: list[tuple[str, dict[str, Any]]] = []
                for i in range(per_round):
                    objs.append(("/api/v1/namespaces/bench/pods", fleet.admission_pod(i, run)))
                    objs.append(("/apis/apps/v1/namespaces/bench/deployments", fleet.admission_deployment(i, run)))
                s0, c0 = self.admission_seconds()
                cpu0 = self.cpu_seconds()
                w0 = self.webhook_calls() if webhooks else {}
                prof = self.start_profile(size, f"admission{rnd}") if webhooks and rnd == 0 else None
                sent = sorted(paced(self.api, objs, self.args.admission_rate, threads=8), key=lambda x: x[2])
                self.stop_profile(prof, size, f"admission{rnd}")
                s1, c1 = self.admission_seconds()
                server[webhooks][0] += s1 - s0
                server[webhooks][1] += c1 - c0
                server[webhooks][2] += self.cpu_seconds() - cpu0
                for name, (w_s, w_c) in (self.webhook_calls() if webhooks else {}).items():
                    before = w0.get(name, (0.0, 0.0))
                    acc = calls.setdefault(name, [0.0, 0.0])
                    acc[0] += w_s - before[0]
                    acc[1] += w_c - before[1]
                for path, kind in kinds.items():
                    lat.setdefault((kind, webhooks), []).extend(
                        [took * 1000 for p, _, _, took in sent if p == path][10:])
                self.delete_run(run)
                self.api.call("DELETE", "/apis/apps/v1/namespaces/bench/deployments",
                              query={"labelSelector": f"{fleet.BENCH_LABEL}={run}"})
        self.gate.unregister()
        out = []
        for (kind, webhooks), values in lat.items():
            s, c, cpu = server[webhooks]
            r = AdmissionResult(size, webhooks, kind, len(values), percentile(values, 50), percentile(values, 99),
                                statistics.fmean(values), s / c * 1000 if c else float("nan"),
                                cpu / c * 1000 if c else float("nan"), load)
            if webhooks:
                r.webhook_call_ms = {name: w_s / w_c * 1000 for name, (w_s, w_c) in calls.items() if w_c}
            out.append(r)
            log(f"  create {kind:10s} webhooks {'on ' if webhooks else 'off'}: p50 {r.p50_ms:.2f} ms "
                f"p99 {r.p99_ms:.2f} ms ({r.samples} at {self.args.admission_rate / 2:.0f}/s)"
                + (f"; vramgate answers a review in {r.review_ms:.2f} ms wall, {r.review_cpu_ms:.2f} ms CPU"
                   if webhooks else "") + f" (load average {load:.1f})")
        if calls:
            log("  kube-apiserver times each webhook call at " + ", ".join(
                f"{name} {w_s / w_c * 1000:.2f} ms" for name, (w_s, w_c) in sorted(calls.items()) if w_c)
                + " (apiserver_admission_webhook_admission_duration_seconds)")
        return out


# --------------------------------------------------------------------------- report


#: Where vramgate's time goes: the share of py-spy samples whose stack passes through each (inclusive;
#: a sample can count in several). uvicorn's event loop is under every request, so HTTP is split out
#: as what costs: the response write (TLS encryption included) and the request parsing.
PROFILE_BUCKETS = {
    "extender decision (extender/decide.py)": ("webhook/serve/extender/decide.py",),
    "ExtenderArgs decode (wire.parse_args)": ("parse_args (",),
    "admission decision (admission/)": ("webhook/serve/admission/",),
    "inventory watch thread (nodecache)": ("KubeInventory._run (",),
    "response write (uvicorn send, TLS)": ("RequestResponseCycle.send (",),
    "request read (httptools, body)": ("HttpToolsProtocol.", "read_body ("),
    "controller + leader": ("webhook/controller/", "webhook/kube/leader.py"),
    "metrics": ("prometheus_client/",),
}


def summarize_profile(raw: str) -> dict[str, float]:
    """Inclusive share of py-spy samples (``-f raw`` folded stacks) whose stack touches each bucket."""
    total = 0
    hits = dict.fromkeys(PROFILE_BUCKETS, 0)
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        for bucket, needles in PROFILE_BUCKETS.items():
            if any(needle in f for f in frames for needle in needles):
                hits[bucket] += n
    return {k: v / total for k, v in hits.items()} if total else {}


def table(res: Results) -> str:
    lines = ["", "Scheduler: backlog throughput and paced create→bind latency (same pods, same run)", ""]
    lines.append("| nodes | configuration | pods/s | ÷ default | bound | unschedulable | paced p50 ms | paced p99 ms "
                 "| extender filter ms | extender prioritize ms | scheduler cycle ms: algorithm (filter+extenders) "
                 "| load avg |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    by = {(r.nodes, r.config): r for r in res.scheduler}
    for r in res.scheduler:
        base = by.get((r.nodes, "default"))
        ratio = r.pods_per_s / base.pods_per_s if base and base.pods_per_s else float("nan")
        ext = (f"{r.ext_filter_ms:.2f} | {r.ext_prioritize_ms:.2f}" if r.config.startswith("extender") else "– | –")
        cyc = (f"{r.cycle_ms['algorithm']:.2f} ({r.cycle_ms['filter+extenders']:.2f})" if r.cycle_ms else "–")
        lines.append(f"| {r.nodes:,} | {r.config} | {r.pods_per_s:.1f} | {ratio:.2f} | {r.bound} | {r.unschedulable} "
                     f"| {r.p50_ms:.0f} | {r.p99_ms:.0f} | {ext} | {cyc} | {r.load:.1f} |")
    for size, b in sorted(res.bounds.items(), key=lambda kv: int(kv[0])):
        lines += ["", filter_pass_line(res, int(size), b)]
    lines += ["", "API server create latency (client side, kept-alive HTTPS, paced)", ""]
    lines.append("| nodes | kind | webhooks | samples | p50 ms | p99 ms | mean ms | p99 added ms "
                 "| vramgate ms per review (wall / CPU) | load avg |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    adm = {(a.nodes, a.kind, a.webhooks): a for a in res.admission}
    for a in res.admission:
        off = adm.get((a.nodes, a.kind, False))
        added = f"{a.p99_ms - off.p99_ms:+.1f}" if a.webhooks and off else "–"
        review = f"{a.review_ms:.2f} / {a.review_cpu_ms:.2f}" if a.webhooks else "–"
        lines.append(f"| {a.nodes:,} | {a.kind} | {'on' if a.webhooks else 'off'} | {a.samples} | {a.p50_ms:.2f} "
                     f"| {a.p99_ms:.2f} | {a.mean_ms:.2f} | {added} | {review} | {a.load:.1f} |")
    return "\n".join(lines)


def filter_pass_line(res: Results, size: int, b: dict[str, float]) -> str:
    """What kube-scheduler's filter pass must visit for correctly placed pods, beside what it measured."""
    line = (f"{size:,} nodes: kube-scheduler's filter pass visits {b['as_written']:.0f} nodes per pod as written, "
            f"{b['placed']:.0f} for any correct placement (x{b['ratio']:.2f}, bench/cluster/bound.py)")
    cycles = {r.config: r.cycle_ms for r in res.scheduler if r.nodes == size and r.cycle_ms}
    base = cycles.get("default", {}).get("filter+extenders")
    for config in ("native", "selector"):
        ms = cycles.get(config, {}).get("filter+extenders")
        if base and ms:
            line += f"; measured {config} x{ms / base:.2f} ({ms:.2f} vs {base:.2f} ms a cycle)"
    return line


def final_line(res: Results) -> str:
    size = max(res.sizes)
    by = {(r.nodes, r.config): r for r in res.scheduler}
    base, ext, native = by.get((size, "default")), by.get((size, "extender-cache")), by.get((size, "native"))
    ratio = ext.pods_per_s / base.pods_per_s if base and ext and base.pods_per_s else float("nan")
    native_ratio = native.pods_per_s / base.pods_per_s if base and native and base.pods_per_s else float("nan")
    adm = {(a.nodes, a.kind, a.webhooks): a for a in res.admission}
    on, off = adm.get((size, "Pod", True)), adm.get((size, "Pod", False))
    added = on.p99_ms - off.p99_ms if on and off else float("nan")
    return (f"bench-cluster: {size} nodes: native/default throughput {native_ratio:.2f}, "
            f"extender/default throughput {ratio:.2f}, webhook create p99 {added:+.1f} ms")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)  # stop the control plane, KWOK and vramgate on the way out
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,2000,5000", help="fleet sizes, ascending (the fleet grows)")
    p.add_argument("--pods", type=int, default=400, help="backlog pods per configuration")
    p.add_argument("--nodelist-pods", type=int, default=150,
                   help="backlog pods for nodeCacheCapable: false (it binds a few pods a second at scale)")
    p.add_argument("--paced", type=int, default=150, help="paced pods per configuration")
    p.add_argument("--rate", type=float, default=15.0, help="paced pods a second")
    p.add_argument("--admission", type=int, default=300, help="Pods and Deployments each, per webhook state")
    p.add_argument("--admission-rounds", type=int, default=3, help="alternating off/on rounds")
    p.add_argument("--admission-rate", type=float, default=40.0, help="creates a second (Pods + Deployments)")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--profile", action="store_true", help="py-spy vramgate during the extender backlogs")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for one configuration's pods to settle")
    p.add_argument("--phases", default="scheduler,admission", help="which phases to run")
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help=f"scheduler configurations, in order (also: {', '.join(EXTRA_CONFIGS)})")
    p.add_argument("--plot", default="", help="write the PNG plot here")
    p.add_argument("--json", default="", help="results JSON (default bench/out/cluster-<time>.json)")
    args = p.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    phases = set(args.phases.split(","))
    res = Results(time.strftime("%Y-%m-%d %H:%M:%S"), f"{os.cpu_count()} CPUs, {os.uname().machine}", sizes)
    out = Path(args.json) if args.json else OUT_DIR / f"cluster-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        out.write_text(json.dumps(asdict(res), indent=2))

    try:
        with Bench(args) as bench:
            for size in sizes:
                res.fleet_seconds[str(size)] = bench.grow(size)
                b = bound.scan(bench.node_objects, bench.used)
                res.bounds[str(size)] = {"as_written": b.as_written, "placed": b.placed, "ratio": b.ratio}
                log(f"  filter pass, nodes visited per pod (from the fleet): {b.as_written:.0f} as written, "
                    f"{b.placed:.0f} placed on GPUs that hold them (x{b.ratio:.2f}, any correct placement)")
                for config in args.configs.split(",") if "scheduler" in phases else ():
                    res.scheduler.append(bench.schedule(size, config))
                    save()
                if "admission" in phases:
                    res.admission += bench.admission(size)
                res.profiles = bench.profiles
                save()
    except (Exception, KeyboardInterrupt) as exc:  # report what was measured before the failure
        res.notes.append(f"stopped early: {type(exc).__name__}: {str(exc)[:500]}")
        log(res.notes[-1])
        save()
        if not res.scheduler and not res.admission:
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
