"""Events on our objects, written to a real API server and deduplicated."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event

from tensorfusion.adapters.kube.events import EventRecorder, InvolvedObject

from .controlplane import eventually

pytestmark = pytest.mark.cluster


async def test_identical_events_are_counted_and_others_written_apart(
    kube: AsyncClient, namespace: str
) -> None:
    clock = [datetime(2026, 12, 1, tzinfo=UTC)]
    recorder = EventRecorder(kube, "tensor-fusion-controller", now=lambda: clock[0])
    pod = InvolvedObject("Pod", "trainer-0", namespace, "uid-1", "v1")
    gpu_name = f"gpu-{namespace}"
    gpu = InvolvedObject("GPU", gpu_name, uid="uid-g", api_version="tensor-fusion.ai/v1")
    await recorder.record(pod, "Normal", "GPUDeviceAllocated", "Allocated 1 GPU: gpu-a1")
    clock[0] += timedelta(seconds=5)
    await recorder.record(pod, "Normal", "GPUDeviceAllocated", "Allocated 1 GPU: gpu-a1")
    await recorder.record(pod, "Warning", "GPUDeviceAllocatedFailed", "patch failed")
    await recorder.record(gpu, "Warning", "UnknownGPUModel", "model X is not in the catalogue")

    async def events() -> list[Event]:
        here = [event async for event in kube.list(Event, namespace=namespace)]
        cluster_scoped = [
            event
            async for event in kube.list(Event, namespace="default")
            if event.involvedObject.name == gpu_name
        ]
        return here + cluster_scoped

    async def three() -> bool:
        return len(await events()) == 3

    await eventually(three, what="three Events")
    by_reason = {event.reason: event for event in await events()}
    allocated = by_reason["GPUDeviceAllocated"]
    assert allocated.count == 2 and allocated.involvedObject.name == "trainer-0"
    assert by_reason["GPUDeviceAllocatedFailed"].type == "Warning"
    cluster_scoped = by_reason["UnknownGPUModel"]
    assert cluster_scoped.involvedObject.kind == "GPU"
    assert cluster_scoped.metadata is not None and cluster_scoped.metadata.namespace == "default"
    assert recorder.failures == 0


async def test_a_failed_write_is_counted_and_never_raises(kube: AsyncClient) -> None:
    recorder = EventRecorder(kube, "tensor-fusion-controller")
    await recorder.record(InvolvedObject("Pod", "p", "no-such-namespace"), "Normal", "Test", "x")
    assert recorder.failures == 1


async def test_repeats_recorded_at_once_raise_one_events_count(
    kube: AsyncClient, namespace: str
) -> None:
    """The extender's Event queue writes with several writers: repeats of one Event that
    arrive together must still be one Event."""
    recorder = EventRecorder(kube, "tensor-fusion-scheduler")
    pod = InvolvedObject("Pod", "waiting-0", namespace, "uid-2", "v1")
    summary = "0/1 nodes are available: 1 GPUResourceFilter"
    await asyncio.gather(
        *(recorder.record(pod, "Warning", "FailedGPUScheduling", summary) for _ in range(5))
    )
    found = [event async for event in kube.list(Event, namespace=namespace)]
    assert [event.count for event in found] == [5]
    assert recorder.failures == 0
