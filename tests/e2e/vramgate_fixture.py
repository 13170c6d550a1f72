"""vramgate as a real ``vramgate serve --role all`` subprocess against the e2e control plane,
registered the way the Helm chart registers it.

:class:`Vramgate` owns one serving directory (``ca.crt``, ``tls.crt``, ``tls.key``, ``config.yaml``)
and one port for its whole life, so a restart (:meth:`Vramgate.restart`) comes back at the same
URL with the same CA: nothing in kube-apiserver or kube-scheduler has to change.

- certificate: ``webhook.tls.certs.make_bundle(["127.0.0.1", "localhost"])`` written by ``write_bundle``;
  :meth:`rotate_cert` writes a new serving cert signed by the same CA (the caBundle registered
  in the webhook configurations stays valid);
- config: the chart's own ``vramgate-config`` ConfigMap, minus ``admission.scheduler_name`` (the
  harness runs the extender in the default scheduler, profile ``default-scheduler``), plus short
  timings for a test (:data:`TEST_CONFIG`);
- webhooks: the chart's MutatingWebhookConfiguration and ValidatingWebhookConfiguration rendered
  with ``webhook.clientConfig=url`` (rules, selectors, failure policies, timeouts as shipped);
- PriorityClasses: the chart's ``gpu-production-priority`` and ``gpu-batch-priority``;
- metrics port: the chart's ``server.metrics_port`` moved to a free port of this process
  (:attr:`Vramgate.metrics_port`); :meth:`Vramgate.get` sends ``/metrics``, ``/inventory`` and the status page
  there. The chart's ``server.metrics_auth`` (TokenReview + SubjectAccessReview) is kept only when asked
  (``metrics_auth=True``, tests/e2e/test_metrics_auth.py): the other modules read the inventory and metrics
  without a token;
- extender: the ``extenders`` entry of the chart's ``vramgate-scheduler-config``, pointed at this
  process and verifying its certificate with ``tlsConfig.caData`` (the chart's default is
  ``insecure: true`` over the pod's loopback).

Its stdout/stderr go to ``<logs_dir>/vramgate.log`` beside the control plane's logs.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from prometheus_client.parser import text_string_to_metric_families

from tests.chart.render import one, render_chart, url_mode_values
from tests.e2e.harness import REPO_ROOT, ControlPlane, HarnessError, Process, free_port, tail
from webhook.tls.certs import Bundle, make_bundle, make_serving_cert, write_bundle

NAMESPACE = "vramgate"  # the chart's release namespace: excluded by the webhooks' namespaceSelector
SERVING_NAMES = ["127.0.0.1", "localhost"]
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
METRICS_PATHS = frozenset({"/metrics", "/inventory", "/status", "/"})

#: Merged over the chart's config: fast certificate polling, a short drain on SIGTERM, and a
#: controller that labels at once but waits long before tainting (a test that wants to see the
#: extender's reason for an unhealthy node must not find the node tainted first).
TEST_CONFIG: dict[str, Any] = {
    "server": {"tls_reload_interval_seconds": 0.2, "shutdown_delay_seconds": 0.5, "shutdown_timeout_seconds": 5},
    "controller": {
        "unhealthy_after_seconds": 3600,
        "healthy_after_seconds": 0,
        "reconcile_interval_seconds": 0.2,
        "lease_duration_seconds": 4,
        "renew_deadline_seconds": 3,
        "retry_period_seconds": 1,
    },
}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class Vramgate:
    """One ``vramgate serve`` process in cluster mode (``--role all`` unless told), plus its chart-rendered
    registration."""

    def __init__(self, cluster: ControlPlane, workdir: Path | None = None, port: int | None = None,
                 role: str = "all", *, metrics_auth: bool = False, kubeconfig: Path | None = None) -> None:
        self.cluster = cluster
        self.role = role
        # Whose credentials the process uses: the control plane's admin unless told (a ServiceAccount's kubeconfig).
        self.kubeconfig = kubeconfig or cluster.kubeconfig
        suffix = "" if role == "all" else f"-{role}"
        self.dir = workdir or cluster.tmpdir / f"vramgate{suffix}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.metrics_port = free_port()
        # The bearer token :meth:`get` sends to the metrics port under metrics_auth (a ServiceAccount's).
        self.token: str | None = None
        self.log = cluster.logs_dir / f"vramgate{suffix}.log"
        self.bundle: Bundle = make_bundle(SERVING_NAMES)
        write_bundle(self.bundle, self.dir)
        self.proc: Process | None = None
        self.last_exit: int | None = None
        self.chart = self.render()
        config = yaml.safe_load(one(self.chart, "ConfigMap", "vramgate-config")["data"]["config.yaml"])
        config.get("admission", {}).pop("scheduler_name", None)
        self.config = _merge(_merge(config, TEST_CONFIG),
                             {"server": {"metrics_port": self.metrics_port, "metrics_auth": metrics_auth}})
        self.config_path = self.dir / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config))

    # ------------------------------------------------------------------ chart

    @property
    def ca_b64(self) -> str:
        return self.bundle.ca_bundle_b64

    def render(self, **values: Any) -> list[dict[str, Any]]:
        """The chart rendered in URL mode for this process (extra values merged in), with the extender on: the
        suite registers its entry in the control plane's own kube-scheduler (native placement, the chart's
        default, is that scheduler reading the webhook's affinity, which every test sees too)."""
        return render_chart(url_mode_values(self.url, self.ca_b64, **{"extender": {"enabled": True}, **values}))

    def webhook_configurations(self, chart: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        objs = chart or self.chart
        return [one(objs, kind, "vramgate") for kind in WEBHOOK_KINDS]

    def priority_classes(self) -> list[dict[str, Any]]:
        return [o for o in self.chart if o["kind"] == "PriorityClass"]

    def extender(self) -> dict[str, Any]:
        """The chart's extender entry, aimed at this process, verifying its cert against the CA."""
        sched = yaml.safe_load(one(self.chart, "ConfigMap", "vramgate-scheduler-config")["data"]["config.yaml"])
        (ext,) = sched["extenders"]
        return {**ext, "urlPrefix": f"{self.url}/scheduler", "tlsConfig": {"caData": self.ca_b64}}

    def apply(self, objects: list[dict[str, Any]]) -> None:
        """``kubectl apply`` a list of objects."""
        self.cluster.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        )

    def register(self, chart: list[dict[str, Any]] | None = None) -> None:
        self.apply(self.webhook_configurations(chart))

    def unregister(self) -> None:
        for kind in WEBHOOK_KINDS:
            self.cluster.kubectl("delete", kind.lower(), "vramgate", "--ignore-not-found", "--wait=false")

    # ------------------------------------------------------------------ process

    def argv(self) -> list[str]:
        return [
            str(REPO_ROOT / ".venv" / "bin" / "vramgate"),
            "serve",
            "--role",
            self.role,
            "--kubeconfig",
            str(self.kubeconfig),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--tls-cert",
            str(self.dir / "tls.crt"),
            "--tls-key",
            str(self.dir / "tls.key"),
            "--config",
            str(self.config_path),
        ]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def start(self, timeout: float = 30.0) -> Vramgate:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMGATE_")}  # only our config counts
        env["PYTHONUNBUFFERED"] = "1"
        self.proc = Process("vramgate", self.argv(), self.log, self.dir, env=env)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.proc.popen.returncode if self.proc else None
                raise HarnessError(f"vramgate exited with {code} before it was ready\n{tail(self.log, 40)}")
            try:
                status, _ = self.get("/readyz", timeout=2)
                if status == 200:
                    return
                last = status
            except OSError as exc:
                last = exc
            time.sleep(0.1)
        raise HarnessError(f"vramgate not ready after {timeout:.0f}s (last: {last!r})\n{tail(self.log, 40)}")

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait; returns the exit code (0 is a clean shutdown)."""
        if self.proc is None:
            return self.last_exit
        self.proc.stop(timeout)
        self.last_exit = self.proc.popen.returncode
        self.proc = None
        return self.last_exit

    def restart(self, timeout: float = 30.0) -> Vramgate:
        self.stop()
        return self.start(timeout)

    # ------------------------------------------------------------------ HTTPS

    def client_context(self) -> ssl.SSLContext:
        """Trusts exactly the CA registered as caBundle; checks the 127.0.0.1 SAN."""
        return ssl.create_default_context(cadata=self.bundle.ca_pem.decode())

    def port_of(self, path: str) -> int:
        """The metrics port for /metrics, /inventory and the status page; the webhook and extender port otherwise."""
        return self.metrics_port if path.partition("?")[0] in METRICS_PATHS else self.port

    def get(self, path: str, timeout: float = 5.0, *, token: str | None = None, anonymous: bool = False,
            port: int | None = None) -> tuple[int, bytes]:
        """GET ``path`` on its port; on the metrics port with ``token``, else :attr:`token` (none if ``anonymous``)."""
        port = port or self.port_of(path)
        if token is None and not anonymous and port == self.metrics_port:
            token = self.token
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=self.client_context())
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token is not None else {})
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def inventory(self) -> dict[str, Any]:
        status, body = self.get("/inventory")
        assert status == 200, body
        result: dict[str, Any] = json.loads(body)
        return result

    def inventory_nodes(self) -> dict[str, dict[str, Any]]:
        return {n["name"]: n for n in self.inventory()["nodes"]}

    def wait_inventory(self, nodes: set[str], timeout: float = 15.0) -> dict[str, dict[str, Any]]:
        """Wait until vramgate's live inventory holds exactly these GPU nodes; return them by name.

        Admission judges against the whole inventory ("the largest GPU in the cluster"), so a test
        waits for exactly its own nodes before it applies anything."""
        return self.cluster.wait_for(
            f"vramgate's inventory to hold exactly {sorted(nodes)}",
            lambda: (inv := self.inventory_nodes()).keys() == nodes and inv,
            timeout,
        )

    def wait_free(self, node: str, free: int, timeout: float = 15.0) -> None:
        self.cluster.wait_for(
            f"vramgate to count {free} free GPUs on {node}",
            lambda: self.inventory_nodes().get(node, {}).get("free") == free,
            timeout,
        )

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        status, body = self.get("/metrics")
        assert status == 200
        out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples named ``name`` whose labels include ``labels``."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.metrics().items() if n == name and want <= set(ls))

    # ------------------------------------------------------------------ certificates

    def rotate_cert(self) -> int:
        """Write a new serving cert and key, signed by the same CA; return the new serial."""
        ca_cert = x509.load_pem_x509_certificate(self.bundle.ca_pem)
        ca_key = serialization.load_pem_private_key(self.bundle.ca_key_pem, password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
        cert, key = make_serving_cert(ca_cert, ca_key, SERVING_NAMES)
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        self.bundle = Bundle(
            self.bundle.ca_pem, cert.public_bytes(serialization.Encoding.PEM), key_pem, self.bundle.ca_key_pem
        )
        write_bundle(self.bundle, self.dir)
        return int(cert.serial_number)

    def file_serial(self) -> int:
        return int(x509.load_pem_x509_certificate(self.bundle.cert_pem).serial_number)

    def served_serial(self) -> int:
        """The serial of the certificate a NEW TLS connection is served (verified against the CA)."""
        with (
            socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw,
            self.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        return int(x509.load_der_x509_certificate(der).serial_number)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
