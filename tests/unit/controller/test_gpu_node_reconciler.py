"""GPUNodes per matching Node, their status from the allocator, phases from the agent."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.controller.gpu_node_reconciler import GPUNodeReconciler
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.gpu_nodes import AgentReadinessMode
from tensorfusion.runtime.informer_store import EventKind
from tensorfusion.runtime.leader_election import NotLeaderError

from .reconciler_fakes import (
    NOW,
    FakeApi,
    FakeRecorder,
    Fence,
    Snapshot,
    allocator_state,
    event,
    feed,
    gpu,
    gpu_node,
    node,
    pool,
    rfc3339,
    selector,
    worker,
)


class World:
    """Pool `shared` selecting nodes labelled `tier=gpu`; node n1 with GPUs g1, g2."""

    def __init__(self, mode: AgentReadinessMode = "heartbeat") -> None:
        self.api = FakeApi()
        self.fence = Fence()
        self.recorder = FakeRecorder()
        self.now = NOW
        self.api.put(pool("shared", selector("tier", "gpu")))
        self.api.put(node("n1", tier="gpu"))
        self.api.put(gpu("g1", "n1", available={"tflops": "1", "vram": "1"}))
        self.api.put(gpu("g2", "n1"))
        self.state = allocator_state(self.api)
        self.reconciler = GPUNodeReconciler(
            nodes=self.api.cache("Node"), gpu_nodes=self.api.cache("GPUNode"),
            gpus=self.api.cache("GPU"), pools=self.api.cache("GPUPool"),
            hypervisor_pods=self.api.cache("Pod"), state=self.state, client=self.api,
            fence=self.fence, recorder=self.recorder, clock=lambda: self.now,
            initial_selector="nvidia.com/gpu.present=true", agent_readiness=mode,
        )  # fmt: skip

    def heartbeat(self, at: float) -> None:
        gpu_node = self.api.obj("GPUNode", "n1")
        status = {**gpu_node.get("status", {}), "hypervisorStatus": {
            "hypervisorState": "Running", "lastHeartbeatTime": rfc3339(at)}}  # fmt: skip
        self.api.put({**gpu_node, "status": status})

    def status(self, name: str = "n1") -> dict[str, Any]:
        return dict(self.api.obj("GPUNode", name)["status"])

    def gpu_phases(self) -> list[str]:
        return [self.api.obj("GPU", g)["status"]["phase"] for g in ("g1", "g2")]


async def test_a_matching_node_gets_a_gpu_node_with_labels_and_owner() -> None:
    world = World()
    world.api.put(node("n2", tier="cpu"))
    await world.reconciler.reconcile("n1")
    await world.reconciler.reconcile("n2")
    created = world.api.obj("GPUNode", "n1")
    assert created["metadata"]["labels"] == {
        KEYS.managed_by: "shared", KEYS.pool_member_label("shared"): "true",
        KEYS.hardware_vendor: "NVIDIA",
    }  # fmt: skip
    owner = created["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("GPUPool", "shared")
    assert created["spec"]["manageMode"] == "AutoSelect"
    assert not world.api.has("GPUNode", "n2")


async def test_status_figures_come_from_memory_and_phases_follow_the_heartbeat() -> None:
    world = World()
    await world.reconciler.reconcile("n1")
    status = world.status()
    assert status["phase"] == "Pending" and world.gpu_phases() == ["Pending", "Pending"]
    # g1 stores available 1/1: the figures are the allocator's, not GPU status.available.
    assert (status["totalTFlops"], status["availableTFlops"]) == ("624", "624")
    assert (status["availableVRAM"], status["totalGPUPods"]) == ("160Gi", 0)
    world.heartbeat(NOW - 30)
    recheck = await world.reconciler.reconcile("n1")
    assert recheck == pytest.approx(60.5)
    assert world.status()["phase"] == "Running"
    assert world.gpu_phases() == ["Running", "Running"]
    writes = len(world.api.writes())
    assert await world.reconciler.reconcile("n1") == pytest.approx(60.5)
    assert len(world.api.writes()) == writes  # up to date: nothing written

    world.now = NOW + 61  # the heartbeat is 91 s old
    assert await world.reconciler.reconcile("n1") is None
    status = world.status()
    assert status["phase"] == "Pending"
    assert status["hypervisorStatus"] == {"hypervisorState": "Stale",
                                          "lastHeartbeatTime": rfc3339(NOW - 30)}  # fmt: skip
    assert world.gpu_phases() == ["Pending", "Pending"]
    await world.reconciler.reconcile("n1")
    assert world.recorder.reasons() == ["HypervisorHeartbeatStale", "GPUNodeNotReady"]


async def test_a_heartbeat_that_races_the_write_is_judged_on_the_fresh_read() -> None:
    world = World()
    await world.reconciler.reconcile("n1")
    world.heartbeat(NOW - 120)
    world.reconciler._gpu_nodes = Snapshot.of(world.api, "GPUNode")  # shows the old beat
    world.heartbeat(NOW - 1)  # the agent beats again before our write lands: 409
    assert await world.reconciler.reconcile("n1") == pytest.approx(89.5)
    status = world.status()
    assert status["phase"] == "Running"
    assert status["hypervisorStatus"]["hypervisorState"] == "Running"
    assert world.recorder.events == []


async def test_a_burst_of_binds_on_a_node_is_one_status_write_per_interval() -> None:
    world = World()
    queue = world.reconciler.loop.queue
    pod = world.api.put(worker("w0", "g1", "n1", tflops="10", vram="1Gi"))
    feed(world.state, pod, EventKind.ADDED)
    assert world.reconciler.take_changes() == {"n1"}
    assert (len(queue), queue.delayed) == (1, 0)  # never reconciled: queued at once
    await world.reconciler.loop.process("n1")
    for i in range(1, 4):
        pod = world.api.put(worker(f"w{i}", "g1", "n1", tflops="10", vram="1Gi"))
        feed(world.state, pod, EventKind.ADDED)
        assert world.reconciler.take_changes() == {"n1"}
    # Reconciled a moment ago: the three changes wait for one reconcile 5 s after it.
    assert (queue.stats.adds, queue.delayed) == (1, 1)


async def test_worker_pods_change_the_figures_and_the_allocated_pods() -> None:
    world = World()
    await world.reconciler.reconcile("n1")
    pod = world.api.put(worker("w1", "g1", "n1", tflops="100", vram="10Gi"))
    feed(world.state, pod, EventKind.ADDED)
    assert world.reconciler.take_changes() == {"n1"}
    await world.reconciler.reconcile("n1")
    status = world.status()
    assert (status["availableTFlops"], status["availableVRAM"]) == ("524", "150Gi")
    assert status["totalGPUPods"] == 1
    assert [p["uid"] for p in status["allocatedPods"]["g1"]] == ["uid-w1"]
    feed(world.state, pod, EventKind.DELETED)
    await world.reconciler.reconcile("n1")
    status = world.status()
    assert status["availableTFlops"] == "624" and status["totalGPUPods"] == 0
    assert "g1" not in status.get("allocatedPods", {})
    last = world.api.writes("patch", "GPUNode")[-1]
    assert last.body["status"]["allocatedPods"] == {"g1": None}


async def test_pod_readiness_follows_the_current_hypervisor_pod() -> None:
    world = World(mode="pod")
    hypervisor: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "hypervisor-n1", "namespace": "tensor-fusion-sys",
                     "labels": {KEYS.component: "hypervisor"},
                     "creationTimestamp": rfc3339(NOW - 100)},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},
    }  # fmt: skip
    stored = world.api.put(hypervisor)
    world.reconciler.on_hypervisor_pod(event(stored))
    await world.reconciler.reconcile("n1")
    assert world.status()["phase"] == "Pending"
    stored = world.api.put({**stored, "status": {"phase": "Running",
                            "conditions": [{"type": "Ready", "status": "True"}]}})  # fmt: skip
    world.reconciler.on_hypervisor_pod(event(stored, EventKind.MODIFIED))
    await world.reconciler.reconcile("n1")
    assert world.status()["phase"] == "Running" and world.gpu_phases() == ["Running", "Running"]
    world.api.objects.pop(("Pod", "tensor-fusion-sys", "hypervisor-n1"))
    world.reconciler.on_hypervisor_pod(event(stored, EventKind.DELETED))
    await world.reconciler.reconcile("n1")
    assert world.status()["phase"] == "Pending"
    assert world.reconciler._pods_by_node == {"n1": set()}  # deleted pods are not kept


async def test_a_missing_gpu_is_reported_once_and_keeps_its_phase() -> None:
    world = World()
    await world.reconciler.reconcile("n1")
    world.heartbeat(NOW)
    missing = {**world.api.obj("GPU", "g2")}
    missing["metadata"] = {**missing["metadata"], "annotations": {
        KEYS.gpu_missing_since: "2027-01-15T07:00:00Z"}}  # fmt: skip
    missing["status"] = {**missing["status"], "phase": "Unknown"}
    feed(world.state, world.api.put(missing))
    await world.reconciler.reconcile("n1")
    await world.reconciler.reconcile("n1")
    assert world.gpu_phases() == ["Running", "Unknown"]
    assert [(e.kind, e.reason) for e in world.recorder.events] == [
        ("GPU", "GPUMissing"), ("GPUNode", "GPUMissing"),
    ]  # fmt: skip
    assert world.status()["totalTFlops"] == "312"  # a missing GPU leaves the totals


async def test_a_gpu_node_goes_when_no_pool_takes_its_node_but_hand_made_ones_stay() -> None:
    world = World()
    await world.reconciler.reconcile("n1")
    world.api.put(node("n1", tier="cpu"))
    await world.reconciler.reconcile("n1")
    assert not world.api.has("GPUNode", "n1")
    world.api.put({"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUNode",
                   "metadata": {"name": "n9"}, "spec": {"manageMode": "Manual"}})  # fmt: skip
    await world.reconciler.reconcile("n9")
    assert world.api.has("GPUNode", "n9")


async def test_a_node_moved_to_another_pool_follows_it() -> None:
    world = World()
    await world.reconciler.reconcile("n1")
    world.api.put(pool("aaa", selector("tier", "gpu")))  # first by name now
    world.reconciler.on_pool(event(world.api.obj("GPUPool", "aaa")))
    assert world.reconciler.loop.queue.depth == 1
    await world.reconciler.reconcile("n1")
    labels = world.api.obj("GPUNode", "n1")["metadata"]["labels"]
    assert labels[KEYS.managed_by] == "aaa" and KEYS.pool_member_label("shared") not in labels
    assert world.recorder.reasons() == ["NodeMatchesSeveralPools"]


async def test_nothing_is_written_before_recovery_nor_without_the_fence() -> None:
    world = World()
    world.reconciler._state = allocator_state(world.api, recover=False)
    assert await world.reconciler.reconcile("n1") == 1.0
    assert world.api.writes() == []
    world.reconciler._state = world.state
    world.fence.open = False
    with pytest.raises(NotLeaderError):
        await world.reconciler.reconcile("n1")
    assert world.api.writes() == []


def test_handlers_ignore_what_changes_nothing() -> None:
    world = World()
    loop = world.reconciler.loop
    n1 = world.api.obj("Node", "n1")
    world.reconciler.on_node(event(n1, EventKind.MODIFIED, {**n1, "status": {"x": 1}}))
    assert loop.queue.depth == 0
    world.reconciler.on_node(event(node("n1", tier="cpu"), EventKind.MODIFIED, n1))
    assert loop.queue.depth == 1
    gpu_node: dict[str, Any] = {"kind": "GPUNode", "metadata": {"name": "n5",
                                "resourceVersion": "1"}, "status": {}}  # fmt: skip
    stamped = {**gpu_node, "metadata": {"name": "n5", "resourceVersion": "2",
               "annotations": {KEYS.last_sync: "2027-01-15T08:00:00Z"}}}  # fmt: skip
    world.reconciler.on_gpu_node(event(stamped, EventKind.MODIFIED, gpu_node))
    assert loop.queue.depth == 1
    g1 = world.api.obj("GPU", "g1")
    written = {**g1, "status": {**g1["status"], "available": {"tflops": "9", "vram": "9"}}}
    world.reconciler.on_gpu(event(written, EventKind.MODIFIED, g1))
    assert loop.queue.depth == 1


def test_a_heartbeat_of_a_running_node_alone_queues_nothing_but_of_a_pending_one_does() -> None:
    world = World()
    loop = world.reconciler.loop

    def beat(phase: str, at: float, name: str = "n7") -> dict[str, Any]:
        obj = gpu_node(name, "shared", heartbeat=at)
        return {**obj, "status": {**obj["status"], "phase": phase}}

    world.reconciler.on_gpu_node(event(beat("Running", 2.0), EventKind.MODIFIED,
                                       beat("Running", 1.0)))  # fmt: skip
    assert loop.queue.depth == 0, "the staleness recheck reads the latest beat when due"
    world.reconciler.on_gpu_node(event(beat("Pending", 2.0), EventKind.MODIFIED,
                                       beat("Pending", 1.0)))  # fmt: skip
    assert loop.queue.depth == 1, "a Pending node waits for this beat"
    world.reconciler.on_gpu_node(event(beat("Running", 1.0, "n8"), EventKind.MODIFIED,
                                       beat("Running", 2.0, "n8")))  # fmt: skip
    assert loop.queue.depth == 2, "a beat moved back (an edited status) is looked at"
    stale = beat("Running", 2.0, "n9")
    stale["status"]["hypervisorStatus"]["hypervisorState"] = "Stale"
    world.reconciler.on_gpu_node(event(stale, EventKind.MODIFIED, beat("Running", 1.0, "n9")))
    assert loop.queue.depth == 3, "a new agent state is looked at"
