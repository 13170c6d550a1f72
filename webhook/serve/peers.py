"""Who may send reviews and extender calls: a client certificate kube-apiserver or kube-scheduler presents.

Anyone who can reach the webhook port can POST a review; a forged rejection then shows on the status page, and a
forged extender call costs a decision. With ``server.client_ca_file`` set, the listener asks every client for a
certificate (``CERT_OPTIONAL``: the kubelet's probes and Prometheus have none) and :class:`ClientCertGuard` lets a
request to any path but the probes and the metrics surface (which has its own token guard) through only with a
certificate that CA signed, and, with ``server.client_names`` set, whose subject CN or a DNS SAN is one of them.
kube-apiserver presents one from its ``AdmissionConfiguration`` kubeconfig (``--admission-control-config-file``,
``WebhookAdmissionConfiguration.kubeConfigFile``); kube-scheduler from its extender's ``tlsConfig.certFile``.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def require_client_certs(context: ssl.SSLContext, ca_file: str) -> None:
    """Ask every client for a certificate and verify it against ``ca_file`` (a missing one is allowed here)."""
    context.load_verify_locations(cafile=ca_file)
    context.verify_mode = ssl.CERT_OPTIONAL


def peer_names(peercert: Any) -> tuple[str, ...]:
    """The subject CN and DNS SANs of a verified peer certificate (``SSLObject.getpeercert()``); () for none."""
    if not isinstance(peercert, dict) or not peercert:
        return ()
    names = [value for rdn in peercert.get("subject", ()) for key, value in rdn if key == "commonName"]
    names += [value for kind, value in peercert.get("subjectAltName", ()) if kind == "DNS"]
    return tuple(names)


class ClientCertGuard:
    """ASGI middleware: requests outside ``open_paths`` need a verified client certificate (named, if ``names``)."""

    def __init__(self, app: ASGIApp, names: Iterable[str] = (), open_paths: frozenset[str] = OPEN_PATHS) -> None:
        self.app = app
        self.names = frozenset(names)
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        tls = (scope.get("extensions") or {}).get("tls") or {}
        names = tuple(tls.get("vg_client_names") or ())
        if not names:
            await _deny(send, "a client certificate signed by server.client_ca_file is required")
            return
        if self.names and not self.names.intersection(names):
            await _deny(send, f"client certificate {names[0]!r} is not one of server.client_names")
            return
        await self.app(scope, receive, send)


async def _deny(send: Send, message: str) -> None:
    body = orjson.dumps({"status": "forbidden", "reason": message})
    await send({"type": "http.response.start", "status": 403,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
