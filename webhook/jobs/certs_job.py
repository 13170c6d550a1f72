"""The chart's certificate hook Jobs (certs.mode=selfSigned): keep the TLS Secret valid and its CA trusted.

``python -m webhook.jobs.certs_job create`` runs before install/upgrade: it keeps the Secret while its
certificate is valid for the Service names and far from expiry, else issues a fresh CA and serving
cert (the code of ``vramgate certs init``). On renewal the new CA is first added to the existing
webhook configurations, then the Secret is written with ``ca.crt`` = new CA + previous CA, so the
replicas (which reload the cert when the mounted Secret changes) are trusted before and after.

``python -m webhook.jobs.certs_job patch`` runs after install/upgrade: it writes ``ca.crt`` as the
``caBundle`` of every webhook in both configurations, with the configured failure policies.

The decisions are pure functions (tested without a cluster); the I/O is in ``run_create``/``run_patch``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import datetime as dt
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization

from ..kube.client import api_status
from ..tls.certs import Bundle, make_bundle, service_dns_names

SECRET_KEYS = ("tls.crt", "tls.key", "ca.crt")
FAILURE_POLICIES = ("Ignore", "Fail")
SECRET_LABELS = {
    "app.kubernetes.io/part-of": "vramgate",
    "app.kubernetes.io/component": "certs",
    "app.kubernetes.io/managed-by": "vramgate-certs-job",
}


# ---------------------------------------------------------------------------------------------
# Pure parts
# ---------------------------------------------------------------------------------------------


def decode_secret_data(data: dict[str, str] | None) -> dict[str, bytes]:
    """A Secret's ``data`` (base64 strings) as bytes; undecodable entries are dropped."""
    out: dict[str, bytes] = {}
    for key, value in (data or {}).items():
        try:
            out[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError, TypeError):
            continue
    return out


def _load_certs(pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def _dns_names(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return set(san.get_values_for_type(x509.DNSName))


def _key_matches(cert: x509.Certificate, key_pem: bytes) -> bool:
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return bool(key.public_key().public_bytes(*fmt) == cert.public_key().public_bytes(*fmt))


def _issued_by_one_of(cert: x509.Certificate, cas: list[x509.Certificate]) -> bool:
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False


def renewal_reason(
    files: dict[str, bytes], names: Sequence[str], now: dt.datetime, renew_before: dt.timedelta
) -> str | None:
    """Why the Secret's certificate must be (re)issued, or None when it can stay.

    It stays only if all three keys are there, the key matches the certificate, the certificate
    names every Service DNS name, was signed by a CA in ``ca.crt``, and is valid past
    ``now + renew_before``.
    """
    missing = [k for k in SECRET_KEYS if not files.get(k)]
    if missing:
        return f"missing {', '.join(missing)}"
    chain = _load_certs(files["tls.crt"])
    if not chain:
        return "tls.crt is not a PEM certificate"
    cert = chain[0]
    if not _key_matches(cert, files["tls.key"]):
        return "tls.key does not match tls.crt"
    lacking = sorted(set(names) - _dns_names(cert))
    if lacking:
        return f"certificate lacks DNS names {', '.join(lacking)}"
    cas = [ca for ca in _load_certs(files["ca.crt"]) if ca.not_valid_after_utc > now]
    if not _issued_by_one_of(cert, cas):
        return "certificate is not signed by a valid CA in ca.crt"
    if cert.not_valid_before_utc > now:
        return "certificate is not valid yet"
    if cert.not_valid_after_utc - renew_before <= now:
        return (f"certificate expires {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC "
                f"(renewal window {renew_before.days} days)")
    return None


def next_ca_bundle(new_ca_pem: bytes, previous_ca_pem: bytes | None, now: dt.datetime) -> bytes:
    """The ``ca.crt`` after a renewal: the new CA, then the newest still-valid previous CA (if any).

    Keeping one previous CA lets replicas still serving the old certificate stay trusted while the
    kubelet updates the mounted Secret; the one before that is dropped, so the bundle holds two.
    """
    new = _load_certs(new_ca_pem)
    fingerprints = {c.fingerprint(hashes.SHA256()) for c in new}
    for old in _load_certs(previous_ca_pem or b""):
        if old.not_valid_after_utc <= now:
            continue
        if old.fingerprint(hashes.SHA256()) in fingerprints:
            continue
        return new_ca_pem.rstrip(b"\n") + b"\n" + old.public_bytes(serialization.Encoding.PEM)
    return new_ca_pem


def secret_manifest(
    name: str, namespace: str, files: dict[str, bytes], resource_version: str | None = None
) -> dict[str, Any]:
    """A ``kubernetes.io/tls`` Secret holding ``tls.crt``, ``tls.key`` and ``ca.crt``."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(SECRET_LABELS)}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": meta,
        "data": {k: base64.b64encode(files[k]).decode() for k in SECRET_KEYS},
    }


def webhook_patch(config: dict[str, Any], ca_bundle_b64: str, failure_policy: str | None,
                  overrides: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """A JSON Patch setting ``caBundle`` (and the failure policy) on every webhook of a configuration.

    ``overrides`` gives some webhooks (by name) their own failure policy (validate-kinds.vramgate.io's).

    Each webhook's name is tested first, so a configuration changed meanwhile fails the patch
    instead of being written at the wrong index. Empty when nothing would change.
    """
    ops: list[dict[str, Any]] = []
    for i, hook in enumerate(config.get("webhooks") or []):
        changes: list[dict[str, Any]] = []
        client = hook.get("clientConfig") or {}
        if client.get("caBundle") != ca_bundle_b64:
            changes.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca_bundle_b64})
        policy = (overrides or {}).get(str(hook.get("name")), failure_policy)
        if policy and hook.get("failurePolicy") != policy:
            changes.append({"op": "add", "path": f"/webhooks/{i}/failurePolicy", "value": policy})
        if changes:
            ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook.get("name")})
            ops.extend(changes)
    return ops


def bundle_files(bundle: Bundle, previous_ca_pem: bytes | None, now: dt.datetime) -> dict[str, bytes]:
    """The Secret's files for a freshly issued bundle, keeping the previous CA trusted."""
    return {
        "tls.crt": bundle.cert_pem,
        "tls.key": bundle.key_pem,
        "ca.crt": next_ca_bundle(bundle.ca_pem, previous_ca_pem, now),
    }


# ---------------------------------------------------------------------------------------------
# I/O
# ---------------------------------------------------------------------------------------------


def _log(msg: str) -> None:
    print(f"certs-job: {msg}", flush=True)


def _read_json(call: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
    """GET an object as plain JSON (camelCase keys); None on 404."""
    try:
        resp = call(*args, _preload_content=False)
    except Exception as exc:
        if api_status(exc) == 404:
            return None
        raise
    data: dict[str, Any] = json.loads(resp.data)
    return data


class _Clients:
    def __init__(self, kubeconfig: str | None) -> None:
        from kubernetes import client

        from ..kube.client import api_client

        api = api_client(kubeconfig)
        # Plain dict bodies are sent as-is; the client's model types are not needed here.
        self.core: Any = client.CoreV1Api(api)
        self.admission: Any = client.AdmissionregistrationV1Api(api)

    def read_webhooks(self, kind: str, name: str) -> dict[str, Any] | None:
        read = (self.admission.read_mutating_webhook_configuration if kind == "mutating"
                else self.admission.read_validating_webhook_configuration)
        return _read_json(read, name)

    def patch_webhooks(self, kind: str, name: str, ops: list[dict[str, Any]]) -> None:
        patch = (self.admission.patch_mutating_webhook_configuration if kind == "mutating"
                 else self.admission.patch_validating_webhook_configuration)
        patch(name, ops)  # a list body is sent as application/json-patch+json


def _patch_configs(
    clients: _Clients, targets: Sequence[tuple[str, str, str | None]], ca_pem: bytes, *, wait_s: float,
    overrides: Mapping[str, str] | None = None,
) -> bool:
    """Patch caBundle (and failure policies) into each (kind, name, policy); True when all were found."""
    ca_b64 = base64.b64encode(ca_pem).decode()
    deadline = time.monotonic() + wait_s
    pending = list(targets)
    while True:
        still: list[tuple[str, str, str | None]] = []
        for kind, name, policy in pending:
            for attempt in range(5):
                obj = clients.read_webhooks(kind, name)
                if obj is None:
                    still.append((kind, name, policy))
                    break
                ops = webhook_patch(obj, ca_b64, policy, overrides if policy else None)
                if not ops:
                    _log(f"{kind} webhook configuration {name}: up to date")
                    break
                try:
                    clients.patch_webhooks(kind, name, ops)
                except Exception as exc:
                    if api_status(exc) in (409, 422) and attempt < 4:  # changed under us: re-read
                        continue
                    raise
                _log(f"{kind} webhook configuration {name}: caBundle{' and failurePolicy' if policy else ''} set")
                break
        if not still:
            return True
        if time.monotonic() >= deadline:
            for kind, name, _ in still:
                _log(f"{kind} webhook configuration {name} not found")
            return False
        pending = still
        time.sleep(2)


def run_create(args: argparse.Namespace, clients: _Clients | None = None) -> int:
    clients = clients or _Clients(args.kubeconfig)
    names = service_dns_names(args.service, args.namespace)
    now = dt.datetime.now(dt.UTC)
    renew_before = dt.timedelta(days=args.renew_before_days)
    for _ in range(5):
        current = _read_json(clients.core.read_namespaced_secret, args.secret, args.namespace)
        files = decode_secret_data((current or {}).get("data"))
        reason = renewal_reason(files, names, now, renew_before)
        if reason is None:
            _log(f"Secret {args.namespace}/{args.secret} is valid; kept")
            return 0
        _log(f"issuing a new CA and serving certificate for {', '.join(names)}: {reason}")
        bundle = make_bundle(names, days=args.days, key_type=args.key_type)
        new_files = bundle_files(bundle, files.get("ca.crt"), now)
        # Trust the new CA before any replica can serve a cert signed by it.
        targets: list[tuple[str, str, str | None]] = [
            (kind, name, None) for kind, name in (("mutating", args.mutating), ("validating", args.validating)) if name
        ]
        if current is not None and targets:
            _patch_configs(clients, targets, new_files["ca.crt"], wait_s=0)
        try:
            if current is None:
                clients.core.create_namespaced_secret(args.namespace, secret_manifest(
                    args.secret, args.namespace, new_files))
            else:
                rv = (current.get("metadata") or {}).get("resourceVersion")
                clients.core.replace_namespaced_secret(args.secret, args.namespace, secret_manifest(
                    args.secret, args.namespace, new_files, rv))
        except Exception as exc:
            if api_status(exc) == 409:  # created or updated concurrently: look again
                continue
            raise
        _log(f"Secret {args.namespace}/{args.secret} written")
        return 0
    _log("Secret kept changing under us; giving up")
    return 1


def run_patch(args: argparse.Namespace, clients: _Clients | None = None) -> int:
    clients = clients or _Clients(args.kubeconfig)
    deadline = time.monotonic() + args.timeout
    while True:
        secret = _read_json(clients.core.read_namespaced_secret, args.secret, args.namespace)
        ca_pem = decode_secret_data((secret or {}).get("data")).get("ca.crt")
        if ca_pem and _load_certs(ca_pem):
            break
        if time.monotonic() >= deadline:
            _log(f"Secret {args.namespace}/{args.secret} has no ca.crt")
            return 1
        time.sleep(2)
    targets = [("mutating", args.mutating, args.mutating_failure_policy),
               ("validating", args.validating, args.validating_failure_policy)]
    overrides = dict(getattr(args, "hook_failure_policy", None) or [])
    ok = _patch_configs(clients, targets, ca_pem, wait_s=max(0.0, deadline - time.monotonic()), overrides=overrides)
    return 0 if ok else 1


def _hook_policy(text: str) -> tuple[str, str]:
    name, sep, policy = text.partition("=")
    if not sep or not name or policy not in FAILURE_POLICIES:
        raise argparse.ArgumentTypeError(f"{text!r}: use NAME=POLICY with POLICY one of {', '.join(FAILURE_POLICIES)}")
    return name, policy


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m webhook.jobs.certs_job", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster)")
    sub = parser.add_subparsers(dest="verb", required=True)

    create = sub.add_parser("create", help="make sure the TLS Secret holds a valid CA + serving cert")
    create.add_argument("--namespace", required=True)
    create.add_argument("--secret", required=True)
    create.add_argument("--service", required=True)
    create.add_argument("--key-type", choices=["ecdsa", "rsa"], default="ecdsa")
    create.add_argument("--days", type=int, default=365)
    create.add_argument("--renew-before-days", type=int, default=30)
    create.add_argument("--mutating", help="MutatingWebhookConfiguration to trust a renewed CA first")
    create.add_argument("--validating", help="ValidatingWebhookConfiguration to trust a renewed CA first")
    create.set_defaults(func=run_create)

    patch = sub.add_parser("patch", help="write the Secret's ca.crt as caBundle into the webhook configurations")
    patch.add_argument("--namespace", required=True)
    patch.add_argument("--secret", required=True)
    patch.add_argument("--mutating", required=True)
    patch.add_argument("--validating", required=True)
    patch.add_argument("--mutating-failure-policy", choices=FAILURE_POLICIES)
    patch.add_argument("--validating-failure-policy", choices=FAILURE_POLICIES)
    patch.add_argument("--hook-failure-policy", type=_hook_policy, action="append", metavar="NAME=POLICY",
                       help="failure policy of one webhook by name, overriding the configuration's (repeatable)")
    patch.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the objects")
    patch.set_defaults(func=run_patch)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "days", 1) < 1 or getattr(args, "renew_before_days", 0) < 0:
        print("certs-job: --days must be ≥ 1 and --renew-before-days ≥ 0", file=sys.stderr)
        return 2
    if args.verb == "create" and args.renew_before_days >= args.days:
        print("certs-job: --renew-before-days must be less than --days", file=sys.stderr)
        return 2
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
