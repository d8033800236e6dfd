"""Enabled-replicas counters recounted from live pods: raised at once, lowered only once the
owner stood still for the settle time, a pod that ended frees its slot, a counter forgotten at
zero; the pod controller recounts after each decrement and leaves ended pods to the recount."""

from __future__ import annotations

from typing import Any

from tensorfusion.controller.pod_release import PodReleaser
from tensorfusion.controller.replica_recount import CounterSlot, ReplicaRecount, counter_of
from tensorfusion.domain.admission.replica_gate import RecountObservation, recount
from tensorfusion.domain.annotations import KEYS
from tensorfusion.runtime.informer_store import EventKind

from .reconciler_fakes import FakeApi, FakeRecorder, Fence, allocator_state, event, worker

COUNTER = "tensor-fusion.ai/tf-counter-abc"
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs", "uid": "rs",
         "controller": True}  # fmt: skip
SLOT = CounterSlot("ml", "ReplicaSet", "web-rs", COUNTER)


def counted(name: str, phase: str = "Running", owner: dict[str, Any] = OWNER) -> dict[str, Any]:
    pod = worker(name, "g1", "n1", phase=phase)
    pod["metadata"]["annotations"][KEYS.pod_counter_key] = COUNTER
    pod["metadata"]["ownerReferences"] = [owner]
    return pod


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class World:
    def __init__(self, stored: str | None, *pods: dict[str, Any]) -> None:
        self.api = FakeApi()
        self.clock = Clock()
        for pod in pods:
            self.api.put(pod)
        annotations = {COUNTER: stored} if stored is not None else {}
        self.api.put({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                      "metadata": {"name": "web-rs", "namespace": "ml",
                                   "annotations": annotations}})  # fmt: skip
        self.recount = ReplicaRecount(
            pods=self.api.cache("Pod"), client=self.api, fence=Fence(), recorder=FakeRecorder(),
            clock=self.clock, settle=30.0,
        )  # fmt: skip
        for pod in pods:
            self.recount.on_pod(event(pod, EventKind.ADDED))

    @property
    def stored(self) -> str | None:
        annotations = self.api.obj("ReplicaSet", "web-rs", "ml")["metadata"]["annotations"]
        value: str | None = annotations.get(COUNTER)
        return value


def test_the_decision_raises_at_once_and_lowers_after_the_owner_stood_still() -> None:
    assert recount(stored=2, live=3, resource_version="7", seen=None, now=0, settle_s=30).write == 3
    same = recount(stored=3, live=3, resource_version="7", seen=None, now=0, settle_s=30)
    assert same.write is None and same.observation is None and same.recheck_s is None
    first = recount(stored=3, live=1, resource_version="7", seen=None, now=0, settle_s=30)
    assert first.write is None and first.recheck_s == 30
    assert first.observation == RecountObservation("7", 0)
    early = recount(stored=3, live=1, resource_version="7", seen=first.observation, now=20,
                    settle_s=30)  # fmt: skip
    assert early.write is None and early.recheck_s == 10
    moved = recount(stored=3, live=1, resource_version="8", seen=first.observation, now=40,
                    settle_s=30)  # fmt: skip
    assert moved.write is None and moved.observation == RecountObservation("8", 40)
    settled = recount(stored=3, live=1, resource_version="7", seen=first.observation, now=30,
                      settle_s=30)  # fmt: skip
    assert settled.write == 1


def test_a_counter_belongs_to_a_counted_owner_kind_only() -> None:
    assert counter_of(counted("w1")) == SLOT
    deployment = {**OWNER, "kind": "Deployment"}
    assert counter_of(counted("w1", owner=deployment)) is None
    plain = worker("w1", "g1", "n1")
    plain["metadata"]["ownerReferences"] = [OWNER]
    assert counter_of(plain) is None


async def test_an_increment_without_a_pod_heals_after_the_settle_time() -> None:
    # Three counted, two pods exist: the third was rejected after the webhook counted it.
    world = World("3", counted("w1"), counted("w2"))
    again = await world.recount.reconcile(SLOT)
    assert again == 30 and world.stored == "3", "lowered before the owner stood still"
    world.clock.now += 30
    assert await world.recount.reconcile(SLOT) is None
    assert world.stored == "2"
    assert world.recount.corrected == 1


async def test_an_admission_in_flight_is_never_undercounted() -> None:
    world = World("3", counted("w1"), counted("w2"))
    await world.recount.reconcile(SLOT)
    # Another admission counts (the owner changes) before its pod appears in the cache.
    owner = world.api.obj("ReplicaSet", "web-rs", "ml")
    owner["metadata"]["annotations"][COUNTER] = "4"
    world.api.put(owner)
    world.clock.now += 30
    assert await world.recount.reconcile(SLOT) == 30
    assert world.stored == "4"
    world.api.put(counted("w3"))  # the pod of that admission
    world.clock.now += 30
    await world.recount.reconcile(SLOT)
    assert world.stored == "3", "the rejected pod's count heals once the owner stood still"


async def test_a_missing_count_is_raised_at_once_and_ended_pods_free_their_slot() -> None:
    world = World("1", counted("w1"), counted("w2"), counted("w3", phase="Succeeded"))
    await world.recount.reconcile(SLOT)
    assert world.stored == "2"
    quiet = World("1", counted("w1"))
    assert quiet.recount.loop.queue.depth == 0
    quiet.recount.on_pod(event(counted("w1", phase="Failed"), EventKind.MODIFIED))
    assert quiet.recount.loop.queue.depth == 1, "an ended pod is recounted at once"


async def test_a_counter_at_zero_is_deleted_and_forgotten_and_a_gone_owner_too() -> None:
    world = World("1")
    world.recount.after_decrement(SLOT)
    await world.recount.reconcile(SLOT)
    world.clock.now += 30
    await world.recount.reconcile(SLOT)
    assert world.stored is None
    assert world.recount.counters == frozenset(), "a counter at zero is forgotten"
    gone = World("2", counted("w1"))
    del gone.api.objects[("ReplicaSet", "ml", "web-rs")]
    assert await gone.recount.reconcile(SLOT) is None


async def test_the_pod_controller_recounts_after_a_decrement_and_not_for_an_ended_pod() -> None:
    recounted: list[CounterSlot] = []
    api = FakeApi()
    for pod in (counted("w1"), counted("w2", phase="Succeeded")):
        api.put(pod)
    api.put({"apiVersion": "apps/v1", "kind": "ReplicaSet",
             "metadata": {"name": "web-rs", "namespace": "ml",
                          "annotations": {COUNTER: "2"}}})  # fmt: skip
    releaser = PodReleaser(pods=api.cache("Pod"), state=allocator_state(api), client=api,
                           fence=Fence(), recorder=FakeRecorder(), clock=lambda: 0.0,
                           recount=recounted.append)  # fmt: skip
    deleting = {**api.obj("Pod", "w2", "ml")}
    deleting["metadata"] = {**deleting["metadata"], "deletionTimestamp": "2027-01-01T00:00:00Z"}
    await releaser._uncount(api.put(deleting))
    owner = api.obj("ReplicaSet", "web-rs", "ml")
    assert owner["metadata"]["annotations"][COUNTER] == "2", "an ended pod is the recount's"
    assert recounted == [SLOT]
    running = {**api.obj("Pod", "w1", "ml")}
    running["metadata"] = {**running["metadata"], "deletionTimestamp": "2027-01-01T00:00:00Z"}
    await releaser._uncount(api.put(running))
    owner = api.obj("ReplicaSet", "web-rs", "ml")
    assert owner["metadata"]["annotations"][COUNTER] == "1"
    assert recounted == [SLOT, SLOT]
