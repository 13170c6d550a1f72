"""The chart's pre-delete hook Job: delete the webhook configurations before Helm deletes the pods behind them.

Helm deletes the kinds it does not know last (helm v3.22.0 pkg/releaseutil/kind_sorter.go: "unknown
kind is last"), and webhook configurations are such kinds: without this hook, ``helm uninstall``
removes the webhook Service and Deployment first, and for that window kube-apiserver still calls
``validate.vramgate.io`` (failurePolicy Fail) and refuses every GPU workload. ``python -m
webhook.jobs.unregister_job --mutating NAME --validating NAME`` deletes both (absent is fine) and waits
until they are gone. ``helm uninstall --no-hooks`` skips it where no pod can run.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..kube.client import api_status

KINDS = ("mutating", "validating")


class _Admission:
    """The two calls this Job makes, per kind."""

    def __init__(self, kubeconfig: str | None) -> None:
        from kubernetes import client

        from ..kube.client import api_client

        self.api: Any = client.AdmissionregistrationV1Api(api_client(kubeconfig))

    def delete(self, kind: str, name: str) -> bool:
        """Delete one configuration; False when it was already gone."""
        call = (self.api.delete_mutating_webhook_configuration if kind == "mutating"
                else self.api.delete_validating_webhook_configuration)
        try:
            call(name)
        except Exception as exc:
            if api_status(exc) == 404:
                return False
            raise
        return True

    def exists(self, kind: str, name: str) -> bool:
        call = (self.api.read_mutating_webhook_configuration if kind == "mutating"
                else self.api.read_validating_webhook_configuration)
        try:
            call(name, _preload_content=False)
        except Exception as exc:
            if api_status(exc) == 404:
                return False
            raise
        return True


def unregister(api: _Admission, targets: Sequence[tuple[str, str]], timeout: float) -> int:
    """Delete every target and wait until none exists; 0 on success, 1 on timeout or API error."""
    deadline = time.monotonic() + timeout
    for kind, name in targets:
        while True:
            try:
                deleted = api.delete(kind, name)
                print(f"unregister-job: {kind}webhookconfiguration {name} "
                      f"{'deleted' if deleted else 'already gone'}", flush=True)
                break
            except Exception as exc:  # an API hiccup: retry until the deadline
                if time.monotonic() > deadline:
                    print(f"unregister-job: cannot delete {kind} {name}: {exc}", file=sys.stderr, flush=True)
                    return 1
                time.sleep(1.0)
    while any(api.exists(kind, name) for kind, name in targets):
        if time.monotonic() > deadline:
            print("unregister-job: the webhook configurations are still there", file=sys.stderr, flush=True)
            return 1
        time.sleep(0.5)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m webhook.jobs.unregister_job", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster)")
    parser.add_argument("--mutating", required=True, help="MutatingWebhookConfiguration to delete")
    parser.add_argument("--validating", required=True, help="ValidatingWebhookConfiguration to delete")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before giving up")
    return parser


def main(argv: Sequence[str] | None = None, api: _Admission | None = None) -> int:
    args = build_parser().parse_args(argv)
    targets = [(kind, getattr(args, kind)) for kind in KINDS]
    return unregister(api or _Admission(args.kubeconfig), targets, args.timeout)


if __name__ == "__main__":
    raise SystemExit(main())
