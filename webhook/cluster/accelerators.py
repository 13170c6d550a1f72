"""GPU vendors other than NVIDIA: the resource a pod asks, and what a node of theirs offers, from one data table.

The table is ``webhook/data/accelerators.yaml`` (a source per row); no vendor's resource or label is spelled
anywhere else. NVIDIA stays the config's (``labels.gpu_resource`` and GFD's labels); a pod or node is NVIDIA's
unless it asks or advertises one of this table's resources.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any

from ..units.data import packaged_yaml
from .mig import MigProfile

NVIDIA = "nvidia"
_GIB_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(?:G|GB|Gi|GiB)?$", re.IGNORECASE)


@dataclass(frozen=True)
class Product:
    """One device of a vendor's table: the token its labels carry, its memory, cores per device, the source."""

    token: str
    mib: int
    source: str
    cores: int = 0  # cores of the vendor's ``cores`` resource per device, where it has one; 0 = not said


@dataclass(frozen=True)
class InstanceType:
    """A machine type whose devices the table knows (``dl1.24xlarge``: 8 × Gaudi HL-205)."""

    product: str  # a token of the vendor's products
    devices: int
    source: str
    name: str = ""  # as the cloud spells it (node affinities compare label values exactly)


@dataclass(frozen=True)
class Vendor:
    name: str
    resource: str
    product_labels: tuple[str, ...]
    memory_labels: tuple[str, ...]
    partition_labels: tuple[str, ...]
    partitions: dict[str, int]
    products: tuple[tuple[str, int, str], ...]  # (token, MiB of one device, source), longest token first
    fault_taints: tuple[str, ...] = ()  # taint keys its operator puts on a node whose GPUs failed
    no_fp8_compute: tuple[str, ...] = ()  # product tokens without FP8 compute (upper case)
    aliases: tuple[str, ...] = ()  # other resource names of the same devices
    cores: str = ""  # a finer resource (one core of a device), "" when none
    shared_product_labels: tuple[str, ...] = ()  # read only where the value names a product of this table
    count_labels: tuple[str, ...] = ()
    topology_labels: tuple[str, ...] = ()
    instance_types: dict[str, InstanceType] = field(default_factory=dict)  # lower-case machine type → row
    product_ids: dict[str, str] = field(default_factory=dict)  # a label value (a PCI id) → product token
    engine_model: str = ""  # "generic": no engine's own memory plan for this vendor
    engines: dict[str, str] = field(default_factory=dict)  # vramgate engine name → the build that runs here
    cores_per: dict[str, int] = field(default_factory=dict)  # product token → cores per device

    @property
    def device_resources(self) -> tuple[str, ...]:
        return (self.resource, *self.aliases)

    @cached_property
    def resources(self) -> tuple[str, ...]:
        return (*self.device_resources, *((self.cores,) if self.cores else ()))

    @cached_property
    def label_prefixes(self) -> tuple[str, ...]:
        """Every label key this vendor reads (a prefix of its "<key>.<value>" forms too)."""
        return (*self.product_labels, *self.memory_labels, *self.shared_product_labels) or ("\0",)


@dataclass(frozen=True)
class CoreView:
    """The node as a pod asking the vendor's core resource sees it: cores, and the memory one core holds."""

    resource: str
    capacity: int
    allocatable: int
    vram_mib: int
    labelled_count: int = 0


@dataclass(frozen=True)
class VendorGPUs:
    """What a node of a listed vendor offers: its devices (partitions, where partitioned) and their memory."""

    vendor: str
    capacity: int
    allocatable: int
    product: str
    vram_mib: int  # per device the resource counts; 0 = unknown
    vram_source: str
    partition: str  # "cpx_nps4", "" when not said
    labelled: bool
    count: int = 0  # devices the labels or the instance type declare (what the node has once its plugin runs)
    topology: str = ""  # the slice the node belongs to ("4x4"), "" when not said
    cores: CoreView | None = None
    partitions: tuple[MigProfile, ...] = ()  # AMD partitions advertised one resource per mode (mixed naming)


def _table() -> dict[str, Any]:
    """webhook/data/accelerators.yaml, parsed once per content (the CLI pays start-up on every run)."""
    return packaged_yaml("accelerators.yaml") or {}


@cache
def vendors() -> tuple[Vendor, ...]:
    out = []
    for name, row in _table().items():
        rows = row.get("products") or {}
        products = sorted(((str(k).upper(), int(float(v["gib"]) * 1024), str(v.get("source", "")))
                           for k, v in rows.items()), key=lambda p: -len(p[0]))
        types = {str(k).lower(): InstanceType(str(v["product"]).upper(), int(v["devices"]), str(v.get("source", "")),
                                              str(k))
                 for k, v in (row.get("instance_types") or {}).items()}
        out.append(Vendor(name=str(name), resource=str(row["resource"]),
                          product_labels=tuple(row.get("product_labels") or ()),
                          memory_labels=tuple(row.get("memory_labels") or ()),
                          partition_labels=tuple(row.get("partition_labels") or ()),
                          partitions={str(k).lower(): int(v) for k, v in (row.get("partitions") or {}).items()},
                          products=tuple(products), fault_taints=tuple(row.get("fault_taints") or ()),
                          no_fp8_compute=tuple(str(x).upper() for x in row.get("no_fp8_compute") or ()),
                          aliases=tuple(row.get("aliases") or ()),
                          cores=str(row.get("cores") or ""),
                          shared_product_labels=tuple(row.get("shared_product_labels") or ()),
                          count_labels=tuple(row.get("count_labels") or ()),
                          topology_labels=tuple(row.get("topology_labels") or ()),
                          instance_types=types,
                          product_ids={str(k): str(v).upper() for k, v in (row.get("product_ids") or {}).items()},
                          engine_model=str(row.get("engine_model") or ""),
                          engines={str(k): str(v) for k, v in (row.get("engines") or {}).items()},
                          cores_per={str(k).upper(): int(v["cores"]) for k, v in rows.items() if v.get("cores")}))
    return tuple(out)


def vendor_named(name: str) -> Vendor | None:
    return next((v for v in vendors() if v.name == name), None)


def resources_of_vendors() -> tuple[str, ...]:
    """Every resource name a listed vendor's pods may ask: devices (and their aliases), then cores."""
    return tuple(r for v in vendors() for r in (*v.device_resources, *((v.cores,) if v.cores else ())))


def vendor_of(resource: str) -> str | None:
    """The listed vendor whose resource this is (``amd.com/gpu`` → ``amd``), else None (NVIDIA's or unknown)."""
    return next((v.name for v in vendors() if resource in v.device_resources or resource == v.cores), None)


def is_core_resource(resource: str) -> bool:
    """Whether ``resource`` counts cores of a device (``aws.amazon.com/neuroncore``), not devices."""
    return any(v.cores == resource for v in vendors() if v.cores)


def resource_of(vendor: str, default: str) -> str:
    """The resource a vendor's pods ask (``default``, the config's, for NVIDIA)."""
    return next((v.resource for v in vendors() if v.name == vendor), default)


@cache
def fault_taints_of_vendors() -> frozenset[str]:
    return frozenset(k for v in vendors() for k in v.fault_taints)


def memory_labels_of_vendors() -> tuple[str, ...]:
    return tuple(k for v in vendors() for k in v.memory_labels)


def partition_labels_of_vendors() -> tuple[str, ...]:
    return tuple(k for v in vendors() for k in v.partition_labels)


def memory_values_holding(vendor: Vendor, floor_mib: int) -> tuple[str, ...]:
    """The values of the vendor's memory label, as its labeller writes them ("%dG": ``192G``), of every product in
    the table with at least ``floor_mib`` MiB per GPU: what a node affinity can ask with ``In`` where no integer
    label (``vramgate.io/gpu-memory-mib``) is there yet for ``Gt``. A partitioned GPU is left to that label."""
    return tuple(f"{g}G" for g in sorted({mib // 1024 for _, mib, _ in vendor.products if mib >= floor_mib}))


def instance_types_by_fit(vendor: Vendor, floor_mib: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the vendor's machine types whose devices hold ``floor_mib`` MiB each, those whose devices do not), spelled
    as the cloud writes ``node.kubernetes.io/instance-type``: what a node affinity can ask of a node its
    labeller has not reached yet, and of one a provisioner has not made yet."""
    holding: list[str] = []
    small: list[str] = []
    for row in vendor.instance_types.values():
        mib = next((m for token, m, _ in vendor.products if token == row.product), 0)
        (holding if mib >= floor_mib else small).append(row.name)
    return tuple(sorted(holding)), tuple(sorted(small))


def instance_type_names_of_vendors() -> frozenset[str]:
    return frozenset(row.name for v in vendors() for row in v.instance_types.values())


_MEMORY_MODES = ("nps1", "nps2", "nps4", "nps8")
# The AMD device plugin's --resource_naming_strategy=mixed advertises each partition mode as its own resource,
# amd.com/<compute>_<memory> (amd.com/cpx_nps4, amd.com/spx_nps1), where "single" calls every one amd.com/gpu
# (ROCm/k8s-device-plugin docs "Resource Naming Strategy"; instinct.docs.amd.com k8s-device-plugin user-guide).
PARTITION_PREFIX = "amd.com/"


def is_partition_name(name: str) -> bool:
    """Whether ``name`` is a partition mode a mixed-naming resource carries (``cpx_nps4``)."""
    compute, _, memory = name.lower().partition("_")
    v = vendor_named("amd")
    return v is not None and compute in v.partitions and memory in _MEMORY_MODES


def partition_resources() -> tuple[str, ...]:
    v = vendor_named("amd")
    return tuple(f"{PARTITION_PREFIX}{c}_{m}" for c in (v.partitions if v else ()) for m in _MEMORY_MODES)


def node_partitions(product_mib_: int, product: str, capacity: Any, allocatable: Any) -> tuple[MigProfile, ...]:
    """The AMD partitions a node advertises under the mixed naming strategy, as slices: one GPU's memory split
    evenly between the mode's compute partitions (MI300X CPX: 192 GB / 8 = 24 GB), smallest first."""
    cap = capacity if isinstance(capacity, dict) else {}
    alloc = allocatable if isinstance(allocatable, dict) else {}
    v = vendor_named("amd")
    out = []
    for resource in partition_resources() if v is not None else ():
        n_cap = _int(cap.get(resource))
        if not n_cap:
            continue
        mode = resource[len(PARTITION_PREFIX):]
        split = v.partitions.get(mode.split("_")[0], 1) if v is not None else 1
        out.append(MigProfile(name=mode, memory_mib=product_mib_ // split if product_mib_ else 0,
                              memory_source="product", capacity=n_cap,
                              allocatable=min(_int(alloc.get(resource)), n_cap), labelled_count=0,
                              product=f"{product or 'AMD GPU'} {mode.upper()} partition"))
    return tuple(sorted(out, key=lambda p: (p.memory_mib, p.name)))


def slice_resource(vendor: str, name: str, mig_prefix: str = "nvidia.com/mig-") -> str:
    """The resource a pod asks for one slice of this name: ``nvidia.com/mig-1g.10gb``, ``amd.com/cpx_nps4``."""
    return f"{PARTITION_PREFIX}{name}" if vendor == "amd" else f"{mig_prefix}{name}"


def partitioned_modes(vendor: Vendor) -> tuple[str, ...]:
    """The partition label's values (``<compute>_<memory>``) of every mode that splits a GPU (``cpx_nps4``): where
    the labeller's vram may be the whole GPU's, a node affinity on it alone would over-promise."""
    return tuple(f"{mode}_{mem}" for mode, split in vendor.partitions.items() if split > 1 for mem in _MEMORY_MODES)


def generic_model_note(vendor: str, engine: str | None) -> str | None:
    """The words a verdict carries where vramgate has no memory model of ``engine`` on ``vendor``, else None."""
    v = vendor_named(vendor)
    if v is None or v.engine_model != "generic":
        return None
    build = v.engines.get(engine or "", "")
    who = build or (f"{engine} on {vendor}" if engine and engine != "unknown" else f"the engine on {vendor}")
    return (f"{who}: memory judged with vramgate's generic model (weights, KV cache, overhead), not a measured "
            f"plan of this engine on {vendor}")


def _label(labels: dict[str, str], keys: tuple[str, ...]) -> list[str]:
    """Values of the first key present: ``key: value``, else every ``key.<value>: <count>``."""
    for key in keys:
        if labels.get(key):
            return [labels[key]]
        forms = [k[len(key) + 1:] for k in labels if k.startswith(key + ".")]
        if forms:
            return forms
    return []


def _gib(value: str) -> int:
    m = _GIB_RE.match(value.strip())
    return int(float(m.group(1)) * 1024) if m else 0


def lacks_fp8(vendor: str, product: str) -> bool:
    """Whether a listed vendor's GPU of this product has no FP8 compute (AMD's MI2xx: see accelerators.yaml)."""
    found = vendor_named(vendor)
    if found is None or not found.no_fp8_compute:
        return False
    return _product_token(found, product) in found.no_fp8_compute


def _product_token(vendor: Vendor, product: str) -> str:
    return product_mib(vendor, product)[1]


def product_mib(vendor: Vendor, product: str) -> tuple[int, str]:
    upper = vendor.product_ids.get(product.strip(), product.upper())
    for token, mib, _ in vendor.products:
        if re.search(rf"(?<![A-Z0-9]){re.escape(token)}(?![A-Z0-9])", upper.replace("_", " ")):
            return mib, token
    return 0, ""


def _products(labels: dict[str, str], v: Vendor, by_type: InstanceType | None
              ) -> tuple[list[str], list[str], bool]:
    """(what the node's labels call its devices, the values that tell their memory, whether its own labels named
    them): the vendor's own labels in
    order (the first present names them; the first the table knows tells the memory), else the instance type's
    product, else a shared label's value where it names a product."""
    own = [vals for key in v.product_labels if (vals := _label(labels, (key,)))]
    known = next((vals for vals in own if any(product_mib(v, p)[0] for p in vals)), None)
    shared = [val for key in v.shared_product_labels if (val := labels.get(key, "")) and product_mib(v, val)[0]]
    typed = [by_type.product] if by_type is not None else []
    named = own[0] if own else typed or shared[:1]
    return named, known or typed or shared[:1] or named, bool(own)


def _int(value: Any) -> int:
    try:
        return max(0, int(str(value).strip()))
    except (TypeError, ValueError):
        return 0


def _instance_type(labels: dict[str, str], v: Vendor) -> InstanceType | None:
    if not v.instance_types:
        return None
    name = labels.get("node.kubernetes.io/instance-type") or labels.get("beta.kubernetes.io/instance-type") or ""
    return v.instance_types.get(name.strip().lower())


def topology_chips(topology: str) -> int:
    """Chips of a TPU slice topology ("2x4" → 8, "4x4x4" → 64); 0 when it is not such a shape."""
    parts = topology.strip().lower().split("x")
    if len(parts) < 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        return 0
    n = 1
    for p in parts:
        n *= int(p)
    return n


def _cores(v: Vendor, cap: dict[str, Any], alloc: dict[str, Any], devices: int, labelled: int, per_device: int,
           token: str) -> CoreView | None:
    """The node in cores: the device plugin's counts; a core's memory is the device's over cores per device."""
    if not v.cores:
        return None
    n_cap = _int(cap.get(v.cores))
    n_alloc = min(_int(alloc.get(v.cores)), n_cap)
    per = n_cap // devices if devices and n_cap and n_cap % devices == 0 else v.cores_per.get(token, 0)
    mib = per_device // per if per_device and per else 0
    return CoreView(v.cores, n_cap, n_alloc, mib, labelled * per if per else 0)


def node_vendor_gpus(labels: dict[str, str], capacity: Any, allocatable: Any) -> VendorGPUs | None:
    """A listed vendor's GPUs on a node (its resource in capacity, or its labels), else None."""
    cap = capacity if isinstance(capacity, dict) else {}
    alloc = allocatable if isinstance(allocatable, dict) else {}
    instance_type = (labels.get("node.kubernetes.io/instance-type") or labels.get("beta.kubernetes.io/instance-type")
                     or "").strip().lower()
    for v in vendors():
        # Most nodes are no vendor's: one C-level prefix test per label rules a vendor out before any parsing.
        mixed = partition_resources() if v.partitions else ()
        if not (any(r in cap for r in v.resources) or instance_type in v.instance_types
                or any(k.startswith(v.label_prefixes) for k in labels) or any(r in cap for r in mixed)):
            continue
        n_cap = sum(_int(cap.get(r)) for r in v.device_resources[:1]) or max(
            (_int(cap.get(r)) for r in v.device_resources[1:]), default=0)
        by_type = _instance_type(labels, v)
        products, telling, own = _products(labels, v, by_type)
        memories = [m for m in (_gib(x) for x in _label(labels, v.memory_labels)) if m]
        core_cap = _int(cap.get(v.cores)) if v.cores else 0
        if not n_cap and not core_cap and not products and not memories and not any(_int(cap.get(r)) for r in mixed):
            continue
        n_alloc = min(sum(_int(alloc.get(r)) for r in v.device_resources[:1]) or max(
            (_int(alloc.get(r)) for r in v.device_resources[1:]), default=0), n_cap)
        product = products[0] if len(products) == 1 else "/".join(sorted(products))
        partition = next((x.lower() for x in _label(labels, v.partition_labels)), "")
        split = v.partitions.get(partition.split("_")[0], 1)
        found = [product_mib(v, p) for p in telling]
        table = min((mib for mib, _ in found), default=0)
        token = next((t for mib, t in found if mib == table and t), "")
        if token and not own:
            product = token  # Karpenter's or the instance type's name: the table's, one spelling for both
        elif token and telling is not products and not any(product_mib(v, p)[0] for p in products):
            product = f"{product} ({token})"  # GAUDI_HL2000M (GAUDI2): the PCI id told the generation
        # The labeller's vram is per KFD node (a partition's share, where partitioned); the table's is a whole GPU's,
        # split evenly between its compute partitions. The smaller of the two is what one device holds.
        vram, source = 0, "unknown"
        if memories:
            vram, source = min(memories), f"{v.name} label {v.memory_labels[0]}"
        if table:
            per = table // split
            if not vram or per < vram:
                vram = per
                shared = next((k for k in v.shared_product_labels if labels.get(k) == telling[0]), "")
                via = f"instance-type {instance_type}" if (by_type is not None and telling == [by_type.product]) \
                    else f"label {shared}={telling[0]}" if shared and not own else f"product {product}"
                source = f"{v.name} {via}" + (f" in {partition} ({split} partitions)" if split > 1 else "")
        count = next((n for n in (_int(labels.get(k)) for k in v.count_labels) if n), 0)
        if not count and by_type is not None:
            count = by_type.devices
        topology = next((labels[k].strip() for k in v.topology_labels if labels.get(k)), "")
        return VendorGPUs(vendor=v.name, capacity=n_cap, allocatable=n_alloc, product=product, vram_mib=vram,
                          vram_source=source, partition=partition, labelled=bool(products or memories),
                          count=count, topology=topology,
                          cores=_cores(v, cap, alloc, n_cap or count, count, vram, token),
                          partitions=node_partitions(table, token or product, cap, alloc) if mixed else ())
    return None


@dataclass(frozen=True)
class DraDriver:
    """A vendor's DRA driver: the ``type`` attribute values of its whole GPUs and partitions, and the profile's."""

    vendor: str
    driver: str
    full_types: tuple[str, ...]
    partition_types: tuple[str, ...]
    profile_attribute: str


@cache
def dra_driver_rows() -> dict[str, DraDriver]:
    """The vendors' DRA drivers by driver name (the ``dra:`` rows of webhook/data/accelerators.yaml)."""
    out = {}
    for name, row in _table().items():
        dra = row.get("dra") if isinstance(row, dict) else None
        if isinstance(dra, dict) and isinstance(dra.get("driver"), str):
            out[dra["driver"]] = DraDriver(str(name), dra["driver"], tuple(dra.get("full_types") or ()),
                                           tuple(dra.get("partition_types") or ()),
                                           str(dra.get("profile_attribute") or "profile"))
    return out
