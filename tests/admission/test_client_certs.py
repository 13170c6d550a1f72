"""Client certificates on the webhook port (issue #44, "who may ask"): with ``server.client_ca_file``, reviews and
extender calls need a certificate that CA signed (and a listed name), the probes do not; without it, as before.
`vramgate serve` as a process, real TLS, certificates from a CA of the test's own."""

from __future__ import annotations

import http.client
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.e2e.harness import issue_client_cert, make_pki

from .helpers import EXAMPLES, example, review
from .test_server import VRAMGATE, free_port, wait_ready


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, Path, Path]]:
    pki = make_pki(tmp_path / "pki")
    issue_client_cert(pki, "apiserver", "kube-apiserver", None)
    issue_client_cert(pki, "stranger", "someone-else", None)
    config = tmp_path / "config.yaml"
    config.write_text(f"server:\n  shutdown_delay_seconds: 0\n  client_ca_file: {pki.ca_crt}\n"
                      "  client_names: [kube-apiserver, vramgate-scheduler]\n")
    port = free_port()
    proc = subprocess.Popen(
        [str(VRAMGATE), "serve", "--config", str(config), "--dev", "--nodes", str(EXAMPLES / "cluster.yaml"),
         "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(port, tmp_path / "certs" / "ca.crt", proc)
        yield port, tmp_path / "certs" / "ca.crt", pki.dir
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _post(port: int, ca: Path, path: str, body: bytes, cert: tuple[Path, Path] | None) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("POST" if body else "GET", path, body or None, {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_reviews_need_a_listed_client_certificate_and_probes_do_not(served: tuple[int, Path, Path]) -> None:
    port, ca, pki = served
    body = orjson.dumps(review(example("llama3-8b-deployment.yaml")))
    apiserver = (pki / "apiserver.crt", pki / "apiserver.key")
    stranger = (pki / "stranger.crt", pki / "stranger.key")
    status, answer = _post(port, ca, "/validate", body, apiserver)
    assert status == 200 and orjson.loads(answer)["response"]["allowed"] is True
    # No certificate: a forged review is refused before it is judged (or shown on the status page).
    status, answer = _post(port, ca, "/validate", body, None)
    assert status == 403 and b"client certificate" in answer, answer
    assert _post(port, ca, "/mutate", body, None)[0] == 403
    assert _post(port, ca, "/scheduler/filter", b"{}", None)[0] == 403
    # Signed by the CA but not a listed name.
    status, answer = _post(port, ca, "/validate", body, stranger)
    assert status == 403 and b"someone-else" in answer, answer
    # The kubelet's probes carry no certificate.
    assert _post(port, ca, "/healthz", b"", None)[0] == 200
    assert _post(port, ca, "/readyz", b"", None)[0] == 200
    # A certificate from another CA does not complete the handshake at all.
    other = make_pki(pki.parent / "other")
    issue_client_cert(other, "apiserver", "kube-apiserver", None)
    with pytest.raises((ssl.SSLError, OSError)):
        _post(port, ca, "/validate", body, (other.dir / "apiserver.crt", other.dir / "apiserver.key"))
