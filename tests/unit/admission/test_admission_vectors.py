"""The nine test vectors of admission.md §14, plus the guide's raw test-pod."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tensorfusion.domain.admission import AdmissionDecision, AdmissionOutcome, admit, owner_key
from tensorfusion.domain.pod_request import request_from_pod

from .admission_builders import P, make_facts, make_pod, native_container, resources_ok

Run = Callable[..., AdmissionDecision]
TOLERATION = {
    "key": P + "used-by",
    "operator": "Equal",
    "value": "tensor-fusion",
    "effect": "PreferNoSchedule",
}
SCHEDULER_PATCH = [
    {"op": "replace", "path": "/spec/schedulerName", "value": "tensor-fusion-scheduler"}
]


def annotations_of(decision: AdmissionDecision) -> dict[str, str]:
    assert decision.mutated_pod is not None
    return dict(decision.mutated_pod["metadata"]["annotations"])


def test_vector_1_basic_tf_pod(run: Run) -> None:
    decision = run(make_pod(resources_ok()))
    assert decision.allowed and decision.outcome is AdmissionOutcome.MUTATED
    pod: dict[str, Any] = dict(decision.mutated_pod or {})
    assert pod["metadata"]["labels"][P + "component"] == "worker"
    assert pod["spec"]["schedulerName"] == "tensor-fusion-scheduler"
    assert TOLERATION in pod["spec"]["tolerations"]
    got = annotations_of(decision)
    assert got[P + "qos"] == "medium"
    assert got[P + "gpu-count"] == "1"
    assert got[P + "isolation"] == "soft"
    assert got[P + "is-local-gpu"] == "true"
    assert got[P + "sidecar-worker"] == "false"
    assert got[P + "inject-container"] == "app"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {P + "index_0": "1"}
    assert pod["metadata"]["finalizers"] == [P + "finalizer"]
    assert "priorityClassName" not in pod["spec"]
    # No limiter injection: the containers are unchanged apart from the index resource.
    assert [c["name"] for c in pod["spec"]["containers"]] == ["app"]
    assert "env" not in pod["spec"]["containers"][0]
    assert decision.workload is not None
    assert decision.workload.name == "pod-a"
    assert decision.workload.body["metadata"]["annotations"][P + "workload-mode"] == "dynamic"
    assert decision.patch


def test_vector_2_limits_only_becomes_high(run: Run) -> None:
    pod = make_pod({"tflops-limit": "20", "vram-limit": "8Gi"}, spec={"priority": 0})
    decision = run(pod)
    got = annotations_of(decision)
    assert got[P + "tflops-request"] == "20"
    assert got[P + "vram-request"] == "8Gi"
    assert got[P + "qos"] == "high"
    spec = (decision.mutated_pod or {})["spec"]
    assert spec["priorityClassName"] == "tensor-fusion-high"
    assert "priority" not in spec
    assert {"op": "remove", "path": "/spec/priority"} in decision.patch


def test_vector_3_gpu_count_zero(run: Run) -> None:
    decision = run(make_pod(resources_ok(**{"gpu-count": "0"})))
    assert not decision.allowed
    assert decision.code == 400
    assert decision.reason == "BadRequest"
    assert decision.message == (
        'tensor-fusion.ai/gpu-count: invalid value "0": must be an integer between 1 and 128'
    )
    assert decision.workload is None
    assert decision.counter_increment is None


def test_vector_4_auto_migration(run: Run) -> None:
    pod = make_pod(enabled=None, containers=[native_container("train", 2)])
    decision = run(pod, auto_migration={"enable": True})
    assert decision.allowed and decision.outcome is AdmissionOutcome.MUTATED
    mutated = decision.mutated_pod or {}
    assert mutated["metadata"]["labels"][P + "enabled"] == "true"
    got = annotations_of(decision)
    assert got[P + "isolation"] == "shared"
    assert got[P + "gpu-count"] == "2"
    assert got[P + "container-gpu-count"] == '{"train":2}'
    assert got[P + "vendor"] == "NVIDIA"
    limits = mutated["spec"]["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu" not in limits
    assert not any(key.startswith(P + "tflops") or key.startswith(P + "vram") for key in got)


def test_vector_5_progressive_migration(run: Run) -> None:
    pod = make_pod(enabled=None, containers=[native_container("app", 1)])
    decision = run(pod, progressive_migration=True)
    assert decision.allowed and decision.outcome is AdmissionOutcome.SCHEDULER_ONLY
    assert list(decision.patch) == SCHEDULER_PATCH
    assert decision.workload is None


def test_vector_6_enabled_replicas_cap_reached(run: Run) -> None:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs-a", "controller": True}
    replica_set = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "rs-a", "annotations": {P + "tf-counter-abc": "1"}},
    }
    pod = make_pod(
        resources_ok(**{"enabled-replicas": "1"}),
        labels={"pod-template-hash": "abc"},
        owner=owner,
    )
    decision = run(pod, owners={owner_key(owner): replica_set})
    assert decision.allowed and decision.outcome is AdmissionOutcome.UNTOUCHED
    assert decision.patch == ()
    assert decision.workload is None
    assert decision.counter_increment is None


def test_vector_7_enabled_replicas_zero_without_owner(run: Run) -> None:
    decision = run(make_pod({"enabled-replicas": "0"}))
    assert decision.allowed and decision.outcome is AdmissionOutcome.UNTOUCHED
    assert decision.patch == ()
    assert decision.workload is None


def test_vector_8_remote_vgpu_denied(run: Run) -> None:
    decision = run(make_pod(resources_ok(**{"is-local-gpu": "false"})))
    assert not decision.allowed
    assert decision.code == 400
    assert decision.message == (
        'tensor-fusion.ai/is-local-gpu: invalid value "false": '
        "remote vGPU is not supported by this version"
    )


def test_vector_9_opted_out_pod_under_progressive_migration(run: Run) -> None:
    pod = make_pod(enabled=False, containers=[native_container("app", 1)])
    decision = run(pod, progressive_migration=True, auto_migration={"enable": True})
    assert decision.allowed
    assert list(decision.patch) == SCHEDULER_PATCH


def test_guide_test_pod_dry_run_then_request() -> None:
    """production-deployment.md: the enabled label and the four resource annotations only."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "test-pod",
            "namespace": "default",
            "labels": {P + "enabled": "true"},
            "annotations": {
                P + "tflops-request": "100",
                P + "vram-request": "16Gi",
                P + "tflops-limit": "100",
                P + "vram-limit": "16Gi",
            },
        },
        "spec": {
            "schedulerName": "tensor-fusion-scheduler",
            "containers": [{"name": "test-container", "image": "nvidia/cuda"}],
        },
    }
    decision = admit(pod, make_facts(dry_run=True))
    assert decision.allowed and decision.dry_run and not decision.has_writes
    assert decision.warnings == ()
    assert decision.mutated_pod is not None
    request = request_from_pod(decision.mutated_pod)
    assert request.pool == "tensor-fusion-shared"
    assert request.count == 1
    assert request.isolation.value == "soft"
    assert request.qos.value == "high"
    assert request.request.tflops_milli == 100_000
    assert request.request.vram_bytes == 16 * 2**30
    assert request.limit == request.request
    assert request.request.to_json() == {"tflops": "100", "vram": "16Gi"}
    assert request.pod_index == 1
    assert request.workload == "test-pod"
