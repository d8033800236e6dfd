"""GPU status write-back (batched, once per second per GPU, failures kept), the GPUNodes'
`last-sync` stamp, and quota status every 10 s."""

from __future__ import annotations

from typing import Any

from tensorfusion.adapters.kube.object_client import KubeError
from tensorfusion.controller.status_writeback import GPUStatusWriter, QuotaStatusWriter
from tensorfusion.domain.annotations import KEYS
from tensorfusion.runtime.informer_store import EventKind

from .reconciler_fakes import (
    NOW,
    V1,
    FakeApi,
    FakeRecorder,
    Fence,
    allocator_state,
    event,
    feed,
    gpu,
    gpu_node,
    pool,
    rfc3339,
    worker,
)


class World:
    def __init__(self) -> None:
        self.api = FakeApi()
        self.now = NOW
        self.api.put(pool("shared"))
        self.api.put(gpu_node("n1", "shared"))
        self.api.put(gpu("g1", "n1", available={"tflops": "7", "vram": "7Gi"}))  # corrupted
        self.api.put(gpu("g2", "n1"))
        self.state = allocator_state(self.api)
        self.writer = GPUStatusWriter(
            gpus=self.api.cache("GPU"), state=self.state, client=self.api, fence=Fence(),
            clock=lambda: self.now, settle=0.0,
        )  # fmt: skip

    def available(self, name: str) -> dict[str, str]:
        return dict(self.api.obj("GPU", name)["status"]["available"])

    def stamp(self) -> str | None:
        annotations = self.api.obj("GPUNode", "n1")["metadata"].get("annotations") or {}
        return annotations.get(KEYS.last_sync)


async def test_changed_gpus_are_written_from_memory_and_the_node_stamped() -> None:
    world = World()
    report = await world.writer.flush()
    # Every GPU is looked at once after recovery; only g1's stored figure was wrong.
    assert report.written == ["g1"] and report.unchanged == ["g2"]
    assert world.available("g1") == {"tflops": "312", "vram": "80Gi"}
    assert report.stamped == ["n1"] and world.stamp() == rfc3339(NOW)
    assert [c.kind for c in world.api.writes()] == ["GPU", "GPUNode"]
    assert world.api.writes()[0].status  # the status subresource
    assert (await world.writer.flush()).written == []


async def test_the_binds_of_a_burst_on_one_gpu_are_one_write_once_it_settled() -> None:
    world = World()
    world.writer = GPUStatusWriter(
        gpus=world.api.cache("GPU"), state=world.state, client=world.api, fence=Fence(),
        clock=lambda: world.now, settle=0.5,
    )  # fmt: skip
    world.now = NOW - 10.0
    await world.writer.flush()  # after recovery: both GPUs settle first
    world.now = NOW - 9.0
    await world.writer.flush()
    writes = len(world.api.writes())
    for i, at in enumerate((0.0, 0.2, 0.4)):
        world.now = NOW + at
        pod = world.api.put(worker(f"w{i}", "g1", "n1", tflops="10", vram="1Gi"))
        feed(world.state, pod, EventKind.ADDED)
        assert (await world.writer.flush()).written == []  # changed 0.4 s ago at most
    world.now = NOW + 0.5
    assert (await world.writer.flush()).written == ["g1"]
    status = world.api.obj("GPU", "g1")["status"]
    assert len(status["runningApps"][0]["pods"]) == 3
    assert [c.kind for c in world.api.writes()[writes:]] == ["GPU", "GPUNode"]


async def test_a_gpu_is_written_at_most_once_a_second() -> None:
    world = World()
    await world.writer.flush()
    pod = world.api.put(worker("w1", "g1", "n1", tflops="100", vram="10Gi"))
    feed(world.state, pod, EventKind.ADDED)
    world.now = NOW + 0.5
    assert (await world.writer.flush()).written == []  # g1 was written 0.5 s ago
    assert world.writer.pending == 1
    world.now = NOW + 1.0
    report = await world.writer.flush()
    assert report.written == ["g1"]
    status = world.api.obj("GPU", "g1")["status"]
    assert status["available"] == {"tflops": "212", "vram": "70Gi"}
    assert [p["uid"] for p in status["runningApps"][0]["pods"]] == ["uid-w1"]
    feed(world.state, pod, EventKind.DELETED)
    world.now = NOW + 2.0
    await world.writer.flush()
    status = world.api.obj("GPU", "g1")["status"]
    assert "runningApps" not in status and status["available"]["tflops"] == "312"
    assert world.stamp() == rfc3339(NOW + 2.0)


async def test_a_failed_write_stays_queued_and_is_tried_again_after_its_backoff() -> None:
    world = World()
    world.api.fail("patch", "GPU", "g1", KubeError(500, "etcd timeout"))
    report = await world.writer.flush()
    assert report.failed == ["g1"] and world.writer.pending == 1
    assert world.available("g1")["tflops"] == "7"
    assert report.stamped == []  # nothing of n1 was written
    world.now = NOW + 0.5
    assert (await world.writer.flush()).written == []  # backoff: 1 s
    world.now = NOW + 1.0
    assert (await world.writer.flush()).written == ["g1"]
    assert world.available("g1")["tflops"] == "312"


async def test_a_gpu_changed_by_someone_else_is_written_again() -> None:
    world = World()
    await world.writer.flush()
    before = world.api.obj("GPU", "g2")
    after = world.api.put({**before, "status": {**before["status"],
                           "available": {"tflops": "0", "vram": "0"}}})  # fmt: skip
    world.writer.on_gpu(event(after, EventKind.MODIFIED, before))
    world.now = NOW + 1
    assert (await world.writer.flush()).written == ["g2"]
    assert world.available("g2") == {"tflops": "312", "vram": "80Gi"}
    same = world.api.obj("GPU", "g2")
    world.writer.on_gpu(event(same, EventKind.MODIFIED, same))
    assert world.writer.pending == 0


async def test_a_failed_stamp_is_tried_at_the_next_batch() -> None:
    world = World()
    world.api.fail("patch", "GPUNode", "n1", KubeError(503, "unavailable"))
    report = await world.writer.flush()
    assert report.written == ["g1"] and report.stamped == [] and world.stamp() is None
    world.now = NOW + 5
    assert (await world.writer.flush()).stamped == ["n1"]
    assert world.stamp() == rfc3339(NOW + 5)


async def test_nothing_is_written_before_recovery() -> None:
    world = World()
    world.writer._state = allocator_state(world.api, recover=False)
    assert (await world.writer.flush()).written == []
    assert world.api.writes() == []


# ---- quota status --------------------------------------------------------------------------


def quota(tflops: str = "1000", threshold: int = 50) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "GPUResourceQuota",
            "metadata": {"name": "q", "namespace": "ml",
                         "creationTimestamp": "2027-01-01T00:00:00Z"},
            "spec": {"total": {"requests": {"tflops": tflops},
                               "alertThresholdPercent": threshold}}}  # fmt: skip


async def test_quota_status_is_written_when_usage_changes_and_alerts_once() -> None:
    api, recorder = FakeApi(), FakeRecorder()
    api.put(pool("shared"))
    api.put(gpu("g1", "n1", tflops="1000"))  # room for the 600 TFLOPs pod below
    api.put(quota())
    state = allocator_state(api)
    now = [NOW]
    writer = QuotaStatusWriter(quotas=api.cache("GPUResourceQuota"), state=state, client=api,
                               fence=Fence(), recorder=recorder, clock=lambda: now[0])  # fmt: skip
    assert await writer.sync() == ["ml/q"]
    status = api.obj("GPUResourceQuota", "q", "ml")["status"]
    assert status["availablePercent"]["requests.tflops"] == "100.00"
    now[0] += 10
    assert await writer.sync() == []  # only the time would change
    pod = api.put(worker("w1", "g1", "n1", tflops="600", vram="1Gi"))
    feed(state, pod, EventKind.ADDED)
    assert await writer.sync() == ["ml/q"]
    status = api.obj("GPUResourceQuota", "q", "ml")["status"]
    assert status["used"]["requests"] == {"tflops": "600", "vram": "1Gi"}
    assert status["lastUpdateTime"] == rfc3339(now[0])
    assert recorder.reasons() == ["QuotaAlertThresholdReached"]
    feed(state, pod, EventKind.DELETED)
    await writer.sync()
    status = api.obj("GPUResourceQuota", "q", "ml")["status"]
    assert status["used"]["requests"] == {}  # zero usage leaves no stale figure
    assert recorder.reasons() == ["QuotaAlertThresholdReached"]


async def test_a_failing_quota_does_not_stop_the_others() -> None:
    api = FakeApi()
    api.put(quota())
    other = quota()
    other["metadata"] = {**other["metadata"], "namespace": "dev"}
    api.put(other)
    writer = QuotaStatusWriter(
        quotas=api.cache("GPUResourceQuota"), state=allocator_state(api), client=api,
        fence=Fence(), recorder=None, clock=lambda: NOW,
    )  # fmt: skip
    api.fail("patch", "GPUResourceQuota", "q", KubeError(500, "boom"))
    assert len(await writer.sync()) == 1
    assert len(await writer.sync()) == 1
