"""Every label, annotation, finalizer, taint and resource name of the public contract (api.md).

The domain is `<prefix>.<suffix>` (default `tensor-fusion.ai`). Reading the environment
(`TENSOR_FUSION_CUSTOM_DOMAIN_PREFIX` / `_SUFFIX`) is the caller's job: it passes the values to
`build_keys`. `KEYS` holds the default key set. This module also encodes and decodes the pod index
resource (api.md §6).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "COMPONENT_CLIENT",
    "COMPONENT_HYPERVISOR",
    "COMPONENT_OPERATOR",
    "COMPONENT_WORKER",
    "DEFAULT_PREFIX",
    "DEFAULT_SUFFIX",
    "DISABLE_FEATURES",
    "INDEX_MAX",
    "INDEX_MIN",
    "KEYS",
    "PRIORITY_CLASS_CRITICAL_VALUE",
    "PRIORITY_CLASS_HIGH_VALUE",
    "PRIORITY_CLASS_MEDIUM_VALUE",
    "USED_BY_TENSOR_FUSION_DEFAULT",
    "WORKLOAD_MODE_DYNAMIC",
    "WORKLOAD_MODE_FIXED",
    "IndexResourceError",
    "Keys",
    "build_keys",
    "decode_index",
    "encode_index",
    "pod_index_from_containers",
]

DEFAULT_PREFIX: Final = "tensor-fusion"
DEFAULT_SUFFIX: Final = "ai"

COMPONENT_WORKER: Final = "worker"
COMPONENT_HYPERVISOR: Final = "hypervisor"
COMPONENT_OPERATOR: Final = "operator"
COMPONENT_CLIENT: Final = "client"

WORKLOAD_MODE_DYNAMIC: Final = "dynamic"
WORKLOAD_MODE_FIXED: Final = "fixed"

DISABLE_FEATURES: Final = ("gpu-opt", "mem-manager", "gpu-limiter", "start-worker")

PRIORITY_CLASS_CRITICAL_VALUE: Final = 100000
PRIORITY_CLASS_HIGH_VALUE: Final = 10000
PRIORITY_CLASS_MEDIUM_VALUE: Final = 0

USED_BY_TENSOR_FUSION_DEFAULT: Final = DEFAULT_PREFIX

INDEX_MIN: Final = 1
INDEX_MAX: Final = 128
_INDEX_PER_NAME: Final = 8


@dataclass(frozen=True, slots=True)
class Keys:
    """The full key set for one domain; build it with `build_keys`."""

    prefix: str
    suffix: str
    domain: str
    system_name: str
    scheduler_name: str
    finalizer: str
    webhook_name: str

    # Pod labels (api.md §3).
    enabled: str
    component: str
    workload: str
    gpupool: str
    pod_template_hash: str
    host_port: str
    port_name: str
    # Node, GPUNode and GPU labels.
    managed_by: str
    hardware_vendor: str
    node_selector_hash: str
    should_delete: str

    # Pod annotations read from users (api.md §4).
    workload_profile: str
    tflops_request: str
    tflops_limit: str
    vram_request: str
    vram_limit: str
    compute_percent_request: str
    compute_percent_limit: str
    gpu_count: str
    gpu_indices: str
    gpu_model: str
    vendor: str
    qos: str
    isolation: str
    partition_id: str
    is_local_gpu: str
    sidecar_worker: str
    inject_container: str
    enabled_replicas: str
    dedicated_gpu: str
    worker_pod_template: str
    autoscale: str
    autoscale_target: str
    disable_features: str
    gang_enabled: str
    gang_min_members: str
    gang_timeout: str
    eviction_protection: str
    require_gpu_topology: str
    gpu_topology_max_tier: str
    gpu_topology_source: str

    # Pod annotations written by the system (api.md §5).
    selected_workload: str
    embedded_worker: str
    container_gpu_count: str
    pending_owned_workload: str
    pod_counter_key: str
    gang_desired_members: str
    gang_required_members: str
    gang_group_key: str
    port_number: str
    gpu_ids: str
    index: str
    effective_hard_sm_percent: str
    container_gpus: str
    partition_uuids: str
    allocation_seal: str

    # Pool, node, GPU and workload annotations (api.md §2).
    is_default_pool: str
    honour_maintenance_window: str
    manual_compaction: str
    provider_config_revisions: str
    last_sync: str
    virtualization_capabilities: str
    gpu_missing_since: str
    workload_mode: str
    tf_counter_prefix: str

    # Taint and toleration (api.md §6).
    used_by: str
    used_by_value: str
    taint_effect: str

    # Priority classes (api.md §7).
    priority_class_critical: str
    priority_class_high: str
    priority_class_medium: str

    # Index resources (api.md §6): `<domain>/index_0` ... `index_f`.
    index_resource_prefix: str
    index_resource_names: tuple[str, ...]

    def pool_member_label(self, pool: str) -> str:
        """GPUNode/hypervisor label `<domain>/pool-<pool>`."""
        return f"{self.domain}/pool-{pool}"

    def update_in_progress(self, component: str) -> str:
        """Pool annotation `<domain>/<component>-update-in-progress`."""
        return f"{self.domain}/{component}-update-in-progress"

    def batch_update_last_time(self, component: str) -> str:
        """Pool annotation `<domain>/<component>-batch-update-last-time`."""
        return f"{self.domain}/{component}-batch-update-last-time"

    def tf_counter(self, template_hash: str) -> str:
        """Owner annotation holding the enabled-replicas count: `<domain>/tf-counter-<hash>`."""
        return f"{self.tf_counter_prefix}{template_hash}"

    def toleration(self) -> dict[str, str]:
        """The toleration every TF pod gets: `used-by=tensor-fusion:PreferNoSchedule`, Equal."""
        return {
            "key": self.used_by,
            "operator": "Equal",
            "value": self.used_by_value,
            "effect": self.taint_effect,
        }

    def priority_class_for(self, qos: str) -> str | None:
        """The class the webhook assigns for a QoS level (only high and critical)."""
        if qos == "critical":
            return self.priority_class_critical
        if qos == "high":
            return self.priority_class_high
        return None

    def is_index_resource(self, name: str) -> bool:
        """True for `<domain>/index_<hex digit>`."""
        return name in self.index_resource_names


def build_keys(prefix: str = DEFAULT_PREFIX, suffix: str = DEFAULT_SUFFIX) -> Keys:
    """The key set for domain `<prefix>.<suffix>`."""
    domain = f"{prefix}.{suffix}"

    def key(name: str) -> str:
        return f"{domain}/{name}"

    index_prefix = key("index_")
    return Keys(
        prefix=prefix,
        suffix=suffix,
        domain=domain,
        system_name=prefix,
        scheduler_name=f"{prefix}-scheduler",
        finalizer=key("finalizer"),
        webhook_name=f"mpod.{domain}",
        enabled=key("enabled"),
        component=key("component"),
        workload=key("workload"),
        gpupool=key("gpupool"),
        pod_template_hash=key("pod-template-hash"),
        host_port=key("host-port"),
        port_name=key("port-name"),
        managed_by=key("managed-by"),
        hardware_vendor=key("hardware-vendor"),
        node_selector_hash=key("node-selector-hash"),
        should_delete=key("should-delete"),
        workload_profile=key("workload-profile"),
        tflops_request=key("tflops-request"),
        tflops_limit=key("tflops-limit"),
        vram_request=key("vram-request"),
        vram_limit=key("vram-limit"),
        compute_percent_request=key("compute-percent-request"),
        compute_percent_limit=key("compute-percent-limit"),
        gpu_count=key("gpu-count"),
        gpu_indices=key("gpu-indices"),
        gpu_model=key("gpu-model"),
        vendor=key("vendor"),
        qos=key("qos"),
        isolation=key("isolation"),
        partition_id=key("partition-id"),
        is_local_gpu=key("is-local-gpu"),
        sidecar_worker=key("sidecar-worker"),
        inject_container=key("inject-container"),
        enabled_replicas=key("enabled-replicas"),
        dedicated_gpu=key("dedicated-gpu"),
        worker_pod_template=key("worker-pod-template"),
        autoscale=key("autoscale"),
        autoscale_target=key("autoscale-target"),
        disable_features=key("disable-features"),
        gang_enabled=key("gang-enabled"),
        gang_min_members=key("gang-min-members"),
        gang_timeout=key("gang-timeout"),
        eviction_protection=key("eviction-protection"),
        require_gpu_topology=key("require-gpu-topology"),
        gpu_topology_max_tier=key("gpu-topology-max-tier"),
        gpu_topology_source=key("gpu-topology-source"),
        selected_workload=key("selected-workload"),
        embedded_worker=key("embedded-worker"),
        container_gpu_count=key("container-gpu-count"),
        pending_owned_workload=key("pending-owned-workload"),
        pod_counter_key=key("pod-counter-key"),
        gang_desired_members=key("gang-desired-members"),
        gang_required_members=key("gang-required-members"),
        gang_group_key=key("gang-group-key"),
        port_number=key("port-number"),
        gpu_ids=key("gpu-ids"),
        index=key("index"),
        effective_hard_sm_percent=key("effective-hard-sm-percent"),
        container_gpus=key("container-gpus"),
        partition_uuids=key("partition-uuids"),
        allocation_seal=key("allocation-seal"),
        is_default_pool=key("is-default-pool"),
        honour_maintenance_window=key("honour-maintenance-window"),
        manual_compaction=key("manual-compaction"),
        provider_config_revisions=key("provider-config-revisions"),
        last_sync=key("last-sync"),
        virtualization_capabilities=key("virtualization-capabilities"),
        gpu_missing_since=key("gpu-missing-since"),
        workload_mode=key("workload-mode"),
        tf_counter_prefix=key("tf-counter-"),
        used_by=key("used-by"),
        used_by_value=prefix,
        taint_effect="PreferNoSchedule",
        priority_class_critical=f"{prefix}-critical",
        priority_class_high=f"{prefix}-high",
        priority_class_medium=f"{prefix}-medium",
        index_resource_prefix=index_prefix,
        index_resource_names=tuple(f"{index_prefix}{digit:x}" for digit in range(16)),
    )


KEYS: Final = build_keys()


class IndexResourceError(ValueError):
    """An index resource name or value outside the encoding of api.md §6."""


def encode_index(p: int, keys: Keys = KEYS) -> tuple[str, int]:
    """Pod index p (1..128) → (`<domain>/index_<hex((p-1) div 8)>`, `((p-1) mod 8) + 1`)."""
    if isinstance(p, bool) or not isinstance(p, int) or not INDEX_MIN <= p <= INDEX_MAX:
        raise IndexResourceError(f"pod index {p!r} is outside {INDEX_MIN}..{INDEX_MAX}")
    high, low = divmod(p - 1, _INDEX_PER_NAME)
    return keys.index_resource_names[high], low + 1


def decode_index(name: str, value: Any, keys: Keys = KEYS) -> int:
    """(`<domain>/index_<h>`, v) → `v + 8 × h`; v must be an integer 1..8."""
    if not name.startswith(keys.index_resource_prefix):
        raise IndexResourceError(f"{name}: not an index resource")
    digit = name[len(keys.index_resource_prefix) :]
    if len(digit) != 1 or digit not in "0123456789abcdef":
        raise IndexResourceError(f"{name}: not an index resource")
    text = str(value).strip() if not isinstance(value, bool) else ""
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= _INDEX_PER_NAME:
        raise IndexResourceError(
            f'{name}: invalid value "{value}": must be an integer between 1 and {_INDEX_PER_NAME}'
        )
    return int(text) + _INDEX_PER_NAME * int(digit, 16)


def pod_index_from_containers(pod: Mapping[str, Any], keys: Keys = KEYS) -> int | None:
    """The pod index carried by the first container holding an index resource in its limits.

    Returns None when no container carries one; raises `IndexResourceError` for a malformed one.
    """
    spec = pod.get("spec") or {}
    for container in spec.get("containers") or ():
        limits = (container.get("resources") or {}).get("limits") or {}
        for name, value in limits.items():
            if name.startswith(keys.index_resource_prefix):
                return decode_index(name, value, keys)
    return None
