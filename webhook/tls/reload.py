"""HTTPS for the service: one live SSLContext (TLS ≥ 1.2, AEAD only) whose certificate is swapped as the files change.

kube-apiserver and kube-scheduler reach vramgate only over TLS, and the serving cert rotates
(cert-manager, ``vramgate certs``, a Secret update). :class:`CertReloader` polls a hash of the
cert and key files and calls ``load_cert_chain`` on the context the listening sockets already
use (the approach of vLLM's ``entrypoints/ssl.py``): new handshakes get the new certificate,
connections already open keep theirs, nothing restarts.

A pair is loaded only once it has been proven good on a scratch context from the *same bytes*:
loading a mismatched pair (a rotation caught half-written) into the live context would leave it
with no usable certificate. The bytes are handed to OpenSSL through an in-memory file
(``memfd_create``), so no key ever touches a writable filesystem.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path

from cryptography.hazmat.primitives import serialization

log = logging.getLogger("vramgate.tls")

DEFAULT_INTERVAL = 1.0

# TLS 1.2: forward-secret AEAD suites only, for either key `vramgate certs` makes (ECDSA P-256, the default, or RSA):
# Mozilla's "intermediate" list without DHE. No CBC suite (Lucky13 and its kin), no static-RSA key exchange. Go's
# crypto/tls (kube-apiserver, kube-scheduler) offers all six. TLS 1.3 suites are OpenSSL's own (all AEAD):
# set_ciphers does not touch them.
TLS12_CIPHERS = ":".join((
    "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
))


def _new_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


@contextlib.contextmanager
def _pem_file(data: bytes) -> Iterator[str]:
    """A path OpenSSL can read ``data`` from: an in-memory file where the OS has them, else a private temp file."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("vramgate-tls", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="vramgate-tls-") as tmp:
        path = Path(tmp) / "pair.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        yield str(path)


def read_pair(cert_path: str | os.PathLike[str], key_path: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    return Path(cert_path).read_bytes(), Path(key_path).read_bytes()


def load_pair(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Load a PEM chain and key into ``context``, after proving them on a scratch context (raises ssl.SSLError)."""
    combined = key_pem.rstrip(b"\n") + b"\n" + cert_pem
    with _pem_file(combined) as path:
        _new_context().load_cert_chain(path)  # raises on a bad or mismatched pair; the live context is untouched
        context.load_cert_chain(path)


def server_context(cert_path: str | os.PathLike[str], key_path: str | os.PathLike[str]) -> ssl.SSLContext:
    """The listening sockets' context: TLS 1.2 minimum (ECDHE AEAD suites), HTTP/1.1 ALPN, the pair from the files."""
    ctx = _new_context()
    load_pair(ctx, *read_pair(cert_path, key_path))
    return ctx


def _digest(cert_pem: bytes, key_pem: bytes) -> str:
    return hashlib.sha256(cert_pem + b"\0" + key_pem).hexdigest()


def _key_kind(key_pem: bytes) -> str | None:
    """The private key's algorithm (OpenSSL keeps one certificate per algorithm in a context)."""
    try:
        return type(serialization.load_pem_private_key(key_pem, password=None)).__name__.lstrip("_")
    except (ValueError, TypeError):
        return None


class CertReloader:
    """Polls the cert and key files; on a change, loads the new pair into the live context."""

    def __init__(
        self,
        context: ssl.SSLContext,
        cert_path: str | os.PathLike[str],
        key_path: str | os.PathLike[str],
        interval: float = DEFAULT_INTERVAL,
    ) -> None:
        self.context = context
        self.cert_path, self.key_path = Path(cert_path), Path(key_path)
        self.interval = interval
        self.reloads = 0
        self.failures = 0
        self._loaded: str | None = None
        self._failed: str | None = None
        self._key_kind: str | None = None
        with contextlib.suppress(OSError):
            cert_pem, key_pem = read_pair(self.cert_path, self.key_path)
            self._loaded, self._key_kind = _digest(cert_pem, key_pem), _key_kind(key_pem)

    @classmethod
    def from_files(
        cls, cert_path: str | os.PathLike[str], key_path: str | os.PathLike[str], interval: float = DEFAULT_INTERVAL
    ) -> CertReloader:
        """A fresh server context loaded from the files, with its reloader."""
        return cls(server_context(cert_path, key_path), cert_path, key_path, interval)

    def check(self) -> bool:
        """Reload if the files changed since the last good load; True when a new pair went live."""
        try:
            cert_pem, key_pem = read_pair(self.cert_path, self.key_path)
        except OSError:
            return False  # mid-rotation (a Secret volume swaps a symlink): try again next tick
        digest = _digest(cert_pem, key_pem)
        if digest in (self._loaded, self._failed):
            return False
        try:
            load_pair(self.context, cert_pem, key_pem)
        except (ssl.SSLError, OSError, ValueError) as exc:
            self._failed = digest
            self.failures += 1
            log.warning("TLS pair not loaded; keeping the current one",
                        extra={"fields": {"cert": str(self.cert_path), "error": str(exc)}})
            return False
        self._loaded, self._failed = digest, None
        self.reloads += 1
        kind = _key_kind(key_pem)
        if self._key_kind and kind != self._key_kind:
            log.warning("TLS key algorithm changed; the old certificate stays in the context until a restart",
                        extra={"fields": {"was": self._key_kind, "now": kind}})
        self._key_kind = kind
        log.info("TLS certificate reloaded", extra={"fields": {"cert": str(self.cert_path), "reloads": self.reloads}})
        return True

    async def run(self) -> None:
        """Poll until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.check()
            except Exception:  # never let the poller die: the next tick tries again
                log.exception("TLS reload check failed")
