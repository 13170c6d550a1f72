"""charts/vramgate: lint, schema, Kubernetes validity of every rendered object, and the wiring."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.chart.conftest import Render
from tests.chart.render import CHART, ROOT, HelmError, find, one, render_chart, run_helm, url_mode_values
from webhook.cluster.accelerators import resources_of_vendors
from webhook.config import Config, load_config
from webhook.metrics import Metrics

K8S_SCHEMA_VERSION = "1.37.0"
NS = "gpu-system"
CA_B64 = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
# Kinds that are CRDs (no schema in kubernetes-validate): their structure is asserted below instead.
CRD_KINDS = {
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}

ALL_ON: dict[str, Any] = {
    "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
    "prometheusRule": {"enabled": True},
    "networkPolicy": {"enabled": True, "from": [{"namespaceSelector": {"matchLabels": {"team": "platform"}}}]},
    "standaloneExtender": {"enabled": True},
    "extender": {"enabled": True},
    "controller": {"remediation": {"enabled": True}},
    "scheduler": {"extender": {"verifyTLS": True}},
    "webhook": {"excludedNamespaces": ["gpu-operator"]},
    "monitoring": {"grafanaDashboard": {"enabled": True}},
}
MODES: dict[str, dict[str, Any]] = {
    "selfSigned": {},
    "certManager": {"certs": {"mode": "certManager"}},
    "certManager-issuer": {"certs": {"mode": "certManager", "certManager": {"issuerRef": {
        "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}}}},
    "provided": {"certs": {"mode": "provided", "secretName": "my-tls", "caBundle": CA_B64}},
    "url": url_mode_values("https://127.0.0.1:18443", CA_B64),
    "url-selfSigned": {"webhook": {"clientConfig": "url", "url": "https://127.0.0.1:18443"},
                       "certs": {"caBundle": CA_B64}},
    "all-on": ALL_ON,
    "all-on-certManager": {**ALL_ON, "certs": {"mode": "certManager"}},
    "minimal": {"extender": {"enabled": False}, "controller": {"enabled": False},
                "priorityClasses": {"enabled": False}},
}


def merged(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for k, v in part.items():
            out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def pods(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(owner name, pod spec) for every Deployment and Job."""
    out = []
    for o in objs:
        if o["kind"] in ("Deployment", "Job"):
            out.append((f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"]))
    return out


def config_of(objs: list[dict[str, Any]], tmp_path: Path, name: str = "vramgate-config") -> Config:
    text = one(objs, "ConfigMap", name)["data"]["config.yaml"]
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return load_config(path)


def webhooks(objs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    m = one(objs, "MutatingWebhookConfiguration")["webhooks"]
    v = one(objs, "ValidatingWebhookConfiguration")["webhooks"]
    assert m[0]["name"] == "mutate.vramgate.io"
    assert [h["name"] for h in m[1:] if h["name"] != "autofit.vramgate.io"] in ([], ["mutate-claims.vramgate.io"])
    assert v[0]["name"] == "validate.vramgate.io"
    assert [h["name"] for h in v[1:] if h["name"] != "validate-claims.vramgate.io"] in (
        [], ["validate-kinds.vramgate.io"])
    return m[0], v[0]


def autofit_webhook(objs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """autofit.vramgate.io, GPU workloads sent to /mutate for vramgate.io/autofit, when rendered."""
    return next((h for h in one(objs, "MutatingWebhookConfiguration")["webhooks"]
                 if h["name"] == "autofit.vramgate.io"), None)


def claim_webhooks(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """mutate-claims and validate-claims.vramgate.io, the DRA claim webhooks, when rendered."""
    hooks = [*one(objs, "MutatingWebhookConfiguration")["webhooks"],
             *one(objs, "ValidatingWebhookConfiguration")["webhooks"]]
    return [h for h in hooks if h["name"] in ("mutate-claims.vramgate.io", "validate-claims.vramgate.io")]


def kinds_webhook(objs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """validate-kinds.vramgate.io, the webhook for the kinds LLMs ship in, when rendered."""
    hooks = one(objs, "ValidatingWebhookConfiguration")["webhooks"]
    return next((h for h in hooks if h["name"] == "validate-kinds.vramgate.io"), None)


def scheduler_config(objs: list[dict[str, Any]]) -> dict[str, Any]:
    cm = one(objs, "ConfigMap", "vramgate-scheduler-config")
    cfg: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
    return cfg


def rules_of(objs: list[dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = one(objs, kind, name)["rules"]
    return rules


def grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


# ---------------------------------------------------------------------------------------------
# lint, schema, validity
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["selfSigned", "certManager", "provided", "url", "all-on", "minimal"])
def test_helm_lint_strict(helm: str, mode: str, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(MODES[mode]))
    out = run_helm("lint", "--strict", str(CHART), "--namespace", NS, "-f", str(values),
                   "--kube-version", "1.37.2")
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_object_is_valid(render: Render, mode: str) -> None:
    """Core kinds pass kubernetes-validate (strict: no unknown fields); CRD kinds are checked below."""
    objs = render(MODES[mode], namespace=NS)
    assert objs
    for o in objs:
        key = (o["apiVersion"], o["kind"])
        if key in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(o, K8S_SCHEMA_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            pytest.fail(f"{key} has no core schema and is not a known CRD kind")
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{o['kind']}/{o['metadata']['name']} ({mode}): {exc.message} at {list(exc.path)}")


@pytest.mark.parametrize("mode", sorted(MODES))
def test_rendered_config_loads(render: Render, mode: str, tmp_path: Path) -> None:
    cfg = config_of(render(MODES[mode], namespace=NS), tmp_path)
    assert cfg.namespace == NS
    assert {"kube-system", NS} <= set(cfg.admission.excluded_namespaces)
    assert cfg.controller.lease_name == "vramgate-controller"


def test_values_yaml_config_default_validates(tmp_path: Path) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(values["config"]))
    load_config(path)


def test_values_schema_in_sync() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "tests/chart/values_schema.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def _closed_everywhere(node: Any, path: str, bad: list[str]) -> None:
    if isinstance(node, dict):
        if "properties" in node and node.get("additionalProperties") is not False:
            bad.append(path or "/")
        for k, v in node.items():
            _closed_everywhere(v, f"{path}/{k}", bad)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _closed_everywhere(v, f"{path}/{i}", bad)


def test_schema_closed_at_every_defined_level() -> None:
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    bad: list[str] = []
    _closed_everywhere(schema, "", bad)
    assert not bad, f"objects without additionalProperties: false: {bad}"
    assert set(schema["properties"]) == set(yaml.safe_load((CHART / "values.yaml").read_text()))


@pytest.mark.parametrize(("values", "message"), [
    ({"bogus": 1}, "bogus"),
    ({"webhook": {"replicaz": 2}}, "replicaz"),
    ({"webhook": {"replicas": 1}}, "replicas"),
    ({"webhook": {"timeoutSeconds": 11}}, "timeoutSeconds"),
    ({"webhook": {"failurePolicy": {"validating": "Deny"}}}, "failurePolicy"),
    ({"certs": {"mode": "vault"}}, "mode"),
    ({"config": {"admission": {"enforcment": "warn"}}}, "enforcment"),
    ({"config": {"gpu_memory_utilization": 1.5}}, "gpu_memory_utilization"),
    ({"certs": {"mode": "provided", "caBundle": CA_B64}}, "certs.secretName is required"),
    ({"certs": {"mode": "provided", "secretName": "x"}}, "certs.caBundle"),
    ({"webhook": {"clientConfig": "url"}, "certs": {"caBundle": CA_B64}}, "webhook.url is required"),
    ({"config": {"namespace": "elsewhere"}}, "release namespace"),
    ({"config": {"controller": {"remediation": {"enabled": True}}}}, "controller.remediation.enabled"),
])
def test_bad_values_are_refused(helm: str, values: dict[str, Any], message: str) -> None:
    with pytest.raises(HelmError, match=re.escape(message)):
        render_chart(values, namespace=NS)


# ---------------------------------------------------------------------------------------------
# labels and references
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["all-on", "certManager", "provided"])
def test_standard_labels_everywhere(render: Render, mode: str) -> None:
    for o in render(MODES[mode], namespace=NS):
        labels = o["metadata"].get("labels") or {}
        for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
                    "app.kubernetes.io/managed-by", "app.kubernetes.io/component", "helm.sh/chart"):
            assert key in labels, f"{o['kind']}/{o['metadata']['name']} lacks {key}"
        assert labels["app.kubernetes.io/instance"] == "vramgate"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


@pytest.mark.parametrize("mode", sorted(MODES))
def test_references_resolve(render: Render, mode: str) -> None:
    """Selectors select their pods; ServiceAccounts, ConfigMaps and role refs exist."""
    objs = render(MODES[mode], namespace=NS)
    sas = {o["metadata"]["name"] for o in find(objs, "ServiceAccount")}
    cms = {o["metadata"]["name"] for o in find(objs, "ConfigMap")}
    templates = [o["spec"]["template"]["metadata"]["labels"] for o in find(objs, "Deployment")]
    for d in find(objs, "Deployment"):
        sel = d["spec"]["selector"]["matchLabels"]
        assert sel.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    for svc in find(objs, "Service"):
        sel = svc["spec"]["selector"]
        assert sum(sel.items() <= t.items() for t in templates) == 1, svc["metadata"]["name"]
    for pdb in find(objs, "PodDisruptionBudget"):
        sel = pdb["spec"]["selector"]["matchLabels"]
        assert sum(sel.items() <= t.items() for t in templates) == 1
    for owner, spec in pods(objs):
        assert spec["serviceAccountName"] in sas, owner
        for vol in spec.get("volumes", []):
            if "configMap" in vol:
                assert vol["configMap"]["name"] in cms, owner
    roles = {(o["metadata"]["name"]) for o in find(objs, "Role")} | {"extension-apiserver-authentication-reader"}
    cluster_roles = {o["metadata"]["name"] for o in find(objs, "ClusterRole")}
    for b in find(objs, "RoleBinding") + find(objs, "ClusterRoleBinding"):
        ref = b["roleRef"]
        if ref["kind"] == "Role":
            assert ref["name"] in roles
        elif not ref["name"].startswith("system:"):
            assert ref["name"] in cluster_roles
        for s in b["subjects"]:
            assert s["name"] in sas and s["namespace"] == NS


# ---------------------------------------------------------------------------------------------
# webhook configurations
# ---------------------------------------------------------------------------------------------


def _rule_set(hook: dict[str, Any]) -> set[tuple[str, str, tuple[str, ...]]]:
    return {(g, r, tuple(rule["operations"])) for rule in hook["rules"] for g in rule["apiGroups"]
            for r in rule["resources"]}


def test_webhook_rules_paths_and_selectors(render: Render) -> None:
    objs = render(MODES["all-on"], namespace=NS)
    m, v = webhooks(objs)
    assert m["name"] == "mutate.vramgate.io" and v["name"] == "validate.vramgate.io"
    assert m["clientConfig"]["service"] == {"name": "vramgate-webhook", "namespace": NS, "path": "/mutate", "port": 443}
    assert v["clientConfig"]["service"]["path"] == "/validate"
    for hook in (m, v):
        assert hook["admissionReviewVersions"] == ["v1"]
        # The mutating webhook writes autofit's Event, never on a dry run.
        assert hook["sideEffects"] == ("NoneOnDryRun" if hook is m else "None")
        assert 1 <= hook["timeoutSeconds"] <= 10
        assert hook["namespaceSelector"] == {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NS, "gpu-operator"]},
            {"key": "vramgate.io/enforcement", "operator": "NotIn", "values": ["off"]},
        ]}
        assert hook["objectSelector"] == {"matchExpressions": [
            {"key": "vramgate.io/skip", "operator": "NotIn", "values": ["true"]}]}
    assert m["reinvocationPolicy"] == "IfNeeded"
    assert "reinvocationPolicy" not in v
    mut = _rule_set(m)
    assert mut == {("", "pods", ("CREATE",)), ("batch", "jobs", ("CREATE",))}
    val = _rule_set(v)
    assert val == {(g, r, ("CREATE", "UPDATE")) for g, r in [
        ("", "pods"), ("apps", "deployments"), ("apps", "statefulsets"), ("apps", "replicasets"),
        ("apps", "daemonsets"), ("batch", "jobs"), ("batch", "cronjobs")]}
    for hook in (m, v):
        assert all(rule["apiVersions"] == ["v1"] and rule["scope"] == "Namespaced" for rule in hook["rules"])


def test_autofit_webhook_sends_gpu_workloads_to_mutate(render: Render) -> None:
    objs = render(MODES["all-on"], namespace=NS)
    m, _ = webhooks(objs)
    a = autofit_webhook(objs)
    assert a is not None
    assert a["clientConfig"]["service"]["path"] == "/mutate" and a["sideEffects"] == "NoneOnDryRun"
    assert a["failurePolicy"] == "Ignore" and a["reinvocationPolicy"] == "Never"
    assert _rule_set(a) == {(g, r, ("CREATE", "UPDATE")) for g, r in [
        ("apps", "deployments"), ("apps", "statefulsets"), ("apps", "replicasets"), ("apps", "daemonsets"),
        ("batch", "cronjobs")]}
    # The same GPU-only conditions and selectors as the other webhooks: CPU workloads never reach it.
    assert a.get("matchConditions") == m.get("matchConditions") and a["namespaceSelector"] == m["namespaceSelector"]
    role = one(objs, "ClusterRole", "vramgate-webhook")
    assert {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]} in role["rules"]
    off = render(merged(MODES["all-on"], {"webhook": {"autofit": {"enabled": False}}}), namespace=NS)
    assert autofit_webhook(off) is None
    assert all("events" not in r["resources"] for r in one(off, "ClusterRole", "vramgate-webhook")["rules"])


def test_failure_policies_from_values(render: Render) -> None:
    m, v = webhooks(render(MODES["provided"], namespace=NS))
    assert (m["failurePolicy"], v["failurePolicy"]) == ("Ignore", "Fail")
    assert m["clientConfig"]["caBundle"] == CA_B64 == v["clientConfig"]["caBundle"]
    flipped = merged(MODES["provided"], {"webhook": {"failurePolicy": {"mutating": "Fail", "validating": "Ignore"},
                                                     "timeoutSeconds": 3}})
    m, v = webhooks(render(flipped, namespace=NS))
    assert (m["failurePolicy"], v["failurePolicy"]) == ("Fail", "Ignore")
    assert m["timeoutSeconds"] == 3 == v["timeoutSeconds"]


def test_certmanager_injects_ca(render: Render) -> None:
    objs = render(MODES["certManager"], namespace=NS)
    m, v = webhooks(objs)
    assert (m["failurePolicy"], v["failurePolicy"]) == ("Ignore", "Fail")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        cfg = one(objs, kind)
        assert cfg["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NS}/vramgate-webhook"
        assert "caBundle" not in cfg["webhooks"][0]["clientConfig"]
    selfsigned = one(objs, "Issuer", "vramgate-selfsigned")
    assert selfsigned["spec"] == {"selfSigned": {}}
    ca = one(objs, "Certificate", "vramgate-ca")
    assert ca["spec"]["isCA"] is True
    assert ca["spec"]["issuerRef"]["name"] == "vramgate-selfsigned"
    ca_issuer = one(objs, "Issuer", "vramgate-ca")
    assert ca_issuer["spec"] == {"ca": {"secretName": ca["spec"]["secretName"]}}
    serving = one(objs, "Certificate", "vramgate-webhook")
    assert serving["spec"]["issuerRef"] == {"name": "vramgate-ca", "kind": "Issuer", "group": "cert-manager.io"}
    assert serving["spec"]["dnsNames"] == [
        "vramgate-webhook", f"vramgate-webhook.{NS}", f"vramgate-webhook.{NS}.svc",
        f"vramgate-webhook.{NS}.svc.cluster.local"]
    assert "server auth" in serving["spec"]["usages"]
    for owner, spec in pods(objs):
        if owner.startswith("Job/"):
            continue
        secrets = [vol["secret"]["secretName"] for vol in spec.get("volumes", []) if "secret" in vol]
        assert secrets == [serving["spec"]["secretName"]]
    # No certificate hooks; only the pre-delete unregister hook.
    assert [j["metadata"]["name"] for j in find(objs, "Job")] == ["vramgate-unregister"]


def test_uninstall_deletes_the_webhook_configurations_first(render: Render) -> None:
    objs = render({}, namespace=NS)
    hook = [o for o in objs if o["metadata"].get("annotations", {}).get("helm.sh/hook") == "pre-delete"]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in hook) == [
        ("ClusterRole", "vramgate-unregister"), ("ClusterRoleBinding", "vramgate-unregister"),
        ("Job", "vramgate-unregister"), ("ServiceAccount", "vramgate-unregister")]
    role = one(objs, "ClusterRole", "vramgate-unregister")
    assert role["rules"] == [
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": [f"{k}webhookconfigurations"],
         "resourceNames": ["vramgate"], "verbs": ["get", "delete"]}
        for k in ("mutating", "validating")]
    job = one(objs, "Job", "vramgate-unregister")
    spec = job["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "vramgate-unregister"
    c = spec["containers"][0]
    assert c["command"] == ["python", "-m", "webhook.jobs.unregister_job"]
    assert c["args"][:4] == ["--mutating", "vramgate", "--validating", "vramgate"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    # Off by value, and in url mode (the webhook is outside the cluster and outlives the release).
    off = render({"webhook": {"unregisterOnUninstall": False}}, namespace=NS)
    assert "vramgate-unregister" not in [j["metadata"]["name"] for j in find(off, "Job")]
    url = render(MODES["url"], namespace=NS)
    assert "vramgate-unregister" not in [j["metadata"]["name"] for j in find(url, "Job")]


def test_certmanager_external_issuer(render: Render) -> None:
    objs = render(MODES["certManager-issuer"], namespace=NS)
    assert not find(objs, "Issuer")
    assert [c["metadata"]["name"] for c in find(objs, "Certificate")] == ["vramgate-webhook"]
    assert one(objs, "Certificate")["spec"]["issuerRef"] == {
        "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}


def test_self_signed_hooks(render: Render) -> None:
    objs = render({}, namespace=NS)
    m, v = webhooks(objs)
    # No CA yet at render time: fail open until the post-install hook sets caBundle + the policies.
    assert (m["failurePolicy"], v["failurePolicy"]) == ("Ignore", "Ignore")
    assert "caBundle" not in m["clientConfig"] and "caBundle" not in v["clientConfig"]
    create = one(objs, "Job", "vramgate-certs-create")
    patch = one(objs, "Job", "vramgate-certs-patch")
    assert create["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert patch["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    for job in (create, patch):
        c = job["spec"]["template"]["spec"]["containers"][0]
        assert c["command"] == ["python", "-m", "webhook.jobs.certs_job"]
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    cargs = create["spec"]["template"]["spec"]["containers"][0]["args"]
    assert cargs[:5] == ["create", "--namespace", NS, "--secret", "vramgate-tls"]
    assert cargs[cargs.index("--service") + 1] == "vramgate-webhook"
    pargs = patch["spec"]["template"]["spec"]["containers"][0]["args"]
    assert pargs[pargs.index("--mutating") + 1] == "vramgate"
    assert pargs[pargs.index("--validating") + 1] == "vramgate"
    assert pargs[pargs.index("--mutating-failure-policy") + 1] == "Ignore"
    assert pargs[pargs.index("--validating-failure-policy") + 1] == "Fail"
    # The job parses these args.
    from webhook.jobs.certs_job import build_parser

    assert build_parser().parse_args(cargs).service == "vramgate-webhook"
    assert build_parser().parse_args(pargs).validating_failure_policy == "Fail"
    # validate-kinds.vramgate.io keeps its own policy when the patch job turns the others to theirs.
    assert pargs[pargs.index("--hook-failure-policy") + 1] == "validate-kinds.vramgate.io=Ignore"
    assert build_parser().parse_args(pargs).hook_failure_policy == [("validate-kinds.vramgate.io", "Ignore")]
    # Hook RBAC exists before the Jobs run and is scoped by name.
    weights = {(o["kind"], o["metadata"]["name"]): int(o["metadata"]["annotations"]["helm.sh/hook-weight"])
               for o in objs if "helm.sh/hook" in (o["metadata"].get("annotations") or {})}
    assert max(w for (k, _), w in weights.items() if k != "Job") < min(w for (k, _), w in weights.items() if k == "Job")
    for o in objs:
        ann = o["metadata"].get("annotations") or {}
        if "helm.sh/hook" in ann:
            assert ann["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    role = grants(rules_of(objs, "Role", "vramgate-certs"))
    assert role == {("", "secrets", "create"), ("", "secrets", "get"), ("", "secrets", "update")}
    named = [r for r in rules_of(objs, "Role", "vramgate-certs") if "get" in r["verbs"]]
    assert named[0]["resourceNames"] == ["vramgate-tls"]
    cr = rules_of(objs, "ClusterRole", "vramgate-certs")
    assert {(r["resources"][0], tuple(r["resourceNames"]), tuple(r["verbs"])) for r in cr} == {
        ("mutatingwebhookconfigurations", ("vramgate",), ("get", "patch")),
        ("validatingwebhookconfigurations", ("vramgate",), ("get", "patch"))}


def test_url_mode(render: Render) -> None:
    objs = render(url_mode_values("https://127.0.0.1:18443/", CA_B64), namespace=NS)
    m, v = webhooks(objs)
    assert m["clientConfig"] == {"url": "https://127.0.0.1:18443/mutate", "caBundle": CA_B64}
    assert v["clientConfig"] == {"url": "https://127.0.0.1:18443/validate", "caBundle": CA_B64}
    assert (m["failurePolicy"], v["failurePolicy"]) == ("Ignore", "Fail")
    assert not find(objs, "Job")
    # selfSigned + url: the Secret is still made for in-cluster pods, but nothing patches the webhooks.
    objs = render(MODES["url-selfSigned"], namespace=NS)
    assert [j["metadata"]["name"] for j in find(objs, "Job")] == ["vramgate-certs-create"]
    assert not find(objs, "ClusterRole", "vramgate-certs")
    m, v = webhooks(objs)
    assert m["clientConfig"]["caBundle"] == CA_B64 and v["failurePolicy"] == "Fail"


# ---------------------------------------------------------------------------------------------
# pods
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["all-on", "selfSigned", "certManager"])
def test_restricted_security_context(render: Render, mode: str) -> None:
    for owner, spec in pods(render(MODES[mode], namespace=NS)):
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert isinstance(psc["runAsUser"], int) and psc["runAsUser"] > 0
        tmp_volumes = {vol["name"] for vol in spec["volumes"] if "emptyDir" in vol}
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532, owner
            assert sc["readOnlyRootFilesystem"] is True, owner
            assert sc["allowPrivilegeEscalation"] is False, owner
            assert sc["capabilities"] == {"drop": ["ALL"]}, owner
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, owner
            assert any(m["mountPath"] == "/tmp" and m["name"] in tmp_volumes for m in c["volumeMounts"]), owner
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"], owner


def test_webhook_deployment(render: Render) -> None:
    objs = render({}, namespace=NS)
    d = one(objs, "Deployment", "vramgate-webhook")
    spec = d["spec"]["template"]["spec"]
    assert d["spec"]["replicas"] >= 2
    assert d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["serviceAccountName"] == "vramgate-webhook"
    (c,) = spec["containers"]
    assert c["image"] == "ghcr.io/vramgate/vramgate:0.1.0"
    assert [*c["command"], *c["args"]][:10] == [
        "vramgate", "serve", "--role", "webhook", "--config", "/etc/vramgate/config.yaml",
        "--tls-cert", "/certs/tls.crt", "--tls-key", "/certs/tls.key"]
    assert c["args"][-2:] == ["--port", "8443"]
    assert c["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"},
                          {"name": "metrics", "containerPort": 8445, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols[mounts["/etc/vramgate"]]["configMap"]["name"] == "vramgate-config"
    assert vols[mounts["/certs"]]["secret"]["secretName"] == "vramgate-tls"
    assert "emptyDir" in vols[mounts["/tmp"]]
    # Spread across nodes.
    tsc = spec["topologySpreadConstraints"]
    assert any(t["topologyKey"] == "kubernetes.io/hostname" and t["maxSkew"] == 1 for t in tsc)
    anti = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "webhook"
    svc = one(objs, "Service", "vramgate-webhook")
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"},
                                    {"name": "metrics", "port": 8445, "targetPort": "metrics", "protocol": "TCP"}]
    pdb = one(objs, "PodDisruptionBudget", "vramgate-webhook")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == d["spec"]["selector"]
    assert "checksum/config" in d["spec"]["template"]["metadata"]["annotations"]


def test_config_change_rolls_pods(render: Render) -> None:
    def checksum(values: dict[str, Any]) -> str:
        d = one(render(values, namespace=NS), "Deployment", "vramgate-webhook")
        return str(d["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    assert checksum({}) != checksum({"config": {"gpu_memory_utilization": 0.8}})


def test_overrides(render: Render) -> None:
    objs = render({"image": {"digest": "sha256:" + "a" * 64}, "webhook": {
        "replicas": 3, "affinity": {"nodeAffinity": {}}, "topologySpreadConstraints": [
            {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
        "nodeSelector": {"role": "infra"}, "podAnnotations": {"a": "b"}}}, namespace=NS)
    d = one(objs, "Deployment", "vramgate-webhook")
    spec = d["spec"]["template"]["spec"]
    assert d["spec"]["replicas"] == 3
    assert spec["containers"][0]["image"] == "ghcr.io/vramgate/vramgate@sha256:" + "a" * 64
    assert spec["affinity"] == {"nodeAffinity": {}}
    assert spec["topologySpreadConstraints"][0]["maxSkew"] == 2
    assert spec["nodeSelector"] == {"role": "infra"}
    assert d["spec"]["template"]["metadata"]["annotations"]["a"] == "b"


def test_controller_deployment(render: Render, tmp_path: Path) -> None:
    objs = render({}, namespace=NS)
    d = one(objs, "Deployment", "vramgate-controller")
    assert d["spec"]["replicas"] == 2
    c = d["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][:3] == ["serve", "--role", "controller"]
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert config_of(objs, tmp_path).controller.remediation.enabled is False
    on = render({"controller": {"remediation": {"enabled": True}}}, namespace=NS)
    assert config_of(on, tmp_path).controller.remediation.enabled is True


# ---------------------------------------------------------------------------------------------
# scheduler
# ---------------------------------------------------------------------------------------------


EXTENDER = {"extender": {"enabled": True}}


def test_native_placement_is_the_default(render: Render, tmp_path: Path) -> None:
    """No second scheduler, no extender: the webhook's affinity and the health taints place GPU pods."""
    objs = render({}, namespace=NS)
    components = {o["metadata"]["labels"].get("app.kubernetes.io/component") for o in find(objs, "Deployment")}
    assert components == {"webhook", "controller"}
    assert "scheduler_name" not in config_of(objs, tmp_path).admission.model_dump(exclude_unset=True)
    assert config_of(objs, tmp_path).admission.scheduler_name is None
    # The deprecated switch still works, as the new one does.
    for values in (EXTENDER, {"scheduler": {"enabled": True}}):
        on = render(values, namespace=NS)
        assert "scheduler" in {o["metadata"]["labels"].get("app.kubernetes.io/component")
                               for o in find(on, "Deployment")}
        assert config_of(on, tmp_path).admission.scheduler_name == "vramgate-scheduler"


def test_scheduler_configuration(render: Render, tmp_path: Path) -> None:
    objs = render(EXTENDER, namespace=NS)
    cfg = scheduler_config(objs)
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    le = cfg["leaderElection"]
    assert le["leaderElect"] is True and le["resourceName"] == "vramgate-scheduler"
    assert le["resourceNamespace"] == NS and le["resourceLock"] == "leases"
    assert cfg["profiles"] == [{"schedulerName": "vramgate-scheduler"}]
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "https://127.0.0.1:8444/scheduler"
    assert ext["filterVerb"] == "filter" and ext["prioritizeVerb"] == "prioritize"
    assert ext["weight"] == 5 and ext["enableHTTPS"] is True
    assert ext["tlsConfig"] == {"insecure": True}
    assert ext["nodeCacheCapable"] is True
    # Every vendor's GPU resource (webhook/data/accelerators.yaml): an amd.com/gpu pod is filtered by it too.
    assert ext["managedResources"] == [{"name": r, "ignoredByScheduler": False}
                                       for r in ("nvidia.com/gpu", *resources_of_vendors())]
    assert ext["ignorable"] is False and ext["httpTimeout"] == "5s"
    assert config_of(objs, tmp_path).admission.scheduler_name == "vramgate-scheduler"

    d = one(objs, "Deployment", "vramgate-scheduler")
    spec = d["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-cluster-critical"
    sched, sidecar = spec["containers"]
    assert sched["image"] == "registry.k8s.io/kube-scheduler:v1.37.2"
    config_flag = next(a for a in sched["command"] if a.startswith("--config="))
    mount = next(m for m in sched["volumeMounts"] if m["name"] == "scheduler-config")
    assert config_flag == f"--config={mount['mountPath']}/config.yaml"
    assert sched["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    args = sidecar["args"]
    assert args[:3] == ["serve", "--role", "extender"]
    assert args[args.index("--port") + 1] == "8444" and args[args.index("--host") + 1] == "127.0.0.1"
    assert "--tls-cert" in args and "--config" in args
    assert "8444/readyz" in " ".join(sidecar["readinessProbe"]["exec"]["command"])


def test_prioritize_is_optional(render: Render) -> None:
    (on,) = scheduler_config(render(EXTENDER, namespace=NS))["extenders"]
    assert on["prioritizeVerb"] == "prioritize" and on["weight"] == 5
    (off,) = scheduler_config(render({**EXTENDER, "scheduler": {"extender": {"prioritize": False}}},
                                     namespace=NS))["extenders"]
    # Filter only: one call per scheduling cycle, kube-scheduler's own scores rank.
    assert off["filterVerb"] == "filter" and "prioritizeVerb" not in off and "weight" not in off


def test_scheduler_verify_tls_and_custom_name(render: Render, tmp_path: Path) -> None:
    objs = render({**EXTENDER, "scheduler": {"name": "gpu-sched", "extender": {"verifyTLS": True, "weight": 2,
                                                                               "ignorable": True}}}, namespace=NS)
    (ext,) = scheduler_config(objs)["extenders"]
    assert ext["tlsConfig"] == {"caFile": "/certs/ca.crt", "serverName": f"vramgate-webhook.{NS}.svc"}
    assert ext["weight"] == 2 and ext["ignorable"] is True
    assert scheduler_config(objs)["profiles"] == [{"schedulerName": "gpu-sched"}]
    assert config_of(objs, tmp_path).admission.scheduler_name == "gpu-sched"
    sched = one(objs, "Deployment", "vramgate-scheduler")["spec"]["template"]["spec"]["containers"][0]
    assert any(m["mountPath"] == "/certs" for m in sched["volumeMounts"])


def test_scheduler_disabled(render: Render, tmp_path: Path) -> None:
    objs = render(MODES["minimal"], namespace=NS)
    assert not find(objs, "ConfigMap", "vramgate-scheduler-config")
    assert [d["metadata"]["name"] for d in find(objs, "Deployment")] == ["vramgate-webhook"]
    assert config_of(objs, tmp_path).admission.scheduler_name is None
    assert not find(objs, "PriorityClass")


def test_standalone_extender(render: Render) -> None:
    objs = render({"scheduler": {"enabled": False}, "standaloneExtender": {"enabled": True}}, namespace=NS)
    d = one(objs, "Deployment", "vramgate-extender")
    c = d["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][:3] == ["serve", "--role", "extender"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert one(objs, "Service", "vramgate-extender")["spec"]["ports"][0]["port"] == 443


def test_scheduler_rbac(render: Render) -> None:
    objs = render(EXTENDER, namespace=NS)
    bound = {b["roleRef"]["name"]: b for b in find(objs, "ClusterRoleBinding")
             if b["subjects"][0]["name"] == "vramgate-scheduler"}
    assert {"system:kube-scheduler", "system:volume-scheduler", "vramgate-extender"} <= set(bound)
    reader = one(objs, "RoleBinding", "vramgate-scheduler-auth-reader")
    assert reader["metadata"]["namespace"] == "kube-system"
    assert reader["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                 "name": "extension-apiserver-authentication-reader"}
    lease = rules_of(objs, "Role", "vramgate-scheduler-leader-election")
    assert grants(lease) == {("coordination.k8s.io", "leases", v) for v in ("create", "get", "update")}
    assert next(r for r in lease if "get" in r["verbs"])["resourceNames"] == ["vramgate-scheduler"]


# ---------------------------------------------------------------------------------------------
# RBAC least privilege
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", sorted(MODES))
def test_no_wildcards(render: Render, mode: str) -> None:
    for o in render(MODES[mode], namespace=NS):
        for rule in o.get("rules", []) if o["kind"] in ("Role", "ClusterRole") else []:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), f"{o['kind']}/{o['metadata']['name']} {field}"
            verbs = set(rule["verbs"])
            if o["metadata"]["name"] == "vramgate-unregister":
                # The pre-delete hook deletes the two webhook configurations, by name, and nothing else.
                assert rule["resourceNames"] == ["vramgate"] and verbs == {"get", "delete"}
                verbs -= {"delete"}
            assert not {"escalate", "bind", "impersonate", "delete", "deletecollection"} & verbs


def test_least_privilege_per_role(render: Render) -> None:
    objs = render({}, namespace=NS)
    # The inventory lists and watches (never a get: tests/chart/test_rbac_matches_code.py compares with the code).
    read = {("", r, v) for r in ("nodes", "pods", "namespaces") for v in ("list", "watch")}
    dra_read = ("resourceslices", "deviceclasses", "resourceclaimtemplates", "resourceclaims")
    read |= {("resource.k8s.io", r, v) for r in dra_read
             for v in ("list", "watch")}  # DRA inventory and the claims pods refer to
    # Admission reads the ConfigMaps a workload's env names (get only; config.admission.read_configmaps), and
    # autofit reads the object it changed for its UID and writes one Event (webhook.autofit.enabled).
    autofit = {("", "events", "create")} | {(g, r, "get") for g, r in (
        ("", "pods"), ("apps", "deployments"), ("apps", "statefulsets"), ("apps", "replicasets"),
        ("apps", "daemonsets"), ("batch", "jobs"), ("batch", "cronjobs"))}
    # The mutation reads PriorityClasses to set spec.priority as the Priority plugin will (one /mutate call a Pod).
    priorities = {("scheduling.k8s.io", "priorityclasses", v) for v in ("list", "watch")}
    # and Karpenter NodePools, read only to admit what no node holds yet but a pool can add (docs/autoscaling.md).
    priorities |= {("karpenter.sh", "nodepools", v) for v in ("list", "watch")}
    # The metrics port's guard (metrics.auth, on by default) asks who a token is and what it may do.
    reviews = {("authentication.k8s.io", "tokenreviews", "create"),
               ("authorization.k8s.io", "subjectaccessreviews", "create")}
    assert grants(rules_of(objs, "ClusterRole", "vramgate-webhook")) == (
        read | priorities | {("", "configmaps", "get")} | autofit | reviews)
    # Native placement (the default) runs no extender; with it, the extender reads what the webhook reads.
    assert not find(objs, "ClusterRole", "vramgate-extender")
    assert grants(rules_of(render(EXTENDER, namespace=NS), "ClusterRole", "vramgate-extender")) == read | reviews
    off = render({"config": {"admission": {"read_configmaps": False}}, "webhook": {"autofit": {"enabled": False}}},
                 namespace=NS)
    assert grants(rules_of(off, "ClusterRole", "vramgate-webhook")) == read | priorities | reviews
    controller = grants(rules_of(objs, "ClusterRole", "vramgate-controller"))
    assert controller == (
        {("", "nodes", v) for v in ("get", "list", "watch", "patch")}  # a merge patch, never an update
        | {("", r, v) for r in ("pods", "namespaces") for v in ("list", "watch")}
        | {("", "events", "create")}  # core v1 Events, posted once each
        | AUDIT_READS
        | {("wgpolicyk8s.io", "policyreports", v) for v in ("list", "create", "update")}
        | {("resource.k8s.io", r, v) for r in dra_read for v in ("list", "watch")}
        | reviews
    )
    dtr = grants(rules_of(render({"config": {"controller": {"device_taint_rules": True}}}, namespace=NS),
                          "ClusterRole", "vramgate-controller"))
    assert dtr - controller == {("resource.k8s.io", "devicetaintrules", v)
                                for v in ("get", "list", "create", "update", "delete")}
    lease = rules_of(objs, "Role", "vramgate-controller-leader-election")
    assert one(objs, "Role", "vramgate-controller-leader-election")["metadata"]["namespace"] == NS
    assert grants(lease) == {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}
    assert next(r for r in lease if "get" in r["verbs"])["resourceNames"] == ["vramgate-controller"]
    # Who is bound to what.
    for binding, sa in (("vramgate-webhook", "vramgate-webhook"), ("vramgate-controller", "vramgate-controller")):
        assert one(objs, "ClusterRoleBinding", binding)["subjects"] == [
            {"kind": "ServiceAccount", "name": sa, "namespace": NS}]


AUDIT_READS = {
    (g, r, "list") for g, rs in {
        "": ("replicationcontrollers",),
        "apps": ("deployments", "statefulsets", "replicasets", "daemonsets"),
        "batch": ("jobs", "cronjobs"),
        "leaderworkerset.x-k8s.io": ("leaderworkersets",),
        "serving.kserve.io": ("inferenceservices", "llminferenceservices", "servingruntimes",
                              "clusterservingruntimes"),
        "ray.io": ("rayclusters", "rayjobs", "rayservices"),
        "trainer.kubeflow.org": ("trainjobs", "trainingruntimes", "clustertrainingruntimes"),
        "kubeflow.org": ("pytorchjobs",),
        "jobset.x-k8s.io": ("jobsets",),
        "kubeai.org": ("models",),
    }.items() for r in rs
}


def test_audit_rbac_reports_and_crd(render: Render, tmp_path: Path) -> None:
    def controller_grants(values: dict[str, Any]) -> set[tuple[str, str, str]]:
        return grants(rules_of(render(values, namespace=NS), "ClusterRole", "vramgate-controller"))

    def config_of(values: dict[str, Any]) -> dict[str, Any]:
        cm = one(render(values, namespace=NS), "ConfigMap", "vramgate-config")
        return yaml.safe_load(cm["data"]["config.yaml"])

    base = controller_grants({"controller": {"audit": {"enabled": False}}})
    assert not base & AUDIT_READS and not {g for g in base if g[0] in ("wgpolicyk8s.io", "openreports.io")}
    assert config_of({"controller": {"audit": {"enabled": False}}})["audit"]["enabled"] is False
    assert config_of({})["audit"] == {"enabled": True, "reports": "policyreport"}
    opened = controller_grants({"reports": {"kind": "openreports"}})
    assert {g for g in opened if g[0] == "openreports.io"} == {
        ("openreports.io", "reports", v) for v in ("list", "create", "update")}
    assert not {g for g in controller_grants({"reports": {"kind": "none"}}) if "report" in g[1]}
    # The CRD only when asked.
    assert not [o for o in render({}, namespace=NS) if o["kind"] == "CustomResourceDefinition"]
    crd = one(render({"reports": {"installCRDs": True}}, namespace=NS), "CustomResourceDefinition",
              "policyreports.wgpolicyk8s.io")
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert crd["spec"]["versions"][0]["name"] == "v1alpha2" and crd["spec"]["names"]["kind"] == "PolicyReport"
    crd = one(render({"reports": {"installCRDs": True, "kind": "openreports"}}, namespace=NS),
              "CustomResourceDefinition", "reports.openreports.io")
    assert crd["spec"]["versions"][0]["name"] == "v1alpha1"
def test_claim_webhooks(render: Render) -> None:
    hooks = claim_webhooks(render({}, namespace=NS))
    assert [h["name"] for h in hooks] == ["mutate-claims.vramgate.io", "validate-claims.vramgate.io"]
    for h in hooks:
        assert h["rules"] == [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"], "operations": ["CREATE"],
                               "resources": ["resourceclaimtemplates", "resourceclaims"], "scope": "Namespaced"}]
        assert h["failurePolicy"] == "Ignore" and "vramgate.io/" in h["matchConditions"][0]["expression"]
    assert hooks[0]["clientConfig"]["service"]["path"] == "/mutate"
    assert claim_webhooks(render({"webhook": {"dra": {"enabled": False}}}, namespace=NS)) == []
    # pods that ask for GPUs through claims reach the pod webhooks despite gpuWorkloadsOnly
    m, _ = webhooks(render({}, namespace=NS))
    assert "resourceClaims" in m["matchConditions"][0]["expression"]


def test_eviction_only_with_remediation(render: Render) -> None:
    def evict(values: dict[str, Any]) -> bool:
        rules = rules_of(render(values, namespace=NS), "ClusterRole", "vramgate-controller")
        return ("", "pods/eviction", "create") in grants(rules)

    assert not evict({})
    assert evict({"controller": {"remediation": {"enabled": True}}})
    rules = rules_of(render(ALL_ON, namespace=NS), "ClusterRole", "vramgate-controller")
    assert {g for g in grants(rules) if g[1] == "pods/eviction"} == {("", "pods/eviction", "create")}


# ---------------------------------------------------------------------------------------------
# PriorityClasses, monitoring, network policy
# ---------------------------------------------------------------------------------------------


def test_priority_classes(render: Render, tmp_path: Path) -> None:
    objs = render({}, namespace=NS)
    prod = one(objs, "PriorityClass", "gpu-production-priority")
    batch = one(objs, "PriorityClass", "gpu-batch-priority")
    assert prod["value"] == 1000 and batch["value"] == 500
    assert prod["globalDefault"] is False and batch["globalDefault"] is False
    assert batch["preemptionPolicy"] == "Never"
    assert set(config_of(objs, tmp_path).admission.tiers.values()) == {prod["metadata"]["name"],
                                                                      batch["metadata"]["name"]}
    objs = render({"priorityClasses": {"batch": {"preemptionPolicy": "PreemptLowerPriority", "value": 400}}},
                  namespace=NS)
    batch = one(objs, "PriorityClass", "gpu-batch-priority")
    assert batch["preemptionPolicy"] == "PreemptLowerPriority" and batch["value"] == 400


def test_service_monitor(render: Render) -> None:
    objs = render(MODES["all-on"], namespace=NS)
    monitors = find(objs, "ServiceMonitor")
    services = find(objs, "Service")
    assert {m["metadata"]["name"] for m in monitors} == {"vramgate-webhook", "vramgate-controller",
                                                         "vramgate-extender"}
    for m in monitors:
        assert m["apiVersion"] == "monitoring.coreos.com/v1"
        assert m["metadata"]["labels"]["release"] == "prom"
        sel = m["spec"]["selector"]["matchLabels"]
        matching = [s for s in services if sel.items() <= s["metadata"]["labels"].items()]
        assert len(matching) == 1
        port_names = {p["name"] for p in matching[0]["spec"]["ports"]}
        (ep,) = m["spec"]["endpoints"]
        assert ep["port"] in port_names and ep["scheme"] == "https" and ep["path"] == "/metrics"
        assert ep["tlsConfig"]["ca"]["secret"] == {"name": "vramgate-tls", "key": "ca.crt"}
        assert ep["tlsConfig"]["serverName"] == f"vramgate-webhook.{NS}.svc"
        assert m["spec"]["namespaceSelector"] == {"matchNames": [NS]}


def _exported_metric_names() -> set[str]:
    """Series names webhook/metrics.py exports (labelled metrics have no samples until used)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    names = set()
    for family in Metrics().registry.collect():
        for suffix in suffixes.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def test_prometheus_rule(render: Render) -> None:
    rule = one(render(MODES["all-on"], namespace=NS), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    fb = alerts["GPUFramebufferNearlyFull"]["expr"]
    assert re.sub(r"\s+", "", fb) == "DCGM_FI_DEV_FB_USED/(DCGM_FI_DEV_FB_USED+DCGM_FI_DEV_FB_FREE)>0.95"
    assert re.sub(r"\s+", "", alerts["GPUTemperatureHigh"]["expr"]) == "DCGM_FI_DEV_GPU_TEMP>85"
    for r in alerts.values():
        assert set(r) == {"alert", "expr", "for", "labels", "annotations"}
        assert r["labels"]["severity"] in {"info", "warning", "critical"}
        assert r["annotations"]["summary"] and r["annotations"]["description"]
    # Every vramgate_* series an alert reads is one webhook/metrics.py exports (counters as *_total).
    exported = _exported_metric_names()
    used = {m for r in alerts.values() for m in re.findall(r"\bvramgate_[a-z_]+", r["expr"])}
    assert used and used <= exported, used - exported
    assert {"vramgate_admission_errors_total", "vramgate_admission_requests_total",
            "vramgate_inventory_staleness_seconds", "vramgate_nodes_by_health"} <= used
    assert 'verdict=~"deny|denied|reject|rejected"' in alerts["VramgateHighRejectionRatio"]["expr"]
    tuned = one(render(merged(MODES["all-on"], {"prometheusRule": {"gpu": {"framebufferUsedRatio": 0.99,
                                                                           "temperatureCelsius": 90}}}),
                       namespace=NS), "PrometheusRule")
    exprs = " ".join(r["expr"] for g in tuned["spec"]["groups"] for r in g["rules"])
    assert "> 0.99" in exprs and "DCGM_FI_DEV_GPU_TEMP > 90" in exprs


def test_metrics_port_auth_and_reader_role(render: Render, tmp_path: Path) -> None:
    """The metrics port in every vramgate pod and Service, the config that serves it (auth on), the ServiceMonitor
    on it with a bearer token, and the ClusterRole monitoring binds; values that disagree fail."""
    objs = render(MODES["all-on"], namespace=NS)
    config = config_of(objs, tmp_path)
    assert config.server.metrics_port == 8445 and config.server.metrics_auth is True
    for name in ("vramgate-webhook", "vramgate-controller", "vramgate-extender"):
        (c,) = one(objs, "Deployment", name)["spec"]["template"]["spec"]["containers"]
        assert {"name": "metrics", "containerPort": 8445, "protocol": "TCP"} in c["ports"], name
        # kubelet's probes stay on the webhook and extender port, without a token.
        assert c["readinessProbe"]["httpGet"]["port"] == "https" and c["livenessProbe"]["httpGet"]["port"] == "https"
        ports = {p["name"]: p for p in one(objs, "Service", name)["spec"]["ports"]}
        assert ports["metrics"] == {"name": "metrics", "port": 8445, "targetPort": "metrics", "protocol": "TCP"}
    for m in find(objs, "ServiceMonitor"):
        (ep,) = m["spec"]["endpoints"]
        assert ep["port"] == "metrics"
        assert ep["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    reader = one(objs, "ClusterRole", "vramgate-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics", "/inventory", "/status", "/"], "verbs": ["get"]}]
    assert not find(objs, "ClusterRoleBinding", "vramgate-metrics-reader")  # bind it yourself, unless told
    prom = {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
    bound = render({"metrics": {"reader": {"subjects": [prom]}}}, namespace=NS)
    binding = one(bound, "ClusterRoleBinding", "vramgate-metrics-reader")
    assert binding["subjects"] == [prom] and binding["roleRef"]["name"] == "vramgate-metrics-reader"

    off = render(merged(MODES["all-on"], {"metrics": {"auth": False, "port": 9100, "reader": {"create": False}}}),
                 namespace=NS)
    assert config_of(off, tmp_path).server.metrics_auth is False
    assert config_of(off, tmp_path).server.metrics_port == 9100
    assert not find(off, "ClusterRole", "vramgate-metrics-reader")
    for m in find(off, "ServiceMonitor"):
        assert "bearerTokenFile" not in m["spec"]["endpoints"][0]
    for role in find(off, "ClusterRole"):
        assert not any("tokenreviews" in r.get("resources", []) for r in role["rules"]), role["metadata"]["name"]
    for values, says in (({"config": {"server": {"metrics_auth": False}}}, "metrics.auth"),
                         ({"config": {"server": {"metrics_port": 9999}}}, "metrics.port"),
                         ({"metrics": {"port": 8443}}, "must differ from controller.port")):
        with pytest.raises(HelmError, match=re.escape(says)):
            render(values, namespace=NS)


def _metrics_from(*namespaces: str) -> list[dict[str, Any]]:
    return [{"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(namespaces)}]}}]


def test_network_policy(render: Render) -> None:
    # On by default: the serving port from any source (kube-apiserver and the kubelet's probes have no pod identity),
    # the metrics port from the release namespace and "monitoring" only.
    default = {p["metadata"]["name"]: p["spec"] for p in find(render({}, namespace=NS), "NetworkPolicy")}
    assert set(default) == {"vramgate-webhook", "vramgate-controller"}
    for name, spec in default.items():
        assert spec["policyTypes"] == ["Ingress"]
        assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == name.removeprefix("vramgate-")
        assert spec["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8443}]},
                                   {"ports": [{"protocol": "TCP", "port": 8445}],
                                    "from": _metrics_from(NS, "monitoring")}]
    # networkPolicy.from keeps its meaning for the serving ports; the metrics port has its own readers.
    objs = render(merged(MODES["all-on"], {"networkPolicy": {"metrics": {
        "namespaces": ["prometheus", NS], "from": [{"podSelector": {"matchLabels": {"app": "scraper"}}}]}}}),
        namespace=NS)
    pols = {p["metadata"]["name"]: p for p in find(objs, "NetworkPolicy")}
    assert set(pols) == {"vramgate-webhook", "vramgate-controller", "vramgate-scheduler", "vramgate-extender"}
    platform = [{"namespaceSelector": {"matchLabels": {"team": "platform"}}}]
    metrics = {"ports": [{"protocol": "TCP", "port": 8445}],
               "from": [*_metrics_from(NS, "prometheus"), {"podSelector": {"matchLabels": {"app": "scraper"}}}]}
    assert pols["vramgate-webhook"]["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": 8443}], "from": platform}, metrics]
    assert pols["vramgate-extender"]["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": 8444}], "from": platform}, metrics]
    # The scheduler pod: kube-scheduler's secure port; the extender sidecar on loopback needs no rule.
    assert pols["vramgate-scheduler"]["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": 10259}], "from": platform}]
    off_loopback = render(merged(MODES["all-on"], {"scheduler": {"extender": {"bindAddress": "0.0.0.0"}}}),
                          namespace=NS)
    assert one(off_loopback, "NetworkPolicy", "vramgate-scheduler")["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": 10259}, {"protocol": "TCP", "port": 8444}], "from": platform},
        {"ports": [{"protocol": "TCP", "port": 8445}], "from": _metrics_from(NS, "monitoring")}]
    # No namespaces listed: the release namespace alone.
    alone = render({"networkPolicy": {"metrics": {"namespaces": []}}}, namespace=NS)
    assert one(alone, "NetworkPolicy", "vramgate-webhook")["spec"]["ingress"][1]["from"] == _metrics_from(NS)
    assert not find(render({"networkPolicy": {"enabled": False}}, namespace=NS), "NetworkPolicy")


def test_install_helm_script_is_idempotent(helm: str) -> None:
    proc = subprocess.run(["bash", str(ROOT / "tests/chart/install_helm.sh")], capture_output=True, text=True,
                          timeout=60, check=False)
    if Path(helm) == ROOT / ".cache/bin/helm":
        assert proc.returncode == 0 and "already" in proc.stdout, proc.stdout + proc.stderr


def test_gpu_workloads_only_match_conditions(render: Render) -> None:
    objs = render({}, namespace=NS)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        hook = one(objs, kind)["webhooks"][0]
        (cond,) = hook["matchConditions"]
        expr = cond["expression"]
        assert cond["name"] == "gpu-workloads-only"
        # One branch per pod location: Pod, CronJob, and the template of every other kind.
        for path in ("object.spec.containers", "object.spec.jobTemplate.spec.template.spec.containers",
                     "object.spec.template.spec.containers"):
            assert f"has({path}) && {path}.exists(c" in expr
        assert expr.count("'nvidia.com/gpu' in c.resources.limits") == 6 and "t.key == 'nvidia.com/gpu'" in expr
        # Pods asking another vendor's GPUs (amd.com/gpu) are sent too: every resource of the accelerator table.
        for r in resources_of_vendors():
            assert expr.count(f"'{r}' in c.resources.limits") == 6 and f"t.key == '{r}'" in expr, r
        # Slices named per profile (MIG mixed, AMD partitions) by prefix: no fixed list holds them.
        # Volcano's vGPUs (volcano.sh/vgpu-number, -memory) too: a pod asking them has no nvidia.com/gpu.
        prefixes = "k.startsWith('nvidia.com/mig-') || k.startsWith('amd.com/') || k.startsWith('volcano.sh/vgpu-')"
        assert expr.count(f"c.resources.limits.exists(k, {prefixes})") == 6, expr
        assert expr.count(f"c.resources.requests.exists(k, {prefixes})") == 6, expr
        # KAI-Scheduler's shares are pod annotations with no GPU resource: one test per pod location.
        for meta in ("object.metadata", "object.spec.jobTemplate.spec.template.metadata",
                     "object.spec.template.metadata"):
            assert (f"has({meta}) && has({meta}.annotations) && ('gpu-fraction' in {meta}.annotations || "
                    f"'gpu-memory' in {meta}.annotations)") in expr, meta
    own = one(render({"config": {"labels": {"mig_resource_prefix": "example.com/mig-"}}}, namespace=NS),
              "ValidatingWebhookConfiguration")["webhooks"][0]["matchConditions"][0]["expression"]
    assert "k.startsWith('example.com/mig-') || k.startsWith('nvidia.com/mig-')" in own
    off = render({"webhook": {"gpuWorkloadsOnly": False}}, namespace=NS)
    assert "matchConditions" not in one(off, "ValidatingWebhookConfiguration")["webhooks"][0]


EXTRA_KINDS = {
    ("leaderworkerset.x-k8s.io", "leaderworkersets", "Namespaced"),
    ("serving.kserve.io", "inferenceservices", "Namespaced"),
    ("serving.kserve.io", "llminferenceservices", "Namespaced"),
    ("ray.io", "rayclusters", "Namespaced"), ("ray.io", "rayjobs", "Namespaced"),
    ("ray.io", "rayservices", "Namespaced"),
    ("trainer.kubeflow.org", "trainjobs", "*"), ("trainer.kubeflow.org", "trainingruntimes", "*"),
    ("trainer.kubeflow.org", "clustertrainingruntimes", "*"), ("kubeflow.org", "pytorchjobs", "Namespaced"),
    ("jobset.x-k8s.io", "jobsets", "Namespaced"), ("kubeai.org", "models", "Namespaced"),
    ("apps.nvidia.com", "nimservices", "Namespaced"), ("batch.volcano.sh", "jobs", "Namespaced"),
    ("nvidia.com", "dynamographdeployments", "Namespaced"), ("nvidia.com", "dynamocomponentdeployments", "Namespaced"),
    ("workloads.x-k8s.io", "rolebasedgroups", "Namespaced"), ("argoproj.io", "workflows", "Namespaced"),
    ("argoproj.io", "cronworkflows", "Namespaced"), ("kaito.sh", "workspaces", "Namespaced"),
    ("kaito.sh", "inferencesets", "Namespaced"), ("kaito.sh", "multiroleinferences", "Namespaced"),
    ("serving.knative.dev", "services", "Namespaced"), ("serving.knative.dev", "configurations", "Namespaced"),
    ("ome.io", "inferenceservices", "Namespaced"), ("grove.io", "podcliquesets", "Namespaced"),
    ("inference.llmaz.io", "playgrounds", "Namespaced"),
}


def test_extra_kinds_webhook(render: Render) -> None:
    objs = render(MODES["all-on"], namespace=NS)
    hook = kinds_webhook(objs)
    assert hook is not None
    _, main = webhooks(objs)
    # Every kind the LLM world ships in, at any version, and no GPU matchCondition: their GPUs may come
    # from a ServingRuntime, a TrainingRuntime or a KubeAI profile that CEL cannot see.
    assert {(g, r, rule["scope"]) for rule in hook["rules"] for g in rule["apiGroups"]
            for r in rule["resources"]} == EXTRA_KINDS
    assert all(rule["apiVersions"] == ["*"] and rule["operations"] == ["CREATE", "UPDATE"] for rule in hook["rules"])
    assert "matchConditions" not in hook and hook["failurePolicy"] == "Ignore"
    assert hook["clientConfig"]["service"] == {**main["clientConfig"]["service"], "path": "/validate"}
    assert (hook["namespaceSelector"], hook["objectSelector"]) == (main["namespaceSelector"], main["objectSelector"])
    strict = kinds_webhook(render(merged(MODES["provided"], {"webhook": {"extraKinds": {"failurePolicy": "Fail",
                                                                                      "ray": False}}}),
                                  namespace=NS))
    assert strict is not None and strict["failurePolicy"] == "Fail"
    assert "ray.io" not in {g for rule in strict["rules"] for g in rule["apiGroups"]}
    assert kinds_webhook(render(merged(MODES["all-on"], {"webhook": {"extraKinds": {"enabled": False}}}),
                                namespace=NS)) is None
    none = {k: False for k in ("leaderWorkerSet", "kserve", "ray", "kubeflowTrainer", "pytorchJob", "jobSet", "kubeai",
                               "nimService", "volcano", "dynamo", "roleBasedGroup", "argoWorkflows", "kaito",
                               "knative", "ome", "grove", "llmaz")}
    assert kinds_webhook(render(merged(MODES["all-on"], {"webhook": {"extraKinds": none}}), namespace=NS)) is None


def test_extra_kinds_only_for_installed_groups() -> None:
    from .render import render_chart

    only = {"webhook": {"extraKinds": {"onlyInstalledGroups": True}}}
    served = ["ray.io/v1", "batch.volcano.sh/v1alpha1", "kaito.sh/v1beta1/Workspace"]
    hook = kinds_webhook(render_chart(merged(MODES["all-on"], only), namespace=NS, api_versions=served))
    assert hook is not None
    assert {g for rule in hook["rules"] for g in rule["apiGroups"]} == {"ray.io", "batch.volcano.sh", "kaito.sh"}
    # A cluster serving none of them (and plain `helm template`): no kinds webhook at all, nothing to block.
    assert kinds_webhook(render_chart(merged(MODES["all-on"], only), namespace=NS)) is None


def test_hub_models_configmap_and_its_rbac() -> None:
    from .render import render_chart

    objs = render_chart({"config": {"hub": {"enabled": True}}})
    cfg = yaml.safe_load(one(objs, "ConfigMap", "vramgate-config")["data"]["config.yaml"])
    assert cfg["hub"] == {"enabled": True, "configmap": "vramgate-hub-models"}
    role = one(objs, "Role", "vramgate-webhook-hub-models")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["vramgate-hub-models"],
         "verbs": ["get", "update"]},
    ]
    binding = one(objs, "RoleBinding", "vramgate-webhook-hub-models")
    assert binding["subjects"][0]["name"] == "vramgate-webhook"
    # Off (the default), or kept in memory only: no Role.
    for values in ({}, {"config": {"hub": {"enabled": True, "configmap": None}}}):
        assert not [o for o in render_chart(values) if o["metadata"]["name"].endswith("hub-models")]


def test_hub_token_secret_is_mounted_and_named_in_the_config() -> None:
    from .render import render_chart

    objs = render_chart({"config": {"hub": {"enabled": True}}, "hubToken": {"secretName": "hf", "key": "HF_TOKEN"}})
    cfg = yaml.safe_load(one(objs, "ConfigMap", "vramgate-config")["data"]["config.yaml"])
    assert cfg["hub"]["token_file"] == "/etc/vramgate-hub/token"
    pod = one(objs, "Deployment", "vramgate-webhook")["spec"]["template"]["spec"]
    assert {"name": "hub-token", "secret": {"secretName": "hf", "items": [{"key": "HF_TOKEN", "path": "token"}]}} \
        in pod["volumes"]
    assert {"name": "hub-token", "mountPath": "/etc/vramgate-hub", "readOnly": True} \
        in pod["containers"][0]["volumeMounts"]
    plain = render_chart({"config": {"hub": {"enabled": True}}})
    assert "token_file" not in yaml.safe_load(one(plain, "ConfigMap", "vramgate-config")["data"]["config.yaml"])["hub"]


def test_client_auth_mounts_the_ca_and_names_it_in_the_config(render: Render) -> None:
    off = render({}, namespace=NS)
    assert "client_ca_file" not in one(off, "ConfigMap", "vramgate-config")["data"]["config.yaml"]
    objs = render({"clientAuth": {"caConfigMap": "apiserver-client-ca", "names": ["kube-apiserver"]}}, namespace=NS)
    config = yaml.safe_load(one(objs, "ConfigMap", "vramgate-config")["data"]["config.yaml"])
    assert config["server"]["client_ca_file"] == "/etc/vramgate-client-ca/ca.crt"
    assert config["server"]["client_names"] == ["kube-apiserver"]
    pod = one(objs, "Deployment", "vramgate-webhook")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "client-ca"]
    assert volume["configMap"] == {"name": "apiserver-client-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    mounts = {m["name"]: m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
    assert mounts["client-ca"] == "/etc/vramgate-client-ca"
