"""A real Kubernetes control plane on loopback for the vramgate end-to-end tests.

Runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built from the
upstream Go modules by ``tests/e2e/build.sh``, as child processes on 127.0.0.1 with free
ports and a temporary directory. There is no kubelet: GPU nodes are created through the
API (:meth:`ControlPlane.create_gpu_node`) and pods are bound by the real scheduler but
never run. (The real-node suite, tests/e2e/node/, binds the API server to a routable
address with ``ControlPlane(address=…)`` and adds a kubelet node beside these.)

No kubelet means no node heartbeats, so kube-controller-manager's node-lifecycle
controller is turned off (``--controllers=*,-node-lifecycle-controller``) and so is the
apiserver's ``TaintNodesByCondition`` admission plugin, which would otherwise put a
``node.kubernetes.io/not-ready:NoSchedule`` taint on every new Node that only the
node-lifecycle controller takes away. A Node is then exactly what a test makes it:
its conditions and taints change only when the test (or vramgate) changes them.

Everything here uses the standard library plus ``cryptography``.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import http.client
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

E2E_DIR = Path(__file__).resolve().parent
REPO_ROOT = E2E_DIR.parent.parent
ARTIFACTS_DIR = E2E_DIR / "_artifacts"
BUILD_CMD = "bash tests/e2e/build.sh"


def _pinned(go_mod: Path, module: str) -> str:
    text = go_mod.read_text()
    m = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    if not m:
        raise RuntimeError(f"{module} is not pinned in {go_mod}")
    return m.group(1)


#: The Kubernetes release the binaries are built from (tests/e2e/k8s/go.mod).
KUBE_VERSION = _pinned(E2E_DIR / "k8s" / "go.mod", "k8s.io/kubernetes")
#: The etcd release (tests/e2e/etcd/go.mod).
ETCD_VERSION = _pinned(E2E_DIR / "etcd" / "go.mod", "go.etcd.io/etcd/server/v3")

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
SERVICE_CIDR = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

GPU_RESOURCE = "nvidia.com/gpu"


def bin_dir() -> Path:
    """Where build.sh puts the binaries (``VRAMGATE_E2E_BIN`` overrides)."""
    env = os.environ.get("VRAMGATE_E2E_BIN")
    return Path(env) if env else REPO_ROOT / ".cache" / "k8s" / KUBE_VERSION / "bin"


def missing_binaries(directory: Path | None = None) -> list[str]:
    d = directory or bin_dir()
    return [b for b in BINARIES if not os.access(d / b, os.X_OK)]


def new_run_dir(keep: int = 5) -> Path:
    """A fresh ``_artifacts/run-<time>-<pid>/`` for one control plane's logs; ``_artifacts/latest``
    points at it. Only the newest ``keep`` run directories are kept. Separate directories let
    two suites run from the same checkout at once without clobbering each other's logs."""
    ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
    run = ARTIFACTS_DIR / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    run.mkdir(exist_ok=True)
    latest = ARTIFACTS_DIR / "latest"
    with contextlib.suppress(OSError):
        tmp = ARTIFACTS_DIR / f".latest-{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(run.name)
        tmp.replace(latest)
    old = sorted((d for d in ARTIFACTS_DIR.glob("run-*") if d.is_dir()), key=lambda d: d.stat().st_mtime)
    for d in old[:-keep]:
        shutil.rmtree(d, ignore_errors=True)
    return run


class HarnessError(RuntimeError):
    """The control plane could not be brought up (the message carries log tails)."""


class KubectlError(subprocess.CalledProcessError):
    def __str__(self) -> str:
        return (
            f"kubectl {' '.join(self.cmd[3:])} exited {self.returncode}\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        self.method, self.path, self.status, self.body = method, path, status, body
        msg = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path} -> {status}: {msg}")


# --------------------------------------------------------------------------- helpers


START_ATTEMPTS = 3


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    return "\n".join(data.splitlines()[-lines:])


def _now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- certificates


@dataclass
class Pki:
    dir: Path
    ca_crt: Path
    ca_key: Path
    serving_crt: Path
    serving_key: Path
    sa_pub: Path
    sa_key: Path
    clients: dict[str, tuple[Path, Path]] = field(default_factory=dict)


def _write_key(path: Path, key: Any) -> None:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: Any) -> None:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(cn: str, org: str | None = None) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _validity() -> tuple[dt.datetime, dt.datetime]:
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    return now, now + dt.timedelta(days=2)


def sign_leaf(pki: Pki, subject: Any, usages: list[Any], sans: list[Any] | None = None) -> tuple[Any, Any]:
    """A fresh EC key and a certificate for it, signed by the harness CA: (key, cert)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ca = x509.load_pem_x509_certificate(pki.ca_crt.read_bytes())
    ca_key: Any = serialization.load_pem_private_key(pki.ca_key.read_bytes(), None)
    not_before, not_after = _validity()
    key = ec.generate_private_key(ec.SECP256R1())
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key, b.sign(ca_key, hashes.SHA256())


def issue_client_cert(
    pki: Pki, ident: str, cn: str, org: str | None, directory: Path | None = None
) -> tuple[Path, Path]:
    """A client certificate ``CN=cn, O=org`` signed by the harness CA, written as ``<ident>.crt/.key``
    in ``directory`` (default: the PKI's) and recorded in ``pki.clients``."""
    from cryptography.x509.oid import ExtendedKeyUsageOID

    d = directory or pki.dir
    d.mkdir(parents=True, exist_ok=True)
    key, cert = sign_leaf(pki, _name(cn, org), [ExtendedKeyUsageOID.CLIENT_AUTH])
    crt_path, key_path = d / f"{ident}.crt", d / f"{ident}.key"
    _write_cert(crt_path, cert)
    _write_key(key_path, key)
    pki.clients[ident] = (crt_path, key_path)
    return crt_path, key_path


def make_pki(directory: Path, address: str = "127.0.0.1") -> Pki:
    """CA, apiserver serving cert, client certs and the service-account key pair.

    ``address`` is the apiserver's bind address, added to its serving cert's SANs."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID

    directory.mkdir(parents=True, exist_ok=True)
    now, until = _validity()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("vramgate-e2e-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    pki = Pki(
        dir=directory,
        ca_crt=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_crt=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        sa_pub=directory / "sa.pub",
        sa_key=directory / "sa.key",
    )
    _write_cert(pki.ca_crt, ca)
    _write_key(pki.ca_key, ca_key)

    service_ip = next(ipaddress.IPv4Network(SERVICE_CIDR).hosts())
    dns = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    ips = {ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv4Address(address), service_ip}
    sans += [x509.IPAddress(ip) for ip in sorted(ips)]
    key, cert = sign_leaf(pki, _name("kube-apiserver"), [ExtendedKeyUsageOID.SERVER_AUTH], sans)
    _write_cert(pki.serving_crt, cert)
    _write_key(pki.serving_key, key)

    for ident, cn, org in (
        ("admin", "kubernetes-admin", "system:masters"),
        ("kube-controller-manager", "system:kube-controller-manager", None),
        ("kube-scheduler", "system:kube-scheduler", None),
        ("front-proxy-client", "front-proxy-client", None),
        # kube-apiserver -> kubelet (logs, exec); bound to system:kubelet-api-admin by RBAC's defaults.
        ("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"),
    ):
        issue_client_cert(pki, ident, cn, org)

    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki.sa_key, sa)
    pki.sa_pub.write_bytes(
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pki


def write_kubeconfig(path: Path, server: str, ca: Path, crt: Path, key: Path, user: str) -> Path:
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user, "namespace": "default"}}],
        "current-context": "e2e",
    }
    path.write_text(json.dumps(cfg, indent=2))  # JSON is YAML
    path.chmod(0o600)
    return path


# --------------------------------------------------------------------------- processes


_LIVE: set[Process] = set()


class Process:
    """A control-plane component: one child process in its own process group."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, cwd: Path, env: dict[str, str] | None = None) -> None:
        self.name, self.argv, self.log = name, list(argv), log
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as f:
            f.write(f"\n===== {_now_rfc3339()} starting {name}\n===== {' '.join(argv)}\n".encode())
            f.flush()
            self.popen = subprocess.Popen(
                self.argv,
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        _LIVE.add(self)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        _LIVE.discard(self)


@atexit.register
def _kill_leftovers() -> None:
    for p in list(_LIVE):
        p.stop(timeout=3)


# --------------------------------------------------------------------------- control plane


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on 127.0.0.1.

    Attributes: ``kubeconfig`` (admin, ``system:masters``), ``server`` (URL), ``ca``
    (CA cert path; also the CA the apiserver trusts for client certs), ``client_cert``/
    ``client_key`` (admin), ``tmpdir``, ``logs_dir``, ``bin_dir``, ``version``.
    """

    def __init__(
        self,
        tmpdir: Path | None = None,
        logs_dir: Path | None = None,
        binaries: Path | None = None,
        address: str = "127.0.0.1",
    ) -> None:
        self.bin_dir = binaries or bin_dir()
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise FileNotFoundError(f"missing e2e binaries {missing} in {self.bin_dir}; build them with: {BUILD_CMD}")
        self._own_tmp = tmpdir is None
        self.tmpdir = Path(tmpdir or tempfile.mkdtemp(prefix="vramgate-e2e-"))
        self.logs_dir = logs_dir or new_run_dir()
        self.version = KUBE_VERSION
        self.procs: dict[str, Process] = {}
        self.scheduler_extenders: list[dict[str, Any]] | None = None
        self._ssl: ssl.SSLContext | None = None
        self._lock = threading.Lock()
        self.pki: Pki
        self.kubeconfig: Path
        self.server: str
        self.ca: Path
        self.client_cert: Path
        self.client_key: Path
        self.ports: dict[str, int] = {}
        #: Where kube-apiserver binds and what it advertises. Loopback (the default) serves the
        #: suite's API-only nodes; a real node's pods need an address they can route to (the
        #: ``kubernetes`` Service's endpoint), see tests/e2e/node/host.py.
        self.address = address

    @property
    def loopback(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback

    # ---------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 120.0) -> ControlPlane:
        # Ports come from free_port(), which closes its socket before the component binds: another process
        # can take the port in between (it happened: kube-controller-manager "bind: address already in use").
        # Then the whole control plane starts again on new ports.
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return self._start_once(timeout)
            except HarnessError as exc:
                if "address already in use" not in str(exc) or attempt == START_ATTEMPTS:
                    raise
                print(f"control plane: a port was taken before its component bound it; attempt {attempt + 1}",
                      file=sys.stderr)
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> ControlPlane:
        t0 = time.monotonic()
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.tmpdir.mkdir(parents=True, exist_ok=True)  # stop() removed it after a failed attempt
        try:
            self.pki = make_pki(self.tmpdir / "pki", self.address)
            self.ca = self.pki.ca_crt
            self.client_cert, self.client_key = self.pki.clients["admin"]
            self.ports = {k: free_port() for k in ("etcd", "etcd-peer", "apiserver", "kcm", "scheduler")}
            self.server = f"https://{self.address}:{self.ports['apiserver']}"
            self.kubeconfig = write_kubeconfig(
                self.tmpdir / "admin.kubeconfig",
                self.server,
                self.ca,
                self.client_cert,
                self.client_key,
                "admin",
            )
            for comp in ("kube-controller-manager", "kube-scheduler"):
                crt, key = self.pki.clients[comp]
                write_kubeconfig(self.tmpdir / f"{comp}.kubeconfig", self.server, self.ca, crt, key, comp)

            self._start_etcd()
            self._wait("etcd", lambda: self._etcd_healthy(), timeout)
            self._start_apiserver()
            self._wait("kube-apiserver", lambda: self._get_status("/readyz") == 200, timeout)
            self._start_kcm()
            self.start_scheduler(None, timeout=timeout)
            self._wait("kube-controller-manager", lambda: self._component_healthz(self.ports["kcm"]), timeout)
            # Pods are refused until the serviceaccount controller made the default SA.
            self._wait(
                "default ServiceAccount",
                lambda: self._get_status("/api/v1/namespaces/default/serviceaccounts/default") == 200,
                timeout,
            )
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            p = self.procs.pop(name, None)
            if p is not None:
                p.stop()
        if self._own_tmp:
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- components

    def _spawn(self, name: str, args: list[str]) -> Process:
        binary = "etcd" if name == "etcd" else name
        p = Process(name, [str(self.bin_dir / binary), *args], self.logs_dir / f"{name}.log", self.tmpdir)
        self.procs[name] = p
        return p

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._spawn(
            "etcd",
            [
                "--name=e2e",
                f"--data-dir={self.tmpdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=e2e={peer}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self) -> None:
        pki = self.pki
        if self.loopback:
            # A loopback advertise address is refused by the endpoint reconcilers; the
            # `kubernetes` Service then has no endpoints, which nothing here needs.
            where = ["--endpoint-reconciler-type=none"]
        else:
            # A real node: pods reach the API server through the `kubernetes` Service, whose
            # endpoint is this address; logs/exec go to the kubelet by its InternalIP.
            crt, key = pki.clients["apiserver-kubelet-client"]
            where = [
                f"--kubelet-client-certificate={crt}",
                f"--kubelet-client-key={key}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
            ]
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                f"--bind-address={self.address}",
                f"--advertise-address={self.address}",
                *where,
                f"--secure-port={self.ports['apiserver']}",
                f"--cert-dir={self.tmpdir / 'apiserver-certs'}",
                f"--tls-cert-file={pki.serving_crt}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_crt}",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
                # No kubelet, no node-lifecycle controller: see the module docstring.
                "--disable-admission-plugins=TaintNodesByCondition",
                "--allow-privileged=true",
                # Front-proxy (request-header) auth, so that delegated authn in KCM/scheduler
                # (and any aggregated API) finds a complete extension-apiserver-authentication.
                f"--requestheader-client-ca-file={pki.ca_crt}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.clients['front-proxy-client'][0]}",
                f"--proxy-client-key-file={pki.clients['front-proxy-client'][1]}",
                "--profiling=false",
                "--v=1",
            ],
        )

    def restart_apiserver(self, down_seconds: float = 2.0) -> None:
        """Stop kube-apiserver, keep it away ``down_seconds``, start it again on the same port (not waiting)."""
        self.procs.pop("kube-apiserver").stop()
        time.sleep(down_seconds)
        self._start_apiserver()

    def _start_kcm(self) -> None:
        pki = self.pki
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={self.tmpdir / 'kube-controller-manager.kubeconfig'}",
                f"--authentication-kubeconfig={self.tmpdir / 'kube-controller-manager.kubeconfig'}",
                f"--authorization-kubeconfig={self.tmpdir / 'kube-controller-manager.kubeconfig'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['kcm']}",
                f"--cert-dir={self.tmpdir / 'kcm-certs'}",
                # Every default controller but node-lifecycle (no kubelet heartbeats here).
                "--controllers=*,-node-lifecycle-controller",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_crt}",
                f"--cluster-signing-cert-file={pki.ca_crt}",
                f"--cluster-signing-key-file={pki.ca_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
        )

    def scheduler_config(self, extenders: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The KubeSchedulerConfiguration the harness runs (``extenders`` go in verbatim)."""
        cfg: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.tmpdir / "kube-scheduler.kubeconfig")},
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": "default-scheduler"}],
        }
        if extenders:
            cfg["extenders"] = extenders
        return cfg

    def start_scheduler(self, extenders: list[dict[str, Any]] | None = None, timeout: float = 60.0) -> None:
        """(Re)start kube-scheduler, optionally with scheduler extenders.

        ``extenders`` is the ``extenders:`` list of KubeSchedulerConfiguration, e.g.
        ``[{"urlPrefix": "https://127.0.0.1:8443/scheduler", "filterVerb": "filter",
        "prioritizeVerb": "prioritize", "weight": 1, "nodeCacheCapable": True,
        "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}],
        "tlsConfig": {"caFile": "..."}}]``. Returns once the new scheduler is healthy.
        """
        old = self.procs.pop("kube-scheduler", None)
        if old is not None:
            old.stop()
        cfg_path = self.tmpdir / "kube-scheduler-config.yaml"
        cfg_path.write_text(json.dumps(self.scheduler_config(extenders), indent=2))
        kc = self.tmpdir / "kube-scheduler.kubeconfig"
        self.ports["scheduler"] = port = free_port()
        self._spawn(
            "kube-scheduler",
            [
                f"--config={cfg_path}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.tmpdir / 'scheduler-certs'}",
                "--v=2",
            ],
        )
        self.scheduler_extenders = extenders
        self._wait("kube-scheduler", lambda: self._component_healthz(port, "/readyz"), timeout)

    @contextlib.contextmanager
    def scheduler_with_extenders(self, extenders: list[dict[str, Any]]) -> Iterator[ControlPlane]:
        """``with cluster.scheduler_with_extenders([...]):`` runs the scheduler with extenders,
        then restarts it without them."""
        self.start_scheduler(extenders)
        try:
            yield self
        finally:
            self.start_scheduler(None)

    # ---------------------------------------------------------------- readiness

    def _wait(self, what: str, ready: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            for p in self.procs.values():
                if not p.alive():
                    raise HarnessError(
                        f"{p.name} exited with {p.popen.returncode} while waiting for {what}\n" + self.log_tails()
                    )
            try:
                if ready():
                    return
            except Exception as e:  # not up yet
                last = e
            time.sleep(0.2)
        raise HarnessError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})\n" + self.log_tails())

    def _etcd_healthy(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.ports["etcd"], timeout=2)
        try:
            conn.request("GET", "/health")
            r = conn.getresponse()
            return r.status == 200 and json.loads(r.read()).get("health") == "true"
        finally:
            conn.close()

    @staticmethod
    def _component_healthz(port: int, path: str = "/healthz") -> bool:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # self-signed serving cert from --cert-dir
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=ctx)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            r.read()
            return r.status == 200
        finally:
            conn.close()

    def log_tails(self, lines: int = 30) -> str:
        out = []
        # The control plane's logs, then any other component's (vramgate.log) written beside them.
        others = sorted(p.stem for p in self.logs_dir.glob("*.log") if p.stem not in BINARIES)
        for b in (*BINARIES, *others):
            log = self.logs_dir / f"{b}.log"
            if log.exists():
                out.append(f"----- {log} (last {lines} lines) -----\n{tail(log, lines)}")
        return "\n".join(out)

    # ---------------------------------------------------------------- API access

    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=str(self.ca))
            ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
            self._ssl = ctx
        return self._ssl

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: dict[str, str] | None = None,
        ok: Sequence[int] = (200, 201, 202),
        timeout: float = 30.0,
    ) -> Any:
        """One call to the apiserver as admin; returns the decoded JSON body.

        Raises :class:`ApiError` unless the status is in ``ok``.
        """
        if query:
            path = f"{path}?{urllib.parse.urlencode(query)}"
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        conn = http.client.HTTPSConnection(
            self.address, self.ports["apiserver"], timeout=timeout, context=self.ssl_context()
        )
        try:
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            raw = r.read()
        finally:
            conn.close()
        try:
            decoded: Any = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode("utf-8", "replace")
        if r.status not in ok:
            raise ApiError(method, path, r.status, decoded)
        return decoded

    def _get_status(self, path: str) -> int:
        try:
            self.request("GET", path, ok=(200,), timeout=5)
            return 200
        except ApiError as e:
            return e.status

    def fresh_namespace(self, name: str, timeout: float = 90.0) -> None:
        """Create namespace ``name``, waiting out a deletion still under way: a module deletes ``vramgate`` at
        teardown, a POST then answers 409 while it terminates, and it vanished under the next module (its
        vramgate's Lease got 404 for a minute, its ServiceAccounts were refused)."""
        deadline = time.monotonic() + timeout
        while True:
            self.request("POST", "/api/v1/namespaces",
                         {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, ok=(201, 409))
            ns = self.request("GET", f"/api/v1/namespaces/{name}", ok=(200, 404))
            meta = ns.get("metadata", {}) if isinstance(ns, dict) else {}
            if meta.get("name") == name and not meta.get("deletionTimestamp"):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"namespace {name} still terminating after {timeout:.0f} s")
            time.sleep(0.5)

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl against this cluster (admin); text in, text out."""
        cmd = [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args]
        cp = subprocess.run(
            cmd,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and cp.returncode != 0:
            raise KubectlError(cp.returncode, cmd, cp.stdout, cp.stderr)
        return cp

    def wait_for(self, what: str, fn: Any, timeout: float = 30.0, interval: float = 0.2) -> Any:
        """Poll ``fn()`` until it returns something truthy; return it (or fail with log tails)."""
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            try:
                v = fn()
                if v:
                    return v
            except Exception as e:
                last = e
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last error: {last!r})")
            time.sleep(interval)

    # ---------------------------------------------------------------- nodes

    def create_gpu_node(
        self,
        name: str,
        gpus: int = 8,
        mem_mib: int = 81920,
        product: str = "NVIDIA-H100-80GB-HBM3",
        driver_major: int | None = 550,
        labels: dict[str, str] | None = None,
        allocatable_gpus: int | None = None,
        taints: list[dict[str, str]] | None = None,
        conditions: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Create a Ready GPU Node the way GPU Feature Discovery + the device plugin show it.

        Labels ``nvidia.com/gpu.memory`` (MiB of one GPU), ``gpu.count``, ``gpu.product``,
        ``cuda.driver-version.major`` (omitted when ``driver_major`` is None) plus ``labels``;
        status capacity ``nvidia.com/gpu: gpus`` and allocatable ``allocatable_gpus``
        (default: ``gpus``). ``gpus=0`` makes a plain CPU node with no GPU labels.
        Returns the Node as the apiserver has it after the status update.
        """
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        if gpus:
            node_labels.update(
                {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.memory": str(mem_mib),
                    "nvidia.com/gpu.count": str(gpus),
                    "nvidia.com/gpu.product": product,
                }
            )
            if driver_major is not None:
                node_labels["nvidia.com/cuda.driver-version.major"] = str(driver_major)
        node_labels.update(labels or {})
        spec: dict[str, Any] = {}
        if taints:
            spec["taints"] = taints
        self.request(
            "POST",
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": node_labels},
                "spec": spec,
            },
        )
        return self.set_node_gpu_status(name, gpus=gpus, allocatable_gpus=allocatable_gpus, conditions=conditions)

    def set_node_gpu_status(
        self,
        name: str,
        gpus: int | None = None,
        allocatable_gpus: int | None = None,
        ready: bool = True,
        conditions: list[dict[str, Any]] | None = None,
        cpu: str = "64",
        memory: str = "512Gi",
        pods: str = "110",
    ) -> dict[str, Any]:
        """Patch a Node's status: capacity/allocatable (``nvidia.com/gpu`` when ``gpus`` is given),
        the Ready condition (``ready``), and any extra ``conditions`` (merged by ``type``, e.g.
        ``{"type": "GpuXidWatch", "status": "True", "reason": "XID79"}``)."""
        now = _now_rfc3339()
        status: dict[str, Any] = {}
        if gpus is not None:
            alloc = gpus if allocatable_gpus is None else allocatable_gpus
            base = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "1Ti"}
            status["capacity"] = {**base, GPU_RESOURCE: str(gpus)}
            status["allocatable"] = {**base, GPU_RESOURCE: str(alloc)}
        elif allocatable_gpus is not None:
            status["allocatable"] = {GPU_RESOURCE: str(allocatable_gpus)}

        def cond(c: dict[str, Any]) -> dict[str, Any]:
            return {
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
                "reason": "E2E",
                "message": "set by the vramgate e2e harness",
                **c,
            }

        conds = [
            cond(
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                }
            )
        ]
        if gpus is not None:  # first status of a new node: the pressure conditions a kubelet posts
            conds += [cond({"type": t, "status": "False"}) for t in ("MemoryPressure", "DiskPressure", "PIDPressure")]
        conds += [cond(c) for c in conditions or []]
        status["conditions"] = conds
        status["addresses"] = [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": "127.0.0.1"}]
        status["nodeInfo"] = {
            "kubeletVersion": self.version,
            "containerRuntimeVersion": "fake://e2e",
            "operatingSystem": "linux",
            "architecture": "amd64",
            "osImage": "vramgate e2e",
            "kernelVersion": "0",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        }
        return self.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": status},
            content_type="application/strategic-merge-patch+json",
        )

    def set_node_taints(self, name: str, taints: list[dict[str, str]]) -> dict[str, Any]:
        """Replace a Node's taints (``[{"key": ..., "value": ..., "effect": "NoSchedule"}]``)."""
        return self.request(
            "PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": taints}}, content_type="application/merge-patch+json"
        )

    def label_node(self, name: str, labels: dict[str, str | None]) -> dict[str, Any]:
        """Set (or, with None, remove) Node labels."""
        return self.request(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"metadata": {"labels": labels}},
            content_type="application/merge-patch+json",
        )

    def get_node(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/nodes/{name}")

    def delete_node(self, name: str) -> None:
        self.request("DELETE", f"/api/v1/nodes/{name}", ok=(200, 202, 404))

    # ---------------------------------------------------------------- pods

    def get_pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return self.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")

    def wait_pod_bound(self, name: str, namespace: str = "default", timeout: float = 30.0) -> str:
        """Wait until the scheduler bound the pod; return ``spec.nodeName``."""
        return str(
            self.wait_for(
                f"pod {namespace}/{name} to be bound",
                lambda: self.get_pod(name, namespace)["spec"].get("nodeName"),
                timeout,
            )
        )

    def pod_scheduling_message(self, name: str, namespace: str = "default") -> str | None:
        """The PodScheduled=False message (why the scheduler could not place it), if any."""
        for c in self.get_pod(name, namespace).get("status", {}).get("conditions", []):
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                return str(c.get("message", ""))
        return None


@contextlib.contextmanager
def control_plane(**kw: Any) -> Iterator[ControlPlane]:
    cp = ControlPlane(**kw)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()
