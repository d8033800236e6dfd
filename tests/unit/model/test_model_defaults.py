"""Defaults of every kind, as api.md §2 gives them."""

from __future__ import annotations

from typing import Any

from tensorfusion.domain.model import (
    API_VERSION,
    GPU,
    GPUNode,
    GPUPool,
    GPUResourceQuota,
    SchedulingConfigTemplate,
    TensorFusionCluster,
    TensorFusionWorkload,
    WorkloadProfile,
    load_as,
    load_object,
)
from tensorfusion.domain.model.gpu import GPUStatus
from tensorfusion.domain.model.node import GPUNodePhase, ManageMode
from tensorfusion.domain.model.pool import PoolPhase, ProvisioningMode, ProvisioningPhase
from tensorfusion.domain.model.workload import WorkloadPhase
from tensorfusion.domain.vocabulary import GPUPhase, IsolationMode, PlacementMode


def _manifest(kind: str, **body: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": "x"}, **body}


def test_pool_defaults_apply_when_sections_are_absent() -> None:
    pool = load_as(GPUPool, _manifest("GPUPool"))
    # No oversubscription object: virtual capacity equals physical capacity (scheduling.md §6),
    # as the API server keeps it (the object has no schema default, only its fields do).
    assert pool.spec.capacity_config.oversubscription is None
    manager = pool.spec.node_manager_config
    assert manager.provisioning_mode is ProvisioningMode.AUTO_SELECT
    assert manager.default_isolation_mode is IsolationMode.SOFT
    assert manager.default_vendor == "NVIDIA"
    assert manager.node_compaction.period == "5m"
    rolling = manager.node_pool_rolling_update_policy
    assert not (rolling.auto_update_hypervisor or rolling.auto_update_worker)
    assert not rolling.auto_update_client
    assert (rolling.batch_percentage, rolling.batch_interval, rolling.max_duration) == (
        100,
        "1s",
        "10m",
    )
    assert pool.spec.default_using_local_gpu is None
    assert pool.spec.qos_config.eviction_protection_price_ratio == "1.2"
    assert pool.spec.component_config.hypervisor.port_number == 8000
    assert pool.status.phase is PoolPhase.PENDING
    assert pool.status.provisioning_phase is ProvisioningPhase.NONE


def test_pool_partial_sections_keep_the_other_defaults() -> None:
    spec = {"capacityConfig": {"oversubscription": {"vramExpandToHostMem": 0}}}
    pool = load_as(GPUPool, _manifest("GPUPool", spec=spec))
    over = pool.spec.capacity_config.oversubscription
    assert over is not None
    assert (over.tflops_oversell_ratio, over.vram_expand_to_host_mem) == (500, 0)
    assert over.vram_expand_to_host_disk == 70


def test_pool_nested_declared_defaults() -> None:
    spec = {
        "nodeManagerConfig": {
            "nodeCompaction": {"defrag": {"timezone": "UTC"}},
            "nodeProvisioner": {"budget": {}, "gpuTaints": [{"key": "k"}]},
        },
        "qosConfig": {"pricing": [{"qos": "high"}]},
    }
    pool = load_as(GPUPool, _manifest("GPUPool", spec=spec))
    manager = pool.spec.node_manager_config
    defrag = manager.node_compaction.defrag
    assert defrag is not None
    assert (defrag.enabled, defrag.schedule, defrag.max_duration) == (False, "0 3 * * *", "2h")
    assert defrag.utilization_threshold_percent == 40
    assert (defrag.evicted_pod_marker_ttl, defrag.source_node_marker_ttl) == ("never", "30m")
    provisioner = manager.node_provisioner
    assert provisioner is not None and provisioner.budget is not None
    assert provisioner.budget.budget_per_day == "100"
    assert provisioner.budget.budget_per_month == "1000"
    assert provisioner.budget.budget_per_quarter == "3000"
    assert provisioner.budget.budget_exceed_strategy == "AlertOnly"
    assert provisioner.gpu_taints[0].effect == "NoSchedule"
    pricing = pool.spec.qos_config.pricing[0]
    assert pricing.requests.per_fp16_tflops_per_hour == "$0.0069228"
    assert pricing.requests.per_gb_of_vram_per_hour == "$0.01548"
    assert pricing.limits_over_requests == "1"


def test_cluster_defaults() -> None:
    data = _manifest(
        "TensorFusionCluster",
        spec={"gpuPools": [{"name": "shared", "specTemplate": {}}], "computingVendor": {}},
    )
    cluster = load_as(TensorFusionCluster, data)
    entry = cluster.spec.gpu_pools[0]
    assert entry.is_default is False
    assert entry.spec_template.capacity_config.oversubscription is None
    assert cluster.spec.computing_vendor is not None and cluster.spec.computing_vendor.enable
    assert cluster.status.phase is PoolPhase.PENDING
    assert cluster.status.retry_count == 0


def test_node_and_gpu_defaults() -> None:
    node = load_as(GPUNode, _manifest("GPUNode"))
    assert node.spec.manage_mode is ManageMode.AUTO_SELECT
    assert node.status.phase is GPUNodePhase.PENDING
    gpu = load_as(GPU, _manifest("GPU", status={}))
    assert gpu.status.phase is GPUPhase.PENDING
    assert gpu.status.vendor == "NVIDIA"
    assert gpu.status.used_by == "tensor-fusion"
    assert gpu.status.isolation_mode is IsolationMode.SOFT
    assert gpu.status.isolation_policy is None
    assert GPUStatus().running_apps == []


def test_scheduling_template_defaults() -> None:
    template = load_as(SchedulingConfigTemplate, _manifest("SchedulingConfigTemplate"))
    assert template.spec.placement.mode is PlacementMode.NODE_COMPACT_GPU_LOW_LOAD
    assert template.spec.placement.allow_using_local_gpu is True
    partial = load_as(
        SchedulingConfigTemplate,
        _manifest("SchedulingConfigTemplate", spec={"placement": {"gpuFilters": []}}),
    )
    assert partial.spec.placement.mode is PlacementMode.NODE_COMPACT_GPU_LOW_LOAD


def test_workload_defaults() -> None:
    for name in ("WorkloadProfile", "TensorFusionWorkload"):
        obj = load_object(_manifest(name, spec={}))
        assert isinstance(obj, WorkloadProfile | TensorFusionWorkload)
        assert obj.spec.isolation is IsolationMode.SOFT
        assert obj.spec.replicas is None
        assert obj.spec.gpu_count is None
        assert obj.spec.resources.requests.tflops is None
    workload = load_as(TensorFusionWorkload, _manifest("TensorFusionWorkload"))
    assert workload.status.phase is WorkloadPhase.PENDING
    gang = load_as(
        TensorFusionWorkload,
        _manifest("TensorFusionWorkload", spec={"gangScheduling": {"minMembers": 0}}),
    ).spec.gang_scheduling
    assert gang is not None and gang.mode == "Strict" and gang.timeout is None


def test_quota_defaults() -> None:
    quota = load_as(GPUResourceQuota, _manifest("GPUResourceQuota", spec={"total": {}}))
    assert quota.spec.total.max_workers == 32768
    assert quota.spec.total.alert_threshold_percent == 95
    assert quota.spec.single.max_gpu_count is None
    assert quota.spec.total.requests is None


def test_load_object_returns_the_kind_model() -> None:
    pool = load_object(_manifest("GPUPool"))
    assert isinstance(pool, GPUPool)
    assert pool.metadata.name == "x"
