"""The controller's `/metrics` figures are read from its parts at each scrape."""

from __future__ import annotations

from collections.abc import AsyncIterator

from prometheus_client import CollectorRegistry

from tensorfusion.adapters.kube.object_client import KubeError
from tensorfusion.app.controller_metrics import ControllerCollector
from tensorfusion.controller.fenced_writes import FencedWriter
from tensorfusion.controller.reconcile_loop import ReconcileLoop
from tensorfusion.runtime.informer import Informer
from tensorfusion.runtime.informer_source import Listing, WatchEvent

from .reconciler_fakes import FakeApi, Fence, gpu
from .test_allocator_state import FakeCache, state_with
from .test_allocator_state import gpu as cached_gpu


class IdleSource:
    description = "gpus"

    async def list(self) -> Listing:
        raise AssertionError("the collector never lists")

    async def watch(self, resource_version: str) -> AsyncIterator[WatchEvent]:
        raise AssertionError("the collector never watches")
        yield  # pragma: no cover


async def test_the_collector_reports_loops_writes_informers_lease_and_allocator() -> None:
    async def reconcile(key: str) -> float | None:
        if key == "bad":
            raise KubeError(500, "etcd timeout")
        return None

    loop: ReconcileLoop[str] = ReconcileLoop("gpunode", reconcile)
    await loop.process("good")
    await loop.process("bad")
    loop.add("waiting")
    api = FakeApi()
    api.put(gpu("a1", "node-a"))
    fence = Fence()
    writer = FencedWriter(api, fence)
    await writer.patch("GPU", "a1", {"status": {"phase": "Running"}})
    fence.open = False
    informer = Informer(IdleSource())
    informer.stats.lists, informer.stats.events = 2, 7
    state = state_with(gpus=FakeCache(cached_gpu("a1"), cached_gpu("a2", node="node-b")))
    leading = [False]
    registry = CollectorRegistry()
    registry.register(ControllerCollector(
        state=state, loops=[loop], writers=[("gpu-nodes", writer)], informers=[informer],
        is_leader=lambda: leading[0], lease_failures=lambda: 3,
    ))  # fmt: skip

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("tf_controller_allocator_ready") == 0.0
    assert value("tf_controller_leader") == 0.0
    state.recover()
    leading[0] = True
    assert value("tf_controller_reconciles_total", loop="gpunode", result="success") == 1
    assert value("tf_controller_reconciles_total", loop="gpunode", result="error") == 1
    assert value("tf_controller_queue_depth", loop="gpunode") == 1
    assert value("tf_controller_api_writes_total", writer="gpu-nodes", result="accepted") == 1
    assert value("tf_controller_api_writes_total", writer="gpu-nodes", result="fenced") == 0
    assert value("tf_controller_informer_events_total", informer="gpus", kind="list") == 2
    assert value("tf_controller_informer_events_total", informer="gpus", kind="event") == 7
    assert value("tf_controller_informer_synced", informer="gpus") == 0
    assert value("tf_controller_leader") == 1.0
    assert value("tf_controller_lease_failures_total") == 3
    assert value("tf_controller_allocator_ready") == 1.0
    assert value("tf_controller_allocator_objects", kind="gpus") == 2
    assert value("tf_controller_allocator_objects", kind="nodes") == 2
