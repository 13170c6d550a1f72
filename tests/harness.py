"""A real uvicorn server on a free loopback port with real TLS, for HTTP tests."""

from __future__ import annotations

import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from webhook.tls.certs import make_bundle, write_bundle


@dataclass
class Running:
    """A started server: its base URL, the CA that signed its cert, and a ready httpx client."""

    url: str
    port: int
    ca_path: Path
    cert_dir: Path
    server: uvicorn.Server

    def client(self, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=ssl.create_default_context(cafile=str(self.ca_path)),
                            timeout=10, **kw)


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def serve_app(app: Any, cert_dir: Path | None = None, **uvicorn_kw: Any) -> Iterator[Running]:
    """Serve an ASGI app over HTTPS on 127.0.0.1:<free port> in a background thread."""
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(cert_dir or tmp)
        if not (certs / "tls.crt").exists():
            write_bundle(make_bundle(["localhost", "127.0.0.1"]), certs)
        sock = free_socket()
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            app, ssl_certfile=str(certs / "tls.crt"), ssl_keyfile=str(certs / "tls.key"),
            log_level="warning", lifespan="on", **uvicorn_kw,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        try:
            yield Running(f"https://127.0.0.1:{port}", port, certs / "ca.crt", certs, server)
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            sock.close()
