"""A real worker node on this machine for the e2e control plane: containerd, kubelet, kube-proxy, bridge CNI.

Everything stays on this machine. kube-apiserver binds to :data:`ADDRESS` on an interface
of our own (``vgate0``, one end of a veth pair), so pods reach it through the ``kubernetes`` Service without any route
off the host. Pods sit on the bridge :data:`BRIDGE` (host-local IPAM, ``ipMasq: false``); the host
keeps ``net.ipv4.ip_forward`` as it found it, so nothing a pod sends is forwarded anywhere.

Teardown leaves the machine as found: pods removed through the CRI (crictl), every process ended
by PID (the shims by their containerd address), mounts under the work directory unmounted,
network namespaces, the bridge and the veth pair deleted, kube-proxy's and kubelet's
iptables chains removed (``kube-proxy --cleanup`` then a check against the rules saved before
the start), kubelet's cgroups and the sysctls it changes restored. :func:`preflight` refuses to
start, with the reason, where the host cannot run a node.

Versions: containerd/runc/CNI plugins from Debian (``make node-deps``); kubelet, kube-proxy and
crictl built by ``tests/e2e/build.sh``; images by ``tests/e2e/node/build_images.sh``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.harness import (
    REPO_ROOT,
    ControlPlane,
    HarnessError,
    Process,
    free_port,
    issue_client_cert,
    tail,
    write_kubeconfig,
)

#: The API server's address: on an interface of ours, reachable from pods, not from outside.
ADDRESS = "10.250.0.1"
HOST_IF = "vgate0"
HOST_IF_PEER = "vgate1"
BRIDGE = "vgbr0"
POD_CIDR = "10.244.0.0/24"
NODE_NAME = "e2e-node"
CNI_NAME = "vramgate-e2e"
CNI_BIN = Path("/usr/lib/cni")
IMAGES_DIR = REPO_ROOT / ".cache" / "images"
CRI_NAMESPACE = "k8s.io"

#: Sysctls kubelet sets at start (kubelet/cm container_manager_linux.go setupKernelTunables) and
#: kube-proxy may set; restored on teardown.
GUARDED_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/ipv4/ip_forward",
)
#: Host paths kubelet, containerd and the CNI plugins use whatever their configuration says.
HOST_PATHS = (Path("/var/log/containers"), Path("/var/lib/cni"), Path("/run/netns"), Path("/run/containerd"))


class NodeUnavailable(RuntimeError):
    """This host cannot run the real node (the message says why and what to install)."""


def _run(*argv: str, check: bool = True, timeout: float = 60.0, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=timeout, **kw)


def images_env() -> dict[str, str]:
    """Image references written by build_images.sh (``PAUSE_REF``, ``SCHEDULER_REF``, ``VRAMGATE_REF``)."""
    path = IMAGES_DIR / "images.env"
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        k, _, v = line.partition("=")
        if k and v:
            out[k.strip()] = v.strip()
    return out


def preflight(bin_dir: Path) -> list[str]:
    """Why this host cannot run the node (empty when it can)."""
    problems: list[str] = []
    if os.geteuid() != 0:
        problems.append("must run as root (containerd, kubelet and network setup need it)")
    for cmd in ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "iptables", "iptables-save", "nft"):
        if shutil.which(cmd) is None:
            problems.append(f"'{cmd}' not on PATH (make node-deps installs containerd, runc, iptables)")
    for plugin in ("bridge", "host-local", "loopback"):
        if not (CNI_BIN / plugin).is_file():
            problems.append(f"CNI plugin {CNI_BIN / plugin} missing (apt-get install containernetworking-plugins)")
    for b in ("kubelet", "kube-proxy", "crictl"):
        if not os.access(bin_dir / b, os.X_OK):
            problems.append(f"{bin_dir / b} missing (bash tests/e2e/build.sh)")
    for f in ("images.env", "pause.tar", "kube-scheduler.tar", "vramgate.tar"):
        if not (IMAGES_DIR / f).is_file():
            problems.append(f"{IMAGES_DIR / f} missing (bash tests/e2e/node/build_images.sh)")
    if not Path("/sys/fs/cgroup/memory").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").is_file():
        problems.append("no memory cgroup controller under /sys/fs/cgroup")
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        problems.append(
            f"interface {BRIDGE} already exists (a node suite running, or left by a killed one: `ip link del {BRIDGE}`)"
        )
    return problems


# --------------------------------------------------------------------------- host state


def _iptables_rules(cmd: str) -> list[str]:
    """The host's rules without counters, comments or kube chains' order noise."""
    try:
        out = _run(cmd, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [
        re.sub(r"\[\d+:\d+\]", "", line).strip()
        for line in out.splitlines()
        if line and not line.startswith("#")
    ]


@dataclass
class HostState:
    """What the node changes on the host, saved before it starts so teardown can restore it."""

    sysctls: dict[str, str] = field(default_factory=dict)
    rules: dict[str, list[str]] = field(default_factory=dict)
    paths: dict[Path, bool] = field(default_factory=dict)
    netns: set[str] = field(default_factory=set)
    cgroups: set[Path] = field(default_factory=set)
    nft_tables: set[str] = field(default_factory=set)

    @classmethod
    def save(cls) -> HostState:
        s = cls()
        for key in GUARDED_SYSCTLS:
            with contextlib.suppress(OSError):
                s.sysctls[key] = (Path("/proc/sys") / key).read_text().strip()
        for cmd in ("iptables-save", "ip6tables-save"):
            s.rules[cmd] = _iptables_rules(cmd)
        s.paths = {p: p.exists() for p in HOST_PATHS}
        s.netns = _netns()
        s.cgroups = set(_kubepods_cgroups())
        s.nft_tables = _nft_tables()
        return s

    def restore(self) -> list[str]:
        """Put back what changed; returns what could not be restored."""
        left: list[str] = []
        for ns in _netns() - self.netns:
            path = Path("/run/netns") / ns
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
            with contextlib.suppress(OSError):
                path.unlink()
        for cg in sorted(set(_kubepods_cgroups()) - self.cgroups, key=lambda p: len(p.parts), reverse=True):
            _rmdir_tree(cg)
        for key, value in self.sysctls.items():
            path = Path("/proc/sys") / key
            with contextlib.suppress(OSError):
                if path.read_text().strip() != value:
                    path.write_text(value)
        _delete_kube_chains()
        # iptables-nft creates a table (ip filter, ip6 nat, ...) on first use; the ones this run
        # created are empty now and go, so the host's ruleset is byte-for-byte what it was.
        for table in _nft_tables() - self.nft_tables:
            _run("nft", "delete", "table", *table.split(), check=False)
        for cmd, before in self.rules.items():
            after = _iptables_rules(cmd)
            if sorted(after) != sorted(before):
                extra = sorted(set(after) - set(before))
                left.append(f"{cmd}: rules differ from before the node started: {extra[:5]}")
        for p, existed in self.paths.items():
            if not existed and p.exists():
                if p == Path("/var/log/containers"):
                    for link in p.glob("*"):
                        if link.is_symlink():
                            link.unlink()
                _rmdir_tree(p, only_empty=p != Path("/var/lib/cni"))
                if p.exists():
                    left.append(f"{p} did not exist before and could not be removed")
        return left


def _nft_tables() -> set[str]:
    """``family name`` of every nftables table (empty when nft is missing)."""
    if shutil.which("nft") is None:
        return set()
    out = _run("nft", "list", "tables", check=False).stdout
    return {line.removeprefix("table ").strip() for line in out.splitlines() if line.startswith("table ")}


def _netns() -> set[str]:
    d = Path("/run/netns")
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


def _kubepods_cgroups() -> Iterator[Path]:
    root = Path("/sys/fs/cgroup")
    for ctrl in root.iterdir() if root.is_dir() else ():
        for name in ("kubepods", "kubepods.slice"):
            if (ctrl / name).is_dir():
                yield ctrl / name
    if (root / "kubepods").is_dir():
        yield root / "kubepods"


def _rmdir_tree(path: Path, only_empty: bool = False) -> None:
    """Remove a directory tree bottom-up (cgroup directories refuse rmtree: rmdir only)."""
    if not path.exists():
        return
    if not only_empty and not str(path).startswith("/sys/fs/cgroup"):
        shutil.rmtree(path, ignore_errors=True)
        return
    for dirpath, _dirs, _files in sorted(os.walk(path), key=lambda t: len(t[0]), reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)


def _delete_kube_chains() -> None:
    """Chains kubelet made (KUBE-KUBELET-CANARY, KUBE-FIREWALL, ...) that kube-proxy --cleanup leaves."""
    for cmd in ("iptables", "ip6tables"):
        save = shutil.which(f"{cmd}-save")
        if save is None:
            continue
        for table in ("filter", "nat", "mangle"):
            out = _run(save, "-t", table, check=False).stdout
            chains = re.findall(r"^:(KUBE-\S+)", out, re.MULTILINE)
            for rule in re.findall(r"^-A (\S+ .*-j KUBE-\S+.*)$", out, re.MULTILINE):
                if not rule.startswith("KUBE-"):
                    _run(cmd, "-t", table, "-D", *rule.split(), check=False)
            for chain in chains:
                _run(cmd, "-t", table, "-F", chain, check=False)
            for chain in chains:
                _run(cmd, "-t", table, "-X", chain, check=False)


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve())
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                mounts.append(point)
    return sorted(set(mounts), key=len, reverse=True)


def _unmount_under(root: Path) -> None:
    """Unmount every mount below ``root``, deepest first (overlay rootfs, tmpfs volumes, shm)."""
    for point in _mounts_under(root):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _matching(needle: str) -> list[int]:
    """PIDs whose command line contains ``needle``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if needle in cmdline:
            pids.append(int(proc.name))
    return pids


def _kill_matching(needle: str) -> None:
    """SIGKILL every process whose command line contains ``needle`` (containerd shims)."""
    for pid in _matching(needle):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- the network


@contextlib.contextmanager
def host_address() -> Iterator[str]:
    """An interface of ours carrying :data:`ADDRESS` for as long as the control plane runs.

    A veth pair, not a dummy interface: this VM's kernel has no dummy driver (and no modules)."""
    if Path(f"/sys/class/net/{HOST_IF}").exists():
        raise NodeUnavailable(
            f"interface {HOST_IF} already exists (a node suite running, or left by a killed one: "
            f"`ip link del {HOST_IF}`)"
        )
    _run("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", HOST_IF_PEER)
    try:
        _run("ip", "link", "set", HOST_IF_PEER, "up")
        _run("ip", "addr", "add", f"{ADDRESS}/32", "dev", HOST_IF)
        _run("ip", "link", "set", HOST_IF, "up")
        yield ADDRESS
    finally:
        _run("ip", "link", "del", HOST_IF, check=False)


# --------------------------------------------------------------------------- the node


class RealNode:
    """containerd + kubelet + kube-proxy registered with ``cp`` as :data:`NODE_NAME`."""

    def __init__(self, cp: ControlPlane) -> None:
        if cp.loopback:
            raise NodeUnavailable("the control plane must bind a routable address (ControlPlane(address=ADDRESS))")
        problems = preflight(cp.bin_dir)
        if problems:
            raise NodeUnavailable("this host cannot run the real node:\n  - " + "\n  - ".join(problems))
        self.cp = cp
        # Short: containerd's socket path and the shims' must fit in sun_path (108 bytes).
        self.dir = Path(cp.tmpdir) / "node"
        self.logs = cp.logs_dir
        self.procs: dict[str, Process] = {}
        self.images = images_env()
        self.ports = {k: free_port() for k in ("kubelet", "kubelet-healthz", "proxy-healthz", "proxy-metrics")}
        self.sock = self.dir / "containerd.sock"
        self.host = HostState()
        self.timings: dict[str, float] = {}

    # ---------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 180.0) -> RealNode:
        self.host = HostState.save()
        try:
            t0 = time.monotonic()
            self.dir.mkdir(parents=True, exist_ok=True)
            self._start_containerd(timeout)
            self.timings["containerd"] = time.monotonic() - t0
            t1 = time.monotonic()
            self._import_images()
            self.timings["image import"] = time.monotonic() - t1
            t2 = time.monotonic()
            self._start_kubelet()
            self._start_kube_proxy()
            self.cp.wait_for(f"node {NODE_NAME} Ready", self._ready, timeout=timeout, interval=1.0)
            self.timings["kubelet to Ready"] = time.monotonic() - t2
        except BaseException as e:
            logs = self.log_tails()
            self.stop()
            if isinstance(e, Exception) and not isinstance(e, NodeUnavailable):
                raise HarnessError(f"the real node did not come up: {e}\n{logs}") from e
            raise
        return self

    def stop(self) -> list[str]:
        """Tear everything down; returns what the host was left with that it did not have before."""
        # kubelet first, so that it cannot start again the sandboxes removed next.
        for name in ("kube-proxy", "kubelet"):
            p = self.procs.pop(name, None)
            if p is not None:
                p.stop(timeout=15)
        if self.procs.get("containerd") is not None and self.procs["containerd"].alive():
            self._remove_pods()
        proxy = self.cp.bin_dir / "kube-proxy"
        if proxy.exists():
            _run(str(proxy), "--cleanup", check=False, timeout=60)
        p = self.procs.pop("containerd", None)
        if p is not None:
            p.stop(timeout=15)
        _kill_matching(f"-address {self.sock}")
        _unmount_under(self.dir)
        _run("ip", "link", "del", BRIDGE, check=False)
        left = self.host.restore()
        time.sleep(0.2)  # SIGKILLed shims are reaped by init
        left += [f"process {pid} (a containerd shim) still runs" for pid in _matching(f"-address {self.sock}")]
        left += [f"{p} still mounted" for p in _mounts_under(self.dir)]
        if Path(f"/sys/class/net/{BRIDGE}").exists():
            left.append(f"bridge {BRIDGE} still exists")
        shutil.rmtree(self.dir, ignore_errors=True)
        return left

    def _ready(self) -> bool:
        node = self.cp.request("GET", f"/api/v1/nodes/{NODE_NAME}", ok=(200, 404))
        conds = {c["type"]: c["status"] for c in (node or {}).get("status", {}).get("conditions", [])}
        return conds.get("Ready") == "True"

    def log_tails(self, lines: int = 30) -> str:
        return "\n".join(
            f"----- {self.logs / f'{n}.log'} -----\n{tail(self.logs / f'{n}.log', lines)}"
            for n in ("containerd", "kubelet", "kube-proxy")
            if (self.logs / f"{n}.log").exists()
        )

    # ---------------------------------------------------------------- containerd

    def _spawn(self, name: str, argv: list[str]) -> Process:
        p = Process(name, argv, self.logs / f"{name}.log", self.dir)
        self.procs[name] = p
        return p

    def _start_containerd(self, timeout: float) -> None:
        d = self.dir
        cni_conf = d / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-vramgate-e2e.conflist").write_text(json.dumps(self.cni_config(), indent=2))
        cfg = f"""version = 2
root = "{d / 'containerd' / 'root'}"
state = "{d / 'containerd' / 'state'}"
# Host-wide plugins this node does not need and that would write outside the work directory.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{d / 'containerd-ttrpc.sock'}"
[debug]
  level = "warn"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{self.images['PAUSE_REF']}"
  # This VM's root lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj below the parent's
  # value and every sandbox fails ("can't get final child's PID from pipe") without this.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni_conf}"
    max_conf_num = 1
"""
        (d / "containerd.toml").write_text(cfg)
        self._spawn("containerd", ["containerd", "--config", str(d / "containerd.toml")])
        self.cp.wait_for(
            "containerd socket", lambda: self._ctr("version", check=False).returncode == 0, timeout=timeout
        )

    def cni_config(self) -> dict[str, Any]:
        """The pod network: one bridge, host-local IPAM, no masquerading, hairpin for Service loops."""
        gateway = str(next(ipaddress.IPv4Network(POD_CIDR).hosts()))
        return {
            "cniVersion": "0.4.0",
            "name": CNI_NAME,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR, "gateway": gateway}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.dir / "cni" / "ipam"),
                    },
                }
            ],
        }

    def _ctr(self, *args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return _run("ctr", "--address", str(self.sock), "-n", CRI_NAMESPACE, *args, check=check, timeout=timeout)

    def crictl(self, *args: str, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return _run(
            str(self.cp.bin_dir / "crictl"),
            "--runtime-endpoint",
            f"unix://{self.sock}",
            "--image-endpoint",
            f"unix://{self.sock}",
            "--timeout",
            "30s",
            *args,
            check=check,
            timeout=timeout,
        )

    def _import_images(self) -> None:
        for name in ("pause", "kube-scheduler", "vramgate"):
            self._ctr("images", "import", "--no-unpack", str(IMAGES_DIR / f"{name}.tar"), timeout=300)
        have = self._ctr("images", "ls", "-q").stdout.split()
        for ref in (self.images["PAUSE_REF"], self.images["SCHEDULER_REF"], self.images["VRAMGATE_REF"]):
            if ref not in have:
                raise HarnessError(f"image {ref} not in containerd after import (have {have})")

    def _remove_pods(self) -> None:
        self.crictl("stopp", *self._sandboxes(), check=False, timeout=120)
        self.crictl("rmp", "-f", *self._sandboxes(), check=False, timeout=120)

    def _sandboxes(self) -> list[str]:
        r = self.crictl("pods", "-q", check=False)
        return r.stdout.split() if r.returncode == 0 else []

    # ---------------------------------------------------------------- kubelet, kube-proxy

    def _start_kubelet(self) -> None:
        d = self.dir
        crt, key = issue_client_cert(self.cp.pki, "kubelet", f"system:node:{NODE_NAME}", "system:nodes", d / "pki")
        kubeconfig = write_kubeconfig(d / "kubelet.kubeconfig", self.cp.server, self.cp.ca, crt, key, "kubelet")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": ADDRESS,
            "port": self.ports["kubelet"],
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.ports["kubelet-healthz"],
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.cp.ca)},
            },
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            # Debian's containerd runs runc with cgroupfs; this VM has cgroup v1 (hybrid), which
            # kubelet 1.35+ refuses unless told.
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "clusterDomain": "cluster.local",
            "clusterDNS": [],
            "resolvConf": "",
            "podLogsDir": str(d / "pod-logs"),
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "serializeImagePulls": False,
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s",
            "maxPods": 64,
        }
        (d / "kubelet.yaml").write_text(json.dumps(config, indent=2))
        self._spawn(
            "kubelet",
            [
                str(self.cp.bin_dir / "kubelet"),
                f"--config={d / 'kubelet.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={d / 'kubelet'}",
                f"--cert-dir={d / 'kubelet' / 'pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={ADDRESS}",
                "--v=2",
            ],
        )

    def _start_kube_proxy(self) -> None:
        d = self.dir
        crt, key = issue_client_cert(self.cp.pki, "kube-proxy", "system:kube-proxy", None, d / "pki")
        kubeconfig = write_kubeconfig(d / "kube-proxy.kubeconfig", self.cp.server, self.cp.ca, crt, key, "kube-proxy")
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "mode": "iptables",
            "hostnameOverride": NODE_NAME,
            "bindAddress": ADDRESS,
            "healthzBindAddress": f"127.0.0.1:{self.ports['proxy-healthz']}",
            "metricsBindAddress": f"127.0.0.1:{self.ports['proxy-metrics']}",
            "clusterCIDR": POD_CIDR,
            "nodePortAddresses": [f"{ADDRESS}/32"],
            # No route_localnet sysctl: NodePorts on 127.0.0.1 are not needed here.
            "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
            # Zero leaves the host's nf_conntrack sysctls as they are.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }
        (d / "kube-proxy.yaml").write_text(json.dumps(config, indent=2))
        self._spawn("kube-proxy", [str(self.cp.bin_dir / "kube-proxy"), f"--config={d / 'kube-proxy.yaml'}", "--v=2"])
