"""webhook/jobs/certs_job.py: the selfSigned hook Jobs' decisions, and their sequencing against a fake API."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
from typing import Any

import jsonpatch
import pytest
from cryptography import x509

from webhook.jobs import certs_job
from webhook.jobs.certs_job import (
    build_parser,
    bundle_files,
    decode_secret_data,
    next_ca_bundle,
    renewal_reason,
    secret_manifest,
    webhook_patch,
)
from webhook.tls.certs import make_bundle, service_dns_names

NAMES = service_dns_names("vramgate-webhook", "gpu-system")
NOW = dt.datetime.now(dt.UTC)
MONTH = dt.timedelta(days=30)


def files_of(days: int = 365, names: list[str] = NAMES) -> dict[str, bytes]:
    b = make_bundle(names, days=days)
    return {"tls.crt": b.cert_pem, "tls.key": b.key_pem, "ca.crt": b.ca_pem}


@pytest.fixture(scope="module")
def good() -> dict[str, bytes]:
    return files_of()


def test_valid_secret_is_kept(good: dict[str, bytes]) -> None:
    assert renewal_reason(good, NAMES, NOW, MONTH) is None


def test_missing_or_broken_files(good: dict[str, bytes]) -> None:
    assert renewal_reason({}, NAMES, NOW, MONTH) == "missing tls.crt, tls.key, ca.crt"
    assert "tls.crt is not" in str(renewal_reason({**good, "tls.crt": b"junk"}, NAMES, NOW, MONTH))
    other = files_of()
    assert "does not match" in str(renewal_reason({**good, "tls.key": other["tls.key"]}, NAMES, NOW, MONTH))
    assert "not signed" in str(renewal_reason({**good, "ca.crt": other["ca.crt"]}, NAMES, NOW, MONTH))


def test_names_and_expiry(good: dict[str, bytes]) -> None:
    moved = service_dns_names("vramgate-webhook", "elsewhere")
    assert "lacks DNS names" in str(renewal_reason(good, moved, NOW, MONTH))
    assert "expires" in str(renewal_reason(good, NAMES, NOW + dt.timedelta(days=340), MONTH))
    assert renewal_reason(good, NAMES, NOW + dt.timedelta(days=300), MONTH) is None
    short = files_of(days=10)
    assert "expires" in str(renewal_reason(short, NAMES, NOW, MONTH))
    assert renewal_reason(short, NAMES, NOW, dt.timedelta(days=5)) is None


def test_ca_bundle_keeps_one_previous_ca(good: dict[str, bytes]) -> None:
    first, second = files_of(), files_of()
    bundle = next_ca_bundle(second["ca.crt"], first["ca.crt"], NOW)
    certs = x509.load_pem_x509_certificates(bundle)
    assert [c.subject for c in certs] == [x509.load_pem_x509_certificate(second["ca.crt"]).subject] * 2
    assert certs[0] == x509.load_pem_x509_certificate(second["ca.crt"])
    assert certs[1] == x509.load_pem_x509_certificate(first["ca.crt"])
    third = files_of()
    assert len(x509.load_pem_x509_certificates(next_ca_bundle(third["ca.crt"], bundle, NOW))) == 2
    # No previous, the same CA again, or an expired previous CA: just the new one.
    assert next_ca_bundle(good["ca.crt"], None, NOW) == good["ca.crt"]
    assert next_ca_bundle(good["ca.crt"], good["ca.crt"], NOW) == good["ca.crt"]
    assert next_ca_bundle(second["ca.crt"], first["ca.crt"], NOW + dt.timedelta(days=4000)) == second["ca.crt"]


def test_renewed_files_verify() -> None:
    old = files_of()
    b = make_bundle(NAMES)
    new = bundle_files(b, old["ca.crt"], NOW)
    assert renewal_reason(new, NAMES, NOW, MONTH) is None
    # The old serving cert is still trusted by the new ca.crt (replicas not yet reloaded).
    assert renewal_reason({**old, "ca.crt": new["ca.crt"]}, NAMES, NOW, MONTH) is None


def test_secret_manifest_round_trip(good: dict[str, bytes]) -> None:
    m = secret_manifest("vramgate-tls", "gpu-system", good, resource_version="42")
    assert m["type"] == "kubernetes.io/tls"
    assert m["metadata"]["resourceVersion"] == "42"
    assert decode_secret_data(m["data"]) == good
    assert decode_secret_data({"bad": "!!!", "ok": base64.b64encode(b"x").decode()}) == {"ok": b"x"}
    assert decode_secret_data(None) == {}


def _config(*names: str, ca: str | None = None, policy: str = "Ignore") -> dict[str, Any]:
    hooks = []
    for n in names:
        client: dict[str, Any] = {"service": {"name": "s", "namespace": "n", "path": "/validate"}}
        if ca is not None:
            client["caBundle"] = ca
        hooks.append({"name": n, "failurePolicy": policy, "clientConfig": client})
    return {"metadata": {"name": "vramgate"}, "webhooks": hooks}


def test_webhook_patch_sets_every_webhook() -> None:
    cfg = _config("a.vramgate.io", "b.vramgate.io")
    ops = webhook_patch(cfg, "Q0E=", "Fail")
    out = jsonpatch.apply_patch(cfg, ops)
    assert [h["clientConfig"]["caBundle"] for h in out["webhooks"]] == ["Q0E=", "Q0E="]
    assert [h["failurePolicy"] for h in out["webhooks"]] == ["Fail", "Fail"]
    assert out["webhooks"][0]["clientConfig"]["service"] == cfg["webhooks"][0]["clientConfig"]["service"]
    assert ops[0] == {"op": "test", "path": "/webhooks/0/name", "value": "a.vramgate.io"}
    assert webhook_patch(out, "Q0E=", "Fail") == []
    only_ca = webhook_patch(_config("a.vramgate.io", ca="T0xE"), "Q0E=", None)
    assert [o["path"] for o in only_ca] == ["/webhooks/0/name", "/webhooks/0/clientConfig/caBundle"]


def test_webhook_patch_keeps_a_hooks_own_policy() -> None:
    cfg = _config("validate.vramgate.io", "validate-kinds.vramgate.io")
    out = jsonpatch.apply_patch(cfg, webhook_patch(cfg, "Q0E=", "Fail", {"validate-kinds.vramgate.io": "Ignore"}))
    assert [h["failurePolicy"] for h in out["webhooks"]] == ["Fail", "Ignore"]
    assert [h["clientConfig"]["caBundle"] for h in out["webhooks"]] == ["Q0E=", "Q0E="]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["patch", "--namespace", "n", "--secret", "s", "--mutating", "m", "--validating",
                                   "v", "--hook-failure-policy", "validate-kinds.vramgate.io=Deny"])


def test_webhook_patch_fails_when_reordered() -> None:
    cfg = _config("a.vramgate.io", "b.vramgate.io")
    ops = webhook_patch(cfg, "Q0E=", "Fail")
    cfg["webhooks"].reverse()
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(cfg, ops)


# ---------------------------------------------------------------------------------------------
# Sequencing against a fake API
# ---------------------------------------------------------------------------------------------


class _NotFoundError(Exception):
    status = 404


class _Resp:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.data = json.dumps(obj).encode()


class _FakeCore:
    def __init__(self, log: list[str]) -> None:
        self.secret: dict[str, Any] | None = None
        self.log = log

    def read_namespaced_secret(self, name: str, namespace: str, _preload_content: bool = True) -> _Resp:
        if self.secret is None:
            raise _NotFoundError()
        return _Resp(self.secret)

    def create_namespaced_secret(self, namespace: str, body: dict[str, Any]) -> None:
        self.log.append("secret-create")
        self.secret = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}

    def replace_namespaced_secret(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        assert self.secret is not None
        assert body["metadata"]["resourceVersion"] == self.secret["metadata"]["resourceVersion"]
        self.log.append("secret-replace")
        self.secret = {**body, "metadata": {**body["metadata"], "resourceVersion": "2"}}


class _FakeClients:
    def __init__(self) -> None:
        self.log: list[str] = []
        self.core = _FakeCore(self.log)
        self.configs: dict[tuple[str, str], dict[str, Any]] = {}

    def read_webhooks(self, kind: str, name: str) -> dict[str, Any] | None:
        return self.configs.get((kind, name))

    def patch_webhooks(self, kind: str, name: str, ops: list[dict[str, Any]]) -> None:
        self.log.append(f"patch-{kind}")
        self.configs[(kind, name)] = jsonpatch.apply_patch(self.configs[(kind, name)], ops)


def _create_args(**kw: Any) -> argparse.Namespace:
    base = {"namespace": "gpu-system", "secret": "vramgate-tls", "service": "vramgate-webhook", "key_type": "ecdsa",
            "days": 365, "renew_before_days": 30, "mutating": "vramgate", "validating": "vramgate",
            "kubeconfig": None}
    return argparse.Namespace(**{**base, **kw})


def _patch_args(**kw: Any) -> argparse.Namespace:
    base = {"namespace": "gpu-system", "secret": "vramgate-tls", "mutating": "vramgate", "validating": "vramgate",
            "mutating_failure_policy": "Ignore", "validating_failure_policy": "Fail", "timeout": 0.0,
            "kubeconfig": None}
    return argparse.Namespace(**{**base, **kw})


def test_install_then_upgrade_then_renewal() -> None:
    fake = _FakeClients()
    # pre-install: no Secret, no webhook configurations yet.
    assert certs_job.run_create(_create_args(), fake) == 0  # type: ignore[arg-type]
    assert fake.log == ["secret-create"]
    first_ca = decode_secret_data(fake.core.secret["data"])["ca.crt"]  # type: ignore[index]
    # post-install: the release created the configurations (Ignore, no caBundle).
    fake.configs[("mutating", "vramgate")] = _config("mutate.vramgate.io")
    fake.configs[("validating", "vramgate")] = _config("validate.vramgate.io")
    assert certs_job.run_patch(_patch_args(), fake) == 0  # type: ignore[arg-type]
    ca_b64 = base64.b64encode(first_ca).decode()
    assert fake.configs[("validating", "vramgate")]["webhooks"][0]["failurePolicy"] == "Fail"
    assert fake.configs[("validating", "vramgate")]["webhooks"][0]["clientConfig"]["caBundle"] == ca_b64
    assert fake.configs[("mutating", "vramgate")]["webhooks"][0]["failurePolicy"] == "Ignore"
    # pre-upgrade with a valid Secret: nothing changes.
    fake.log.clear()
    assert certs_job.run_create(_create_args(), fake) == 0  # type: ignore[arg-type]
    assert fake.log == []
    # pre-upgrade after the service moved namespace names: renew, trusting the new CA before writing.
    assert certs_job.run_create(_create_args(namespace="other-ns"), fake) == 0  # type: ignore[arg-type]
    assert fake.log == ["patch-mutating", "patch-validating", "secret-replace"]
    new_ca = decode_secret_data(fake.core.secret["data"])["ca.crt"]  # type: ignore[index]
    assert len(x509.load_pem_x509_certificates(new_ca)) == 2 and new_ca.endswith(first_ca)
    hook = fake.configs[("validating", "vramgate")]["webhooks"][0]
    assert hook["clientConfig"]["caBundle"] == base64.b64encode(new_ca).decode()
    assert hook["failurePolicy"] == "Fail"  # the early patch leaves the policy alone


def test_patch_fails_without_secret_or_configs() -> None:
    fake = _FakeClients()
    assert certs_job.run_patch(_patch_args(), fake) == 1  # type: ignore[arg-type]
    certs_job.run_create(_create_args(), fake)  # type: ignore[arg-type]
    assert certs_job.run_patch(_patch_args(), fake) == 1  # type: ignore[arg-type]


def test_cli_argument_checks() -> None:
    assert certs_job.main(["create", "--namespace", "n", "--secret", "s", "--service", "x", "--days", "10",
                           "--renew-before-days", "10"]) == 2
    with pytest.raises(SystemExit):
        certs_job.main(["patch", "--namespace", "n", "--secret", "s", "--mutating", "m", "--validating", "v",
                        "--validating-failure-policy", "Deny"])
