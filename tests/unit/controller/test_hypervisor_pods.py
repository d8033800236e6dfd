"""The leader's agent pods against an in-memory API server: created per GPUNode, recreated when
missing, none on a NotReady node, replaced after a crash loop (Event) or at once on a changed
configuration while the GPUNode is not Running, kept and reported out of sync on a Running one
until the rollout selects it; fenced; queued by the right informer events."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.adapters.kube.object_client import KubeError
from tensorfusion.controller.hypervisor_pods import CREATED_UNSEEN_S, HypervisorPodReconciler
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.hypervisor_pods import HypervisorPodSettings
from tensorfusion.runtime.informer_store import EventKind
from tensorfusion.runtime.leader_election import NotLeaderError

from .reconciler_fakes import (
    V1,
    FakeApi,
    FakeRecorder,
    Fence,
    Snapshot,
    drain,
    event,
    gpu_node,
    node,
    pool,
)

NS = "tf-sys"
POD = "hypervisor-n1"


class World:
    """Pool `shared`, Ready node n1 with its GPUNode, a ProviderConfig for NVIDIA."""

    def __init__(self) -> None:
        self.api = FakeApi()
        self.fence = Fence()
        self.recorder = FakeRecorder()
        self.crash_limit = 5
        self.api.put(pool("shared", componentConfig={"hypervisor": {"image": "agent:1"}}))
        self.api.put(ready(node("n1")))
        self.api.put(gpu_node("n1", "shared"))
        self.api.put({"apiVersion": V1, "kind": "ProviderConfig",
                      "metadata": {"name": "nvidia-provider"},
                      "spec": {"vendor": "NVIDIA", "hardwareMetadata": [
                          {"model": "H100", "fp16TFlops": "989"}]}})  # fmt: skip
        self.reconciler = HypervisorPodReconciler(
            gpu_nodes=self.api.cache("GPUNode"), nodes=self.api.cache("Node"),
            pools=self.api.cache("GPUPool"), hypervisor_pods=self.api.cache("Pod"),
            templates=self.api.cache("SchedulingConfigTemplate"),
            provider_configs=self.api.cache("ProviderConfig"),
            settings=HypervisorPodSettings(namespace=NS, default_image="default:0"),
            client=self.api, fence=self.fence, recorder=self.recorder,
            max_crash_count=lambda: self.crash_limit,
        )  # fmt: skip

    def pod(self) -> dict[str, Any]:
        return self.api.obj("Pod", POD, NS)

    def set_pod_status(self, **status: Any) -> None:
        self.api.put({**self.pod(), "status": status})

    def set_gpu_node_phase(self, phase: str) -> None:
        current = self.api.obj("GPUNode", "n1")
        self.api.put({**current, "status": {**current["status"], "phase": phase}})

    def set_image(self, image: str) -> None:
        current = self.api.obj("GPUPool", "shared")
        spec = {**current["spec"], "componentConfig": {"hypervisor": {"image": image}}}
        self.api.put({**current, "spec": spec})


def ready(obj: dict[str, Any], status: str = "True") -> dict[str, Any]:
    return {**obj, "status": {"conditions": [{"type": "Ready", "status": status}]}}


def env(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


async def test_a_gpu_node_gets_its_pod_once_and_a_missing_pod_is_recreated() -> None:
    world = World()
    await world.reconciler.reconcile("n1")
    pod = world.pod()
    owners = [
        (o["kind"], o["name"], o.get("controller")) for o in pod["metadata"]["ownerReferences"]
    ]
    assert owners == [("GPUNode", "n1", True), ("Node", "n1", None)]
    assert pod["spec"]["nodeName"] == "n1" and pod["spec"]["containers"][0]["image"] == "agent:1"
    assert env(pod)["TF_PROVIDER_HARDWARE_METADATA"] == '[{"fp16TFlops":"989","model":"H100"}]'
    sync = world.reconciler.sync["n1"]
    assert sync.in_sync and sync.pool == "shared" and not sync.out_of_sync
    writes = len(world.api.writes())
    await world.reconciler.reconcile("n1")
    assert len(world.api.writes()) == writes  # up to date: nothing written
    world.api.objects.pop(("Pod", NS, POD))
    await world.reconciler.reconcile("n1")
    assert world.api.has("Pod", POD, NS)


async def test_a_not_ready_node_gets_no_pod_and_loses_one_that_is_not_running() -> None:
    world = World()
    world.api.put(ready(node("n1"), "False"))
    await world.reconciler.reconcile("n1")
    assert not world.api.has("Pod", POD, NS)
    world.api.put(ready(node("n1")))
    await world.reconciler.reconcile("n1")
    world.api.put(ready(node("n1"), "False"))
    world.set_pod_status(phase="Running")
    await world.reconciler.reconcile("n1")
    assert world.api.has("Pod", POD, NS)  # Running: kept
    world.set_pod_status(phase="Pending")
    await world.reconciler.reconcile("n1")
    assert not world.api.has("Pod", POD, NS)


async def test_during_a_driver_upgrade_nothing_is_created() -> None:
    world = World()
    upgrading = node("n1", **{"nvidia.com__gpu-driver-upgrade-state": "upgrade-required"})
    world.api.put(ready(upgrading))
    await world.reconciler.reconcile("n1")
    assert not world.api.writes()


async def test_a_crash_looping_pod_is_deleted_with_an_event_and_recreated() -> None:
    world = World()
    await world.reconciler.reconcile("n1")
    old_uid = world.pod()["metadata"]["uid"]
    world.set_pod_status(phase="Running",
                         containerStatuses=[{"name": "hypervisor", "restartCount": 5}])  # fmt: skip
    await world.reconciler.reconcile("n1")
    assert world.api.has("Pod", POD, NS) and not world.recorder.events
    world.set_pod_status(phase="Running",
                         containerStatuses=[{"name": "hypervisor", "restartCount": 6}])  # fmt: skip
    await world.reconciler.reconcile("n1")
    assert not world.api.has("Pod", POD, NS)
    [recorded] = world.recorder.events
    assert (recorded.kind, recorded.name, recorded.type, recorded.reason) == (
        "GPUNode", "n1", "Warning", "HypervisorCrashLoopRecreate")  # fmt: skip
    assert "restarted 6 times" in recorded.message
    await world.reconciler.reconcile("n1")
    assert world.pod()["metadata"]["uid"] != old_uid


async def test_a_changed_configuration_replaces_the_pod_unless_the_gpu_node_runs() -> None:
    world = World()
    await world.reconciler.reconcile("n1")
    first = world.pod()["metadata"]["labels"][KEYS.pod_template_hash]
    world.set_image("agent:2")
    await world.reconciler.reconcile("n1")  # Pending GPUNode: deleted at once
    assert not world.api.has("Pod", POD, NS)
    await world.reconciler.reconcile("n1")
    second = world.pod()["metadata"]["labels"][KEYS.pod_template_hash]
    assert second != first and world.pod()["spec"]["containers"][0]["image"] == "agent:2"

    world.set_gpu_node_phase("Running")
    world.set_image("agent:3")
    await world.reconciler.reconcile("n1")
    assert world.pod()["metadata"]["labels"][KEYS.pod_template_hash] == second  # kept
    sync = world.reconciler.sync["n1"]
    assert sync.out_of_sync and sync.pod_hash == second and not sync.in_sync

    world.reconciler.select(["n1"])  # the rollout's choice
    assert world.reconciler.loop.queue.depth == 1
    await drain(world.reconciler.loop)
    assert not world.api.has("Pod", POD, NS)
    await world.reconciler.reconcile("n1")
    assert world.pod()["spec"]["containers"][0]["image"] == "agent:3"
    assert world.reconciler.sync["n1"].in_sync
    world.set_image("agent:4")  # the selection ended with the new pod
    await world.reconciler.reconcile("n1")
    assert world.pod()["spec"]["containers"][0]["image"] == "agent:3"


async def test_a_template_that_cannot_be_used_creates_nothing_and_warns_once() -> None:
    world = World()
    current = world.api.obj("GPUPool", "shared")
    spec = {**current["spec"], "componentConfig": {"hypervisor": {"podTemplate": "broken"}}}
    world.api.put({**current, "spec": spec})
    await world.reconciler.reconcile("n1")
    await world.reconciler.reconcile("n1")
    assert not world.api.has("Pod", POD, NS)
    assert [(e.kind, e.reason) for e in world.recorder.events] == [
        ("GPUPool", "HypervisorPodTemplateInvalid")]  # fmt: skip


async def test_no_write_without_the_lease_and_a_cache_that_lags_is_not_an_error() -> None:
    world = World()
    world.fence.open = False
    with pytest.raises(NotLeaderError):
        await world.reconciler.reconcile("n1")
    assert not world.api.has("Pod", POD, NS)
    world.fence.open = True
    world.api.fail("create", "Pod", POD, KubeError(409, "exists", "AlreadyExists"))
    assert await world.reconciler.reconcile("n1") is None
    world.api.objects.pop(("GPUNode", "", "n1"))
    await world.reconciler.reconcile("n1")
    assert "n1" not in world.reconciler.sync


async def test_a_pod_just_created_is_not_posted_again_while_the_cache_lags() -> None:
    world = World()
    world.reconciler._pods = Snapshot.of(world.api, "Pod")  # the cache has not seen it yet
    assert await world.reconciler.reconcile("n1") is None
    again = await world.reconciler.reconcile("n1")
    assert len(world.api.writes("create", "Pod")) == 1
    assert again is not None and 0 < again <= CREATED_UNSEEN_S, "looked at again later"


async def test_informer_events_queue_the_nodes_whose_pod_may_change() -> None:
    world = World()
    world.api.put(gpu_node("n2", "other"))
    queue = world.reconciler.loop.queue
    reconciler = world.reconciler
    beat = {**gpu_node("n1", "shared", heartbeat=1.0)}
    reconciler.on_gpu_node(event(beat, EventKind.MODIFIED, old=gpu_node("n1", "shared", 0.0)))
    assert queue.depth == 0  # a heartbeat alone
    running = {**beat, "status": {**beat["status"], "phase": "Running"}}
    reconciler.on_gpu_node(event(running, EventKind.MODIFIED, old=beat))
    assert await drain(reconciler.loop) == 1
    reconciler.on_node(event(ready(node("n1")), EventKind.MODIFIED, old=ready(node("n1"))))
    assert queue.depth == 0
    reconciler.on_node(event(ready(node("n1"), "False"), EventKind.MODIFIED,
                             old=ready(node("n1"))))  # fmt: skip
    assert queue.depth == 1
    await drain(reconciler.loop)

    changed = pool("shared", componentConfig={"hypervisor": {"image": "agent:9"}})
    reconciler.on_pool(event(changed, EventKind.MODIFIED, old=pool("shared")))
    assert queue.depth == 1  # n1 only: n2 is in another pool
    await drain(reconciler.loop)
    template = {"apiVersion": V1, "kind": "SchedulingConfigTemplate", "metadata": {"name": "t"},
                "spec": {"hypervisor": {"x": 1}}}  # fmt: skip
    world.api.put(pool("other", schedulingConfigTemplate="t"))
    reconciler.on_template(event(template))
    assert await drain(reconciler.loop) == 1  # n2's pool names it
    reconciler.on_provider_config(event(world.api.obj("ProviderConfig", "nvidia-provider")))
    assert await drain(reconciler.loop) == 2
    owner = {"kind": "GPUNode", "name": "n2", "controller": True}
    owned = {"kind": "Pod", "metadata": {"name": "hypervisor-x", "namespace": NS,
                                         "ownerReferences": [owner]}}  # fmt: skip
    reconciler.on_pod(event(owned, EventKind.DELETED))
    assert queue.depth == 1
