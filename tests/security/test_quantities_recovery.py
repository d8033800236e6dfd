"""Recovery with a bad quantity in one object of each kind, and a second allocation of a GPU.

The bad objects are reported (problems, log line, a queued Event); everything else recovers.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tensorfusion.adapters.kube.object_client import KubeError
from tensorfusion.app.controller_metrics import ControllerCollector
from tensorfusion.controller.allocator_state import UNREADABLE_REASON, AllocatorState
from tensorfusion.controller.problem_reports import ProblemReporter
from tensorfusion.domain.allocator.recovery import OVER_COMMIT_REASON

from ..unit.controller.reconciler_fakes import FakeApi, FakeRecorder, Fence
from ..unit.controller.test_allocator_state import (
    V1,
    FakeCache,
    gpu,
    quota,
    state_with,
    worker,
)

HUGE = "1e400"


def pool(name: str, min_tflops: str = "1") -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "GPUPool", "metadata": {"name": name},
            "spec": {"capacityConfig": {"minResources": {"tflops": min_tflops}}}}  # fmt: skip


def gpu_node(name: str, ram: str = "64Gi") -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "GPUNode", "metadata": {"name": name},
            "status": {"nodeInfo": {"ramSize": ram}}}  # fmt: skip


def template(name: str) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "SchedulingConfigTemplate", "metadata": {"name": name},
            "spec": {"placement": {"mode": "CompactFirst"}}}  # fmt: skip


def recovered_state() -> AllocatorState:
    bad_pod = worker("p-bad", "a2", "Running")
    bad_pod["metadata"]["annotations"]["tensor-fusion.ai/tflops-request"] = HUGE
    state = state_with(
        gpus=FakeCache(gpu("a1"), gpu("a2"), gpu("a3", capacity=HUGE)),
        pods=FakeCache(worker("p-good", "a1", "Running"), bad_pod),
        quotas=FakeCache(quota("q-good", "2026-01-01T00:00:00Z", "500"),
                         {**quota("q-bad", "2026-01-01T00:00:00Z", HUGE),
                          "metadata": {"name": "q-bad", "namespace": "other",
                                       "creationTimestamp": "2026-01-01T00:00:00Z"}}),
        pools=FakeCache(pool("shared"), pool("broken", min_tflops=HUGE)),
        gpu_nodes=FakeCache(gpu_node("node-a"), gpu_node("node-b", ram="9" * 200)),
        templates=FakeCache(template("t")),
    )  # fmt: skip
    state.recover()
    return state


def test_one_bad_quantity_of_each_kind_is_that_objects_problem(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = recovered_state()
    allocator = state.allocator
    assert allocator is not None
    # Everything readable recovered.
    assert sorted(allocator.gpus) == ["a1", "a2"]
    assert set(allocator.records) == {"uid-p-good"}
    assert "shared" in allocator.pools and "broken" not in allocator.pools
    assert set(allocator.quotas) == {"ml"}
    assert allocator.nodes["node-a"].ram_bytes == 64 * 2**30
    # Every bad object is reported, once, with the bound it broke.
    bad = {
        "GPU a3", "GPUPool broken", "GPUNode node-b", "GPUResourceQuota other/q-bad",
        "Pod ml/p-bad",
    }  # fmt: skip
    assert set(state.problems) == bad
    assert "9223372036854775807" in state.problems["GPU a3"]
    assert "longer than 128 characters" in state.problems["GPUNode node-b"]
    assert (
        'tflops-request: invalid value "1e400": must be at most' in state.problems["Pod ml/p-bad"]
    )
    assert {notice.key for notice in state.notices} == bad
    assert state.last_report is not None
    assert set(state.last_report.unreadable) == bad - {"Pod ml/p-bad"}
    logged = caplog.text
    assert all(key in logged for key in bad)


def test_a_second_allocation_of_a_gpu_is_refused_and_reported() -> None:
    first = worker("p-first", "a1", "Running", creationTimestamp="2026-01-01T00:00:00Z")
    second = worker("p-second", "a1", "Running", creationTimestamp="2026-01-01T00:05:00Z")
    for pod in (first, second):
        pod["metadata"]["annotations"]["tensor-fusion.ai/tflops-request"] = "200"
    # The later bound pod is listed first: the earliest bound one still keeps the GPU.
    state = state_with(gpus=FakeCache(gpu("a1")), pods=FakeCache(second, first))
    report = state.recover()
    allocator = state.allocator
    assert allocator is not None
    assert set(allocator.records) == {"uid-p-first"}
    assert allocator.gpus["a1"].available_tflops == 112_000
    assert list(report.refused_pods) == ["ml/p-second"]
    assert "has no room" in report.refused_pods["ml/p-second"]
    assert state.refused == 1
    [notice] = state.notices
    assert (notice.key, notice.reason) == ("Pod ml/p-second", OVER_COMMIT_REASON)


def test_a_pod_bound_after_recovery_that_over_commits_is_refused() -> None:
    pods = FakeCache()
    state = state_with(gpus=FakeCache(gpu("a1")), pods=pods)
    state.recover()
    allocator = state.allocator
    assert allocator is not None
    late = worker("p-late", "a1", "Pending")
    late["metadata"]["annotations"]["tensor-fusion.ai/tflops-request"] = "300"
    state.on_pod(pods.put(worker("p-live", "a1", "Running")))  # 100 TFLOPs: fits
    state.on_pod(pods.put(late))  # 300 more on a 312 TFLOPs GPU: refused
    assert set(allocator.records) == {"uid-p-live"}
    assert allocator.gpus["a1"].available_tflops == 212_000
    assert state.refused == 1 and "Pod ml/p-late" in state.problems


async def test_each_problem_becomes_one_warning_event_on_its_object() -> None:
    state = recovered_state()
    caches = state.caches
    recorder = FakeRecorder()
    reporter = ProblemReporter(
        state=state, client=FakeApi(), fence=Fence(), recorder=recorder,
        caches={"GPU": caches.gpus, "GPUNode": caches.gpu_nodes, "GPUPool": caches.pools,
                "GPUResourceQuota": caches.quotas, "Pod": caches.pods},
    )  # fmt: skip
    assert await reporter.publish() == 5
    assert sorted((e.kind, e.name, e.reason) for e in recorder.events) == [
        ("GPU", "a3", UNREADABLE_REASON), ("GPUNode", "node-b", UNREADABLE_REASON),
        ("GPUPool", "broken", UNREADABLE_REASON),
        ("GPUResourceQuota", "q-bad", UNREADABLE_REASON), ("Pod", "p-bad", UNREADABLE_REASON),
    ]  # fmt: skip
    assert await reporter.publish() == 0  # each problem once
    # The same problem seen again is not news; a changed one is.
    state.note("GPU a3", state.problems["GPU a3"])
    state.note("GPU a3", "another problem")
    assert await reporter.publish() == 1


def test_the_metrics_count_refusals_and_problems() -> None:
    state = recovered_state()
    state.refused = 2
    registry = CollectorRegistry()
    registry.register(ControllerCollector(
        state=state, loops=[], writers=[], informers=[], is_leader=lambda: True,
        lease_failures=lambda: 0,
    ))  # fmt: skip
    assert registry.get_sample_value("tf_controller_allocations_refused_total") == 2
    assert registry.get_sample_value("tf_controller_object_problems") == 5


def readable(api: FakeApi, kind: str, name: str) -> dict[str, Any] | None:
    conditions = api.obj(kind, name).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Readable"), None)


async def test_a_bad_pool_or_gpu_node_carries_a_readable_condition_until_fixed() -> None:
    state = recovered_state()
    caches = state.caches
    api = FakeApi()
    for cache in (caches.pools, caches.gpu_nodes):
        for obj in cache.list():
            api.put(obj)
    api.fail("patch", "GPUPool", "broken", KubeError(500, "etcd timeout"))
    reporter = ProblemReporter(
        state=state, client=api, fence=Fence(), recorder=FakeRecorder(),
        caches={"GPUNode": caches.gpu_nodes, "GPUPool": caches.pools},
        clock=lambda: 1_796_428_800.0,  # 2026-12-05T00:00:00Z
    )  # fmt: skip
    await reporter.publish()
    node_condition = readable(api, "GPUNode", "node-b")
    assert node_condition is not None
    assert (node_condition["status"], node_condition["reason"]) == ("False", UNREADABLE_REASON)
    assert "longer than 128 characters" in node_condition["message"]
    assert readable(api, "GPUPool", "broken") is None  # the write failed: tried again
    assert readable(api, "GPUPool", "shared") is None and readable(api, "GPUNode", "node-a") is None
    await reporter.publish()
    pool_condition = readable(api, "GPUPool", "broken")
    assert pool_condition is not None and pool_condition["status"] == "False"
    # Fixed: the informer delivers the object (with its condition) and a good spec.
    pools = caches.pools
    assert isinstance(pools, FakeCache)
    fixed_pool = {**api.obj("GPUPool", "broken"), "spec": pool("broken")["spec"]}
    state.on_pool_or_template(pools.put(fixed_pool))
    assert "GPUPool broken" not in state.problems
    await reporter.publish()
    fixed = readable(api, "GPUPool", "broken")
    assert fixed is not None and (fixed["status"], fixed["reason"]) == ("True", "ReadsWell")
    assert fixed["lastTransitionTime"] == "2026-12-05T00:00:00Z"
