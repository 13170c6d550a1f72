"""The `vramgate` command line: serve, check, estimate, nodes and certs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .catalog import Catalog, builtin_catalog
from .config import Config, ConfigError, load_config
from .kinds import Runtimes
from .manifests import ManifestError, load_file, load_nodes
from .precision import ACCEPTED as PRECISIONS_ACCEPTED
from .precision import canonical
from .quantity import QuantityError, parse_count, parse_positive_int
from .snapshot import Snapshot, snapshot_from_nodes
from .verdict import judge
from .vram import EstimateRequest, estimate

EXIT_OK, EXIT_REJECTED, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(Exception):
    """Bad input on the command line: exit 2 with a one-line message."""


def _catalog(config: Config) -> Catalog:
    base = builtin_catalog()
    return base.with_entries(config.models) if config.models else base


def _kube_nodes(kubeconfig: str | None) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Nodes and GPUs in use per node, listed once from a cluster."""
    from .kube import list_nodes_and_usage

    return list_nodes_and_usage(kubeconfig)


def _snapshot(args: argparse.Namespace, config: Config) -> Snapshot:
    if getattr(args, "nodes", None):
        return snapshot_from_nodes(load_nodes(args.nodes), config)
    kubeconfig = getattr(args, "kubeconfig", None)
    default = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if kubeconfig is None and not Path(default.split(os.pathsep)[0]).exists():
        raise UsageError("no inventory: pass --nodes FILE or --kubeconfig PATH")
    try:
        nodes, used = _kube_nodes(kubeconfig)
    except Exception as exc:  # the client raises many types; all mean "cluster unreachable"
        raise UsageError(f"cannot list nodes: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
    return snapshot_from_nodes(nodes, config, used)


def cmd_check(args: argparse.Namespace, config: Config) -> int:
    catalog = _catalog(config)
    objects: list[dict[str, Any]] = []
    for path in args.file:
        objects.extend(load_file(path))
    snapshot = _snapshot(args, config)
    # ServingRuntimes and TrainingRuntimes in the same files are what their workloads refer to.
    runtimes = Runtimes.of(objects)
    rejected = False
    for obj in objects:
        result = judge(obj, snapshot, config, catalog, runtimes=runtimes)
        if result.view is None and result.code == "not-a-workload":
            continue
        meta = obj.get("metadata") or {}
        name = result.view.ref if result.view else f"{str(obj.get('kind', '?')).lower()}/{meta.get('name', '?')}"
        lines = [(r.judgement, r.role.view.ref) for r in result.roles] or [(result, name)]
        for judgement, ref in lines:
            if judgement.allowed:
                detail = judgement.demand.summary() if judgement.demand else "no GPU requested"
                print(f"ADMIT   {ref}: {detail}")
            else:
                rejected = True
                print(f"REJECT  {judgement.message}")
        for warning in result.warnings:
            print(f"  warning: {warning}")
    return EXIT_REJECTED if rejected else EXIT_OK


def cmd_estimate(args: argparse.Namespace, config: Config) -> int:
    catalog = _catalog(config)
    spec = None
    if args.model:
        spec = catalog.lookup(args.model)
        if spec is None and args.params is None:
            raise UsageError(f"unknown model {args.model!r}: not in the catalog; pass --params (e.g. 15B)")
    try:
        params = parse_count(args.params) if args.params else spec.params  # type: ignore[union-attr]
    except QuantityError as exc:
        raise UsageError(f"--params: {exc}; use a count such as 15B, 7.6b, 350M or 1.5e9") from None
    precision = canonical(args.precision) if args.precision else (spec.dtype if spec else "bf16")
    if precision is None:
        raise UsageError(f"--precision: {args.precision!r} is not a precision; use {PRECISIONS_ACCEPTED}")
    try:
        context = parse_positive_int(args.context) if args.context else None
        batch = parse_positive_int(args.batch)
        gpus = parse_positive_int(args.gpus)
    except QuantityError as exc:
        raise UsageError(str(exc)) from None
    if context is None:
        context = spec.context if spec else 4096
        if args.workload == "training":
            context = min(context, 2048)
    est = estimate(EstimateRequest(
        params=params, precision=precision, spec=spec, context=context, batch=batch, gpus=gpus,
        workload=args.workload, kv_cache_dtype=args.kv_cache_dtype,
    ))
    if args.json:
        print(json.dumps({
            "model": spec.name if spec else None,
            "params": params,
            "precision": precision,
            "context": context,
            "batch": batch,
            "workload": args.workload,
            "gpus": gpus,
            "total_mib": est.total_mib,
            "per_gpu_mib": est.per_gpu_mib,
            "kv_bytes_per_token": est.kv_bytes_per_token,
            "architecture_known": est.shape_known,
            "breakdown": est.breakdown(),
        }, indent=2))
        return EXIT_OK
    name = spec.name if spec else "custom model"
    print(f"{name}: {params / 1e9:.3g}B parameters, {precision}, {args.workload}, context {context}, "
          f"batch {batch}, {gpus} GPU{'s' if gpus > 1 else ''}")
    rows = [(k.removesuffix("_mib").replace("_", " "), v) for k, v in est.breakdown().items()]
    for label, mib in rows:
        print(f"  {label:<12} {mib / 1024:>9.2f} GiB")
    print(f"  {'total':<12} {est.total_mib / 1024:>9.2f} GiB")
    print(f"  {'per GPU':<12} {est.per_gpu_mib / 1024:>9.2f} GiB")
    if not est.shape_known:
        print("  (architecture unknown: KV cache from a Llama-style fallback shape)")
    return EXIT_OK


def cmd_nodes(args: argparse.Namespace, config: Config) -> int:
    snapshot = _snapshot(args, config)
    header = ("NAME", "PRODUCT", "GPUS", "VRAM/GPU", "FREE", "DRIVER", "HEALTH", "REASON")
    rows = [header]
    for n in sorted(snapshot.nodes.values(), key=lambda n: n.name):
        if not n.is_gpu_node:
            continue
        rows.append((
            n.name,
            n.product or "-",
            f"{n.allocatable}/{n.capacity}",
            f"{n.vram_mib / 1024:.1f}Gi" if n.vram_mib else "?",
            str(snapshot.free_gpus(n.name)),
            str(n.driver_major) if n.driver_major is not None else "-",
            n.health,
            n.health_reason,
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    if len(rows) == 1:
        print("(no GPU nodes)")
    return EXIT_OK


def cmd_serve(args: argparse.Namespace, config: Config) -> int:
    from .server import serve

    return serve(args, config)


def cmd_certs(args: argparse.Namespace, config: Config) -> int:
    from .certs import cmd_certs_init

    return cmd_certs_init(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vramgate",
        description="Keep GPU workloads off GPUs that cannot hold them: admission webhook, scheduler extender, "
        "GPU health controller, and offline checks.",
    )
    parser.add_argument("--config", help="YAML config file (default: built-in defaults)")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTPS service (webhook, extender, controller)")
    serve.add_argument("--nodes", metavar="FILE",
                       help="serve a fixed inventory from this file of Node objects instead of a cluster")
    serve.add_argument("--config", dest="config_sub", metavar="FILE", help="YAML config file (see webhook/config.py)")
    serve.add_argument("--role", choices=["all", "webhook", "extender", "controller"], default="all",
                       help="what this process serves: admission (/mutate, /validate), the scheduler extender, "
                       "the GPU health controller, or all (default)")
    serve.add_argument("--host", default="0.0.0.0", help="listen address (default 0.0.0.0)")
    serve.add_argument("--port", type=int, default=8443, help="HTTPS port (default 8443)")
    serve.add_argument("--tls-cert", metavar="FILE", default="certs/tls.crt",
                       help="PEM certificate chain, reloaded on change (default certs/tls.crt)")
    serve.add_argument("--tls-key", metavar="FILE", default="certs/tls.key",
                       help="PEM private key, reloaded on change (default certs/tls.key)")
    serve.add_argument("--kubeconfig", metavar="PATH",
                       help="kubeconfig for cluster mode (default: in-cluster, then ~/.kube/config)")
    serve.add_argument("--dev", action="store_true", help="create a self-signed CA and serving cert under certs/ "
                       "if missing")
    serve.set_defaults(func=cmd_serve)

    check = sub.add_parser("check", help="the verdict admission would give, offline, for workloads in manifests")
    check.add_argument("-f", "--file", nargs="+", required=True, action="extend", help="manifest files (YAML/JSON)")
    _inventory_args(check)
    check.set_defaults(func=cmd_check)

    est = sub.add_parser("estimate", help="VRAM breakdown for a model")
    who = est.add_mutually_exclusive_group(required=True)
    who.add_argument("--model", help="catalog name or hub id, e.g. llama-3-8b-instruct")
    who.add_argument("--params", help="parameter count, e.g. 15B")
    est.add_argument("--precision", help=f"weight precision: {PRECISIONS_ACCEPTED} (default: the model's dtype)")
    est.add_argument("--context", help="tokens per sequence (default: the model's full context)")
    est.add_argument("--batch", default="1", help="concurrent sequences (default 1)")
    est.add_argument("--gpus", default="1", help="GPUs the model is split over (default 1)")
    est.add_argument("--workload", choices=["inference", "training"], default="inference")
    est.add_argument("--kv-cache-dtype", help="KV cache dtype when it differs from the weights, e.g. fp8")
    est.add_argument("--json", action="store_true", help="print one JSON object")
    est.set_defaults(func=cmd_estimate)

    nodes = sub.add_parser("nodes", help="table of GPU nodes: product, count, VRAM, free GPUs, driver, health")
    _inventory_args(nodes)
    nodes.set_defaults(func=cmd_nodes)

    certs = sub.add_parser("certs", help="certificates for the webhook")
    certs_sub = certs.add_subparsers(dest="certs_command", required=True)
    init = certs_sub.add_parser("init", help="write a CA and serving cert; print the base64 caBundle")
    init.add_argument("--service", required=True)
    init.add_argument("--namespace", required=True)
    init.add_argument("--out", default="certs")
    init.add_argument("--force", action="store_true", help="overwrite existing files")
    init.add_argument("--key-type", choices=["ecdsa", "rsa"], default="ecdsa")
    init.add_argument("--days", type=int, default=365, help="serving cert validity (CA: 10 years)")
    init.set_defaults(func=cmd_certs)
    return parser


def _inventory_args(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--nodes", help="file of Node objects (kubectl get nodes -o yaml)")
    group.add_argument("--kubeconfig", help="read nodes from a cluster")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    config_path = getattr(args, "config_sub", None) or args.config
    try:
        config = load_config(config_path)
        result: int = args.func(args, config)
        return result
    except (UsageError, ManifestError, ConfigError) as exc:
        print(f"vramgate {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
