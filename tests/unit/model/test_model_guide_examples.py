"""The manifests of the production guide (seed/production-deployment.md) load and round-trip."""

from __future__ import annotations

from typing import Any

import yaml

from tensorfusion.domain.model import (
    API_VERSION,
    CapacityConfig,
    GPUPool,
    GPUPoolSpec,
    ObjectMeta,
    Oversubscription,
    Resource,
    Resources,
    TensorFusionCluster,
    TensorFusionWorkload,
    WorkloadProfileSpec,
    load_object,
    to_wire,
    unknown_fields,
)
from tensorfusion.domain.quantities import Quantity, QuantityFormat

# Step 7: rolling updates (the guide elides metadata with "# ...").
ROLLING_UPDATE_CLUSTER = """
apiVersion: tensor-fusion.ai/v1
kind: TensorFusionCluster
spec:
  gpuPools:
    - name: shared
      isDefault: true
      specTemplate:
        nodeManagerConfig:
          nodePoolRollingUpdatePolicy:
            autoUpdateHypervisor: true
            autoUpdateWorker: false
            autoUpdateClient: false
            batchPercentage: 20
            batchInterval: 5m
"""

# Step 8: the oversubscription overlay, which the chart puts into the default pool's spec.
CONSERVATIVE_CAPACITY = """
capacityConfig:
  oversubscription:
    tflopsOversellRatio: 300
    vramExpandToHostMem: 40
    vramExpandToHostDisk: 20
"""

# Step 8: the chart's default pool as the guide describes it (20x TFLOPs, 50% RAM, 60% disk).
DEFAULT_POOL = """
apiVersion: tensor-fusion.ai/v1
kind: GPUPool
metadata:
  name: tensor-fusion-shared
  labels:
    tensor-fusion.ai/managed-by: tensor-fusion
  annotations:
    tensor-fusion.ai/is-default-pool: "true"
spec:
  capacityConfig:
    oversubscription:
      tflopsOversellRatio: 2000
      vramExpandToHostMem: 50
      vramExpandToHostDisk: 60
  nodeManagerConfig:
    defaultIsolationMode: soft
  componentConfig:
    hypervisor:
      image: tensorfusion/tensor-fusion-hypervisor:1.8.8
      podTemplate:
        spec:
          containers:
            - name: hypervisor
              env:
                - name: TF_LOG_LEVEL
                  value: info
status:
  phase: Running
  totalTFlops: "1979"
  totalVRAM: 160Gi
"""


def _load(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def test_rolling_update_cluster_round_trips() -> None:
    data = _load(ROLLING_UPDATE_CLUSTER)
    cluster = load_object(data)
    assert isinstance(cluster, TensorFusionCluster)
    entry = cluster.spec.gpu_pools[0]
    assert (entry.name, entry.is_default) == ("shared", True)
    policy = entry.spec_template.node_manager_config.node_pool_rolling_update_policy
    assert policy.auto_update_hypervisor and not policy.auto_update_worker
    assert (policy.batch_percentage, policy.batch_interval, policy.max_duration) == (
        20,
        "5m",
        "10m",
    )
    assert to_wire(cluster, exclude_unset=True) == data
    assert load_object(to_wire(cluster)) == cluster
    assert unknown_fields(cluster) == []


def test_conservative_capacity_overlay_is_a_pool_spec_fragment() -> None:
    capacity = CapacityConfig.model_validate(_load(CONSERVATIVE_CAPACITY)["capacityConfig"])
    over = capacity.oversubscription
    assert over is not None
    assert (over.tflops_oversell_ratio, over.vram_expand_to_host_mem) == (300, 40)
    assert over.vram_expand_to_host_disk == 20
    spec = GPUPoolSpec.model_validate(_load(CONSERVATIVE_CAPACITY))
    assert spec.capacity_config == capacity


def test_default_pool_round_trips_with_free_form_templates() -> None:
    data = _load(DEFAULT_POOL)
    pool = load_object(data)
    assert isinstance(pool, GPUPool)
    over = pool.spec.capacity_config.oversubscription
    assert over is not None and over.tflops_oversell_ratio == 2000
    assert pool.metadata.annotations["tensor-fusion.ai/is-default-pool"] == "true"
    template = pool.spec.component_config.hypervisor.pod_template
    assert template is not None
    assert template["spec"]["containers"][0]["env"][0]["value"] == "info"
    assert to_wire(pool, exclude_unset=True) == data
    assert load_object(to_wire(pool)) == pool


def test_full_dump_has_defaults_and_omits_nulls() -> None:
    pool = load_object({"apiVersion": API_VERSION, "kind": "GPUPool", "metadata": {"name": "p"}})
    wire = to_wire(pool)
    assert wire["spec"]["nodeManagerConfig"]["defaultIsolationMode"] == "soft"
    assert "oversubscription" not in wire["spec"]["capacityConfig"]
    assert "defaultUsingLocalGPU" not in wire["spec"]
    assert wire["metadata"] == {"name": "p"}


def test_unknown_fields_are_kept_and_reported() -> None:
    data = _load(ROLLING_UPDATE_CLUSTER)
    data["spec"]["gpuPools"][0]["specTemplate"]["capacityConfig"] = {"oversubscriptoin": {}}
    data["spec"]["gpuPools"][0]["specTemplate"]["componentConfig"] = {"client": {"x": 1}}
    cluster = load_object(data)
    assert unknown_fields(cluster) == [
        "spec.gpuPools[0].specTemplate.capacityConfig.oversubscriptoin",
        "spec.gpuPools[0].specTemplate.componentConfig.client.x",
    ]
    assert to_wire(cluster, exclude_unset=True) == data


def test_metadata_collections_are_written_when_touched() -> None:
    pool = GPUPool()
    pool.metadata.name = "p"
    assert to_wire(pool)["metadata"] == {"name": "p"}
    pool.metadata.finalizers = []
    assert to_wire(pool)["metadata"] == {"name": "p", "finalizers": []}
    loaded = load_object(to_wire(pool))
    assert to_wire(loaded)["metadata"] == {"name": "p", "finalizers": []}


def test_models_can_be_built_in_code_with_snake_case_names() -> None:
    pool = GPUPool(
        metadata=ObjectMeta(name="p", labels={"tensor-fusion.ai/managed-by": "c"}),
        spec=GPUPoolSpec(
            capacity_config=CapacityConfig(
                oversubscription=Oversubscription(tflops_oversell_ratio=300)
            ),
            default_using_local_gpu=False,
        ),
    )
    pool.status.total_tflops = Quantity("312")
    pool.status.total_vram = Quantity(80 * 2**30, QuantityFormat.BINARY_SI)
    wire = to_wire(pool)
    assert wire["spec"]["capacityConfig"]["oversubscription"]["tflopsOversellRatio"] == 300
    assert wire["spec"]["defaultUsingLocalGPU"] is False
    assert (wire["status"]["totalTFlops"], wire["status"]["totalVRAM"]) == ("312", "80Gi")
    assert load_object(wire) == pool
    workload = TensorFusionWorkload(
        metadata=ObjectMeta(name="w", namespace="ns"),
        spec=WorkloadProfileSpec(
            resources=Resources(requests=Resource(tflops=Quantity("10"), vram=Quantity("1Gi"))),
            gpu_count=2,
        ),
    )
    assert to_wire(workload)["spec"]["resources"]["requests"] == {"tflops": "10", "vram": "1Gi"}
