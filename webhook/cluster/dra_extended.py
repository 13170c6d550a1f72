"""Extended resources backed by DRA: which DeviceClass serves a pod's plain ``nvidia.com/gpu``, and with which devices.

Kubernetes 1.34 added (alpha), 1.36 turned on (beta) and 1.37 made GA the ``DRAExtendedResource`` feature
(kubernetes/kubernetes v1.37.2, pkg/features/kube_features.go: GA, LockToDefault). A DeviceClass may name
``spec.extendedResourceName`` (staging/src/k8s.io/api/resource/v1/types.go, ``DeviceClassSpec``); every class
also answers to the implicit name ``deviceclass.resource.kubernetes.io/<class>`` (``ResourceDeviceClassPrefix``,
same file). A pod that asks such a resource in plain ``resources.requests`` gets, on a node whose
``status.allocatable`` has none of it, devices of that class: the scheduler's dynamicresources plugin
(pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go, ``filterExtendedResources``)
builds a special ResourceClaim (``<pod>-extended-resources-…``, annotation
``resource.kubernetes.io/extended-resource-claim: "true"``) with one ``exactly`` request per container and
resource (``deviceClassName`` = the class, ``count`` = the quantity, no selector of the pod's own), creates it in
PreBind and records it in ``pod.status.extendedResourceClaimStatus``. A node with the resource in its allocatable
(a device plugin) serves it the old way; noderesources' Fit delegates to DRA only where allocatable is 0
(pkg/scheduler/framework/plugins/noderesources/fit.go, ``shouldDelegateResourceToDRA``).

When two classes name the same resource, the newer one wins, the lower name on a tie
(staging/src/k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache/extendedresourcecache.go,
``updateResourceName2class``).

Pure: DeviceClasses (from a :class:`~webhook.cluster.dra.DraView`) and devices in, values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from .dra import Device, DeviceClass, DraView, Request, is_gpu_request, matching
from .inventory import NodeGPUs

# Every DeviceClass's implicit extended resource name is this prefix + its name.
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
# The name the scheduler gives its special claim while it exists only in memory.
CLAIM = "<extended-resources>"


def classes_by_resource(classes: Mapping[str, DeviceClass] | Iterable[DeviceClass]) -> dict[str, DeviceClass]:
    """Extended resource name → the DeviceClass the scheduler picks for it, explicit names and implicit ones."""
    values = list(classes.values()) if isinstance(classes, Mapping) else list(classes)
    out: dict[str, DeviceClass] = {IMPLICIT_PREFIX + dc.name: dc for dc in values}
    for dc in sorted(values, key=lambda c: c.name):
        name = dc.extended_resource
        if not name:
            continue
        held = out.get(name)
        # Newer wins; on equal timestamps (or none, as in files) the lower name, which sorted() met first.
        # RFC 3339 timestamps as the API writes them (seconds, "Z") compare as strings.
        if held is None or dc.created > held.created:
            out[name] = dc
    return out


def gpu_resources(view: DraView) -> Mapping[str, DeviceClass]:
    """The extended resources a DeviceClass of a GPU driver serves (classes of other drivers are none of ours).

    Asked for every GPU pod admitted: memoized on the classes and drivers (a few, and they rarely change).
    """
    if not view.classes:
        return {}
    return _gpu_resources(tuple(view.classes.values()), tuple(view.drivers))


@lru_cache(maxsize=16)
def _gpu_resources(classes: tuple[DeviceClass, ...], drivers: tuple[str, ...]) -> Mapping[str, DeviceClass]:
    view = DraView(classes={dc.name: dc for dc in classes}, drivers=drivers)
    return MappingProxyType({name: dc for name, dc in classes_by_resource(classes).items()
                             if is_gpu_request(Request(claim=CLAIM, name=name, class_name=dc.name), view)})


def extended_request(resource: str, count: int, dc: DeviceClass) -> Request:
    """The request the scheduler's special claim makes for ``count`` of ``resource``: the class's selectors only."""
    return Request(claim=CLAIM, name=resource, class_name=dc.name, selectors=dc.selectors, count=count)


@dataclass(frozen=True)
class Offer:
    """What a node offers of one DRA-backed extended resource: the untainted devices its class matches."""

    resource: str
    device_class: str
    devices: tuple[Device, ...]

    @property
    def memory_mib(self) -> tuple[int, ...]:
        return tuple(d.memory_mib for d in self.devices)


def offers(devices: Iterable[Device], view: DraView) -> tuple[Offer, ...]:
    """Each GPU extended resource a DeviceClass maps, with the node's untainted devices of that class (none: left out).

    Only explicit ``extendedResourceName``s are listed: every class has an implicit name, and listing each would
    repeat the node's devices once per class.
    """
    devs = tuple(devices)
    out = []
    for name, dc in sorted(gpu_resources(view).items()):
        if name.startswith(IMPLICIT_PREFIX):
            continue
        found = tuple(d for d in matching(extended_request(name, 1, dc), devs).devices if d.taint is None)
        if found:
            out.append(Offer(name, dc.name, found))
    return tuple(out)


def extended_record(node: NodeGPUs, view: DraView) -> dict[str, Any]:
    """What ``/inventory`` and ``vramgate nodes -o json`` add for a node without a device plugin for the resources
    (none allocatable): ``extended_resources: {resource: {device_class, devices, memory_mib}}``; {} otherwise."""
    found = offers(node.dra, view) if node.dra and view.classes and node.allocatable == 0 else ()
    if not found:
        return {}
    return {"extended_resources": {o.resource: {"device_class": o.device_class, "devices": len(o.devices),
                                                "memory_mib": list(o.memory_mib)} for o in found}}


def describe_extended(record: Mapping[str, Any]) -> str:
    """ "serves nvidia.com/gpu: 2 via DeviceClass gpu.nvidia.com" from a record's ``extended_resources``; "" if none."""
    served = record.get("extended_resources") or {}
    parts = [f"{name}: {v['devices']} via DeviceClass {v['device_class']}" for name, v in served.items()]
    return f"serves {'; '.join(parts)}" if parts else ""
