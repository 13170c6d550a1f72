"""Finding a cluster as kubectl does, for the commands that talk to one (`audit`, `explain`, …).

Credentials: ``--kubeconfig``, then ``KUBECONFIG`` (a list of files, merged), then ``~/.kube/config``,
then the in-cluster service account. ``--context`` picks a context; ``-n`` a namespace, else the
context's, else ``default``; ``-A`` all namespaces.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class NoCluster(Exception):
    """No credentials found, or the named context does not exist."""


def add_cluster_args(p: argparse.ArgumentParser, *, all_namespaces: bool = False) -> None:
    """kubectl's flags: --kubeconfig, --context, -n/--namespace (and -A/--all-namespaces)."""
    p.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, "
                   "then in-cluster)")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    if all_namespaces:
        group = p.add_mutually_exclusive_group()
        group.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")
        group.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    else:
        p.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")


@dataclass(frozen=True)
class Cluster:
    """An API client and the namespace kubectl would use."""

    client: Any
    namespace: str
    source: str  # where the credentials came from (for messages)


def _kubeconfig_path(flag: str | None) -> tuple[str | None, str]:
    if flag:
        return flag, f"--kubeconfig {flag}"
    env = os.environ.get("KUBECONFIG")
    if env and any(Path(p).exists() for p in env.split(os.pathsep) if p):
        return env, "$KUBECONFIG"
    home = Path.home() / ".kube" / "config"
    if home.exists():
        return str(home), str(home)
    return None, "in-cluster"


def connect(kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None) -> Cluster:
    """A client from the first credentials kubectl would use. Raises NoCluster."""
    from kubernetes import client, config

    path, source = _kubeconfig_path(kubeconfig)
    if path is None:
        try:
            config.load_incluster_config()
        except config.ConfigException as exc:
            raise NoCluster("no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a cluster") from exc
        ns = namespace
        if ns is None:
            sa = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
            ns = sa.read_text().strip() if sa.exists() else "default"
        return Cluster(client.ApiClient(), ns, source)
    try:
        api = config.new_client_from_config(config_file=path, context=context)
    except (config.ConfigException, OSError) as exc:
        raise NoCluster(f"{source}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
    ns = namespace
    if ns is None:
        try:
            contexts, current = config.list_kube_config_contexts(config_file=path)
            chosen = next((c for c in contexts if c.get("name") == context), current) if context else current
            ns = ((chosen or {}).get("context") or {}).get("namespace")
        except (config.ConfigException, OSError):
            ns = None
    return Cluster(api, ns or "default", source)


def from_args(args: argparse.Namespace) -> Cluster:
    return connect(getattr(args, "kubeconfig", None), getattr(args, "context", None),
                   getattr(args, "namespace", None))
