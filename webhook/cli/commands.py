"""What each `vramgate` command does (serve, check, estimate, nodes, fit, models, certs); the parser is main.py."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ..cluster.dra_extended import describe_extended, extended_record
from ..cluster.inventory import node_record
from ..cluster.snapshot import Snapshot, snapshot_from_nodes
from ..config import Config
from ..engines import estimate, training_engine
from ..engines.base import parse_version
from ..engines.precision import resolve_precision
from ..kube.manifests import load_inventory
from ..models.architectures import memory_model
from ..models.catalog import (
    Catalog,
    ConfigImportError,
    ModelSpec,
    computed_params,
    entry_from_hf_config,
)
from ..models.vram import EstimateRequest
from ..units.precision import ACCEPTED as PRECISIONS_ACCEPTED
from ..units.precision import canonical
from ..units.quantity import QuantityError, parse_count, parse_positive_int
from .common import EXIT_OK, UsageError, catalog_for


def _snapshot(args: argparse.Namespace, config: Config) -> Snapshot:
    if getattr(args, "nodes", None):
        nodes, dra = load_inventory(args.nodes)
        snapshot = snapshot_from_nodes(nodes, config, dra=dra)
        if snapshot.provisioners.problems:  # a NodePool judged wrongly would be worse than none: say which
            raise UsageError(f"{args.nodes}: {'; '.join(snapshot.provisioners.problems)}")
        return snapshot
    kubeconfig = getattr(args, "kubeconfig", None)
    default = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if kubeconfig is None and not Path(default.split(os.pathsep)[0]).exists():
        raise UsageError("no inventory: pass --nodes FILE or --kubeconfig PATH")
    from ..kube.nodecache import live_snapshot

    try:  # listed once as the service lists (kube/nodecache.py): the same resource names, DRA, namespaces
        return live_snapshot(config, kubeconfig)
    except Exception as exc:  # the client raises many types; all mean "cluster unreachable"
        raise UsageError(f"cannot list nodes: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc


def cmd_check(args: argparse.Namespace, config: Config) -> int:
    from .inputs import read_text
    from .report import run_autofit, run_check

    catalog = catalog_for(config)
    if (args.dry_run or args.suggestion != 1) and not args.fix:
        raise UsageError("--suggestion and --dry-run go with --fix")
    if args.fix and args.output != "text":
        raise UsageError("--fix prints a diff; -o json|yaml|junit|sarif lists the fixes without applying them")
    if args.autofit and (args.fix or args.output != "text"):
        raise UsageError("--autofit prints the diff autofit would make; it goes without --fix and -o")
    if args.suggestion < 1:
        raise UsageError("--suggestion: use 1 for the first fix, 2 for the second …")
    for path in args.file:
        read_text(path)  # an unreadable file first (exit 2); a broken document is reported beside the rest
    snapshot = _snapshot(args, config)
    if getattr(args, "hub", False):
        from .hub import with_hub

        catalog = with_hub(args.file, snapshot, config, catalog)
    if args.autofit:
        return run_autofit(args.file, snapshot, config, catalog)
    return run_check(args.file, args.output, snapshot, config, catalog, fix=args.fix,
                     suggestion=args.suggestion, dry_run=args.dry_run, explain=args.explain)


def cmd_estimate(args: argparse.Namespace, config: Config) -> int:
    catalog = catalog_for(config)
    spec = None
    in_id: str | None = None
    if args.model:
        found = catalog.resolve(args.model)
        spec, in_id = (found.spec, found.quantization) if found else (None, None)
        if spec is None and args.params is None:
            raise UsageError(f"unknown model {args.model!r}: not in the catalog; pass --params (e.g. 15B)")
    try:
        params = parse_count(args.params) if args.params else spec.params  # type: ignore[union-attr]
    except QuantityError as exc:
        raise UsageError(f"--params: {exc}; use a count such as 15B, 7.6b, 350M or 1.5e9") from None
    if args.precision and canonical(args.precision) is None:
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
    engine = args.engine or (training_engine().name if args.workload == "training" else "vllm")
    precision, _ = resolve_precision([(args.precision, "--precision"), (in_id, "model id")], spec, args.workload,
                                     engine)
    version = parse_version(args.engine_version) if args.engine_version else None
    if args.engine_version and version is None:
        raise UsageError(f"--engine-version: {args.engine_version!r} is not a version; use e.g. 0.8.5")
    est = estimate(EstimateRequest(
        params=params, precision=precision, spec=spec, context=context, batch=batch, gpus=gpus,
        workload=args.workload, kv_cache_dtype=args.kv_cache_dtype, engine=engine, engine_version=version,
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
            "engine": est.engine,
            "low_per_gpu_mib": est.low_per_gpu_mib,
            "high_per_gpu_mib": est.high_per_gpu_mib,
            "notes": list(est.notes),
        }, indent=2))
        return EXIT_OK
    name = spec.name if spec else "custom model"
    print(f"{name}: {params / 1e9:.3g}B parameters, {precision}, {args.workload}, context {context}, "
          f"batch {batch}, {gpus} GPU{'s' if gpus > 1 else ''}")
    rows = [(k.removesuffix("_mib").replace("_", " "), v) for k, v in est.breakdown().items()]
    for label, mib in rows:
        print(f"  {label:<12} {mib / 1024:>9.2f} GiB")
    print(f"  {'total':<12} {est.total_mib / 1024:>9.2f} GiB")
    print(f"  {'per GPU':<12} {est.per_gpu_mib / 1024:>9.2f} GiB  (band {est.low_per_gpu_mib / 1024:.2f}–"
          f"{est.high_per_gpu_mib / 1024:.2f} GiB, {est.engine})")
    for note in est.notes:
        print(f"  {note}")
    if not est.shape_known:
        print("  (architecture unknown: KV cache from a Llama-style fallback shape)")
    return EXIT_OK


def cmd_nodes(args: argparse.Namespace, config: Config) -> int:
    snapshot = _snapshot(args, config)
    records = [{**node_record(n, snapshot.free_gpus(n.name)), **extended_record(n, snapshot.dra)}
               for n in sorted(snapshot.nodes.values(), key=lambda n: n.name) if n.is_gpu_node]
    if getattr(args, "output", "table") == "json":
        # The same records /inventory serves; the table below is drawn from them, so the two never disagree.
        print(json.dumps({"nodes": records}, indent=2))
        return EXIT_OK
    header = ("NAME", "PRODUCT", "GPUS", "VRAM/GPU", "SOURCE", "FREE", "DRIVER", "HEALTH", "VENDOR", "LAYOUT", "REASON")
    rows = [header]
    for r in records:
        rows.append((
            r["name"],
            r["product"] or "-",
            f"{r['allocatable']}/{r['gpus']}",
            _gi(r["vram_mib"]),
            r["vram_source"],
            str(r["free"]),
            str(r["driver_major"]) if r["driver_major"] is not None else "-",
            r["health"],
            r["vendor"],
            _layout(r),
            "; ".join(filter(None, (r["reason"], describe_extended(r)))),
        ))
    _print_table(rows, "(no GPU nodes)")
    return EXIT_OK


def _gi(mib: int) -> str:
    return f"{mib / 1024:.1f}Gi" if mib else "?"


def _layout(r: dict[str, Any]) -> str:
    """How a node's devices are cut or joined: a partition mode, a slice over hosts, cores of a device."""
    parts = []
    if r["partition"]:
        parts.append(r["partition"])
    if r["topology"]:
        parts.append(f"slice {r['topology']}")
    if r["cores"] is not None and r["cores"]["count"]:
        parts.append(f"{r['cores']['count']} cores of {_gi(r['cores']['vram_mib'])}")
    return ", ".join(parts) or "-"


def _print_table(rows: Sequence[Sequence[str]], empty: str) -> None:
    """Left-aligned columns, the first row the header; ``empty`` when there is nothing under it."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    if len(rows) == 1:
        print(empty)


def _kv_value_bytes(spec: ModelSpec) -> int:
    """Bytes per KV value as the catalog lists it: 16-bit, but DeepSeek-V4's fixed fp8_ds_mla layout (one a byte)."""
    return 1 if spec.compressed_kv else 2


def _spec_row(spec: ModelSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "family": spec.family,
        "task": spec.task,
        "params": spec.params,
        "active_params": spec.active_params,
        "dtype": spec.dtype,
        "context": spec.context,
        "kv_bytes_per_token": spec.kv_elements_per_token() * _kv_value_bytes(spec),
        "vision": bool(spec.vision_params),
        "verified": spec.verified,
    }


def _models_list(catalog: Catalog, family: str | None, output: str) -> int:
    specs = [s for s in catalog if family is None or (s.family or "").lower() == family.lower()]
    if output == "json":
        print(json.dumps([_spec_row(s) for s in specs], indent=2))
        return EXIT_OK
    header = ("NAME", "FAMILY", "TASK", "PARAMS", "ACTIVE", "DTYPE", "CONTEXT", "KV/TOKEN", "VISION")
    rows = [header]
    for s in specs:
        rows.append((
            s.name, s.family or "-", s.task, f"{s.params / 1e9:.3g}B",
            f"{s.active_params / 1e9:.3g}B" if s.active_params else "-", s.dtype, str(s.context),
            f"{s.kv_elements_per_token() * _kv_value_bytes(s) / 1024:.0f}KiB", "yes" if s.vision_params else "-",
        ))
    _print_table(rows, "(no models)")
    return EXIT_OK


def _models_show(catalog: Catalog, name: str) -> int:
    found = catalog.resolve(name)
    if found is None:
        raise UsageError(f"{name!r} is not in the catalog; see `vramgate models list`, or import its config.json")
    spec = found.spec
    entry: dict[str, Any] = {}
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if value is None or (f.name == "aliases" and not value):
            continue
        entry[f.name] = list(value) if isinstance(value, tuple) else value
    entry["matched"] = {"reference": name, "how": found.how, "quantization": found.quantization}
    # DeepSeek-V4's compressed cache has one layout whatever the dtype flag: its bytes, not a 16-bit figure.
    layout = "fp8_ds_mla" if spec.compressed_kv else "16bit"
    derived: dict[str, Any] = {
        "kv_elements_per_token": spec.kv_elements_per_token(),
        f"kv_bytes_per_token_{layout}": spec.kv_elements_per_token() * _kv_value_bytes(spec),
        f"kv_bytes_full_context_{layout}": spec.kv_elements_for(spec.context) * _kv_value_bytes(spec),
        "embedding_params": spec.embedding_params,
    }
    try:
        derived["computed_params"] = round(computed_params(spec))
        if spec.experts:
            derived["computed_active_params"] = round(computed_params(spec, active=True))
    except ValueError:
        pass
    entry["derived"] = derived
    print(yaml.safe_dump(entry, sort_keys=False, width=120), end="")
    return EXIT_OK


def _models_import(path: str, name: str | None) -> int:
    p = Path(path)
    config_path = p / "config.json" if p.is_dir() else p
    if not config_path.is_file():
        raise UsageError(f"no config.json at {path}")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{config_path} is not JSON: {exc}") from None
    index = None
    index_path = config_path.parent / "model.safetensors.index.json"
    if index_path.is_file():
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UsageError(f"{index_path} is not JSON: {exc}") from None
    quant_path = config_path.parent / "quantization_config.json"
    if isinstance(config, dict) and "quantization_config" not in config and quant_path.is_file():
        try:
            config["quantization_config"] = json.loads(quant_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UsageError(f"{quant_path} is not JSON: {exc}") from None
    try:
        entry = entry_from_hf_config(config, index, name)
    except ConfigImportError as exc:
        raise UsageError(f"{config_path}: {exc}") from None
    print(f"# {entry['name']}: imported from {config_path}"
          + (f" and {index_path.name}" if index else "") + "; check and set verified: true")
    arch = str((config.get("architectures") or [""])[0]) if isinstance(config, dict) else ""
    if arch and memory_model(arch) is None:
        # The entry still reads the usual keys; say when its layer layout is a guess (webhook/models/architectures.py).
        print(f"# note: vramgate has no memory model for {arch} yet: the entry assumes the attention and state "
              "layout the config's common keys describe")
    print(yaml.safe_dump({"models": [entry]}, sort_keys=False, width=120), end="")
    return EXIT_OK


def cmd_models(args: argparse.Namespace, config: Config) -> int:
    if args.models_command == "list":
        return _models_list(catalog_for(config), args.family, args.output)
    if args.models_command == "show":
        return _models_show(catalog_for(config), args.name)
    return _models_import(args.path, args.name)


def cmd_fit(args: argparse.Namespace, config: Config) -> int:
    from ..advise import fit

    try:
        req, util, name = fit.request_for(
            catalog_for(config), args.model, config, engine=args.engine, engine_version=args.engine_version,
            precision=args.precision, context=args.context, kv_cache_dtype=args.kv_cache_dtype,
            utilization=args.gpu_memory_utilization)
    except fit.FitError as exc:
        raise UsageError(str(exc)) from None
    if args.nodes or args.kubeconfig:
        snapshot = _snapshot(args, config)
        kinds = fit.kinds_of(snapshot.nodes.values(), dict(snapshot.free))
        where = f"inventory {args.nodes or 'from the cluster'}"
    else:
        kinds, where = fit.common_kinds(), "built-in list of common GPUs, 8 per node"
    result = fit.plan(req, kinds, util, name, where, by_gpu=args.gpu_memory_utilization is None)
    if args.output == "json":
        print(json.dumps(fit.render_json(result), indent=2))
    else:
        print(fit.render_table(result))
    return EXIT_OK


def cmd_serve(args: argparse.Namespace, config: Config) -> int:
    from ..serve.server import serve

    return serve(args, config)


def cmd_certs(args: argparse.Namespace, config: Config) -> int:
    from ..tls.certs import cmd_certs_init

    return cmd_certs_init(args)
