"""The `vramgate` command line: its parser, and the command a call names, imported only when it runs."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..kube.kubectl import add_cluster_args

if TYPE_CHECKING:
    from ..config import Config


def _engines() -> ModuleType:
    """The engine registry (for the engine choices of `estimate` and `fit`), imported when those parsers are built."""
    return importlib.import_module("webhook.engines")


def _precisions() -> str:
    from ..units.precision import ACCEPTED

    return ACCEPTED


def _inventory_args(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--nodes", help="file of Node objects (kubectl get nodes -o yaml); ResourceSlices, "
                       "DeviceClasses and Karpenter NodePools may be in the same list")
    group.add_argument("--kubeconfig", help="read nodes from a cluster")


def _offline_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", metavar="FILE", help="offline: Node objects (kubectl get nodes -o yaml) instead of "
                   "a cluster; needs -f")
    p.add_argument("-f", "--file", nargs="+", action="extend", metavar="FILE|DIR",
                   help="manifests (files or folders of .yaml/.yml/.json): offline with --nodes; for explain alone, "
                   "the workload from its manifest judged against the cluster")


def _serve(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", metavar="FILE",
                   help="serve a fixed inventory from this file of Node objects instead of a cluster")
    p.add_argument("--config", dest="config_sub", metavar="FILE", help="YAML config file (see webhook/config.py)")
    p.add_argument("--role", choices=["all", "webhook", "extender", "controller"], default="all",
                   help="what this process serves: admission (/mutate, /validate), the scheduler extender, "
                   "the GPU health controller, or all (default)")
    p.add_argument("--host", default="0.0.0.0", help="listen address (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=8443, help="HTTPS port (default 8443)")
    p.add_argument("--tls-cert", metavar="FILE", default="certs/tls.crt",
                   help="PEM certificate chain, reloaded on change (default certs/tls.crt)")
    p.add_argument("--tls-key", metavar="FILE", default="certs/tls.key",
                   help="PEM private key, reloaded on change (default certs/tls.key)")
    p.add_argument("--kubeconfig", metavar="PATH",
                   help="kubeconfig for cluster mode (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--dev", action="store_true", help="create a self-signed CA and serving cert under certs/ "
                   "if missing")


def _check(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--file", nargs="+", required=True, action="extend", help="manifest files (YAML/JSON)")
    p.add_argument("--explain", action="store_true",
                   help="also print where each input came from (annotation, flag, env, catalog, engine default)")
    _inventory_args(p)
    p.add_argument("-o", "--output", choices=["text", "json", "yaml", "junit", "sarif"], default="text",
                   help="text (default), or machine-readable results with fixes as JSON Patches")
    p.add_argument("--fix", action="store_true",
                   help="rewrite the files in place with a checked fix for each rejection; print the diff")
    p.add_argument("--suggestion", type=int, default=1, metavar="N",
                   help="with --fix: apply the Nth offered fix of each rejection (default 1)")
    p.add_argument("--dry-run", action="store_true", help="with --fix: print the diff, change nothing")
    p.add_argument("--autofit", action="store_true",
                   help="print, as a diff, what autofit (vramgate.io/autofit) would change in each rejected "
                   "workload, opted in or not; files are not changed. Exit 0 when every workload is then "
                   "admitted, 1 when some has no eligible fix")
    p.add_argument("--hub", action="store_true",
                   help="first read hub ids the catalog does not know from the model hub (config hub.endpoint, "
                   "else HF_ENDPOINT, else huggingface.co; token: hub.token_file, else HF_TOKEN), kept under "
                   "$XDG_CACHE_HOME/vramgate/hub; a hub that cannot answer is a warning, the check runs without it")


def _estimate(p: argparse.ArgumentParser) -> None:
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--model", help="catalog name or hub id, e.g. llama-3-8b-instruct")
    who.add_argument("--params", help="parameter count, e.g. 15B")
    p.add_argument("--precision", help=f"weight precision: {_precisions()} (default: the model's dtype)")
    p.add_argument("--context", help="tokens per sequence (default: the model's full context)")
    p.add_argument("--batch", default="1", help="concurrent sequences (default 1)")
    p.add_argument("--gpus", default="1", help="GPUs the model is split over (default 1)")
    p.add_argument("--workload", choices=["inference", "training"], default="inference")
    p.add_argument("--kv-cache-dtype", help="KV cache dtype when it differs from the weights, e.g. fp8")
    p.add_argument("--engine", choices=list(_engines().ENGINES),
                   help="engine whose allocation rules apply (default: vllm for inference, trainer for training)")
    p.add_argument("--engine-version", help="engine release, e.g. 0.8.5 (default: the newest modelled)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _nodes(p: argparse.ArgumentParser) -> None:
    _inventory_args(p)
    p.add_argument("-o", "--output", choices=["table", "json"], default="table",
                   help="json: the records /inventory serves (vendor, memory and its source, partition, slice)")


def _fit(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="catalog name, hub id, quantized repo or Ollama tag")
    p.add_argument("--engine", default="vllm", help="serving engine: vllm (default), "
                   + ", ".join(e.name for e in _engines().engines() if e.serves and e.name != "vllm"))
    p.add_argument("--engine-version", help="engine release, e.g. 0.8.5 (default: the newest modelled)")
    p.add_argument("--precision", help=f"weight precision: {_precisions()} (default: the model's dtype)")
    p.add_argument("--kv-cache-dtype", help="KV cache dtype when it differs from the weights, e.g. fp8")
    p.add_argument("--context", help="tokens per sequence (default: the model's full context, as vLLM does)")
    p.add_argument("--gpu-memory-utilization", help="share of each GPU the engine may use "
                   "(default: as admission assumes, 0.9 for vLLM)")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    _inventory_args(p)


def _models(p: argparse.ArgumentParser) -> None:
    models_sub = p.add_subparsers(dest="models_command", required=True)
    mlist = models_sub.add_parser("list", help="catalog entries, one a line")
    mlist.add_argument("--family", help="only this family, e.g. qwen2.5, llama4, gpt-oss")
    mlist.add_argument("-o", "--output", choices=["table", "json"], default="table")
    mshow = models_sub.add_parser("show", help="one entry (any alias, hub id, quantized repo or Ollama tag) "
                                  "with derived KV bytes per token")
    mshow.add_argument("name")
    mimport = models_sub.add_parser("import", help="print a catalog entry for a Hugging Face config.json "
                                    "(a file, or a folder with config.json and model.safetensors.index.json)")
    mimport.add_argument("path")
    mimport.add_argument("--name", help="hub id or name for the entry (default: the config's _name_or_path)")


def _certs(p: argparse.ArgumentParser) -> None:
    certs_sub = p.add_subparsers(dest="certs_command", required=True)
    init = certs_sub.add_parser("init", help="write a CA and serving cert; print the base64 caBundle")
    init.add_argument("--service", required=True)
    init.add_argument("--namespace", required=True)
    init.add_argument("--out", default="certs")
    init.add_argument("--force", action="store_true", help="overwrite existing files")
    init.add_argument("--key-type", choices=["ecdsa", "rsa"], default="ecdsa")
    init.add_argument("--days", type=int, default=365, help="serving cert validity (CA: 10 years)")


def _audit(p: argparse.ArgumentParser) -> None:
    add_cluster_args(p, all_namespaces=True)
    _offline_args(p)
    p.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")


def _explain(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", nargs="+", metavar="KIND/NAME", help="e.g. deployment/llama, pod/llama-0, lws/big")
    add_cluster_args(p)
    _offline_args(p)  # -f alone: the workload from its manifest, the nodes and events from the cluster
    p.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")


# name → (one-line help, its arguments, "module:function" that runs it)
_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], str]] = {
    "serve": ("run the HTTPS service (webhook, extender, controller)", _serve, "commands:cmd_serve"),
    "check": ("the verdict admission would give, offline, for workloads in manifests", _check,
              "commands:cmd_check"),
    "estimate": ("VRAM breakdown for a model", _estimate, "commands:cmd_estimate"),
    "nodes": ("table of GPU nodes: product, count, VRAM, free GPUs, driver, health", _nodes, "commands:cmd_nodes"),
    "fit": ("where a model fits: per GPU kind, the fewest GPUs, the largest context, the concurrency, the launch "
            "flags", _fit, "commands:cmd_fit"),
    "models": ("the model catalog: list, show an entry, import a config.json", _models, "commands:cmd_models"),
    "certs": ("certificates for the webhook", _certs, "commands:cmd_certs"),
    "audit": ("judge what already runs (or manifests offline); exit 1 if anything fails", _audit,
              "audit:cmd_audit"),
    "explain": ("why a GPU workload is rejected or Pending, and the change that would place it", _explain,
                "audit:cmd_explain"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``only``, the arguments of that command alone (the others listed by name and help),
    so that ``vramgate --help`` and each command start without importing what the others need."""
    parser = argparse.ArgumentParser(
        prog="vramgate",
        description="Keep GPU workloads off GPUs that cannot hold them: admission webhook, scheduler extender, "
        "GPU health controller, and offline checks.",
    )
    parser.add_argument("--config", help="YAML config file (default: built-in defaults)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (text, add, target) in _COMMANDS.items():
        p = sub.add_parser(name, help=text)
        if only is None or only == name:
            add(p)
        p.set_defaults(func=target)
    return parser


def _command_named(argv: Sequence[str]) -> str:
    """The command an argument list names ("" when none does: top-level help, or a usage error)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--config":
            skip = True
        elif not arg.startswith("-"):
            return arg if arg in _COMMANDS else ""
    return ""


def _run(target: str, args: argparse.Namespace, config: Config) -> int:
    module, name = target.split(":")
    func: Callable[[argparse.Namespace, Any], int] = getattr(importlib.import_module(f"webhook.cli.{module}"), name)
    return func(args, config)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(only=_command_named(argv)).parse_args(argv)
    from ..config import ConfigError, load_config
    from ..kube.manifests import ManifestError
    from .common import EXIT_BAD_INPUT, UsageError

    config_path = getattr(args, "config_sub", None) or args.config
    try:
        config = load_config(config_path)
        return _run(args.func, args, config)
    except (UsageError, ManifestError, ConfigError) as exc:
        print(f"vramgate {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
