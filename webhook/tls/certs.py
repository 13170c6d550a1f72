"""Certificates for the webhook: a CA and a serving cert with the Service's DNS names (`vramgate certs init`)."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KeyType = Literal["ecdsa", "rsa"]
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
CA_DAYS = 3650


@dataclass(frozen=True)
class Bundle:
    """PEM bytes of a CA cert, a serving cert (chain) and its key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    ca_key_pem: bytes

    @property
    def ca_bundle_b64(self) -> str:
        """The ``caBundle`` value for webhook configurations."""
        return base64.b64encode(self.ca_pem).decode()


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The four names kube-apiserver may use for a Service: S, S.N, S.N.svc, S.N.svc.cluster.local."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _key(kind: KeyType) -> PrivateKey:
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_ca(common_name: str = "vramgate-ca", key_type: KeyType = "ecdsa") -> tuple[x509.Certificate, PrivateKey]:
    """A self-signed CA certificate and key."""
    key = _key(key_type)
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_serving_cert(
    ca_cert: x509.Certificate, ca_key: PrivateKey, names: list[str], *, days: int = 365,
    key_type: KeyType = "ecdsa",
) -> tuple[x509.Certificate, PrivateKey]:
    """A serving certificate for DNS names and IP addresses, signed by the CA."""
    key = _key(key_type)
    now = dt.datetime.now(dt.UTC)
    sans: list[x509.GeneralName] = []
    for n in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def make_bundle(names: list[str], *, days: int = 365, key_type: KeyType = "ecdsa") -> Bundle:
    """A fresh CA and a serving cert for ``names``."""
    ca_cert, ca_key = make_ca(key_type=key_type)
    cert, key = make_serving_cert(ca_cert, ca_key, names, days=days, key_type=key_type)
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    return Bundle(ca_pem, cert.public_bytes(serialization.Encoding.PEM), _pem_key(key), _pem_key(ca_key))


def write_bundle(bundle: Bundle, out: Path) -> None:
    """Write ``ca.crt``, ``tls.crt`` and ``tls.key`` (the key names of a ``kubernetes.io/tls`` Secret).

    Each file is written beside its target and renamed into place, so a process that polls the
    files never reads a half-written key.
    """
    out.mkdir(parents=True, exist_ok=True)
    for name, data, mode in (("ca.crt", bundle.ca_pem, 0o644), ("tls.crt", bundle.cert_pem, 0o644),
                             ("tls.key", bundle.key_pem, 0o600)):
        tmp = out / f".{name}.tmp"
        tmp.write_bytes(data)
        os.chmod(tmp, mode)
        os.replace(tmp, out / name)


def cmd_certs_init(args: argparse.Namespace) -> int:
    """`vramgate certs init`: exit 1 without writing when files exist and --force is not given."""
    out = Path(args.out)
    existing = [str(out / n) for n in ("ca.crt", "tls.crt", "tls.key") if (out / n).exists()]
    if existing and not args.force:
        print(f"vramgate certs: {', '.join(existing)} exist; pass --force to overwrite")
        return 1
    names = service_dns_names(args.service, args.namespace)
    bundle = make_bundle(names, days=args.days, key_type=args.key_type)
    write_bundle(bundle, out)
    print(bundle.ca_bundle_b64)
    return 0
