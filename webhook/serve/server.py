"""`vramgate serve`: the inventory, the app, HTTPS with a reloading certificate, and a graceful shutdown.

Ports: with ``server.metrics_port`` set, one uvicorn server listens on two sockets, the webhook and extender port
(reviews, extender calls, probes) and the metrics port (``/metrics``, ``/inventory``, the status page; guarded by
TokenReview and SubjectAccessReview under ``server.metrics_auth``, ``serve/auth.py``); ``PortSplit`` sends each
request to its port's app. One lifespan, one drain, one connection bound for both.

Lifecycle: the app's lifespan starts the inventory (a file or a cluster watch), the TLS reloader
and the role tasks; SIGTERM turns ``/readyz`` to 503 at once, keeps serving for
``server.shutdown_delay_seconds`` (so endpoints drop the pod first), then closes the listener,
lets in-flight reviews finish and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI

from ..cluster.snapshot import InventorySource, StaticInventory
from ..config import Config
from ..kube import heap
from ..kube.access import AccessReviewer
from ..kube.apiserver import RawApi
from ..kube.autofit_events import AutofitEvents
from ..kube.configmaps import ConfigMapReader
from ..kube.hub_store import HubModelStore
from ..kube.manifests import load_inventory
from ..metrics import Metrics
from ..tls.certs import make_bundle, service_dns_names
from ..tls.reload import CertReloader
from .acceptor import TLSAcceptor
from .app import Surface, create_app
from .auth import GUARDED_PATHS, AccessGuard
from .connections import ConnectionGuard, DeadlineProtocol, default_max_connections
from .peers import OPEN_PATHS, ClientCertGuard, require_client_certs
from .state import AppState, plays

log = logging.getLogger("vramgate.server")

DEV_SERVICE = "vramgate"
# `serve --dev`: in-flight requests get this long at shutdown (production: server.shutdownTimeoutSeconds).
DEV_GRACEFUL_TIMEOUT_S = 1.0
SWITCH_INTERVAL_S = 0.0005


# ---------------------------------------------------------------------------------------------------------------
# Pieces


def build_inventory(args: argparse.Namespace, config: Config, metrics: Metrics) -> InventorySource:
    """``--nodes FILE``: a fixed inventory; otherwise a list+watch of the cluster."""
    if getattr(args, "nodes", None):
        nodes, dra = load_inventory(args.nodes)
        return StaticInventory(nodes, config, dra)
    from ..kube.nodecache import KubeInventory

    # PriorityClasses and NodePools only where pods are admitted (the webhook's RBAC grants them; the extender's
    # does not).
    mutates = plays(getattr(args, "role", "all"), "webhook")
    return KubeInventory(config, kubeconfig=getattr(args, "kubeconfig", None), metrics=metrics,
                         priorities=mutates, pools=mutates, settler=heap.Settler())


def configmap_reader(config: Config, inventory: InventorySource, kubeconfig: str | None) -> ConfigMapReader | None:
    """The ConfigMap reader of an instance that admits in a cluster (none for ``--nodes``, or when turned off)."""
    if isinstance(inventory, StaticInventory) or not config.admission.read_configmaps:
        return None

    def api() -> RawApi:
        from ..kube.client import api_client

        # No client retries: urllib3's default three made a frozen API server cost 4 x 2 s per review, past the
        # webhook's timeoutSeconds. A review's read is one attempt within its budget; a late one is read again in
        # the background (kube/configmaps.py).
        return RawApi(api_client(kubeconfig or getattr(inventory, "kubeconfig", None), retries=False), timeout=2.0)

    return ConfigMapReader(api, ttl=config.admission.configmap_ttl_seconds)


def autofit_events(inventory: InventorySource, kubeconfig: str | None) -> AutofitEvents | None:
    """The writer of autofit's Events, for an instance that admits in a cluster."""
    if isinstance(inventory, StaticInventory):
        return None

    def api() -> RawApi:
        from ..kube.client import api_client

        return RawApi(api_client(kubeconfig or getattr(inventory, "kubeconfig", None)), timeout=5.0)

    return AutofitEvents(api, os.environ.get("POD_NAME") or socket.gethostname())


def hub_store(config: Config, inventory: InventorySource, kubeconfig: str | None) -> HubModelStore | None:
    """Where hub-resolved models are kept (``hub.configmap``), for an instance that runs in a cluster."""
    if not config.hub.enabled or not config.hub.configmap or isinstance(inventory, StaticInventory):
        return None

    def api() -> RawApi:
        from ..kube.client import api_client

        return RawApi(api_client(kubeconfig or getattr(inventory, "kubeconfig", None)), timeout=5.0)

    return HubModelStore(api, config.namespace, config.hub.configmap)


def access_reviewer(config: Config, inventory: InventorySource, kubeconfig: str | None) -> AccessReviewer | None:
    """Who may read the metrics port's routes (``server.metrics_auth``); the client is made at the first request.

    With ``--nodes`` too: the reviews need only an API server (``--kubeconfig``, in-cluster or the default
    kubeconfig), not a watched cluster."""
    server = config.server
    if not server.metrics_auth:
        return None

    def api() -> RawApi:
        from ..kube.client import api_client

        # One attempt per review within its deadline (urllib3's default retries would make a frozen API server cost
        # four deadlines per request).
        return RawApi(api_client(kubeconfig or getattr(inventory, "kubeconfig", None), retries=False),
                      timeout=server.access_review_timeout_seconds)

    return AccessReviewer(api, ttl=server.access_cache_seconds, size=server.access_cache_size,
                          timeout=server.access_review_timeout_seconds)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def ensure_dev_certs(cert_path: Path, key_path: Path, config: Config) -> bool:
    """``--dev``: a self-signed CA (``ca.crt`` beside the cert) and a serving pair, unless both files exist.

    The serving cert names localhost, 127.0.0.1 and the ``vramgate`` Service in ``config.namespace``.
    Returns True when it wrote new files.
    """
    if cert_path.exists() and key_path.exists():
        return False
    names = ["localhost", "127.0.0.1", *service_dns_names(DEV_SERVICE, config.namespace)]
    bundle = make_bundle(names)
    _write_atomic(cert_path.parent / "ca.crt", bundle.ca_pem, 0o644)
    _write_atomic(key_path, bundle.key_pem, 0o600)
    _write_atomic(cert_path, bundle.cert_pem, 0o644)
    log.info("wrote a self-signed dev certificate", extra={"fields": {"cert": str(cert_path), "names": names}})
    return True


def _log_task_end(task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("background task failed", exc_info=exc, extra={"fields": {"task": task.get_name()}})


def _start_role_tasks(state: AppState, kubeconfig: str | None = None) -> list[asyncio.Task[Any]]:
    """Background work of the roles this instance plays, started in the app lifespan and cancelled at shutdown.

    The webhook and the extender are request-driven (their routes come from ``create_app``); the
    GPU health controller (role ``all`` or ``controller``) is the role with a loop of its own. With a
    fixed inventory (``--nodes``) it has no cluster to act on and returns at once.
    """
    tasks: list[asyncio.Task[Any]] = []
    if state.serves("controller"):
        tasks.append(asyncio.create_task(run_controller(state, kubeconfig), name="controller"))
    for task in tasks:
        task.add_done_callback(_log_task_end)
    return tasks


async def run_controller(state: AppState, kubeconfig: str | None = None) -> None:
    """The controller role of ``vramgate serve``: run until cancelled (then release the Lease).

    Uses the service's inventory and metrics; ``kubeconfig`` defaults to the inventory's. With a
    fixed inventory (``--nodes``) there is no cluster to act on, and it returns at once.
    """
    if isinstance(state.inventory, StaticInventory):
        logging.getLogger("vramgate.controller").info("controller: fixed inventory (--nodes), no cluster to act on")
        return
    from ..controller.controller import Controller
    from ..kube.client import api_client

    kubeconfig = kubeconfig or getattr(state.inventory, "kubeconfig", None)
    client = await asyncio.to_thread(api_client, kubeconfig)
    controller = Controller(state.config, client, state.inventory, state.metrics, catalog=state.catalog)
    await controller.run()


def build_app(state: AppState, reloader: CertReloader | None = None, kubeconfig: str | None = None,
              surface: Surface = "all") -> FastAPI:
    """``create_app`` plus a lifespan that starts the inventory, the TLS reloader and the role tasks."""
    app = create_app(state, surface)

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        await state.inventory.start()
        if state.hub is not None:
            await asyncio.to_thread(state.hub.load)  # what earlier pods resolved: before the first review
        tasks: list[asyncio.Task[Any]] = []
        if reloader is not None:
            tasks.append(asyncio.create_task(reloader.run(), name="tls-reload"))
        tasks.extend(_start_role_tasks(state, kubeconfig))
        if state.config.models_file:
            from .models_watch import ModelsWatcher

            watcher = ModelsWatcher(state, state.config.models_file, state.config.inline_models,
                                    state.config.models_file_bytes, state.config.models_reload_interval_seconds)
            app.state.vg_models = watcher
            tasks.append(asyncio.create_task(watcher.run(), name="models-reload"))
        try:
            yield
        finally:
            state.shutting_down = True
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if state.hub is not None:
                await asyncio.to_thread(state.hub.stop)
            await state.inventory.stop()

    app.router.lifespan_context = lifespan
    return app


class PortSplit:
    """Requests that arrived on the metrics socket go to ``ops``; every other request, and the lifespan, to ``main``.

    The socket is told by the local port uvicorn puts in the scope (``server``); ``ops_port`` is set once the metrics
    socket is bound (a test binds port 0)."""

    def __init__(self, main: Any, ops: Any, ops_port: int | None = None) -> None:
        self.main = main
        self.ops = ops
        self.ops_port = ops_port

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.ops_port is not None:
            local = scope.get("server") or (None, None)
            if local[1] == self.ops_port:
                await self.ops(scope, receive, send)
                return
        await self.main(scope, receive, send)


def serving_app(state: AppState, reloader: CertReloader | None, kubeconfig: str | None) -> tuple[Any, PortSplit | None]:
    """The ASGI app of ``vramgate serve``, and its PortSplit when ``server.metrics_port`` is set."""
    server = state.config.server
    reviewer = access_reviewer(state.config, state.inventory, kubeconfig)
    checked = server.client_ca_file is not None
    if server.metrics_port is None:
        app: Any = build_app(state, reloader, kubeconfig, "all")
        if checked:  # the metrics surface sits on this port too: the token guard is its bound, not a certificate
            app = ClientCertGuard(app, server.client_names, OPEN_PATHS | GUARDED_PATHS)
        if reviewer is not None:
            app = AccessGuard(app, reviewer, state.metrics, GUARDED_PATHS)
        return app, None
    ops: Any = create_app(state, "ops")
    if reviewer is not None:
        ops = AccessGuard(ops, reviewer, state.metrics)  # every path of the metrics port, as controller-runtime does
    main: Any = build_app(state, reloader, kubeconfig, "webhook")
    if checked:
        main = ClientCertGuard(main, server.client_names)
    split = PortSplit(main, ops)
    return split, split


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket as uvicorn binds one (IPv6 when the host is an IPv6 address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class CloseWhileDraining:
    """While draining, every response carries ``Connection: close``.

    kube-apiserver keeps connections to a webhook alive; when uvicorn's shutdown closes one just as
    a request goes out on it, Go's HTTP client does not retry the POST, and the review is lost (the
    mutating webhook fails open: an unmutated pod; seen by the real-node e2e during ``helm upgrade``).
    Closing each connection after its next response during the drain makes the client reconnect,
    through the Service, to a replica that stays."""

    def __init__(self, app: Any, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.state.shutting_down:
            await self.app(scope, receive, send)
            return

        async def send_closing(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, send_closing)


class _TLSConfig(uvicorn.Config):
    """uvicorn builds its own SSLContext from the files; swap in the reloader's live one (any uvicorn version)."""

    def __init__(self, app: Any, reloader: CertReloader, **kwargs: Any) -> None:
        self.reloader = reloader
        self.vg_guard: ConnectionGuard | None = None  # read by DeadlineProtocol
        super().__init__(app, ssl_certfile=str(reloader.cert_path), ssl_keyfile=str(reloader.key_path), **kwargs)

    def load(self) -> None:
        super().load()
        guard = self.vg_guard
        if guard is None:
            self.ssl = self.reloader.context
            return
        # TLS is started by the acceptor, per connection, once the socket is counted and admitted: the listener
        # itself is plain TCP (webhook/serve/acceptor.py). The scheme the app sees still comes from the transport.
        self.ssl = None
        http = self.http_protocol_class
        reloader = self.reloader

        def accept(**kw: Any) -> TLSAcceptor:
            return TLSAcceptor(lambda: http(**kw), lambda: reloader.context, guard)

        self.http_protocol_class = accept  # type: ignore[assignment]


class GracefulServer(uvicorn.Server):
    """SIGTERM: ``/readyz`` 503 now, keep serving for ``delay`` seconds, then uvicorn's graceful shutdown."""

    def __init__(self, config: uvicorn.Config, state: AppState, delay: float, split: PortSplit | None = None) -> None:
        super().__init__(config)
        self.state = state
        self.delay = delay
        self.split = split
        self._exit_at: float | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """With a metrics port: bind both sockets (uvicorn binds only one host and port) and serve them together."""
        if sockets is None and self.split is not None:
            port = self.state.config.server.metrics_port
            assert port is not None
            sockets = []
            try:
                for p in (self.config.port, port):
                    sockets.append(bind(self.config.host, p))
            except OSError as exc:  # as uvicorn does for its one socket: a line, and no start (exit 1)
                log.error("cannot listen", extra={"fields": {"host": self.config.host, "port": p, "error": str(exc)}})
                for sock in sockets:
                    sock.close()
                return
            self.split.ops_port = sockets[1].getsockname()[1]
            log.info("listening", extra={"fields": {"host": self.config.host, "port": sockets[0].getsockname()[1],
                                                    "metrics_port": self.split.ops_port,
                                                    "metrics_auth": self.state.config.server.metrics_auth}})
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.state.shutting_down = True
        if self._exit_at is None and self.delay > 0 and sig == signal.SIGTERM:
            log.info("SIGTERM: draining", extra={"fields": {"delay_s": self.delay}})
            self._exit_at = time.monotonic() + self.delay
            return
        super().handle_exit(sig, frame)  # a second signal, SIGINT or no delay: stop now

    def _log_started_message(self, listeners: Any) -> None:
        """uvicorn names the scheme by ``config.ssl``, which the acceptor's plain listener leaves unset."""
        config = self.config
        plain = config.ssl
        config.ssl = plain or getattr(getattr(config, "reloader", None), "context", None)
        try:
            super()._log_started_message(listeners)
        finally:
            config.ssl = plain

    async def on_tick(self, counter: int) -> bool:
        if self._exit_at is not None and time.monotonic() >= self._exit_at:
            self.should_exit = True
        return await super().on_tick(counter)


def make_server(
    state: AppState, reloader: CertReloader, host: str, port: int, kubeconfig: str | None = None, *,
    dev: bool = False, **kwargs: Any
) -> GracefulServer:
    """The uvicorn server for an instance (uvloop and httptools when installed).

    ``dev`` (``serve --dev``): no drain delay and a short graceful timeout, so Ctrl-C (or a SIGTERM from
    a process manager) on a laptop stops at once; no endpoints are there to drop the pod first. A
    config file that sets ``server.shutdown_delay_seconds`` keeps its drain (and timeout) in dev too.
    """
    fast = dev and "shutdown_delay_seconds" not in state.config.server.model_fields_set
    graceful = state.config.server.shutdown_timeout_seconds
    app, split = serving_app(state, reloader, kubeconfig)
    config = _TLSConfig(
        CloseWhileDraining(app, state),
        reloader,
        host=host,
        port=port,
        lifespan="on",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=min(graceful, DEV_GRACEFUL_TIMEOUT_S) if fast else graceful,
        http=DeadlineProtocol,
        timeout_keep_alive=state.config.server.keep_alive_seconds,
        **kwargs,
    )
    server_config = state.config.server
    config.vg_guard = ConnectionGuard(server_config.read_deadline_seconds,
                                      server_config.max_connections or default_max_connections(), state.metrics,
                                      handshake_deadline=server_config.handshake_deadline_seconds,
                                      max_per_peer=server_config.max_connections_per_peer)
    return GracefulServer(config, state, 0.0 if fast else state.config.server.shutdown_delay_seconds, split)


# ---------------------------------------------------------------------------------------------------------------
# The command


def tune_runtime() -> None:
    """Keep the interpreter's housekeeping off the review path: the GC (``kube/heap.py``) and the GIL hand-off.

    The watch threads, the audit and the controller's writes share the GIL with the event loop that answers
    reviews: each time the loop waits on a socket it must win the GIL back, by default after up to 5 ms of
    another thread's bytecode. 0.5 ms bounds that wait per hand-off (a review takes several): the webhooks'
    create p99 at 5,000 nodes went from +144 to +18 ms (docs/scaling.md).
    """
    heap.tune()
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def _ignore(sig: int, frame: FrameType | None) -> None:
    """uvicorn re-raises the signal that stopped it; after a clean shutdown that is a no-op."""


def serve(args: argparse.Namespace, config: Config) -> int:
    """Run the service until SIGTERM/SIGINT; 0 after a clean shutdown, 2 on bad input, 1 if it cannot start."""
    from .logs import setup_logging

    setup_logging(config.server.log_level)
    cert, key = Path(args.tls_cert), Path(args.tls_key)
    if getattr(args, "dev", False):
        ensure_dev_certs(cert, key, config)
    missing = [str(p) for p in (cert, key) if not p.is_file()]
    if missing:
        print(f"vramgate serve: {', '.join(missing)} not found; pass --tls-cert and --tls-key, "
              "or --dev for a self-signed pair", file=sys.stderr)
        return 2
    try:
        reloader = CertReloader.from_files(cert, key, config.server.tls_reload_interval_seconds)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        print(f"vramgate serve: cannot load {cert} / {key}: {exc}", file=sys.stderr)
        return 2
    if config.server.client_ca_file:
        try:
            require_client_certs(reloader.context, config.server.client_ca_file)
        except (OSError, ValueError) as exc:
            print(f"vramgate serve: cannot load server.client_ca_file {config.server.client_ca_file}: {exc}",
                  file=sys.stderr)
            return 2
    if config.server.metrics_port and config.server.metrics_port == args.port:
        print(f"vramgate serve: server.metrics_port ({config.server.metrics_port}) is the serving port; "
              "pick another, or unset it to serve everything on one port", file=sys.stderr)
        return 2
    metrics = Metrics()
    inventory = build_inventory(args, config, metrics)
    kubeconfig = getattr(args, "kubeconfig", None)
    state = AppState(config, inventory, role=args.role, metrics=metrics,
                     configmaps=configmap_reader(config, inventory, kubeconfig),
                     hub_store=hub_store(config, inventory, kubeconfig),
                     autofit_events=autofit_events(inventory, kubeconfig))
    server = make_server(state, reloader, args.host, args.port, getattr(args, "kubeconfig", None),
                         dev=bool(getattr(args, "dev", False)))
    handled = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, _ignore) for sig in handled}
    tune_runtime()
    pauses = heap.PauseTimer(metrics.observe_gc_pause)
    pauses.install()
    try:
        server.run()
    finally:
        pauses.remove()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("stopped", extra={"fields": {"clean": server.started}})
    return 0 if server.started else 1
