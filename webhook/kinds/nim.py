"""NVIDIA NIM Operator's NIMService (apps.nvidia.com): the one NIM container the operator runs.

Shape from NVIDIA/k8s-nim-operator api/apps/v1alpha1/nimservice_types.go: ``spec.image.{repository,tag}``,
``spec.env`` (a list of EnvVar), ``spec.resources`` (ResourceRequirements), ``spec.replicas``,
``spec.nodeSelector``, ``spec.tolerations``; the operator builds a Deployment whose container runs that
image with those env and resources. With ``spec.multiNode.parallelism`` (``pipeline``, ``tensor``) it builds
a LeaderWorkerSet of ``pipeline`` pods instead (``GetLWSSize``), each with ``tensor`` GPUs unless the
resources name them, and sets ``NIM_TENSOR_PARALLEL_SIZE`` / ``NIM_PIPELINE_PARALLEL_SIZE``
(api/apps/v1alpha1/nimservice_types.go ``getLWSCommonEnv``; platform/standalone/nimservice.go).
"""

from __future__ import annotations

import json
from typing import Any

from .runtimes import Context
from .view import PodView, Role, RoleSet, WorkloadError, as_dict, as_list, count, identity, inherit_annotations

# NVIDIA/k8s-nim-operator api/apps/v1alpha1/groupversion_info.go.
GROUP = "apps.nvidia.com"
KINDS = frozenset({"NIMService"})


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """One role: the NIM container with the image, env and resources the NIMService names."""
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    image = as_dict(spec.get("image"))
    repo, tag = image.get("repository"), image.get("tag")
    if repo is not None and not isinstance(repo, str):
        raise WorkloadError("spec.image.repository must be a string")
    container: dict[str, Any] = {"name": "nim", "image": f"{repo}:{tag}" if repo and tag else str(repo or "")}
    env = [e for e in as_list(spec.get("env")) if isinstance(e, dict)]
    if env:
        container["env"] = env
    # "Any DRA claim references are ignored" in spec.resources (nimservice_types.go): DRA goes through draResources.
    resources = {k: v for k, v in as_dict(spec.get("resources")).items() if k != "claims"}
    if resources:
        container["resources"] = resources
    pod: dict[str, Any] = {"containers": [container]}
    claim_templates, dra_warnings = _dra_resources(pod, spec.get("draResources"), name)
    for key in ("nodeSelector", "tolerations", "affinity", "runtimeClassName"):
        if key in spec:
            pod[key] = spec[key]
    annotations = {str(k): str(v) for k, v in as_dict(spec.get("annotations")).items()}
    # The NIMCache the service mounts names the profile's precision (spec.source.ngc.model.precision).
    cache_name = as_dict(as_dict(spec.get("storage")).get("nimCache")).get("name")
    cache = ctx.runtimes.get("NIMCache", str(cache_name), ns) if ctx.runtimes and cache_name else None
    model = as_dict(as_dict(as_dict(as_dict(cache).get("spec")).get("source")).get("ngc")).get("model")
    precision = as_dict(model).get("precision")
    if isinstance(precision, str) and precision:
        annotations.setdefault("vramgate.io/precision", precision)
    pod_meta = inherit_annotations({"annotations": annotations, "labels": as_dict(spec.get("labels"))}, meta)
    replicas = count(spec.get("replicas"), 1, "spec.replicas")
    group = _multinode(container, as_dict(as_dict(spec.get("multiNode")).get("parallelism")),
                       gpus_from_claims="resourceClaims" in pod)
    view = PodView(kind, ns, name, pod_meta, pod, "", group, claim_templates=claim_templates)
    return RoleSet(kind, name, (Role("", view, group, replicas * group),), tuple(dra_warnings), grouped=group > 1)


def _multinode(container: dict[str, Any], parallelism: dict[str, Any], gpus_from_claims: bool = False) -> int:
    """Apply ``multiNode.parallelism`` as the operator does; the pods of one instance (1 when not multi-node).

    With draResources the operator assigns no ``nvidia.com/gpu`` (addGPUResources: "DRAResources found, skipping
    GPU resource assignment"): the claims are the GPUs.
    """
    if not parallelism:
        return 1
    pp = count(parallelism.get("pipeline"), 1, "spec.multiNode.parallelism.pipeline", minimum=1)
    tp = count(parallelism.get("tensor"), 1, "spec.multiNode.parallelism.tensor", minimum=1)
    own = {e.get("name") for e in as_list(container.get("env")) if isinstance(e, dict)}
    operator_env = [{"name": "NIM_TENSOR_PARALLEL_SIZE", "value": str(tp)},
                    {"name": "NIM_PIPELINE_PARALLEL_SIZE", "value": str(pp)}]
    container["env"] = [*[e for e in operator_env if e["name"] not in own], *as_list(container.get("env"))]
    resources = as_dict(container.get("resources"))
    named = any("nvidia.com/gpu" in as_dict(resources.get(s)) for s in ("limits", "requests"))
    if not named and not gpus_from_claims:
        limits = {**as_dict(resources.get("limits")), "nvidia.com/gpu": str(tp)}
        container["resources"] = {**resources, "limits": limits}
    return pp


# --- spec.draResources ------------------------------------------------------------------------------
# NVIDIA/k8s-nim-operator at f63f74d: api/apps/v1alpha1/dra_types.go (DRAResource: exactly one of
# resourceClaimName, resourceClaimTemplateName, claimCreationSpec; requests; DRADeviceSpec defaults count 1,
# deviceClassName and driverName gpu.nvidia.com, op Equal), internal/shared/resourceclaims.go
# (NewNamedDRAResourceList, GetPodResourceClaims, UpdateContainerResourceClaims: each claim on every container,
# one reference per listed request; GetDRADeviceCELExpressions: ``device.driver == "<driverName>"``, then the
# celExpressions, or one expression per attribute and capacity selector), manifests/resourceclaimtemplate.yaml
# (one ``exactly`` request per device: allocationMode ExactCount, count, deviceClassName, the selectors),
# internal/k8sutil/cel/cel.go BuildExpr (the expressions' shapes), internal/k8sutil/k8sutil.go SplitQualifiedName.
_CEL_OPS = {"Equal": "==", "NotEqual": "!=", "GreaterThan": ">", "GreaterThanOrEqual": ">=", "LessThan": "<",
            "LessThanOrEqual": "<="}
_DEFAULT_DRIVER = "gpu.nvidia.com"  # the +kubebuilder:default of deviceClassName and driverName


def _dra_resources(pod: dict[str, Any], raw: Any, name: str) -> tuple[tuple[tuple[str, dict[str, Any]], ...],
                                                                         list[str]]:
    """Put the pod claims the operator makes from ``spec.draResources`` on ``pod``; the templates it creates."""
    templates: list[tuple[str, dict[str, Any]]] = []
    warnings: list[str] = []
    claims: list[dict[str, Any]] = []
    refs: list[dict[str, Any]] = []
    for idx, res in enumerate(r for r in as_list(raw) if isinstance(r, dict)):
        claim = f"claim-{idx}"  # the operator's name is a hash (generateUniquePodClaimName); any unique one will do
        where = f"spec.draResources[{idx}]"
        if isinstance(res.get("resourceClaimName"), str):
            claims.append({"name": claim, "resourceClaimName": res["resourceClaimName"]})
        elif isinstance(res.get("resourceClaimTemplateName"), str):
            claims.append({"name": claim, "resourceClaimTemplateName": res["resourceClaimTemplateName"]})
        elif isinstance(res.get("claimCreationSpec"), dict):
            creation = res["claimCreationSpec"]
            prefix = creation.get("generateName") if isinstance(creation.get("generateName"), str) else ""
            template = f"{prefix or 'claimtemplate'}-{name}-{idx}"
            requests = [_device_request(d, f"{where}.claimCreationSpec.devices[{i}]", warnings)
                        for i, d in enumerate(as_list(creation.get("devices"))) if isinstance(d, dict)]
            templates.append((template, {"devices": {"requests": requests}}))
            claims.append({"name": claim, "resourceClaimTemplateName": template})
        else:
            raise WorkloadError(f"{where}: exactly one of resourceClaimName, resourceClaimTemplateName or "
                                "claimCreationSpec must be set")
        wanted = [r for r in as_list(res.get("requests")) if isinstance(r, str) and r]
        refs.extend([{"name": claim, "request": r} for r in wanted] or [{"name": claim}])
    if claims:
        pod["resourceClaims"] = claims
        for c in pod["containers"]:
            resources = as_dict(c.get("resources"))
            c["resources"] = {**resources, "claims": [dict(r) for r in refs]}
    return tuple(templates), warnings


def _device_request(device: dict[str, Any], where: str, warnings: list[str]) -> dict[str, Any]:
    """One ``exactly`` request of the template the operator renders for a ``claimCreationSpec`` device."""
    driver = str(device.get("driverName") or _DEFAULT_DRIVER)
    cls = str(device.get("deviceClassName") or _DEFAULT_DRIVER)
    n = device.get("count")
    exprs = [f"device.driver == {json.dumps(driver)}"]
    cel = [e for e in as_list(device.get("celExpressions")) if isinstance(e, str) and e.strip()]
    if cel:
        exprs += [" ".join(e.split()) for e in cel]
    for key, build in (("attributeSelectors", _attribute_expr), ("capacitySelectors", _capacity_expr)):
        for i, sel in enumerate(as_list(device.get(key))):
            expr = build(sel, driver) if isinstance(sel, dict) else None
            if expr is None:
                warnings.append(f"{where}.{key}[{i}]: not read; taken as \"may match\"")
            else:
                exprs.append(expr)
    return {"name": str(device.get("name") or "gpu"), "exactly": {
        "allocationMode": "ExactCount", "count": n if isinstance(n, int) and n >= 1 else 1, "deviceClassName": cls,
        "selectors": [{"cel": {"expression": e}} for e in exprs]}}


def _key(key: Any, driver: str) -> tuple[str, str] | None:
    """SplitQualifiedName: ``domain/name``, else the driver's own ``name``."""
    if not isinstance(key, str) or not key:
        return None
    domain, sep, short = key.partition("/")
    return (domain, short) if sep else (driver, key)


def _attribute_expr(sel: dict[str, Any], driver: str) -> str | None:
    """BuildExpr for an attribute selector: ``device.attributes["<domain>"].<name> <op> <value>``."""
    key, op = _key(sel.get("key"), driver), _CEL_OPS.get(str(sel.get("op") or "Equal"))
    value = as_dict(sel.get("value"))
    if key is None or op is None:
        return None
    attr = f"device.attributes[{json.dumps(key[0])}].{key[1]}"
    if isinstance(value.get("boolValue"), bool) and op in ("==", "!="):
        return f"{attr} {op} {'true' if value['boolValue'] else 'false'}"
    if isinstance(value.get("intValue"), int) and not isinstance(value.get("intValue"), bool):
        return f"{attr} {op} {value['intValue']}"
    if isinstance(value.get("stringValue"), str) and op in ("==", "!="):
        return f"{attr} {op} {json.dumps(value['stringValue'])}"
    if isinstance(value.get("versionValue"), str):
        return f"({attr}).compareTo(semver({json.dumps(value['versionValue'])})) {op} 0"
    return None


def _capacity_expr(sel: dict[str, Any], driver: str) -> str | None:
    """BuildExpr for a capacity selector: ``(device.capacity["<domain>"].<name>).compareTo(quantity("<q>")) <op> 0``."""
    key, op, value = _key(sel.get("key"), driver), _CEL_OPS.get(str(sel.get("op") or "Equal")), sel.get("value")
    if key is None or op is None or not isinstance(value, str | int) or isinstance(value, bool):
        return None
    return f"(device.capacity[{json.dumps(key[0])}].{key[1]}).compareTo(quantity({json.dumps(str(value))})) {op} 0"
