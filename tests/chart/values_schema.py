"""Builds charts/vramgate/values.schema.json: the chart's values, closed at every level the chart
defines, and the `config` subtree generated from webhook.config.Config (so `helm install` rejects
a config key vramgate would reject at start-up).

    .venv/bin/python tests/chart/values_schema.py --write   # regenerate after changing values or config.py
    .venv/bin/python tests/chart/values_schema.py --check   # exit 1 when the file is out of date

Kubernetes types passed through verbatim (affinity, tolerations, topologySpreadConstraints,
NetworkPolicy peers) stay open objects: kube-apiserver validates those.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "charts" / "vramgate" / "values.schema.json"

Schema = dict[str, Any]

DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}
QUANTITY = {"type": ["string", "number"]}
STRING = {"type": "string"}
BOOL = {"type": "boolean"}
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
OPEN_OBJECT = {"type": "object"}
OPEN_OBJECTS = {"type": "array", "items": {"type": "object"}}
FAILURE_POLICY = {"type": "string", "enum": ["Ignore", "Fail"]}
PREEMPTION = {"type": "string", "enum": ["PreemptLowerPriority", "Never"]}


def obj(properties: dict[str, Schema], description: str | None = None, required: list[str] | None = None) -> Schema:
    """A closed object: only the listed properties."""
    out: Schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if description:
        out["description"] = description
    if required:
        out["required"] = required
    return out


def describe(schema: Schema, text: str) -> Schema:
    return {**schema, "description": text}


RESOURCES = obj({
    "requests": {"type": "object", "additionalProperties": QUANTITY},
    "limits": {"type": "object", "additionalProperties": QUANTITY},
    "claims": OPEN_OBJECTS,
}, "Container resources (requests/limits).")

SECCOMP = obj({"type": {"type": "string", "enum": ["RuntimeDefault", "Localhost", "Unconfined"]},
               "localhostProfile": STRING})
APPARMOR = obj({"type": {"type": "string", "enum": ["RuntimeDefault", "Localhost", "Unconfined"]},
                "localhostProfile": STRING})
UID = {"type": "integer", "minimum": 0}

POD_SECURITY = obj({
    "runAsNonRoot": BOOL,
    "runAsUser": UID,
    "runAsGroup": UID,
    "fsGroup": UID,
    "fsGroupChangePolicy": {"type": "string", "enum": ["OnRootMismatch", "Always"]},
    "supplementalGroups": {"type": "array", "items": UID},
    "seccompProfile": SECCOMP,
    "appArmorProfile": APPARMOR,
    "seLinuxOptions": OPEN_OBJECT,
    "sysctls": OPEN_OBJECTS,
}, "Pod securityContext of every vramgate pod.")

CONTAINER_SECURITY = obj({
    "runAsNonRoot": BOOL,
    "runAsUser": UID,
    "runAsGroup": UID,
    "readOnlyRootFilesystem": BOOL,
    "allowPrivilegeEscalation": BOOL,
    "privileged": BOOL,
    "capabilities": obj({"add": {"type": "array", "items": STRING}, "drop": {"type": "array", "items": STRING}}),
    "seccompProfile": SECCOMP,
    "appArmorProfile": APPARMOR,
    "seLinuxOptions": OPEN_OBJECT,
    "procMount": STRING,
}, "Container securityContext of every container the chart runs.")

PDB = obj({"enabled": BOOL, "minAvailable": {"type": ["integer", "string"]}})


def placement() -> dict[str, Schema]:
    """Scheduling and pod metadata knobs every component has."""
    return {
        "priorityClassName": STRING,
        "resources": RESOURCES,
        "pdb": PDB,
        "topologySpreadConstraints": describe(OPEN_OBJECTS, "Replaces the default spread across nodes and zones."),
        "affinity": describe(OPEN_OBJECT, "Replaces the default preferred podAntiAffinity across nodes."),
        "nodeSelector": STRING_MAP,
        "tolerations": OPEN_OBJECTS,
        "podAnnotations": STRING_MAP,
        "podLabels": STRING_MAP,
    }


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            return _inline_refs(copy.deepcopy(defs[name]), defs)
        return {k: _inline_refs(v, defs) for k, v in node.items() if k not in ("title", "default", "$defs")}
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


def config_schema() -> Schema:
    """webhook.config.Config as a self-contained JSON schema (refs inlined, titles and defaults dropped)."""
    sys.path.insert(0, str(ROOT))
    from webhook.config import Config

    raw = Config.model_json_schema()
    out: Schema = _inline_refs(raw, raw.get("$defs", {}))
    out["description"] = ("vramgate's config file (webhook/config.py), rendered as config.yaml. The chart sets "
                          "namespace, admission.excluded_namespaces, admission.scheduler_name, controller.lease_name "
                          "and controller.remediation.enabled unless given.")
    return out


def model_entry() -> Schema:
    """One catalog entry (webhook.models.catalog.ModelSpec, as in webhook/data/models.yaml), closed."""
    import dataclasses

    sys.path.insert(0, str(ROOT))
    from webhook.models.catalog import ModelSpec

    kinds = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
    props: dict[str, Schema] = {}
    for f in dataclasses.fields(ModelSpec):
        text = str(f.type)
        if text.startswith("tuple"):
            prop: Schema = {"type": "array", "items": STRING}
        else:
            base = text.split(" | ")[0]
            prop = {"type": [kinds[base], "null"] if "None" in text else kinds[base]}
            if base == "float":
                prop["type"] = ["number", "string", "null"] if "None" in text else ["number", "string"]
        props[f.name] = prop
    return obj(props, "A catalog entry: the schema of webhook/data/models.yaml (docs/models.md).",
               required=["name", "params", "layers", "hidden_size", "heads", "vocab_size", "context"])


def values_schema() -> Schema:
    component = placement()
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "vramgate chart values",
        **obj({
            "nameOverride": STRING,
            "fullnameOverride": STRING,
            "commonLabels": STRING_MAP,
            "image": obj({
                "repository": {"type": "string", "minLength": 1},
                "tag": STRING,
                "digest": {"type": "string", "pattern": r"^(sha256:[a-f0-9]{64})?$"},
                "pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
            }, required=["repository"]),
            "imagePullSecrets": {"type": "array", "items": obj({"name": STRING}, required=["name"])},
            "podSecurityContext": POD_SECURITY,
            "containerSecurityContext": CONTAINER_SECURITY,
            "webhook": obj({
                "replicas": {"type": "integer", "minimum": 2},
                "port": PORT,
                "clientConfig": {"type": "string", "enum": ["service", "url"]},
                "url": {"type": "string", "pattern": r"^(https://.+)?$"},
                "failurePolicy": obj({"mutating": FAILURE_POLICY, "validating": FAILURE_POLICY}),
                "timeoutSeconds": {"type": "integer", "minimum": 1, "maximum": 10},
                "gpuWorkloadsOnly": BOOL,
                "acceleratorResources": {"type": "array", "items": STRING},
                "acceleratorResourcePrefixes": {"type": "array", "items": STRING},
                "shareAnnotations": {"type": "array", "items": STRING},
                "unregisterOnUninstall": BOOL,
                "excludedNamespaces": {"type": "array", "items": STRING},
                "autofit": obj({"enabled": BOOL},
                               "autofit.vramgate.io: GPU workloads to /mutate, for vramgate.io/autofit."),
                "extraKinds": obj({
                    "enabled": BOOL, "failurePolicy": FAILURE_POLICY, "leaderWorkerSet": BOOL, "kserve": BOOL,
                    "ray": BOOL, "kubeflowTrainer": BOOL, "pytorchJob": BOOL, "jobSet": BOOL, "kubeai": BOOL,
                    "nimService": BOOL, "volcano": BOOL, "dynamo": BOOL, "roleBasedGroup": BOOL,
                    "argoWorkflows": BOOL, "kaito": BOOL, "knative": BOOL, "ome": BOOL, "grove": BOOL, "llmaz": BOOL,
                    "onlyInstalledGroups": BOOL,
                }, "The kinds LLMs ship in, judged per role by validate-kinds.vramgate.io."),
                "dra": obj({"enabled": BOOL, "failurePolicy": FAILURE_POLICY},
                           "ResourceClaimTemplates/ResourceClaims that declare a workload: judged and given a memory "
                           "selector (validate-claims / mutate-claims.vramgate.io)."),
                **component,
            }, "The admission webhook (mutating + validating)."),
            "extender": obj({"enabled": BOOL}, "Opt-in: vramgate-scheduler with the extender (docs/modes.md); "
                                                "native placement otherwise."),
            "scheduler": obj({
                "enabled": BOOL,
                "name": {"type": "string", "minLength": 1},
                "replicas": {"type": "integer", "minimum": 1},
                "image": obj({
                    "repository": {"type": "string", "minLength": 1},
                    "tag": {"type": "string", "minLength": 1},
                    "pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
                }),
                "verbosity": {"type": "integer", "minimum": 0, "maximum": 10},
                "leaderElection": obj({
                    "enabled": BOOL,
                    "resourceName": {"type": "string", "minLength": 1},
                    "leaseDuration": DURATION,
                    "renewDeadline": DURATION,
                    "retryPeriod": DURATION,
                }),
                "extender": obj({
                    "port": PORT,
                    "bindAddress": {"type": "string", "enum": ["127.0.0.1", "0.0.0.0"]},
                    "prioritize": BOOL,
                    "weight": {"type": "integer", "minimum": 1},
                    "httpTimeout": DURATION,
                    "ignorable": BOOL,
                    "verifyTLS": BOOL,
                    "resources": RESOURCES,
                }),
                **component,
            }, "vramgate-scheduler: kube-scheduler with the extender as a sidecar."),
            "standaloneExtender": obj({
                "enabled": BOOL,
                "replicas": {"type": "integer", "minimum": 1},
                "port": PORT,
                **component,
            }, "An extender Deployment + Service for an existing kube-scheduler."),
            "controller": obj({
                "enabled": BOOL,
                "replicas": {"type": "integer", "minimum": 1},
                "port": PORT,
                "remediation": obj({"enabled": BOOL}),
                "audit": obj({"enabled": BOOL}),
                **component,
            }, "The GPU health controller."),
            "reports": obj({
                "kind": {"type": "string", "enum": ["policyreport", "openreports", "none"]},
                "installCRDs": BOOL,
            }, "Where the background audit writes its results, and whether the chart installs that CRD."),
            "certs": obj({
                "mode": {"type": "string", "enum": ["selfSigned", "certManager", "provided"]},
                "secretName": STRING,
                "caBundle": {"type": "string", "pattern": r"^[A-Za-z0-9+/=\s]*$"},
                "selfSigned": obj({
                    "keyType": {"type": "string", "enum": ["ecdsa", "rsa"]},
                    "days": {"type": "integer", "minimum": 2},
                    "renewBeforeDays": {"type": "integer", "minimum": 0},
                    "timeoutSeconds": {"type": "integer", "minimum": 10},
                    "resources": RESOURCES,
                }),
                "certManager": obj({
                    "duration": DURATION,
                    "renewBefore": DURATION,
                    "caDuration": DURATION,
                    "issuerRef": obj({
                        "name": STRING,
                        "kind": {"type": "string", "enum": ["Issuer", "ClusterIssuer"]},
                        "group": STRING,
                    }),
                }),
            }, "How the serving certificate and the webhooks' caBundle are made."),
            "priorityClasses": obj({
                "enabled": BOOL,
                "production": obj({"value": {"type": "integer", "minimum": 0, "maximum": 1000000000},
                                   "preemptionPolicy": PREEMPTION}),
                "batch": obj({"value": {"type": "integer", "minimum": 0, "maximum": 1000000000},
                              "preemptionPolicy": PREEMPTION}),
            }),
            "metrics": obj({
                "port": PORT,
                "auth": BOOL,
                "reader": obj({
                    "create": BOOL,
                    "subjects": describe(OPEN_OBJECTS, "RBAC subjects bound to <release>-metrics-reader."),
                }),
            }, "The metrics port (/metrics, /inventory, the status page) and who may read it."),
            "serviceMonitor": obj({
                "enabled": BOOL,
                "interval": DURATION,
                "scrapeTimeout": DURATION,
                "labels": STRING_MAP,
                "insecureSkipVerify": BOOL,
                "bearerTokenFile": {"type": "string", "minLength": 1},
            }),
            "prometheusRule": obj({
                "enabled": BOOL,
                "labels": STRING_MAP,
                "vramgate": obj({
                    "enabled": BOOL,
                    "staleInventorySeconds": {"type": "number", "exclusiveMinimum": 0},
                    "rejectionRatio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                    "rejectedVerdicts": {"type": "string", "minLength": 1},
                }),
                "gpu": obj({
                    "enabled": BOOL,
                    "framebufferUsedRatio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                    "temperatureCelsius": {"type": "number", "exclusiveMinimum": 0},
                    "for": DURATION,
                }),
            }),
            "hubToken": obj({"secretName": STRING, "key": STRING},
                            "A Secret with a model hub token, mounted for config.hub.token_file."),
            "clientAuth": obj({"caConfigMap": STRING, "key": STRING, "names": {"type": "array", "items": STRING}},
                              "A ConfigMap with the CA of kube-apiserver's and kube-scheduler's client certificates."),
            "models": describe({"type": "array", "items": model_entry()},
                               "Extra catalog entries, mounted as a ConfigMap the service reloads on change."),
            "monitoring": obj({
                "grafanaDashboard": obj({
                    "enabled": BOOL,
                    "label": {"type": "string", "minLength": 1},
                    "labelValue": STRING,
                    "namespace": STRING,
                    "labels": STRING_MAP,
                    "annotations": STRING_MAP,
                }, "A ConfigMap of dashboards/vramgate.json for Grafana's dashboard sidecar."),
            }),
            "networkPolicy": obj({
                "enabled": BOOL,
                "from": describe(OPEN_OBJECTS, "NetworkPolicyPeers allowed to the serving ports; empty: any source."),
                "metrics": obj({
                    "namespaces": {"type": "array", "items": {"type": "string", "minLength": 1},
                                   "description": "Namespaces (kubernetes.io/metadata.name) allowed to metrics.port, "
                                                  "besides the release namespace."},
                    "from": describe(OPEN_OBJECTS, "More NetworkPolicyPeers allowed to metrics.port."),
                }),
            }),
            "config": config_schema(),
        }),
    }


def render() -> str:
    return json.dumps(values_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--write" in argv:
        SCHEMA_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {SCHEMA_PATH.relative_to(ROOT)}")
        return 0
    if "--check" in argv:
        current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH.relative_to(ROOT)} is out of date: run .venv/bin/python tests/chart/values_schema.py "
                  "--write", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
