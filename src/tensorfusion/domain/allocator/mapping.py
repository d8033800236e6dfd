"""From the CRD models to the allocator's plain records: the one mapper (scheduling.md §3, §6, §9).

The controller loads GPU, GPUNode, GPUPool, SchedulingConfigTemplate and GPUResourceQuota
objects from its informer cache (`model.load_as`) and the simulator builds the same models from
its cluster file; both hand them to these functions, so the allocator is filled by one code
path. The plain records (`GPUState`, `PoolSettings`, `OversubscriptionSettings`, `QuotaSpec`)
carry no defaults of their own: every default comes from the models.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.allocator.allocator import PoolSettings
from tensorfusion.domain.allocator.gpu_state import GPUCapabilities, GPUState
from tensorfusion.domain.allocator.oversubscription import OversubscriptionSettings
from tensorfusion.domain.allocator.quota import QuotaCaps, QuotaSpec
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.model.gpu import GPU
from tensorfusion.domain.model.node import GPUNode
from tensorfusion.domain.model.pool import GPUPool
from tensorfusion.domain.model.pool import Oversubscription as OversubscriptionModel
from tensorfusion.domain.model.quota import GPUResourceQuota
from tensorfusion.domain.model.resources import GPUCapacity, Resource
from tensorfusion.domain.model.scheduling import Placement, SchedulingConfigTemplate
from tensorfusion.domain.quantities import QuantityError, parse_quantity
from tensorfusion.domain.topology import PeerLink

__all__ = [
    "HOSTNAME_KEY",
    "GPUMapping",
    "capabilities_from_annotation",
    "gpu_state",
    "host_facts",
    "hypervisor_index0",
    "oversubscription_of",
    "placement_of",
    "pool_settings",
    "quota_caps",
    "quota_spec",
]

HOSTNAME_KEY: Final = "kubernetes.io/hostname"
_CAPABILITY_KEYS: Final = {
    "supportssoftisolation": "supports_soft",
    "supportshardisolation": "supports_hard",
    "supportspartitioning": "supports_partitioning",
}


def oversubscription_of(model: OversubscriptionModel | None) -> OversubscriptionSettings | None:
    """The allocator's oversubscription record; None when the pool sets none (§6)."""
    if model is None:
        return None
    return OversubscriptionSettings(
        tflops_oversell_ratio=model.tflops_oversell_ratio,
        vram_expand_to_host_mem=model.vram_expand_to_host_mem,
        vram_expand_to_host_disk=model.vram_expand_to_host_disk,
    )


def placement_of(pool: GPUPool, templates: Mapping[str, SchedulingConfigTemplate]) -> Placement:
    """Pool → `spec.schedulingConfigTemplate` → `placement`; any missing link: the defaults."""
    name = pool.spec.scheduling_config_template
    template = templates.get(name) if name else None
    return template.spec.placement if template is not None else Placement()


def pool_settings(
    pool: GPUPool, templates: Mapping[str, SchedulingConfigTemplate] | None = None
) -> PoolSettings:
    """What the allocator needs of a GPUPool: placement mode and oversubscription."""
    return PoolSettings(
        name=pool.metadata.name or "",
        placement_mode=placement_of(pool, templates or {}).mode,
        oversubscription=oversubscription_of(pool.spec.capacity_config.oversubscription),
    )


def quota_caps(resource: Resource | None) -> QuotaCaps:
    """TFLOPs (milli) and VRAM (bytes) caps of a quota resource; absent or zero: unchecked."""
    if resource is None:
        return QuotaCaps(tflops=0, vram=0)
    return QuotaCaps(
        tflops=resource.tflops.milli() if resource.tflops is not None else 0,
        vram=resource.vram.ceil() if resource.vram is not None else 0,
    )


def quota_spec(quota: GPUResourceQuota) -> QuotaSpec:
    """The allocator's view of a namespace's effective GPUResourceQuota."""
    total, single = quota.spec.total, quota.spec.single
    return QuotaSpec(
        namespace=quota.metadata.namespace or "",
        name=quota.metadata.name or "",
        total_requests=quota_caps(total.requests),
        total_limits=quota_caps(total.limits),
        max_workers=total.max_workers,
        single_max_requests=quota_caps(single.max_requests),
        single_max_limits=quota_caps(single.max_limits),
        single_max_gpu_count=single.max_gpu_count or 0,
        alert_threshold_percent=total.alert_threshold_percent,
    )


def capabilities_from_annotation(text: str | None) -> tuple[GPUCapabilities | None, str | None]:
    """The `virtualization-capabilities` annotation, keys read case-insensitively.

    Absent: every mode is supported (None). A key the JSON object lacks reads as false, as the
    reference's Go decoder reads it. Unreadable JSON: every mode supported, and the problem.
    """
    if text is None:
        return None, None
    try:
        value: Any = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return None, (
            f"annotation {KEYS.virtualization_capabilities}: invalid value {text[:80]!r}: "
            "must be a JSON object such as "
            '{"supportsSoftIsolation": true, "supportsHardIsolation": false}'
        )
    flags = {"supports_soft": False, "supports_hard": False, "supports_partitioning": False}
    bad: list[str] = []
    for key, flag in value.items():
        attribute = _CAPABILITY_KEYS.get(str(key).lower())
        if attribute is None:
            continue
        if not isinstance(flag, bool):
            bad.append(f"{key}: {json.dumps(flag)[:40]}")
        flags[attribute] = flag is True
    problem = None
    if bad:
        problem = (
            f"annotation {KEYS.virtualization_capabilities}: invalid value(s) {', '.join(bad)}: "
            "must be true or false; read as false"
        )
    return GPUCapabilities(**flags), problem


@dataclass(frozen=True, slots=True)
class GPUMapping:
    """A GPU object as the allocator reads it, and what in it could not be read."""

    state: GPUState
    problems: tuple[str, ...] = ()


def gpu_state(gpu: GPU) -> GPUMapping:
    """The allocator's record of a GPU object (informer-copied facts only, §3)."""
    metadata, status = gpu.metadata, gpu.status
    labels = metadata.labels or {}
    annotations = metadata.annotations or {}
    capabilities, problem = capabilities_from_annotation(
        annotations.get(KEYS.virtualization_capabilities)
    )
    problems = [problem] if problem is not None else []
    node = status.node_selector.get(HOSTNAME_KEY, "")
    if not node and (status.capacity is not None or status.node_selector):
        # Without capacity and node the GPU is not reported yet (its agent creates the object,
        # then writes the status): unschedulable, not a problem.
        problems.append(f"status.nodeSelector: {HOSTNAME_KEY} is not set; the GPU has no node")
    capacity = status.capacity or GPUCapacity()
    tflops = capacity.tflops.milli() if capacity.tflops is not None else 0
    vram = capacity.vram.ceil() if capacity.vram is not None else 0
    for field_name, quantity in (("tflops", capacity.tflops), ("vram", capacity.vram)):
        if quantity is not None and quantity.value < 0:
            problems.append(
                f"status.capacity.{field_name}: invalid value {quantity}: must not be negative; "
                "read as 0 (the GPU is not schedulable)"
            )
    peers = tuple(
        PeerLink(peer.peer_gpu_uuid, peer.tier, peer.bandwidth or 0)
        for peer in (status.topology.peers if status.topology is not None else ())
    )
    state = GPUState(
        name=metadata.name or "",
        node=node,
        pool=labels.get(KEYS.gpupool, ""),
        capacity_tflops=max(tflops, 0),
        capacity_vram=max(vram, 0),
        phase=status.phase,
        used_by=status.used_by,
        vendor=status.vendor,
        model=status.gpu_model or "",
        uuid=status.uuid or "",
        index=status.index,
        numa_node=status.numa_node if status.numa_node is not None else -1,
        isolation_mode=status.isolation_mode.value,
        isolation_policy=status.isolation_policy,
        capabilities=capabilities,
        peers=peers,
        message=status.message or "",
        missing_since=annotations.get(KEYS.gpu_missing_since, ""),
    )
    return GPUMapping(state, tuple(problems))


def host_facts(gpu_node: GPUNode | None) -> tuple[int, int]:
    """(host RAM bytes, data disk bytes) of a GPUNode's `nodeInfo` (virtual VRAM, §6)."""
    info = gpu_node.status.node_info if gpu_node is not None else None
    if info is None:
        return 0, 0
    ram = info.ram_size.ceil() if info.ram_size is not None else 0
    disk = info.data_disk_size.ceil() if info.data_disk_size is not None else 0
    return max(ram, 0), max(disk, 0)


def hypervisor_index0(node: Mapping[str, Any] | None) -> int | None:
    """Node allocatable `tensor-fusion.ai/index_0`; None when absent or unreadable."""
    allocatable = ((node or {}).get("status") or {}).get("allocatable") or {}
    value = allocatable.get(KEYS.index_resource_names[0])
    if value is None:
        return None
    try:
        return parse_quantity(str(value)).ceil()
    except QuantityError:
        return None
