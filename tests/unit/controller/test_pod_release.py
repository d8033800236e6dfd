"""Worker pods that end or go away: released once, Event, finalizer removed, 3-minute sweep."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.adapters.kube.object_client import KubeError
from tensorfusion.controller.pod_release import PodReleaser
from tensorfusion.domain.allocator.records import RecordState
from tensorfusion.domain.annotations import KEYS
from tensorfusion.runtime.informer_store import EventKind, ObjectKey

from .reconciler_fakes import (
    NOW,
    FakeApi,
    FakeRecorder,
    Fence,
    Snapshot,
    allocator_state,
    drain,
    event,
    feed,
    gpu,
    pool,
    worker,
)

KEY = ObjectKey("ml", "w1")
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs", "uid": "rs",
         "controller": True}  # fmt: skip


class World:
    def __init__(self, *pods: dict[str, Any]) -> None:
        self.api = FakeApi()
        self.fence = Fence()
        self.recorder = FakeRecorder()
        self.api.put(pool("shared"))
        self.api.put(gpu("g1", "n1"))
        for pod in pods:
            self.api.put(pod)
        self.state = allocator_state(self.api)
        self.releaser = PodReleaser(
            pods=self.api.cache("Pod"), state=self.state, client=self.api, fence=self.fence,
            recorder=self.recorder, clock=lambda: NOW,
        )  # fmt: skip

    @property
    def records(self) -> dict[str, Any]:
        assert self.state.allocator is not None
        return dict(self.state.allocator.records)

    def delete(self, name: str = "w1") -> dict[str, Any]:
        pod = self.api.obj("Pod", name, "ml")
        metadata = {**pod["metadata"], "deletionTimestamp": "2027-01-15T08:00:00Z",
                    "finalizers": [KEYS.finalizer, "other.io/keep"]}  # fmt: skip
        deleting = {**pod, "metadata": metadata}
        return self.api.put(deleting)


async def test_a_deleting_pod_is_released_then_its_finalizer_removed() -> None:
    world = World(worker("w1", "g1", "n1"))
    assert "uid-w1" in world.records
    deleting = world.delete()
    # Recovery ran before; this is the first event the allocator hears of the deletion.
    world.releaser.on_pod(event(deleting, EventKind.MODIFIED))
    assert world.releaser.loop.queue.depth == 1
    await world.releaser.reconcile(KEY)
    assert "uid-w1" not in world.records
    assert world.api.obj("Pod", "w1", "ml")["metadata"]["finalizers"] == ["other.io/keep"]
    assert [(e.reason, e.message) for e in world.recorder.events] == [
        ("GPUResourcesReleased", "released GPUs g1 on node n1: the pod deleted")]  # fmt: skip
    # The informer's DELETED event later: the release is not reported twice.
    feed(world.state, deleting, EventKind.DELETED)
    world.releaser.on_pod(event(deleting, EventKind.DELETED))
    await world.releaser.reconcile(KEY)
    assert len(world.recorder.events) == 1


async def test_the_finalizer_removal_survives_conflicts_and_errors() -> None:
    world = World(worker("w1", "g1", "n1"))
    deleting = world.delete()
    releaser = PodReleaser(
        pods=Snapshot.of(world.api, "Pod"), state=world.state, client=world.api,
        fence=world.fence, recorder=None, clock=lambda: NOW,
    )  # fmt: skip
    world.api.put(world.api.obj("Pod", "w1", "ml"))  # someone wrote after our cache's copy
    world.api.fail("patch", "Pod", "w1", KubeError(500, "etcd leader changed"))
    with pytest.raises(KubeError):
        await releaser.reconcile(KEY)
    assert KEYS.finalizer in world.api.obj("Pod", "w1", "ml")["metadata"]["finalizers"]
    assert "uid-w1" not in world.records  # released first, whatever the write does
    await releaser.reconcile(KEY)
    assert world.api.obj("Pod", "w1", "ml")["metadata"]["finalizers"] == ["other.io/keep"]
    assert [c.op for c in world.api.calls] == ["patch", "patch", "get", "patch"]
    assert deleting["metadata"]["uid"] == "uid-w1"


async def test_a_recreated_pod_of_the_same_name_keeps_its_finalizer() -> None:
    world = World(worker("w1", "g1", "n1"))
    releaser = PodReleaser(
        pods=Snapshot.of(world.api, "Pod"), state=world.state, client=world.api,
        fence=world.fence, recorder=None, clock=lambda: NOW,
    )  # fmt: skip
    snapshot = releaser._pods
    assert isinstance(snapshot, Snapshot)
    snapshot.objects[("ml", "w1")] = world.delete()
    world.api.put(worker("w1", "g1", "n1", uid="uid-new"))
    world.api.put(world.api.obj("Pod", "w1", "ml"))
    await releaser.reconcile(KEY)
    assert world.api.obj("Pod", "w1", "ml")["metadata"]["finalizers"] == [KEYS.finalizer]


async def test_nothing_is_removed_before_recovery() -> None:
    world = World(worker("w1", "g1", "n1"))
    world.delete()
    releaser = PodReleaser(
        pods=world.api.cache("Pod"), state=allocator_state(world.api, recover=False),
        client=world.api, fence=world.fence, recorder=None, clock=lambda: NOW,
    )  # fmt: skip
    assert await releaser.reconcile(KEY) == 1.0
    assert world.api.writes() == []


async def test_an_ended_pod_is_reported_once_and_keeps_its_finalizer() -> None:
    world = World(worker("w1", "g1", "n1"))
    pod = world.api.obj("Pod", "w1", "ml")
    done = world.api.put({**pod, "status": {"phase": "Succeeded"}})
    feed(world.state, done)
    world.releaser.on_pod(event(done, EventKind.MODIFIED, pod))
    world.releaser.on_pod(event(done, EventKind.MODIFIED, pod))
    assert await drain(world.releaser.loop) == 1
    assert "uid-w1" not in world.records
    assert world.recorder.reasons() == ["GPUResourcesReleased"]
    assert "the pod Succeeded" in world.recorder.events[0].message
    assert world.api.writes() == []
    # A pod that never held GPUs is not reported.
    world.releaser.on_pod(event(worker("w2", "", "n1", phase="Failed")))
    assert world.releaser.loop.queue.depth == 0


async def test_the_sweep_releases_records_of_pods_gone_twice_and_ended_pods() -> None:
    world = World(worker("w1", "g1", "n1"), worker("w2", "g1", "n1"), worker("w3", "g1", "n1"))
    assert set(world.records) == {"uid-w1", "uid-w2", "uid-w3"}
    world.api.objects.pop(("Pod", "ml", "w1"))  # gone without our informer noticing
    failed = world.api.obj("Pod", "w2", "ml")
    world.api.put({**failed, "status": {"phase": "Failed"}})
    world.delete("w3")
    first = world.releaser.sweep()
    assert [r.uid for r in first] == ["uid-w2", "uid-w3"]
    assert "uid-w1" in world.records  # maybe bound a moment ago: wait one more sweep
    assert world.releaser.loop.queue.depth == 2  # w2's Event, w3's Event and finalizer
    second = world.releaser.sweep()
    assert [r.uid for r in second] == ["uid-w1"]
    assert world.records == {}
    assert all(r.state is RecordState.COMMITTED for r in [*first, *second])
    await drain(world.releaser.loop)
    assert sorted(e.message.split(": ")[0] for e in world.recorder.events) == [
        "released GPUs g1 on node n1"] * 3  # fmt: skip
    assert world.api.obj("Pod", "w3", "ml")["metadata"]["finalizers"] == ["other.io/keep"]
    assert world.releaser.released_by_sweep == 3


def test_the_sweep_waits_for_recovery() -> None:
    world = World(worker("w1", "g1", "n1"))
    world.releaser._state = allocator_state(world.api, recover=False)
    assert world.releaser.sweep() == []


async def test_a_counted_pod_lowers_its_owners_count_once_before_its_finalizer_goes() -> None:
    key = KEYS.pod_counter_key
    counter = "tensor-fusion.ai/tf-counter-abc"
    pod = worker("w1", "g1", "n1")
    pod["metadata"]["annotations"][key] = counter
    pod["metadata"]["ownerReferences"] = [OWNER]
    world = World(pod)
    world.api.put({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                   "metadata": {"name": "web-rs", "namespace": "ml",
                                "annotations": {counter: "2"}}})  # fmt: skip
    deleting = world.delete()
    world.releaser.on_pod(event(deleting, EventKind.MODIFIED))
    await world.releaser.reconcile(KEY)
    owner = world.api.obj("ReplicaSet", "web-rs", "ml")
    assert owner["metadata"]["annotations"][counter] == "1"
    assert world.api.obj("Pod", "w1", "ml")["metadata"]["finalizers"] == ["other.io/keep"]
    # Again (a retried reconcile): counted down once only.
    await world.releaser._uncount(deleting)
    assert world.api.obj("ReplicaSet", "web-rs", "ml")["metadata"]["annotations"][counter] == "1"


async def test_the_last_counted_pod_removes_the_key_and_a_gone_owner_is_done() -> None:
    counter = "tensor-fusion.ai/tf-counter-abc"
    owner_ref = OWNER
    first, second = worker("w1", "g1", "n1"), worker("w2", "g1", "n1")
    for pod in (first, second):
        pod["metadata"]["annotations"][KEYS.pod_counter_key] = counter
        pod["metadata"]["ownerReferences"] = [owner_ref]
    world = World(first, second)
    world.api.put({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                   "metadata": {"name": "web-rs", "namespace": "ml",
                                "annotations": {counter: "1", "other": "x"}}})  # fmt: skip
    await world.releaser._uncount(world.delete("w1"))
    assert world.api.obj("ReplicaSet", "web-rs", "ml")["metadata"]["annotations"] == {"other": "x"}
    del world.api.objects[("ReplicaSet", "ml", "web-rs")]
    await world.releaser._uncount(world.delete("w2"))  # owner gone: nothing raised
