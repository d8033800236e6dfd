"""Recovery: the allocator rebuilt from API objects and live worker pods (scheduling.md §12)."""

from __future__ import annotations

from typing import Any

from tensorfusion.domain.allocator.recovery import (
    ClusterInventory,
    bound_since,
    is_live_worker,
    recover,
)
from tensorfusion.domain.annotations import KEYS, encode_index
from tensorfusion.domain.model import GPU, GPUNode, GPUPool, GPUResourceQuota, load_as
from tensorfusion.domain.vocabulary import IsolationPolicy

from .builders import tflops, vram

V1 = "tensor-fusion.ai/v1"
POOL = "shared"


def gpu(name: str, node: str, *, available: str = "312") -> GPU:
    return load_as(GPU, {
        "apiVersion": V1, "kind": "GPU",
        "metadata": {"name": name, "labels": {KEYS.gpupool: POOL}},
        "status": {"phase": "Running", "capacity": {"tflops": "312", "vram": "80Gi"},
                   # A stale stored figure: recovery must never read it.
                   "available": {"tflops": available, "vram": "1Gi"},
                   "nodeSelector": {"kubernetes.io/hostname": node}},
    })  # fmt: skip


def worker(name: str, gpus: str, **changes: Any) -> dict[str, Any]:
    index_name, index_value = encode_index(3)
    pod: dict[str, Any] = {
        "metadata": {
            "name": name, "namespace": "ml", "uid": f"uid-{name}",
            "labels": {KEYS.component: "worker", KEYS.workload: "train"},
            "annotations": {KEYS.gpupool: POOL, KEYS.gpu_ids: gpus,
                            KEYS.tflops_request: "100", KEYS.vram_request: "10Gi"},
            "finalizers": [KEYS.finalizer],
        },
        "spec": {"nodeName": "node-a", "containers": [
            {"name": "c", "resources": {"limits": {index_name: str(index_value)}}}]},
        "status": {"phase": "Running"},
    }  # fmt: skip
    for path, value in changes.items():
        section, key = path.split("__")
        pod[section][key] = value
    return pod


def inventory() -> ClusterInventory:
    pool = load_as(GPUPool, {"apiVersion": V1, "kind": "GPUPool", "metadata": {"name": POOL},
                             "spec": {"capacityConfig": {"oversubscription": {}}}})  # fmt: skip
    quota = load_as(GPUResourceQuota, {
        "apiVersion": V1, "kind": "GPUResourceQuota", "metadata": {"name": "q", "namespace": "ml"},
        "spec": {"total": {"requests": {"tflops": "1000"}}},
    })  # fmt: skip
    node = load_as(GPUNode, {"apiVersion": V1, "kind": "GPUNode", "metadata": {"name": "node-a"},
                             "status": {"nodeInfo": {"ramSize": "64Gi"}}})  # fmt: skip
    return ClusterInventory(
        pools=[pool],
        quotas=[quota],
        gpus=[gpu("a1", "node-a"), gpu("a2", "node-a", available="0")],
        gpu_nodes=[node],
        nodes={"node-a": {"status": {"allocatable": {KEYS.index_resource_names[0]: "36"}}}},
    )


def test_live_workers_are_restored_and_stored_available_is_ignored() -> None:
    pods = [
        worker("p1", "a1"),
        worker("pending", "a2", status__phase="Pending"),
        worker("done", "a1", status__phase="Succeeded"),
        worker("gone", "a1", metadata__deletionTimestamp="2026-12-01T00:00:00Z",
               metadata__finalizers=[]),
        worker("leaving", "a2", metadata__deletionTimestamp="2026-12-01T00:00:00Z"),
        worker("unbound", "a1", spec__nodeName=None),
        worker("bad", "a1", metadata__annotations={KEYS.gpu_ids: "a1"}),
    ]  # fmt: skip
    allocator, report = recover(inventory(), pods, IsolationPolicy.STATIC, now=10.0)
    assert sorted(allocator.records) == ["uid-leaving", "uid-p1", "uid-pending"]
    assert allocator.gpus["a1"].available_tflops == tflops("212")
    assert allocator.gpus["a2"].available_tflops == tflops("112")
    assert allocator.gpus["a2"].available_vram == vram("60Gi")
    assert allocator.quotas["ml"].committed.request_tflops == tflops("300")
    node = allocator.nodes["node-a"]
    assert node.committed_workers == {"uid-p1", "uid-pending", "uid-leaving"}
    assert node.pending_indices == {3: "uid-pending"}  # running pods free their index
    assert (node.ram_bytes, node.hypervisor_index0) == (vram("64Gi"), 36)
    assert allocator.pool(POOL).oversubscription is not None
    assert list(report.skipped_pods) == ["ml/bad"]
    assert "tensor-fusion.ai/gpupool" in report.skipped_pods["ml/bad"]
    assert report.inconsistent == []


def test_a_pod_naming_an_unknown_gpu_is_restored_and_reported() -> None:
    _, report = recover(inventory(), [worker("p", "a1,zz")], IsolationPolicy.STATIC, now=0)
    assert [o.unknown_gpus for o in report.inconsistent] == [("zz",)]


def test_which_pods_count_as_live_workers() -> None:
    assert is_live_worker(worker("p", "a1"))
    assert not is_live_worker(worker("p", ""))
    assert not is_live_worker(worker("p", "a1", status__phase="Failed"))
    assert not is_live_worker(worker("p", "a1", metadata__labels={}))


def test_a_record_is_dated_by_the_pods_binding_whichever_leader_restores_it() -> None:
    pod = worker("p", "a1")
    pod["metadata"]["creationTimestamp"] = "2026-12-01T10:00:00Z"
    assert bound_since(pod, 5.0) == 1_796_119_200.0
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T10:00:30Z"}
    ]
    assert bound_since(pod, 5.0) == 1_796_119_230.0
    allocator, _ = recover(inventory(), [pod], IsolationPolicy.STATIC, now=99.0)
    assert allocator.records["uid-p"].since == 1_796_119_230.0
    assert bound_since({"metadata": {}}, 5.0) == 5.0
