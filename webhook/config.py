"""The one validated configuration file (YAML, usually a mounted ConfigMap), with defaults for a laptop."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from .units.quantity import QuantityError, parse_gpu_memory_label

Enforcement = Literal["enforce", "warn", "off"]
PlacementMode = Literal["binpack", "spread"]

DEFAULT_FAULT_CONDITIONS = [
    "GpuMemWatch",
    "GpuThermalWatch",
    "GpuPcieWatch",
    "GpuPowerWatch",
    "GpuInforomWatch",
    "GpuSmWatch",
    "GpuNvlinkWatch",
    "GpuDriverWatch",
    "SysLogsXIDError",
    "SysLogsSXIDError",
    "SysLogsGPUFallenOff",
    "DCGMError",
]
DEFAULT_FAULT_TAINTS = ["nvidia.com/gpu-xid-error", "nvidia.com/gpu-unhealthy", "vramgate.io/gpu-unhealthy"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Labels(_Section):
    """Resource names, label keys and taints read from and written to nodes."""

    gpu_resource: str = "nvidia.com/gpu"
    # Other resource names that count GPUs a container gets: the device plugin's time-slicing with renamed
    # resources (nvidia.com/gpu.shared), HAMi's nvidia.com/gpualloc.
    gpu_resource_aliases: list[str] = Field(default_factory=lambda: ["nvidia.com/gpu.shared", "nvidia.com/gpualloc"])
    # Resources that state the GPU memory a container gets, in MiB per GPU (HAMi's nvidia.com/gpumem): the
    # workload's declared VRAM, as vramgate.io/vram would be.
    gpu_memory_resources: list[str] = Field(default_factory=lambda: ["nvidia.com/gpumem"])
    gpu_memory: str = "nvidia.com/gpu.memory"
    gpu_count: str = "nvidia.com/gpu.count"
    gpu_product: str = "nvidia.com/gpu.product"
    gpu_replicas: str = "nvidia.com/gpu.replicas"
    mig_strategy: str = "nvidia.com/mig.strategy"
    # MIG under the device plugin's mixed strategy: a pod asks nvidia.com/mig-<profile> (1g.10gb, 3g.40gb, 1g.10gb+me),
    # the node lists it in capacity and GFD labels nvidia.com/mig-<profile>.memory (MiB), .count, .product.
    mig_resource_prefix: str = "nvidia.com/mig-"
    driver_major: str = "nvidia.com/cuda.driver-version.major"
    driver_major_deprecated: str = "nvidia.com/cuda.driver.major"
    normalized_memory: str = "vramgate.io/gpu-memory-mib"
    health: str = "vramgate.io/gpu-health"
    unhealthy_taint: str = "vramgate.io/gpu-unhealthy"
    # The cluster's own labels, read only where neither GFD nor a managed cloud tells a node's GPU memory.
    # Labels whose value is the memory of ONE GPU: a bare number is MiB (like nvidia.com/gpu.memory), else 24Gi, 24GB.
    memory_labels: list[str] = Field(default_factory=list)
    # Labels whose value names the GPU model (nvidia.com/gpu.product is always read) ...
    product_labels: list[str] = Field(default_factory=list)
    # ... and the memory of one GPU for each such value (case-insensitive), e.g. {"rtx-4090": "24GB"}.
    product_memory: dict[str, str] = Field(default_factory=dict)
    # DRA drivers whose ResourceSlices publish GPUs (device capacity "memory", attributes productName, type, …):
    # NVIDIA's and AMD's (ROCm/k8s-gpu-dra-driver; what its attributes mean is in webhook/data/accelerators.yaml).
    dra_drivers: list[str] = Field(default_factory=lambda: ["gpu.nvidia.com", "gpu.amd.com"])

    @model_validator(mode="after")
    def _product_memory_sizes(self) -> Labels:
        for product, size in self.product_memory.items():
            try:
                parse_gpu_memory_label(size)
            except QuantityError as exc:
                raise ValueError(
                    f"labels.product_memory[{product!r}]: {exc}; use MiB (24576) or a size (24Gi)"
                ) from None
        return self


class Health(_Section):
    """How node conditions, taints and capacity gaps become a health state."""

    fault_conditions: list[str] = Field(default_factory=lambda: list(DEFAULT_FAULT_CONDITIONS))
    # Conditions that say the hardware is ready, so False is the fault: the EKS node monitoring agent's
    # AcceleratedHardwareReady covers NVIDIA (XID, DCGM) and AWS Neuron devices alike (aws/eks-node-monitoring-agent
    # README, v1.7.0; EKS node auto repair replaces such a node). Unknown is not a fault.
    fault_when_false: list[str] = Field(default_factory=lambda: ["AcceleratedHardwareReady"])
    fault_taints: list[str] = Field(default_factory=lambda: list(DEFAULT_FAULT_TAINTS))
    # A node is unhealthy once more than this fraction of its GPUs is unhealthy (else degraded).
    unhealthy_fraction: float = Field(0.5, ge=0, le=1)
    # ... or once this many GPUs are unhealthy (0 disables the count rule).
    unhealthy_count: int = Field(0, ge=0)


class Autofit(_Section):
    """Autofit (vramgate.io/autofit): the fixes the mutating webhook may apply instead of a rejection."""

    # The highest --gpu-memory-utilization autofit sets: above ~0.95 the CUDA context, NCCL and fragmentation
    # leave too little outside vLLM's share.
    max_gpu_memory_utilization: float = Field(0.95, gt=0, le=1)


class Admission(_Section):
    """Admission webhook behaviour."""

    default_enforcement: Enforcement = "enforce"
    # When the inventory has not heard from the API server for longer than this, a rejection that rests on the
    # cluster's GPUs (none can hold it, a selector only too-small GPUs match) is admitted with the reason as a
    # warning: the GPUs may have changed unseen. 0: never. Watch bookmarks arrive about once a minute.
    stale_inventory_seconds: float = Field(300.0, ge=0)
    # vramgate_workload_placeable_replicas: how many admitted GPU workloads to track (the metric's series), and
    # how long one is kept after its last admission.
    placeable_workloads_max: int = Field(100, ge=0)
    placeable_ttl_seconds: float = Field(7 * 24 * 3600, gt=0)
    excluded_namespaces: list[str] = Field(default_factory=lambda: ["kube-system"])
    tiers: dict[str, str] = Field(
        default_factory=lambda: {"production": "gpu-production-priority", "batch": "gpu-batch-priority"}
    )
    batch_kinds: list[str] = Field(default_factory=lambda: ["Job", "CronJob"])
    scheduler_name: str | None = None
    reroute_narrow_selectors: bool = False
    non_gpu_pods_on_gpu_nodes: Literal["ignore", "warn", "reject"] = "warn"
    # Warn when the host-memory limit is below this multiple of the weights (loading stages them).
    host_memory_factor: float = Field(1.2, ge=0)
    # The floor injected when a GPU container has no memory limit: this multiple of the weights.
    host_memory_floor_factor: float = Field(1.3, ge=0)
    not_ready_toleration_seconds: int = Field(900, ge=0)
    termination_grace_period_floor: int = Field(60, ge=0)
    # Exit codes that mean "the GPU failed", not "the program failed": a GPU Job's podFailurePolicy ignores them.
    device_fault_exit_codes: list[Annotated[int, Field(ge=1, le=255)]] = Field(default_factory=list)
    validation_failure_mode: Literal["deny", "allow"] = "deny"
    # kube-apiserver accepts a write of up to 3 MiB (k8s.io/apiserver pkg/server/config.go, MaxRequestBodyBytes);
    # an UPDATE's review carries it as `object` beside the stored `oldObject` (written through the same limit),
    # so two such objects and the envelope: 7 MiB. Below that, a large UPDATE got a 413 and the failure policy.
    max_body_bytes: int = Field(7 * 1024 * 1024, gt=0)
    # Read the ConfigMaps a workload's env refers to (configMapKeyRef, envFrom), in its own namespace, to judge
    # the flags they carry (needs get on configmaps; the chart grants it with this on). Never Secrets.
    read_configmaps: bool = True
    configmap_ttl_seconds: float = Field(30.0, gt=0)
    # How long one review may wait for ConfigMap reads before it is judged without them.
    configmap_budget_seconds: float = Field(1.0, gt=0)
    # CPU seconds one review may spend judging its object; past it the object is admitted unjudged, with a warning
    # (a hostile script or config must not hold the event loop, and /healthz with it). 0: no budget.
    review_cpu_budget_seconds: float = Field(0.05, ge=0)
    autofit: Autofit = Field(default_factory=Autofit)
    # The VRAM affinity also names, for nodes that carry neither vramgate's nor GFD's memory label (a node a
    # provisioner has not created yet), the Karpenter (AWS) and GKE GPU names that can hold the pod.
    provisioner_affinity: bool = True


class Server(_Section):
    """HTTPS serving, certificate reload and shutdown."""

    # How often the TLS cert and key files are hashed to notice a rotation.
    tls_reload_interval_seconds: float = Field(1.0, gt=0)
    # After SIGTERM: /readyz answers 503 but requests are still served for this long, so endpoints drop the pod
    # before its listener closes (kube-proxy and the apiserver's endpoint cache lag a few seconds).
    shutdown_delay_seconds: float = Field(5.0, ge=0)
    # Then at most this long for in-flight requests to finish once the listener is closed.
    shutdown_timeout_seconds: float = Field(20.0, gt=0)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # A connection that has not delivered a complete request this long after it opened (or after its request
    # began) is aborted: well above the API server's webhook timeout (at most 30 s by default 10 s).
    read_deadline_seconds: float = Field(10.0, gt=0)
    # Connections beyond this are refused at once (None: 90 % of the soft descriptor limit).
    max_connections: int | None = Field(None, ge=1)
    # Sockets one peer address may hold (None: half of max_connections), counted before TLS like the total: one
    # client cannot take every descriptor. Behind a sidecar proxy every peer is 127.0.0.1; raise it there.
    max_connections_per_peer: int | None = Field(None, ge=1)
    # A socket that has not finished its TLS handshake by then is aborted (asyncio's default: 60 s).
    handshake_deadline_seconds: float = Field(5.0, gt=0)
    # An idle keep-alive connection is closed after this long. Above the 90 s for which kube-apiserver's webhook
    # client and kube-scheduler's extender client keep idle connections (client-go's transport defaults), so the
    # client closes first: it never sends a review on a connection this end is closing (a failed call, an "EOF"
    # error under failurePolicy), and a burst after a lull needs no new TLS handshakes. uvicorn's own 5 s did both.
    keep_alive_seconds: float = Field(120.0, gt=0)
    # The read-only status page at / and /status (inventory, admissions, recent rejections, the fit planner).
    status_page: bool = True
    # A second HTTPS port (same host, same certificate) for /metrics, /inventory and the status page: the webhook
    # and extender port then serves only /mutate, /validate, /scheduler/* and the probes. None: one port for all
    # (`vramgate serve` on a laptop); the chart sets 8445 (values metrics.port). docs/security.md.
    metrics_port: int | None = Field(None, ge=0, le=65535)  # 0: any free port
    # Ask kube-apiserver who calls /metrics, /inventory and the status page, and whether they may (TokenReview,
    # then SubjectAccessReview of a GET on the path, as controller-runtime's WithAuthenticationAndAuthorization):
    # no bearer token or an invalid one is 401, denied 403. Off by default, so `vramgate serve --nodes` needs no
    # cluster; the chart turns it on (values metrics.auth). /healthz and /readyz never ask (kubelet probes).
    metrics_auth: bool = False
    # A CA file: reviews and extender calls need a client certificate it signed (kube-apiserver's from its
    # AdmissionConfiguration kubeconfig, kube-scheduler's from the extender tlsConfig); the probes and the metrics
    # surface do not. Unset: anyone who reaches the port may ask (the NetworkPolicy is then the bound).
    client_ca_file: str | None = None
    # With client_ca_file: the certificate's subject CN or a DNS SAN must be one of these (empty: any it signed).
    client_names: list[str] = Field(default_factory=list)
    # How long a TokenReview's and an allowed SubjectAccessReview's answer is kept; a denial for a quarter of this,
    # so a ClusterRoleBinding just made takes effect soon. Past access_cache_size entries the oldest go first.
    access_cache_seconds: float = Field(60.0, ge=0)
    access_cache_size: int = Field(1024, ge=1)
    # One review's deadline (one attempt, no client retries); a caller waits at most twice this.
    access_review_timeout_seconds: float = Field(3.0, gt=0)


class Extender(_Section):
    """Scheduler extender behaviour."""

    placement: PlacementMode = "binpack"
    # ExtenderArgs in NodeList mode (nodeCacheCapable: false) carry every candidate Node object:
    # thousands of nodes make tens of MiB, far above admission's limit.
    max_body_bytes: int = Field(64 * 1024 * 1024, gt=0)


class Remediation(_Section):
    """Opt-in eviction of pods from failed GPUs."""

    enabled: bool = False
    dry_run: bool = False
    max_evictions_per_minute: float = Field(2.0, gt=0)
    # How often the leader looks for pods to evict (pods on unhealthy nodes; pods that report an
    # Unhealthy GPU in status.containerStatuses[].allocatedResourcesStatus, KEP-4680).
    interval_seconds: float = Field(10.0, gt=0)
    # A pod whose eviction a PodDisruptionBudget blocked (429) is tried again after this long.
    blocked_retry_seconds: float = Field(30.0, gt=0)


class Controller(_Section):
    """GPU health controller behaviour."""

    unhealthy_after_seconds: float = Field(30.0, ge=0)
    healthy_after_seconds: float = Field(120.0, ge=0)
    device_plugin_grace_seconds: float = Field(300.0, ge=0)
    lease_name: str = "vramgate-controller"
    lease_duration_seconds: int = Field(15, gt=0)
    renew_deadline_seconds: int = Field(10, gt=0)
    retry_period_seconds: int = Field(2, gt=0)
    # How often the leader reconciles node labels and taints with the inventory.
    reconcile_interval_seconds: float = Field(1.0, gt=0)
    remediation: Remediation = Field(default_factory=Remediation)
    # Opt-in: also taint an unhealthy node's DRA devices with a DeviceTaintRule (resource.k8s.io/v1) per
    # pool, so the scheduler's DRA plugin stops allocating them; removed when the node is healthy again.
    device_taint_rules: bool = False

    @model_validator(mode="after")
    def _lease_timings(self) -> Controller:
        if not self.retry_period_seconds < self.renew_deadline_seconds < self.lease_duration_seconds:
            raise ValueError(
                "controller lease timings need retry_period_seconds < renew_deadline_seconds < lease_duration_seconds"
            )
        return self


class Audit(_Section):
    """Background audit of what already runs (leader only): re-judged on inventory changes and on a slow period."""

    enabled: bool = True
    # A full pass at least this often (new and changed workloads are picked up then); inventory changes
    # that matter (a GPU node added, removed, relabelled, its health or driver) trigger one at once.
    interval_seconds: float = Field(300.0, gt=0)
    # Never more often than this, however fast the inventory changes.
    min_interval_seconds: float = Field(5.0, ge=0)
    # Where results go: wgpolicyk8s.io/v1alpha2 PolicyReports, openreports.io/v1alpha1 Reports, or nowhere
    # (metrics and Events only).
    reports: Literal["policyreport", "openreports", "none"] = "policyreport"
    # Failing and at-risk results listed per namespace report (the summary counts them all).
    max_results_per_report: int = Field(100, ge=1, le=5000)
    # A Warning Event on a workload when it turns from pass to fail.
    events: bool = True


class Hub(_Section):
    """Models the catalog does not know, read from a model hub (config.json + safetensors index) off the hot path."""

    enabled: bool = False
    # The hub's base URL; unset: HF_ENDPOINT, else https://huggingface.co (as huggingface_hub and vLLM do).
    endpoint: str | None = None
    # A file holding the token (a mounted key of vramgate's own Secret); unset: HF_TOKEN, else anonymous.
    token_file: str | None = None
    timeout_seconds: float = Field(10.0, gt=0, le=120)
    # A repository the hub could not answer for is asked again after this long.
    retry_after_seconds: float = Field(300.0, ge=0)
    # Repositories remembered (resolved or failed); past it the oldest failures are forgotten first.
    max_models: int = Field(256, ge=1, le=10000)
    # A ConfigMap in vramgate's namespace keeping what the hub resolved (read at start, merged into after
    # each model), so a restarted pod does not ask again; the chart sets <release>-hub-models. Unset: memory.
    configmap: str | None = None


class Sharing(_Section):
    """GPU-sharing systems: filling the share a pod leaves out (docs/sharing.md)."""

    # Which system the mutating webhook writes a pod's share into when the pod states none (it gets a whole GPU
    # then): "hami" adds nvidia.com/gpumem to a GPU container that asks nvidia.com/gpu. "off": never.
    fill: Literal["off", "hami"] = "off"
    # Where it does: pods of these namespaces, and any pod annotated vramgate.io/share-fill: "true".
    namespaces: list[str] = Field(default_factory=list)
    # Above the estimate's high end (÷ the engine's share of the device): what a longer prompt or a larger
    # batch than estimated may still take.
    headroom: float = Field(0.10, ge=0, le=1)


ENV_PREFIX = "VRAMGATE_"


class Config(BaseModel):
    """vramgate's configuration. Every key has a default; unknown keys are an error.

    ``VRAMGATE_<KEY>`` (nested keys joined by ``__``) sets a key the file leaves out, as pydantic-settings reads
    the environment (see ``_from``).
    """

    model_config = ConfigDict(extra="forbid")

    namespace: str = "vramgate"
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1,
        description="vLLM/NIM --gpu-memory-utilization when a workload sets none; unset: each engine "
                    "version's own default (vLLM 0.9, 0.92 from 0.20).")
    labels: Labels = Field(default_factory=Labels)
    health: Health = Field(default_factory=Health)
    admission: Admission = Field(default_factory=Admission)
    server: Server = Field(default_factory=Server)
    extender: Extender = Field(default_factory=Extender)
    controller: Controller = Field(default_factory=Controller)
    audit: Audit = Field(default_factory=Audit)
    hub: Hub = Field(default_factory=Hub)
    sharing: Sharing = Field(default_factory=Sharing)
    # Catalog additions, same schema as webhook/data/models.yaml entries.
    models: list[dict[str, Any]] = Field(default_factory=list)
    # A YAML file of more entries (`models: [...]`, the chart's models ConfigMap): appended to `models` at
    # start, and re-read every `models_reload_interval_seconds` while serving (webhook/models/models_file.py).
    models_file: str | None = None
    models_reload_interval_seconds: float = Field(10.0, gt=0)
    # What load_config read: the entries written in this config, and the models file's bytes at start.
    _inline_models: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    _models_file_bytes: bytes = PrivateAttr(default=b"")

    @property
    def inline_models(self) -> list[dict[str, Any]]:
        return self._inline_models

    @property
    def models_file_bytes(self) -> bytes:
        return self._models_file_bytes


class ConfigError(ValueError):
    """The configuration file is unreadable or invalid."""


def load_config(path: str | Path | None) -> Config:
    """Load and validate a YAML config file; None gives the defaults (env overrides apply)."""
    if path is None:
        return with_models_file(_from({}))
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping")
    try:
        config = _from(data)
    except Exception as exc:  # pydantic.ValidationError: keep its readable text
        raise ConfigError(f"invalid config {path}: {exc}") from exc
    return with_models_file(config)


def _from(data: dict[str, Any]) -> Config:
    """The config of ``data`` with the environment's ``VRAMGATE_*`` overrides, as pydantic-settings reads them.

    pydantic-settings costs a quarter of a second to import (most of a ``vramgate check`` run), so it is imported
    only when such a variable is set: the same class, read through the same settings source, where there is work.
    """
    if not any(k.upper().startswith(ENV_PREFIX) for k in os.environ):
        return Config(**data)
    return _settings_class()(**data)


@cache
def _settings_class() -> type[Config]:
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class EnvConfig(BaseSettings, Config):  # a Config read with the environment's overrides
        model_config = SettingsConfigDict(extra="forbid", env_prefix=ENV_PREFIX, env_nested_delimiter="__")

    return EnvConfig


def with_models_file(config: Config) -> Config:
    """Append the entries of ``config.models_file`` to ``config.models`` (ConfigError when they are bad)."""
    from .models.models_file import ModelsFileError, read_models_file

    config._inline_models = list(config.models)
    if config.models_file:
        try:
            entries, raw = read_models_file(config.models_file)
        except ModelsFileError as exc:
            raise ConfigError(str(exc)) from exc
        config.models = [*config.models, *entries]
        config._models_file_bytes = raw
    return config
