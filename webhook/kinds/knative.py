"""Knative Serving Service and Configuration (serving.knative.dev/v1): the revision's pod, min-scale times.

Shape from knative/serving pkg/apis/serving/v1 (service_types.go, configuration_types.go, revision_types.go:
``spec.template`` is a RevisionTemplateSpec, its ``spec`` a PodSpec plus ``containerConcurrency`` and
timeouts) and the autoscaler's annotations on the template (pkg/apis/autoscaling/register.go:
``autoscaling.knative.dev/min-scale`` and ``initial-scale``; ``minScale`` the older spelling). Knative adds its
queue-proxy sidecar, which asks for no GPU.
"""

from __future__ import annotations

from typing import Any

from .runtimes import Context
from .view import PodView, Role, RoleSet, as_dict, identity, inherit_annotations, template_parts

GROUP = "serving.knative.dev"
KINDS = frozenset({"Service", "Configuration"})
_SCALE = ("autoscaling.knative.dev/min-scale", "autoscaling.knative.dev/minScale",
          "autoscaling.knative.dev/initial-scale", "autoscaling.knative.dev/initialScale")


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """One role: the revision's pod, as many as the autoscaler keeps at least (scale to zero counts as one)."""
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    pod_meta, pod_spec = template_parts(as_dict(obj.get("spec")).get("template"), "spec.template")
    annotations = as_dict(pod_meta.get("annotations"))
    replicas = max([1, *(_scale(annotations.get(key)) for key in _SCALE)])
    view = PodView(kind, ns, name, inherit_annotations(pod_meta, meta), pod_spec)
    return RoleSet(kind, name, (Role("", view, 1, replicas),))


def _scale(value: Any) -> int:
    try:
        return max(int(str(value)), 0) if value is not None else 0
    except ValueError:
        return 0  # a bad annotation is Knative's webhook to refuse; here it only means "at least one"
