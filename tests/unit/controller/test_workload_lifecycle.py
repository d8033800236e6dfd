"""Workloads after admission: an ownerless pod becomes its workload's controller owner and loses
`pending-owned-workload`; a dynamic workload without pods for 10 minutes is collected."""

from __future__ import annotations

from typing import Any

from tensorfusion.controller.workload_lifecycle import COLLECTED, WorkloadLifecycle
from tensorfusion.domain.annotations import KEYS
from tensorfusion.runtime.informer_store import EventKind, ObjectKey

from .reconciler_fakes import FakeApi, FakeRecorder, Fence, event, worker

KEY = ObjectKey("ml", "train")


def workload(name: str = "train", *, dynamic: bool = True, **metadata: Any) -> dict[str, Any]:
    annotations = {KEYS.workload_mode: "dynamic"} if dynamic else {}
    return {"apiVersion": "tensor-fusion.ai/v1", "kind": "TensorFusionWorkload",
            "metadata": {"name": name, "namespace": "ml", "annotations": annotations,
                         **metadata}, "spec": {}}  # fmt: skip


def pod_of(name: str, workload_name: str = "train", *, pending: bool = False) -> dict[str, Any]:
    pod = worker(name, "g1", "n1")
    pod["metadata"]["labels"][KEYS.workload] = workload_name
    if pending:
        pod["metadata"]["annotations"][KEYS.pending_owned_workload] = workload_name
    return pod


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


class World:
    def __init__(self, *objects: dict[str, Any]) -> None:
        self.api = FakeApi()
        self.clock = Clock()
        self.recorder = FakeRecorder()
        for obj in objects:
            self.api.put(obj)
        self.lifecycle = WorkloadLifecycle(
            pods=self.api.cache("Pod"), workloads=self.api.cache("TensorFusionWorkload"),
            client=self.api, fence=Fence(), recorder=self.recorder, clock=self.clock,
        )  # fmt: skip


async def test_an_ownerless_pod_becomes_its_workloads_owner_then_loses_the_annotation() -> None:
    world = World(workload(), pod_of("train-0", pending=True))
    pod = world.api.obj("Pod", "train-0", "ml")
    world.lifecycle.on_pod(event(pod, EventKind.ADDED))
    assert world.lifecycle.owners.queue.depth == 1
    await world.lifecycle.adopt(ObjectKey("ml", "train-0"))
    refs = world.api.obj("TensorFusionWorkload", "train", "ml")["metadata"]["ownerReferences"]
    assert refs == [{"apiVersion": "v1", "kind": "Pod", "name": "train-0", "uid": "uid-train-0",
                     "controller": True}]  # fmt: skip
    annotations = world.api.obj("Pod", "train-0", "ml")["metadata"]["annotations"]
    assert KEYS.pending_owned_workload not in annotations
    writes = len(world.api.writes())
    await world.lifecycle.adopt(ObjectKey("ml", "train-0"))
    assert len(world.api.writes()) == writes, "adopting twice writes nothing"


async def test_a_workload_controlled_by_another_is_left_alone() -> None:
    other = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x", "uid": "d",
             "controller": True}  # fmt: skip
    world = World(workload(ownerReferences=[other]), pod_of("train-0", pending=True))
    await world.lifecycle.adopt(ObjectKey("ml", "train-0"))
    refs = world.api.obj("TensorFusionWorkload", "train", "ml")["metadata"]["ownerReferences"]
    assert refs == [other]
    annotations = world.api.obj("Pod", "train-0", "ml")["metadata"]["annotations"]
    assert KEYS.pending_owned_workload not in annotations


async def test_a_dynamic_workload_without_pods_is_collected_after_10_minutes() -> None:
    world = World(workload(), pod_of("train-0"))
    assert await world.lifecycle.collect(KEY) is None, "it has a pod"
    del world.api.objects[("Pod", "ml", "train-0")]
    assert await world.lifecycle.collect(KEY) == 600
    world.clock.now += 599
    assert await world.lifecycle.collect(KEY) == 1
    assert world.api.has("TensorFusionWorkload", "train", "ml")
    world.clock.now += 1
    assert await world.lifecycle.collect(KEY) is None
    assert not world.api.has("TensorFusionWorkload", "train", "ml")
    assert world.recorder.reasons() == [COLLECTED]


async def test_a_pod_in_between_restarts_the_10_minutes_and_static_workloads_stay() -> None:
    world = World(workload())
    assert await world.lifecycle.collect(KEY) == 600
    world.clock.now += 500
    world.api.put(pod_of("train-1"))
    assert await world.lifecycle.collect(KEY) is None
    del world.api.objects[("Pod", "ml", "train-1")]
    world.clock.now += 200
    assert await world.lifecycle.collect(KEY) == 600, "the empty time starts again"
    static = World(workload(dynamic=False))
    assert await static.lifecycle.collect(KEY) is None
    static.clock.now += 10_000
    assert await static.lifecycle.collect(KEY) is None
    assert static.api.has("TensorFusionWorkload", "train", "ml")


def test_a_pod_going_queues_its_workload() -> None:
    world = World(workload(), pod_of("train-0"))
    pod = world.api.obj("Pod", "train-0", "ml")
    world.lifecycle.on_pod(event(pod, EventKind.MODIFIED))
    assert world.lifecycle.collection.queue.depth == 0
    world.lifecycle.on_pod(event(pod, EventKind.DELETED))
    assert world.lifecycle.collection.queue.depth == 1
