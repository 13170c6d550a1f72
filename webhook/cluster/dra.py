"""Dynamic Resource Allocation: GPUs as ResourceSlices publish them, claims as workloads ask for them.

Everything here is pure: ``resource.k8s.io`` objects (as ``kubectl get -o yaml`` or the API returns
them) in, plain frozen values out. It reads

- ResourceSlices (``resource.k8s.io/v1``; the ``v1beta1`` ``basic`` wrapper too): per node (the
  slice's ``spec.nodeName``, a device's own ``nodeName``, else the pool name), each device of a GPU
  driver (``gpu.nvidia.com`` and the config's ``labels.dra_drivers``) with its ``capacity.memory``,
  ``productName``, ``type`` (gpu, mig, vfio), ``driverVersion``/``cudaDriverVersion``, MIG
  ``profile``, ``allowMultipleAllocations`` and taints. Only the newest generation of a pool counts.
- DeviceClasses: their CEL selectors.
- ResourceClaims and ResourceClaimTemplates: the device requests (``exactly`` or ``firstAvailable``
  in v1; the request's own fields in v1beta1), each with its class, selectors and count.

CEL is not evaluated in general: the shapes people write for GPUs (``device.driver == "…"``, an
attribute compared to a string, ``device.capacity[…].memory.compareTo(quantity("40Gi")) >= 0``, joined
with ``&&``) are understood; any other clause is taken as "may match" and reported, so an unread
selector can never cause a rejection.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from typing import Any

from ..units.quantity import MIB, QuantityError, parse_size_bytes
from .accelerators import dra_driver_rows

NVIDIA_DRIVER = "gpu.nvidia.com"
API_GROUP = "resource.k8s.io"
SLICE_KIND, CLASS_KIND = "ResourceSlice", "DeviceClass"
CLAIM_KIND, TEMPLATE_KIND = "ResourceClaim", "ResourceClaimTemplate"
DRA_KINDS = frozenset({SLICE_KIND, CLASS_KIND, CLAIM_KIND, TEMPLATE_KIND})
SOURCE = "dra ResourceSlice"
_BAD_EFFECTS = ("NoSchedule", "NoExecute")


# ---- devices ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """One device a ResourceSlice publishes, with what vramgate judges on."""

    driver: str
    pool: str
    name: str
    node: str  # "" for devices not bound to one node
    type: str  # the driver's "type" attribute: gpu, mig, vfio, … ("" when absent)
    product: str
    memory_mib: int  # capacity "memory"; 0 = not published
    driver_version: str = ""
    cuda_driver_version: str = ""
    profile: str = ""  # MIG profile, e.g. 1g.10gb
    shared: bool = False  # allowMultipleAllocations: consumable capacity, several claims share it
    taint: str | None = None  # the first NoSchedule/NoExecute taint: "key=value:Effect"
    # every attribute and capacity, for selectors: ((name, value), …) with names unqualified
    attributes: tuple[tuple[str, str | int | bool], ...] = field(default=(), repr=False)
    capacity: tuple[tuple[str, int], ...] = field(default=(), repr=False)  # bytes for sizes, else the number

    @property
    def label(self) -> str:
        """How a message names it: "NVIDIA A100-SXM4-80GB" or "NVIDIA A100-SXM4-80GB MIG 1g.10gb"."""
        base = self.product or self.name
        return f"{base} {driver_traits(self.driver).partition_word} {self.profile}" if self.profile else base

    @property
    def driver_major(self) -> int | None:
        """The NVIDIA driver's major version (for the CUDA check); None for drivers whose version is another's."""
        if not driver_traits(self.driver).cuda:
            return None
        head = self.driver_version.split(".", 1)[0]
        return int(head) if head.isdigit() else None

    @property
    def full(self) -> bool:
        """A whole GPU, not a MIG slice or partition (untyped devices count as whole)."""
        return self.type in ("", *driver_traits(self.driver).full_types)

    def attribute(self, domain: str, name: str) -> str | int | bool | None:
        if domain and domain != self.driver:
            return None
        return dict(self.attributes).get(name)

    def capacity_of(self, domain: str, name: str) -> int | None:
        if domain and domain != self.driver:
            return None
        return dict(self.capacity).get(name)


# ---- what each driver's attributes mean -------------------------------------------------------


@dataclass(frozen=True)
class DriverTraits:
    """How a DRA driver's devices say what they are: whole GPU or partition, its profile, its driver version."""

    full_types: tuple[str, ...]  # "type" values of a whole GPU
    partition_types: tuple[str, ...]  # "type" values of a MIG slice or partition
    profile_attribute: str  # the attribute that names a partition's profile
    partition_word: str  # how a message names a partition: "MIG", "partition"
    cuda: bool  # driverVersion is the NVIDIA driver's (feeds the CUDA check)


# NVIDIA's dra-driver-nvidia-gpu: type gpu / mig, MIG "profile", driverVersion the NVIDIA driver's.
_NVIDIA_TRAITS = DriverTraits(("gpu",), ("mig",), "profile", "MIG", True)


@cache
def driver_traits(driver: str) -> DriverTraits:
    """The traits of a driver: NVIDIA's, a vendor's from webhook/data/accelerators.yaml (``dra:``), else NVIDIA's.

    A driver the config adds (``labels.dra_drivers``) that the table does not know is read as NVIDIA's is.
    """
    if driver == NVIDIA_DRIVER:
        return _NVIDIA_TRAITS
    row = dra_driver_rows().get(driver)
    if row is None:
        return _NVIDIA_TRAITS
    return DriverTraits(tuple(row.full_types), tuple(row.partition_types), row.profile_attribute, "partition", False)


def _profile(attrs: Mapping[str, str | int | bool], driver: str) -> str:
    """A MIG slice's or partition's profile ("1g.10gb", "cpx_nps4"); "" for a whole GPU."""
    traits = driver_traits(driver)
    kind = attrs.get("type", traits.partition_types[0] if traits.partition_types else "")
    if kind not in traits.partition_types:
        return ""
    return str(attrs.get(traits.profile_attribute, ""))


def _qualified(name: str, driver: str) -> str:
    """Attribute and capacity names are unqualified within the driver's own domain."""
    domain, _, short = name.rpartition("/")
    return short if not domain or domain == driver else name


def _attribute_value(raw: Any) -> str | int | bool | None:
    if not isinstance(raw, dict):
        return raw if isinstance(raw, str | int | bool) else None
    for key in ("string", "version", "int", "bool"):
        if key in raw and isinstance(raw[key], str | int | bool):
            return raw[key]
    return None


def quantity_bytes(raw: Any) -> int | None:
    """A capacity as v1 (``{value: 80Gi}``) or v1alpha3 (a bare quantity) writes it; bytes, or the plain number."""
    if isinstance(raw, dict):
        raw = raw.get("value")
    if isinstance(raw, bool) or raw is None:
        return None
    if isinstance(raw, int):
        return raw
    try:
        return parse_size_bytes(str(raw))
    except QuantityError:
        return None


def _taint(raw: Any) -> str | None:
    for t in raw if isinstance(raw, list) else []:
        if isinstance(t, dict) and t.get("effect") in _BAD_EFFECTS:
            value = f"={t['value']}" if t.get("value") else ""
            return f"{t.get('key', '?')}{value}:{t['effect']}"
    return None


def _device(raw: dict[str, Any], driver: str, pool: str, node: str) -> Device:
    basic = raw.get("basic")
    body: dict[str, Any] = basic if isinstance(basic, dict) else raw  # v1beta1 wraps it in "basic"
    attrs_raw = body.get("attributes")
    attrs: dict[str, str | int | bool] = {}
    for key, value in (attrs_raw.items() if isinstance(attrs_raw, dict) else ()):
        parsed = _attribute_value(value)
        if parsed is not None:
            attrs[_qualified(str(key), driver)] = parsed
    caps_raw = body.get("capacity")
    caps: dict[str, int] = {}
    for key, value in (caps_raw.items() if isinstance(caps_raw, dict) else ()):
        number = quantity_bytes(value)
        if number is not None:
            caps[_qualified(str(key), driver)] = number
    memory = caps.get("memory", 0)
    own_node = body.get("nodeName") if isinstance(body.get("nodeName"), str) else None
    return Device(
        driver=driver, pool=pool, name=str(raw.get("name") or ""), node=own_node or node,
        type=str(attrs.get("type", "")), product=str(attrs.get("productName", "")),
        memory_mib=memory // MIB if memory else 0,
        driver_version=str(attrs.get("driverVersion", "")),
        cuda_driver_version=str(attrs.get("cudaDriverVersion", "")),
        profile=_profile(attrs, driver),
        shared=body.get("allowMultipleAllocations") is True,
        taint=_taint(body.get("taints")),
        attributes=tuple(sorted(attrs.items())),
        capacity=tuple(sorted(caps.items())),
    )


def slice_devices(obj: Mapping[str, Any], drivers: Iterable[str]) -> tuple[int, list[Device]]:
    """(pool generation, devices) of one ResourceSlice, or (0, []) when its driver is not a GPU driver."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return 0, []
    driver = spec.get("driver") or spec.get("driverName")
    if not isinstance(driver, str) or driver not in set(drivers):
        return 0, []
    pool_raw = spec.get("pool")
    pool: dict[str, Any] = pool_raw if isinstance(pool_raw, dict) else {}
    pool_name = str(pool.get("name") or "")
    gen = pool.get("generation")
    generation = gen if isinstance(gen, int) else 0
    node_raw = spec.get("nodeName")
    node = node_raw if isinstance(node_raw, str) else ""
    if not node and spec.get("allNodes") is not True and not spec.get("nodeSelector") and not spec.get(
            "perDeviceNodeSelection"):
        node = pool_name  # drivers name a node's pool after the node
    devices = [_device(d, driver, pool_name, node) for d in spec.get("devices") or [] if isinstance(d, dict)]
    return generation, devices


def devices_by_node(slices: Iterable[Mapping[str, Any]], drivers: Iterable[str]) -> dict[str, tuple[Device, ...]]:
    """Every GPU device of the slices by node; a pool's older generations are dropped, as the scheduler does."""
    wanted = tuple(drivers)
    newest: dict[tuple[str, str], int] = {}
    parsed: list[tuple[int, list[Device]]] = []
    for obj in slices:
        generation, devices = slice_devices(obj, wanted)
        if devices:
            parsed.append((generation, devices))
            key = (devices[0].driver, devices[0].pool)
            newest[key] = max(newest.get(key, generation), generation)
    out: dict[str, list[Device]] = {}
    for generation, devices in parsed:
        if generation < newest[(devices[0].driver, devices[0].pool)]:
            continue
        for d in devices:
            if d.node:
                out.setdefault(d.node, []).append(d)
    return {node: tuple(sorted(ds, key=lambda d: (d.driver, d.pool, d.name))) for node, ds in out.items()}


@dataclass(frozen=True)
class NodeDevices:
    """What a node's GPU devices say in the inventory's terms (used where no label tells)."""

    vram_mib: int  # the largest full GPU (else the largest device)
    product: str
    gpus: int  # full GPUs (type gpu, or untyped)
    driver_major: int | None


def summarize(devices: Iterable[Device]) -> NodeDevices | None:
    devs = list(devices)
    if not devs:
        return None
    full = [d for d in devs if d.full] or devs
    top = max(full, key=lambda d: d.memory_mib)
    major = next((d.driver_major for d in devs if d.driver_major is not None), None)
    return NodeDevices(top.memory_mib, top.product, len(full), major)


# ---- selectors -------------------------------------------------------------------------------

_STR = r"""(?:"([^"]*)"|'([^']*)')"""
_DOMAIN = r"""\[\s*(?:"([^"]*)"|'([^']*)')\s*\]"""
_DRIVER_RE = re.compile(rf"^device\.driver\s*(==|!=)\s*{_STR}$")
_ATTR_RE = re.compile(rf"^device\.attributes{_DOMAIN}\.([A-Za-z_][\w-]*)\s*(==|!=)\s*{_STR}$")
_ATTR_BOOL_RE = re.compile(rf"^device\.attributes{_DOMAIN}\.([A-Za-z_][\w-]*)\s*(==|!=)\s*(true|false)$")
_CAP_RE = re.compile(
    rf"""^device\.capacity{_DOMAIN}\.([A-Za-z_][\w-]*)\.compareTo\(\s*quantity\(\s*{_STR}\s*\)\s*\)"""
    r"""\s*(>=|<=|==|!=|>|<)\s*(-?1|0)$"""
)
_OPS = {
    ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b, ">": lambda a, b: a > b, "<": lambda a, b: a < b,
}


@lru_cache(maxsize=4096)  # selectors are few and judged per node per pod: parse each once
def _strip(expr: str) -> str:
    text = expr.strip()
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1].strip()
    return text


def _balanced(text: str) -> bool:
    depth = 0
    quote = ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


@lru_cache(maxsize=4096)  # the list is shared: callers only read it
def _split_and(expr: str) -> list[str] | None:
    """Top-level ``&&`` clauses; None when the expression has a top-level ``||`` (not understood)."""
    parts: list[str] = []
    depth, quote, start, i = 0, "", 0, 0
    while i < len(expr):
        ch = expr[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and expr.startswith("&&", i):
            parts.append(expr[start:i])
            start, i = i + 2, i + 2
            continue
        elif depth == 0 and expr.startswith("||", i):
            return None
        i += 1
    parts.append(expr[start:])
    return [_strip(p) for p in parts if p.strip()]


def _pick(a: str | None, b: str | None) -> str:
    return a if a is not None else (b or "")


_SHAPES = (_DRIVER_RE, _ATTR_RE, _ATTR_BOOL_RE, _CAP_RE)
# CEL's other spellings of the same clauses: an index for a field (KServe's managed-DRA sample writes
# ``device.attributes['gpu.nvidia.com']['type']``), and the NIM Operator's parenthesised capacity
# (``(device.capacity["gpu.nvidia.com"].memory).compareTo(quantity("40Gi")) >= 0``, internal/k8sutil/cel/cel.go).
_INDEX_RE = re.compile(
    rf"""^(device\.(?:attributes|capacity){_DOMAIN})\[\s*(?:"([A-Za-z_][\w-]*)"|'([A-Za-z_][\w-]*)')\s*\]""")
_PAREN_CAP_RE = re.compile(rf"""^\(\s*(device\.capacity{_DOMAIN}\.[A-Za-z_][\w-]*)\s*\)(\.compareTo\()""")


@lru_cache(maxsize=4096)  # per device and clause on the extender's path: the same few clauses over and over
def canonical_clause(clause: str) -> str:
    """A clause as the shapes above spell it: ``x['name']`` read as ``x.name``, ``(x).compareTo`` as ``x.compareTo``."""
    text = clause.strip()
    m = _INDEX_RE.match(text)
    if m is not None:
        text = f"{m.group(1)}.{_pick(m.group(4), m.group(5))}{text[m.end():]}"
    m = _PAREN_CAP_RE.match(text)
    if m is not None:
        text = f"{m.group(1)}{m.group(4)}{text[m.end():]}"
    return text


def _clause(clause: str, device: Device) -> bool | None:
    """True/False when the clause is one of the understood shapes, None when it is not."""
    clause = canonical_clause(clause)
    if (m := _DRIVER_RE.match(clause)) is not None:
        same = device.driver == _pick(m.group(2), m.group(3))
        return same if m.group(1) == "==" else not same
    if (m := _ATTR_RE.match(clause)) is not None:
        value = device.attribute(_pick(m.group(1), m.group(2)), m.group(3))
        same = value is not None and str(value) == _pick(m.group(5), m.group(6))
        return same if m.group(4) == "==" else (value is not None and not same)
    if (m := _ATTR_BOOL_RE.match(clause)) is not None:
        value = device.attribute(_pick(m.group(1), m.group(2)), m.group(3))
        same = value is (m.group(5) == "true")
        return same if m.group(4) == "==" else (value is not None and not same)
    if (m := _CAP_RE.match(clause)) is not None:
        have = device.capacity_of(_pick(m.group(1), m.group(2)), m.group(3))
        want = quantity_bytes(_pick(m.group(4), m.group(5)))
        if have is None or want is None:
            return False if have is None and want is not None else None
        cmp = (have > want) - (have < want)
        return bool(_OPS[m.group(6)](cmp, int(m.group(7))))
    return None


@lru_cache(maxsize=4096)  # parsed once per expression, not once per device and scheduling cycle
def _clauses(expression: str) -> tuple[str, ...] | None:
    split = _split_and(_strip(expression))
    return None if split is None else tuple(split)


@dataclass(frozen=True)
class Selector:
    """One CEL selector expression."""

    expression: str

    def matches(self, device: Device) -> tuple[bool, str | None]:
        """(may match, the clause not understood if any). A clause that is false decides: no match."""
        clauses = _clauses(self.expression)
        if clauses is None:
            return True, self.expression
        unknown = None
        for c in clauses:
            result = _clause(c, device)
            if result is False:
                return False, None
            if result is None:
                unknown = unknown or c
        return True, unknown

    def unread(self) -> list[str]:
        """The clauses vramgate does not understand (taken as "may match")."""
        clauses = _clauses(self.expression)
        if clauses is None:
            return [self.expression]
        return [c for c in clauses if not any(r.match(canonical_clause(c)) for r in _SHAPES)]


def _selectors(raw: Any) -> tuple[Selector, ...]:
    out = []
    for s in raw if isinstance(raw, list) else []:
        cel = s.get("cel") if isinstance(s, dict) else None
        expr = cel.get("expression") if isinstance(cel, dict) else None
        if isinstance(expr, str) and expr.strip():
            out.append(Selector(expr.strip()))
    return tuple(out)


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[Selector, ...]
    # spec.extendedResourceName (Kubernetes 1.34+, DRAExtendedResource): pods asking this resource in plain
    # resources.requests get devices of this class on nodes without a device plugin for it (dra_extended.py).
    extended_resource: str = ""
    created: str = ""  # metadata.creationTimestamp (RFC 3339): the newest class wins a shared extendedResourceName


# The DeviceClasses NVIDIA's DRA driver chart installs, used when the cluster's own are not in view.
KNOWN_CLASSES: Mapping[str, DeviceClass] = {
    "gpu.nvidia.com": DeviceClass("gpu.nvidia.com", (Selector(
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"),)),
    "mig.nvidia.com": DeviceClass("mig.nvidia.com", (Selector(
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"),)),
    # ROCm/k8s-gpu-dra-driver helm-charts-k8s/templates/deviceclass.yaml (commit 2622427)
    "gpu.amd.com": DeviceClass("gpu.amd.com", (Selector("device.driver == 'gpu.amd.com'"),)),
}


def device_class(obj: Mapping[str, Any]) -> DeviceClass | None:
    meta, spec = obj.get("metadata"), obj.get("spec")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        return None
    ext = spec.get("extendedResourceName") if isinstance(spec, dict) else None
    created = meta.get("creationTimestamp") if isinstance(meta, dict) else None
    return DeviceClass(name, _selectors(spec.get("selectors") if isinstance(spec, dict) else None),
                       ext.strip() if isinstance(ext, str) else "", created if isinstance(created, str) else "")


# ---- claims ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One device request of a claim (one alternative of ``firstAvailable``, or ``exactly``)."""

    claim: str  # the pod's name for the claim (spec.resourceClaims[].name)
    name: str
    class_name: str  # "" when the claim itself is not in view
    selectors: tuple[Selector, ...] = ()
    count: int = 1
    all: bool = False  # allocationMode All: every matching device
    alternatives: tuple[Request, ...] = ()  # firstAvailable's other choices, in order
    # the per-device capacity it asks for (consumable capacity): name → bytes
    capacity: tuple[tuple[str, int], ...] = ()

    @property
    def unknown(self) -> bool:
        return not self.class_name

    def choices(self) -> tuple[Request, ...]:
        return (self, *self.alternatives)


def _one_request(claim: str, name: str, body: Mapping[str, Any]) -> Request:
    count = body.get("count")
    mode = body.get("allocationMode")
    caps: dict[str, int] = {}
    cap = body.get("capacity")
    reqs = cap.get("requests") if isinstance(cap, dict) else None
    for key, value in (reqs.items() if isinstance(reqs, dict) else ()):
        number = quantity_bytes(value)
        if number is not None:
            caps[str(key).rpartition("/")[2]] = number
    return Request(
        claim=claim, name=name, class_name=str(body.get("deviceClassName") or ""),
        selectors=_selectors(body.get("selectors")),
        count=count if isinstance(count, int) and count > 0 else 1,
        all=mode == "All", capacity=tuple(sorted(caps.items())),
    )


def claim_requests(claim_spec: Mapping[str, Any] | None, claim: str = "") -> tuple[Request, ...]:
    """The requests of a ResourceClaimSpec (``{devices: {requests: […]}}``)."""
    devices = claim_spec.get("devices") if isinstance(claim_spec, Mapping) else None
    raw = devices.get("requests") if isinstance(devices, dict) else None
    out: list[Request] = []
    for r in raw if isinstance(raw, list) else []:
        if not isinstance(r, dict):
            continue
        name = str(r.get("name") or "")
        if isinstance(r.get("exactly"), dict):
            out.append(_one_request(claim, name, r["exactly"]))
        elif isinstance(r.get("firstAvailable"), list):
            subs = [_one_request(claim, f"{name}/{s.get('name', '')}", s)
                    for s in r["firstAvailable"] if isinstance(s, dict)]
            if subs:
                first = subs[0]
                out.append(Request(first.claim, name, first.class_name, first.selectors, first.count, first.all,
                                   tuple(subs[1:]), first.capacity))
        elif r.get("deviceClassName"):  # v1beta1: the request's own fields
            out.append(_one_request(claim, name, r))
    return tuple(out)


def claim_spec_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ResourceClaimSpec of a ResourceClaim or a ResourceClaimTemplate."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return None
    if obj.get("kind") == TEMPLATE_KIND:
        inner = spec.get("spec")
        return inner if isinstance(inner, dict) else None
    return spec


@dataclass(frozen=True)
class DraView:
    """The DRA objects admission and the CLI read: device classes, and claims/templates by namespace and name."""

    classes: Mapping[str, DeviceClass] = field(default_factory=dict)
    templates: Mapping[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (ns, name) → claim spec
    claims: Mapping[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    drivers: tuple[str, ...] = (NVIDIA_DRIVER,)

    def lookup(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        table = self.templates if kind == TEMPLATE_KIND else self.claims
        found = table.get((namespace, name))
        if found is None:
            # Manifests often leave the namespace out: a unique name is enough.
            same = [v for (_, n), v in table.items() if n == name]
            found = same[0] if len(same) == 1 else None
        return found


def with_templates(view: DraView, namespace: str, templates: Iterable[tuple[str, Mapping[str, Any]]]) -> DraView:
    """The view with the ResourceClaimTemplates an operator makes for a workload (name, claim spec) in ``namespace``.

    They are what the operator will create from the workload's own fields, so they win over older copies in view.
    """
    added = {(namespace, name): dict(spec) for name, spec in templates}
    return replace(view, templates={**view.templates, **added}) if added else view


def dra_view(objects: Iterable[Mapping[str, Any]], drivers: Iterable[str] = (NVIDIA_DRIVER,),
             base: DraView | None = None) -> DraView:
    """Add the DeviceClasses, ResourceClaims and ResourceClaimTemplates among ``objects`` to ``base``."""
    classes = dict(base.classes) if base else {}
    templates = dict(base.templates) if base else {}
    claims = dict(base.claims) if base else {}
    for obj in objects:
        kind = obj.get("kind")
        if kind == CLASS_KIND:
            dc = device_class(obj)
            if dc is not None:
                classes[dc.name] = dc
        elif kind in (TEMPLATE_KIND, CLAIM_KIND):
            meta_raw = obj.get("metadata")
            meta: dict[str, Any] = meta_raw if isinstance(meta_raw, dict) else {}
            name = meta.get("name")
            spec = claim_spec_of(obj)
            if isinstance(name, str) and spec is not None:
                table = templates if kind == TEMPLATE_KIND else claims
                table[(str(meta.get("namespace") or ""), name)] = spec
    return DraView(classes, templates, claims, tuple(drivers))


# ---- matching --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Match:
    devices: tuple[Device, ...]
    unread: tuple[str, ...] = ()  # selector clauses taken as "may match"


def is_gpu_request(req: Request, view: DraView) -> bool:
    """Whether a request asks for devices of a GPU driver (a request whose claim is not in view counts)."""
    if req.unknown:
        return True
    dc = view.classes.get(req.class_name) or KNOWN_CLASSES.get(req.class_name)
    texts = [s.expression for s in (dc.selectors if dc else ())] + [s.expression for s in req.selectors]
    if any(d in t for t in texts for d in view.drivers):
        return True
    if dc is None:
        return any(d in req.class_name for d in view.drivers) or "gpu" in req.class_name.lower()
    return False


def resolved(req: Request, view: DraView) -> Request:
    """The request with its class's selectors in front of its own (and so for each alternative)."""
    dc = view.classes.get(req.class_name) or KNOWN_CLASSES.get(req.class_name)
    alts = tuple(resolved(a, view) for a in req.alternatives)
    if dc is None or not dc.selectors:
        return Request(req.claim, req.name, req.class_name, req.selectors, req.count, req.all, alts, req.capacity)
    return Request(req.claim, req.name, req.class_name, (*dc.selectors, *req.selectors), req.count, req.all, alts,
                   req.capacity)


def matching(req: Request, devices: Iterable[Device]) -> Match:
    """The devices one choice of a request could be allocated (its selectors, class's included by ``resolved``)."""
    selectors = req.selectors
    out: list[Device] = []
    unread: list[str] = []
    for d in devices:
        ok = True
        for s in selectors:
            may, clause = s.matches(d)
            if not may:
                ok = False
                break
            if clause and clause not in unread:
                unread.append(clause)
        if ok and req.capacity:
            ok = all((d.capacity_of("", k) or 0) >= v for k, v in req.capacity)
        if ok:
            out.append(d)
    return Match(tuple(out), tuple(unread))


# ---- the memory selector vramgate adds ------------------------------------------------------

_MINE_RE = re.compile(
    rf"""^device\.capacity{_DOMAIN}\.memory\.compareTo\(\s*quantity\(\s*{_STR}\s*\)\s*\)\s*>=\s*0$"""
)


def quantity_text(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def memory_expression(mib: int, driver: str = NVIDIA_DRIVER) -> str:
    return f'device.capacity["{driver}"].memory.compareTo(quantity("{quantity_text(mib)}")) >= 0'


def memory_floor_mib(selectors: Iterable[Selector]) -> int | None:
    """The largest memory lower bound among ``>= 0`` memory selectors, in MiB."""
    floor = None
    for s in selectors:
        clauses = _clauses(s.expression) or ()
        for c in clauses:
            m = _MINE_RE.match(canonical_clause(c))
            if m:
                want = quantity_bytes(_pick(m.group(3), m.group(4)))
                if want is not None:
                    floor = max(floor or 0, -(-want // MIB))
    return floor


def with_memory_selector(body: dict[str, Any], need_mib: int, driver: str = NVIDIA_DRIVER) -> bool:
    """Append the memory selector to one request body (``exactly`` or a subrequest) unless it asks as much already.

    Returns whether it changed. Never removes or loosens a selector: adding one only narrows.
    """
    raw = body.get("selectors")
    existing = _selectors(raw)
    floor = memory_floor_mib(existing)
    if floor is not None and floor >= need_mib:
        return False
    selectors = list(raw) if isinstance(raw, list) else []
    selectors.append({"cel": {"expression": memory_expression(need_mib, driver)}})
    body["selectors"] = selectors
    return True


# ---- a pod's claims ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PodClaims:
    """The GPU devices a pod asks for through ResourceClaims."""

    gpus: int
    containers: tuple[dict[str, Any], ...]  # the containers that use a GPU claim
    requests: tuple[Request, ...]
    warnings: tuple[str, ...] = ()


def _refs(container: Mapping[str, Any]) -> list[tuple[str, str]]:
    res = container.get("resources")
    claims = res.get("claims") if isinstance(res, dict) else None
    out = []
    for c in claims if isinstance(claims, list) else []:
        if isinstance(c, dict) and isinstance(c.get("name"), str):
            out.append((c["name"], str(c.get("request") or "")))
    return out


def pod_claims(spec: Mapping[str, Any], namespace: str, view: DraView,
               generated: Mapping[str, str] | None = None) -> PodClaims | None:
    """GPUs a pod (or template) asks for through ``spec.resourceClaims`` that its containers use, or None.

    ``generated`` (a Pod's ``status.resourceClaimStatuses``: claim name → ResourceClaim) names the claims made
    from the pod's templates; where such a claim is in view it is read instead of the template it came from.
    """
    raw = spec.get("resourceClaims")
    if not isinstance(raw, list) or not raw:
        return None
    warnings: list[str] = []
    by_claim: dict[str, tuple[Request, ...]] = {}
    for ref in raw:
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
            continue
        name = ref["name"]
        if ref.get("resourceClaimTemplateName"):
            kind, target = TEMPLATE_KIND, str(ref["resourceClaimTemplateName"])
        elif ref.get("resourceClaimName"):
            kind, target = CLAIM_KIND, str(ref["resourceClaimName"])
        else:
            continue
        claim_spec = None
        made = (generated or {}).get(name)
        if made and kind == TEMPLATE_KIND:
            claim_spec = view.lookup(CLAIM_KIND, namespace, made)
            kind, target = (CLAIM_KIND, made) if claim_spec is not None else (kind, target)
        if claim_spec is None:
            claim_spec = view.lookup(kind, namespace, target)
        if claim_spec is None:
            by_claim[name] = (Request(claim=name, name="", class_name=""),)
            warnings.append(f"claim {name}: {kind} {target} is not in view; counted as 1 device of unknown kind "
                            "(pass it with -f, or create it first)")
            continue
        by_claim[name] = tuple(resolved(r, view) for r in claim_requests(claim_spec, name) if is_gpu_request(r, view))
        for r in by_claim[name]:
            if r.class_name not in view.classes and r.class_name not in KNOWN_CLASSES:
                warnings.append(f"claim {name}: DeviceClass {r.class_name} is not in view; any GPU device may match")
            for choice in r.choices():
                for sel in choice.selectors:
                    for clause in sel.unread():
                        note = f"claim {name}: selector clause {clause!r} not understood; taken as \"may match\""
                        if note not in warnings:
                            warnings.append(note)
    app: dict[tuple[str, str], Request] = {}
    init = 0
    users: list[dict[str, Any]] = []
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            used: dict[tuple[str, str], Request] = {}
            for claim, request in _refs(c):
                for r in by_claim.get(claim, ()):
                    if not request or r.name == request or r.unknown:
                        used[(claim, r.name)] = r
            if not used:
                continue
            users.append(c)
            if key == "containers":
                app.update(used)  # a claim shared by containers is one set of devices
            else:
                init = max(init, sum(r.count for r in used.values()))
    if not users:
        return None
    requests = tuple(app.values())
    for r in requests:
        if r.all:
            warnings.append(f"claim {r.claim} request {r.name}: allocationMode All; judged as at least 1 device")
    gpus = max(sum(r.count for r in requests), init)
    return PodClaims(gpus, tuple(users), requests, tuple(warnings))


def claims_vendor(requests: Iterable[Request]) -> str | None:
    """The vendor (webhook/data/accelerators.yaml) whose DRA driver every request names, or None (NVIDIA, mixed,
    or unsaid): a claim on ``gpu.amd.com`` devices asks for AMD GPUs as ``amd.com/gpu`` does."""
    rows = dra_driver_rows()
    found: set[str] = set()
    for req in requests:
        texts = [req.class_name, *(s.expression for c in req.choices() for s in c.selectors)]
        named = {d for d in (*rows, NVIDIA_DRIVER) if any(d in t for t in texts)}
        if len(named) != 1 or NVIDIA_DRIVER in named:
            return None
        found.add(rows[named.pop()].vendor)
    return found.pop() if len(found) == 1 else None


def with_memory_request(body: dict[str, Any], need_mib: int) -> bool:
    """Ask for ``need_mib`` of a shared device's memory (``capacity.requests.memory``) unless the request names some.

    Returns whether it changed. An amount the user set is kept, whatever it is.
    """
    cap = body.get("capacity")
    if cap is not None and not isinstance(cap, dict):
        return False
    reqs = (cap or {}).get("requests")
    if reqs is not None and not isinstance(reqs, dict):
        return False
    if reqs and any(str(k).rpartition("/")[2] == "memory" for k in reqs):
        return False
    body["capacity"] = {**(cap or {}), "requests": {**(reqs or {}), "memory": quantity_text(need_mib)}}
    return True


# ---- DeviceTaintRules the controller writes ---------------------------------------------------

DEVICE_TAINT_RULE_PREFIX = "vramgate-gpu-unhealthy-"


def device_taint_rules(node: str, devices: Iterable[Device], key: str, reason: str) -> list[dict[str, Any]]:
    """``resource.k8s.io/v1`` DeviceTaintRules that taint every device of a node's pools ``key:NoSchedule``.

    One rule per (driver, pool), named ``vramgate-gpu-unhealthy-<node>`` (``-<n>`` after the first), so
    the scheduler's DRA plugin stops allocating a node's devices while vramgate judges it unhealthy.
    """
    pools = sorted({(d.driver, d.pool) for d in devices if d.pool})
    out = []
    for i, (driver, pool) in enumerate(pools):
        name = f"{DEVICE_TAINT_RULE_PREFIX}{node}" + (f"-{i}" if i else "")
        out.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": name[:253], "labels": {"app.kubernetes.io/managed-by": "vramgate"},
                         "annotations": {"vramgate.io/node": node, "vramgate.io/reason": reason[:1000]}},
            "spec": {"deviceSelector": {"driver": driver, "pool": pool},
                     "taint": {"key": key, "value": "true", "effect": "NoSchedule"}},
        })
    return out
