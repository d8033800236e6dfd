"""`Extender` against fakes of the pod calls: the §12 bind order (patch, commit, Binding), the
fence, retries and rollbacks, and the answers for other pods."""

from __future__ import annotations

from tensorfusion.domain.allocator.records import RecordState
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.scheduling.extender_protocol import ExtenderBindingArgs
from tensorfusion.domain.scheduling.native import NativePlugins
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster
from tensorfusion.extender.scheduling import FAILED_GPU_SCHEDULING, NOT_LEADER, Extender

from .conftest import (
    NODES,
    SETTINGS,
    Harness,
    NoCache,
    args_for,
    binding,
    left_behind,
    place,
    worker,
)


async def test_the_gpu_ids_travel_in_the_binding_committed_before_it(h: Harness) -> None:
    pod = worker()
    chosen = await place(h, pod)
    result = await h.extender.bind(binding(pod, chosen))
    assert result.ok, result.error_message
    assert h.pods.calls == ["get", "bind"], "one API write per bind"
    assert h.pods.states_at_bind == [RecordState.COMMITTED]
    record = h.allocator.records["u1"]
    assert pod["metadata"]["annotations"][KEYS.gpu_ids] == ",".join(record.gpus)
    assert pod["metadata"]["annotations"][KEYS.index] == "3"
    assert h.events.recorded[-1][2] == "GPUDeviceAllocated"


async def test_a_replica_that_lost_the_lease_refuses_bind_before_writing(h: Harness) -> None:
    pod = left_behind()
    chosen = await place(h, pod)
    h.leading[0] = False
    result = await h.extender.bind(binding(pod, chosen))
    assert result.error_message == NOT_LEADER
    assert h.pods.calls == []
    assert KEYS.gpu_ids not in pod["metadata"]["annotations"]


async def test_a_cleanup_patch_that_keeps_failing_releases_the_assumption(h: Harness) -> None:
    pod = left_behind()
    chosen = await place(h, pod)
    h.pods.patch_failures = 3
    result = await h.extender.bind(binding(pod, chosen))
    assert "cannot write the GPU annotations" in result.error_message
    assert h.pods.calls == ["get", "patch", "patch", "patch"]
    assert [round(s) for s in h.slept] == [1, 2]
    assert "u1" not in h.allocator.records
    assert h.events.recorded[-1][2] == "GPUDeviceAllocatedFailed"


async def test_a_cleanup_patch_that_succeeds_on_retry_binds(h: Harness) -> None:
    pod = left_behind()
    chosen = await place(h, pod)
    h.pods.patch_failures = 2
    assert (await h.extender.bind(binding(pod, chosen))).ok
    assert h.pods.calls == ["get", "patch", "patch", "patch", "bind"]
    assert KEYS.container_gpus not in pod["metadata"]["annotations"]


async def test_a_failed_binding_releases_the_record_and_leaves_no_annotation(h: Harness) -> None:
    pod = worker()
    chosen = await place(h, pod)
    h.pods.bind_error = RuntimeError("409: pod is being deleted")
    result = await h.extender.bind(binding(pod, chosen))
    assert "binding to node" in result.error_message
    assert "u1" not in h.allocator.records
    assert KEYS.gpu_ids not in pod["metadata"]["annotations"]
    assert all(g.committed_tflops == 0 for g in h.allocator.gpus.values())


async def test_a_failed_binding_of_a_pod_bound_all_the_same_succeeds(h: Harness) -> None:
    pod = worker()
    chosen = await place(h, pod)
    h.pods.bind_error, h.pods.bound_anyway = RuntimeError("timeout"), True
    assert (await h.extender.bind(binding(pod, chosen))).ok
    assert h.allocator.records["u1"].state is RecordState.COMMITTED


async def test_a_stale_uid_is_refused(h: Harness) -> None:
    pod = worker()
    chosen = await place(h, pod)
    stale = binding(pod, chosen)
    other = ExtenderBindingArgs(stale.pod_name, stale.pod_namespace, "old-uid", chosen)
    assert "stale binding request" in (await h.extender.bind(other)).error_message


async def test_bind_without_an_assumption_evaluates_the_node_alone(h: Harness) -> None:
    pod = worker()
    h.pods.add(pod)
    assert (await h.extender.bind(binding(pod, "node-b"))).ok
    assert h.allocator.records["u1"].gpus == ("b1",)


async def test_an_unplaceable_pod_gets_one_warning_event_with_the_summary(h: Harness) -> None:
    pod = worker(tflops="400")
    h.pods.add(pod)
    result = await h.extender.filter(args_for(pod))
    assert result.node_names == ()
    [(name, type_, reason, message)] = h.events.recorded
    assert (name, type_, reason) == ("pod-u1", "Warning", FAILED_GPU_SCHEDULING)
    assert message == "0/2 nodes are available: 2 GPUResourceFilter."


async def test_other_pods_pass_everywhere_and_bind_plainly(h: Harness) -> None:
    pod = {"metadata": {"name": "plain", "namespace": "ns", "uid": "p"}, "spec": {}}
    h.pods.add(pod)
    result = await h.extender.filter(args_for(pod))
    assert result.node_names == NODES
    assert (await h.extender.bind(binding(pod, "node-a"))).ok
    assert h.pods.calls == ["get", "bind"]


async def test_not_ready_answers_allocator_not_ready(h: Harness) -> None:
    extender = Extender(
        allocator=lambda: None, native=NativeCluster(NativePlugins()), pods=h.pods,
        cache=NoCache(), events=h.events, fence=lambda: 1.0,
        profile=SETTINGS.profile,
    )  # fmt: skip
    pod = worker()
    assert (await extender.filter(args_for(pod))).error_message == "allocator not ready"
    assert (await extender.bind(binding(pod, "node-a"))).error_message == "allocator not ready"


async def test_assumptions_without_a_bind_expire_after_60_s(h: Harness) -> None:
    now = [100.0]
    h.extender._clock = lambda: now[0]
    await place(h, worker())
    now[0] = 159.0
    assert h.extender.expire_assumptions() == []
    now[0] = 161.0
    assert h.extender.expire_assumptions() == ["u1"]
    assert h.allocator.records == {}


async def test_a_retried_filter_of_a_committed_pod_keeps_its_node(h: Harness) -> None:
    """kube-scheduler gave up waiting for a bind that then committed: the pod is not placed
    again (that would free the GPUs it holds), and a late bind elsewhere changes nothing."""
    pod = worker()
    chosen = await place(h, pod)
    assert (await h.extender.bind(binding(pod, chosen))).ok
    gpus = pod["metadata"]["annotations"][KEYS.gpu_ids]
    again = await h.extender.filter(args_for(pod))
    assert again.node_names == (chosen,)
    other = next(n for n in NODES if n != chosen)
    late = await h.extender.bind(binding(pod, other))
    assert late.error_message == f"pod is already bound to node {chosen}"
    assert pod["metadata"]["annotations"][KEYS.gpu_ids] == gpus
    record = h.allocator.records["u1"]
    assert (record.node, record.state) == (chosen, RecordState.COMMITTED)
    h.pods.calls.clear()
    assert (await h.extender.bind(binding(pod, chosen))).ok
    assert h.pods.calls == ["get"]
