"""A model hub that misbehaves (issue #44): endless bodies, foreign redirects, silence, a flood of names, and
shutdown while a lookup hangs. Real sockets throughout; figures printed with ``pytest -s``."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from webhook.config import Hub
from webhook.models.hub import HubError, fetch_entry
from webhook.serve.hub import STOP_WAIT_SECONDS, HubResolver

from .helpers import EXAMPLES, review
from .test_server import VRAMGATE, free_port, wait_ready
from .tlsutil import client_context, request

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hub"
REPO = "HuggingFaceTB/SmolLM3-3B"  # a config tests/fixtures/hub holds


class Hostile(BaseHTTPRequestHandler):
    """``/<mode>/...``: the hub's resolve API at the mercy of a mode chosen by the URL's first segment."""

    protocol_version = "HTTP/1.1"
    seen: list[str] = []

    def do_GET(self) -> None:
        Hostile.seen.append(self.path)
        mode, _, rest = self.path.lstrip("/").partition("/")
        if mode == "endless":  # 5 GB declared, then streamed until the client hangs up
            self.send_response(200)
            self.send_header("Content-Length", str(5 * 10**9))
            self.end_headers()
            self._pour()
        elif mode == "undeclared":  # no length at all: close-delimited, endless
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self._pour()
        elif mode == "foreign":  # to another host: localhost is not 127.0.0.1 to a URL
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{self.server.server_address[1]}/ok/{rest}")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif mode == "relative":  # a renamed repository: same host, relative Location
            self.send_response(307)
            self.send_header("Location", f"/ok/{rest}")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif mode == "silent":
            time.sleep(30)
        elif mode == "drip":  # a byte at a time, each within the read timeout, never done
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            with _quiet():
                for _ in range(100000):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
        else:  # ok: the fixture, as the hub serves it
            repo, _, name = rest.partition("/resolve/")
            path = FIXTURES / repo / name.partition("/")[2]
            if not path.is_file():
                body = orjson.dumps({"error": "EntryNotFound"})
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
            else:
                body = path.read_bytes()
                self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def _pour(self) -> None:
        block = b"{" * (1 << 20)
        with _quiet():
            for _ in range(5000):
                self.wfile.write(block)

    def log_message(self, *args: Any) -> None:
        pass


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is not None and issubclass(kind, (BrokenPipeError, ConnectionResetError))


@pytest.fixture(scope="module")
def hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def _peak_rss_of_fetch(endpoint: str) -> tuple[str, float, float]:
    """fetch_entry in a fresh interpreter: what it raised, its peak RSS (MiB, its own VmHWM: ru_maxrss of a child
    counts the parent's size at fork, 379 MiB deep into the suite) and how long it took."""
    code = ("import sys\nfrom webhook.models.hub import fetch_entry, HubError\n"
            "try:\n    fetch_entry(sys.argv[1], endpoint=sys.argv[2], timeout=20)\n    print('no error')\n"
            "except HubError as e:\n    print(e)\n"
            "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))\n")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, REPO, endpoint], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=60, check=True)
    took = time.monotonic() - start
    said, peak_kib = proc.stdout.strip().rsplit("\n", 1)
    return said, int(peak_kib) / 1024, took


@pytest.mark.parametrize("mode", ["endless", "undeclared"])
def test_a_hub_sending_gigabytes_is_cut_at_the_cap(hub: str, mode: str) -> None:
    said, peak, took = _peak_rss_of_fetch(f"{hub}/{mode}")
    print(f"\n{mode}: peak RSS {peak:.0f} MiB in {took:.2f}s: {said}")
    assert "more than a model config holds" in said, said
    assert peak <= 300, peak  # the bound; reading it whole took 1.6 GiB
    assert took < 15


def test_a_redirect_to_another_host_is_not_followed(hub: str) -> None:
    Hostile.seen.clear()
    with pytest.raises(HubError, match="redirected to another host"):
        fetch_entry(REPO, endpoint=f"{hub}/foreign", timeout=5)
    assert not any(p.startswith("/ok/") for p in Hostile.seen), Hostile.seen


def test_a_redirect_on_the_same_host_is_followed(hub: str) -> None:
    entry = fetch_entry(REPO, endpoint=f"{hub}/relative", timeout=5)
    assert entry["params"] > 0


@pytest.mark.parametrize("mode", ["silent", "drip"])
def test_a_hub_that_never_finishes_is_given_up_on_at_the_deadline(hub: str, mode: str) -> None:
    start = time.monotonic()
    with pytest.raises(HubError):
        fetch_entry(REPO, endpoint=f"{hub}/{mode}", timeout=1.0)
    took = time.monotonic() - start
    print(f"\n{mode}: given up after {took:.2f}s (timeout 1 s)")
    assert took < 2.5


def test_the_queue_is_bounded_and_each_name_queued_once(hub: str) -> None:
    resolver = HubResolver(Hub(enabled=True, endpoint=f"{hub}/silent", timeout_seconds=5, max_models=64),
                           add=lambda entry: None)
    start = time.monotonic()
    notes = [resolver.note(f"org/model-{i}") for i in range(100_000)]
    took = time.monotonic() - start
    queued = resolver._queue.qsize()  # one may be in flight already
    print(f"\n100,000 distinct names in {took:.2f}s: {queued} queued, "
          f"{sum('not asked' in (n or '') for n in notes)} told 'not asked yet'")
    assert queued <= 64
    assert sum("asking" in (n or "") for n in notes) == 64
    assert "not asked of 127.0.0.1" in (notes[-1] or "") and "judged without it" in (notes[-1] or "")
    # Naming a queued model again queues nothing more.
    for _ in range(1000):
        resolver.note("org/model-3")
    assert resolver._queue.qsize() <= 64
    start = time.monotonic()
    resolver.stop()
    assert time.monotonic() - start <= STOP_WAIT_SECONDS + 0.5


def test_sigterm_with_a_hanging_hub_exits_within_the_grace_period(hub: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"server:\n  shutdown_delay_seconds: 0\nhub:\n  enabled: true\n  endpoint: {hub}/silent\n"
                      "  timeout_seconds: 120\n")
    port = free_port()
    proc = subprocess.Popen([str(VRAMGATE), "serve", "--config", str(config), "--dev", "--nodes",
                             str(EXAMPLES / "cluster.yaml"), "--host", "127.0.0.1", "--port", str(port)],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, tmp_path / "certs" / "ca.crt", proc)
        ctx = client_context(tmp_path / "certs" / "ca.crt")
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
               "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                                        "command": ["vllm", "serve", "someorg/never-heard-of-it"],
                                        "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
        status, _, body = request(port, ctx, method="POST", path="/validate", body=orjson.dumps(review(pod)))
        assert status == 200 and b"asking 127.0.0.1" in body, body[:300]
        time.sleep(0.5)  # the lookup is in flight against a hub that answers nothing for 30 s (timeout 120 s)
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        took = time.monotonic() - start
        print(f"\nSIGTERM with a hanging hub lookup: exit {code} after {took:.2f}s")
        assert code == 0 and took <= 25
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
