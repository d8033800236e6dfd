"""The leader's allocator: recovered from the caches, then kept current by their events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensorfusion.controller.allocator_state import AllocatorState, StateCaches
from tensorfusion.domain.annotations import KEYS, encode_index
from tensorfusion.domain.vocabulary import IsolationPolicy, PlacementMode
from tensorfusion.runtime.informer_store import EventKind, InformerEvent, ObjectKey

from ..allocator.builders import request

V1 = "tensor-fusion.ai/v1"
TFLOPS_312 = 312_000


class FakeCache:
    """An informer's cache: objects by (namespace, name)."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects: dict[ObjectKey, dict[str, Any]] = {}
        for obj in objects:
            self.put(obj)

    def put(self, obj: dict[str, Any]) -> InformerEvent:
        key = ObjectKey.of(obj)
        kind = EventKind.MODIFIED if key in self.objects else EventKind.ADDED
        self.objects[key] = obj
        return InformerEvent(kind, key, obj)

    def drop(self, obj: dict[str, Any]) -> InformerEvent:
        key = ObjectKey.of(obj)
        return InformerEvent(EventKind.DELETED, key, self.objects.pop(key))

    def list(self, namespace: str | None = None) -> list[Mapping[str, Any]]:
        return [o for k, o in self.objects.items() if namespace is None or k.namespace == namespace]

    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None:
        return self.objects.get(ObjectKey(namespace, name))


def gpu(name: str, node: str = "node-a", capacity: str = "312") -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "GPU",
            "metadata": {"name": name, "labels": {KEYS.gpupool: "shared"}},
            "status": {"phase": "Running", "capacity": {"tflops": capacity, "vram": "80Gi"},
                       "nodeSelector": {"kubernetes.io/hostname": node}}}  # fmt: skip


def worker(name: str, gpus: str, phase: str = "Pending", **metadata: Any) -> dict[str, Any]:
    index, value = encode_index(5)
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                     "labels": {KEYS.component: "worker"},
                     "annotations": {KEYS.gpupool: "shared", KEYS.gpu_ids: gpus,
                                     KEYS.tflops_request: "100", KEYS.vram_request: "1Gi"},
                     "finalizers": [KEYS.finalizer], **metadata},
        "spec": {"nodeName": "node-a",
                 "containers": [{"name": "c", "resources": {"limits": {index: str(value)}}}]},
        "status": {"phase": phase},
    }  # fmt: skip


def quota(name: str, created: str, tflops: str) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "GPUResourceQuota",
            "metadata": {"name": name, "namespace": "ml", "creationTimestamp": created},
            "spec": {"total": {"requests": {"tflops": tflops}}}}  # fmt: skip


def state_with(**caches: FakeCache) -> AllocatorState:
    names = ("gpus", "gpu_nodes", "nodes", "pools", "templates", "quotas", "pods")
    all_caches = {name: caches.get(name, FakeCache()) for name in names}
    return AllocatorState(StateCaches(**all_caches), IsolationPolicy.STATIC, lambda: 100.0)


def test_nothing_changes_before_recovery_and_recovery_reads_the_caches() -> None:
    gpus = FakeCache(gpu("a1"), gpu("a2"))
    pods = FakeCache(worker("p1", "a1", "Running"))
    state = state_with(gpus=gpus, pods=pods)
    state.on_gpu(gpus.put(gpu("a3")))
    assert not state.ready and state.allocator is None
    report = state.recover()
    assert state.ready and [o.record.uid for o in report.restored] == ["uid-p1"]
    assert state.allocator is not None
    assert sorted(state.allocator.gpus) == ["a1", "a2", "a3"]
    assert state.allocator.gpus["a1"].available_tflops == TFLOPS_312 - 100_000


def test_pod_events_release_restore_and_free_the_index() -> None:
    gpus = FakeCache(gpu("a1"), gpu("a2"))
    pods = FakeCache()
    state = state_with(gpus=gpus, pods=pods)
    state.recover()
    allocator = state.allocator
    assert allocator is not None
    # Bound by another actor (a previous leader's extender) after recovery.
    state.on_pod(pods.put(worker("p2", "a2")))
    assert allocator.records["uid-p2"].gpus == ("a2",)
    assert allocator.nodes["node-a"].pending_indices == {5: "uid-p2"}
    state.on_pod(pods.put(worker("p2", "a2", "Running")))
    assert allocator.nodes["node-a"].pending_indices == {}
    state.on_pod(pods.put(worker("p2", "a2", "Running", deletionTimestamp="2026-12-01T00:00:00Z")))
    assert "uid-p2" not in allocator.records
    assert allocator.gpus["a2"].available_tflops == TFLOPS_312
    state.on_pod(pods.put(worker("p3", "a1", "Running")))
    state.on_pod(pods.put(worker("p3", "a1", "Succeeded")))
    assert "uid-p3" not in allocator.records
    state.on_pod(pods.put(worker("p4", "a1")))
    state.on_pod(pods.drop(worker("p4", "a1")))
    assert allocator.records == {}


def test_a_worker_restored_before_its_gpu_is_charged_when_the_gpu_appears() -> None:
    gpus = FakeCache(gpu("a1"))
    pods = FakeCache(worker("p6", "a1,a2", "Running"), worker("p7", "a1", "Running"))
    state = state_with(gpus=gpus, pods=pods)
    state.recover()
    allocator = state.allocator
    assert allocator is not None and list(allocator.records["uid-p6"].gpus) == ["a1"]
    state.on_gpu(gpus.put(gpu("a2")))  # the agent writes the GPU after the pod was restored
    assert list(allocator.records["uid-p6"].gpus) == ["a1", "a2"]
    assert allocator.gpus["a2"].available_tflops == TFLOPS_312 - 100_000
    assert allocator.gpus["a1"].available_tflops == TFLOPS_312 - 200_000  # charged once each
    assert allocator.records["uid-p7"].gpus == ("a1",)


def test_an_assumption_is_never_released_by_its_pod_before_bind() -> None:
    pods = FakeCache()
    state = state_with(gpus=FakeCache(gpu("a1")), pods=pods)
    state.recover()
    assert state.allocator is not None
    state.allocator.assume(request("uid-p5", ("1", "1Gi"), pool="shared"), "node-a", ["a1"], 0)
    state.on_pod(pods.put(worker("p5", "")))  # no gpu-ids yet: the extender is binding it
    assert "uid-p5" in state.allocator.records


def test_gpu_events_upsert_remove_and_report_unreadable_objects() -> None:
    gpus = FakeCache(gpu("a1"))
    state = state_with(gpus=gpus)
    state.recover()
    assert state.allocator is not None
    state.on_gpu(gpus.put(gpu("a1", capacity="400")))
    assert state.allocator.gpus["a1"].capacity_tflops == 400_000
    bad = gpu("a1", capacity="lots")
    state.on_gpu(gpus.put(bad))
    assert "GPU a1" in state.problems and "capacity" in state.problems["GPU a1"]
    state.on_gpu(gpus.drop(gpu("a1")))
    assert state.allocator.gpus == {}


def test_the_oldest_quota_is_enforced_and_a_pool_follows_its_template() -> None:
    quotas = FakeCache(quota("new", "2026-06-01T00:00:00Z", "50"))
    pools = FakeCache({"apiVersion": V1, "kind": "GPUPool", "metadata": {"name": "shared"},
                       "spec": {"schedulingConfigTemplate": "t"}})  # fmt: skip
    templates = FakeCache()
    state = state_with(gpus=FakeCache(gpu("a1")), quotas=quotas, pools=pools, templates=templates)
    state.recover()
    allocator = state.allocator
    assert allocator is not None
    assert allocator.quotas["ml"].spec.name == "new"
    state.on_quota(quotas.put(quota("old", "2026-01-01T00:00:00Z", "70")))
    assert allocator.quotas["ml"].spec.name == "old"
    state.on_quota(quotas.drop(quota("old", "2026-01-01T00:00:00Z", "70")))
    state.on_quota(quotas.drop(quota("new", "2026-06-01T00:00:00Z", "50")))
    assert "ml" not in allocator.quotas
    assert allocator.pool("shared").placement_mode is PlacementMode.NODE_COMPACT_GPU_LOW_LOAD
    template = {"apiVersion": V1, "kind": "SchedulingConfigTemplate", "metadata": {"name": "t"},
                "spec": {"placement": {"mode": "CompactFirst"}}}  # fmt: skip
    state.on_pool_or_template(templates.put(template))
    assert allocator.pool("shared").placement_mode is PlacementMode.COMPACT_FIRST


def test_node_events_set_the_agent_index_and_host_facts() -> None:
    agent_up = {KEYS.index_resource_names[0]: "36"}
    nodes = FakeCache({"metadata": {"name": "node-a"}, "status": {"allocatable": agent_up}})
    gpu_nodes = FakeCache()
    state = state_with(gpus=FakeCache(gpu("a1")), nodes=nodes, gpu_nodes=gpu_nodes)
    state.recover()
    assert state.allocator is not None
    assert state.allocator.nodes["node-a"].hypervisor_index0 == 36
    down = {"metadata": {"name": "node-a"},
            "status": {"allocatable": {KEYS.index_resource_names[0]: "0"}}}  # fmt: skip
    state.on_node(nodes.put(down))
    assert state.allocator.nodes["node-a"].hypervisor_index0 == 0
    state.on_node(gpu_nodes.put({"apiVersion": V1, "kind": "GPUNode",
                                 "metadata": {"name": "node-a"},
                                 "status": {"nodeInfo": {"ramSize": "1Gi"}}}))  # fmt: skip
    assert state.allocator.nodes["node-a"].ram_bytes == 2**30


def test_a_late_gpu_is_not_charged_beyond_its_room() -> None:
    gpus = FakeCache()
    big = worker("p8", "b1", "Running")
    big["metadata"]["annotations"][KEYS.tflops_request] = "250"
    pods = FakeCache(big, worker("p9", "b1", "Running"))
    state = state_with(gpus=gpus, pods=pods)
    state.recover()
    allocator = state.allocator
    assert allocator is not None
    state.on_gpu(gpus.put(gpu("b1")))  # 312 TFLOPS: room for 250 or 100, not both
    charged = [uid for uid, record in allocator.records.items() if "b1" in record.gpus]
    assert len(charged) == 1
    assert allocator.gpus["b1"].available_tflops >= 0
