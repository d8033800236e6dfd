"""admission.md §13: each reference failure, where it is pure logic, and what we do instead."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tensorfusion.domain.admission import AdmissionDecision, AdmissionOutcome, owner_key

from .admission_builders import P, make_pod, make_profile, native_container, resources_ok

Run = Callable[..., AdmissionDecision]


@pytest.mark.parametrize(
    ("annotations", "containers", "prefix"),
    [
        ({"enabled-replicas": "-3"}, None, f'{P}enabled-replicas: invalid value "-3"'),
        ({"gpu-count": "200"}, None, f'{P}gpu-count: invalid value "200"'),
        ({"gpu-indices": "0,0"}, None, f'{P}gpu-indices: invalid value "0,0"'),
        (
            {"tflops-limit": "1", "compute-percent-limit": "5"},
            None,
            f'{P}compute-percent-limit: invalid value "5"',
        ),
        ({"gang-min-members": "1"}, None, f'{P}gang-min-members: invalid value "1"'),
        ({"gang-timeout": "forever"}, None, f'{P}gang-timeout: invalid value "forever"'),
        ({"worker-pod-template": "x"}, None, f'{P}worker-pod-template: invalid value "x"'),
        ({"vendor": "AMD"}, None, f'{P}isolation: invalid value "soft"'),
        ({"dedicated-gpu": "true"}, None, f'{P}dedicated-gpu: invalid value "true"'),
        (
            {"dedicated-gpu": "true", "gpu-model": "X"},
            None,
            f'{P}gpu-model: invalid value "X"',
        ),
        ({}, [{"name": "a"}, {"name": "b"}], f"{P}inject-container: required"),
    ],
)
def test_parse_failures_are_400_naming_annotation_and_value(
    run: Run, annotations: dict[str, str], containers: list[dict[str, str]] | None, prefix: str
) -> None:
    decision = run(make_pod(resources_ok(**annotations), containers=containers))
    assert not decision.allowed
    assert decision.code == 400 and decision.reason == "BadRequest"
    assert decision.message.startswith(prefix), decision.message


@pytest.mark.parametrize(
    ("annotations", "pools"),
    [
        ({"workload-profile": "nope"}, None),
        ({"gpupool": "nope"}, None),
        ({}, {}),
    ],
)
def test_missing_profile_or_pool_is_400(
    run: Run, annotations: dict[str, str], pools: dict[str, object] | None
) -> None:
    extra = {} if pools is None else {"pools": pools}
    assert run(make_pod(resources_ok(**annotations)), **extra).code == 400


def test_no_resource_request_is_400_naming_the_three_annotations(run: Run) -> None:
    message = run(make_pod()).message
    for key in ("tflops-request", "compute-percent-request", "vram-request"):
        assert P + key in message


@pytest.mark.parametrize(("key", "value"), [("qos", "gold"), ("isolation", "strict")])
def test_invalid_enums_are_400_not_a_later_crd_failure(run: Run, key: str, value: str) -> None:
    decision = run(make_pod(resources_ok(**{key: value})))
    assert decision.code == 400 and decision.workload is None


def test_unparsable_quantity_is_400_not_ignored(run: Run) -> None:
    decision = run(make_pod({"tflops-limit": "10", "vram-limit": "16GB"}))
    assert decision.code == 400
    assert decision.message.startswith(f'{P}vram-limit: invalid value "16GB"')


@pytest.mark.parametrize(
    "annotation",
    [
        {"is-local-gpu": "yes"},
        {"sidecar-worker": "1"},
        {"require-gpu-topology": "hard"},
        {"gpu-topology-max-tier": "9"},
        {"gpu-topology-source": "pci"},
    ],
)
def test_invalid_mode_and_topology_annotations_are_400(
    run: Run, annotation: dict[str, str]
) -> None:
    assert run(make_pod(resources_ok(**annotation))).code == 400


def test_unknown_inject_container_is_400_not_untouched(run: Run) -> None:
    decision = run(make_pod(resources_ok(**{"inject-container": "ghost"})))
    assert decision.code == 400 and decision.outcome is AdmissionOutcome.DENIED


def test_enabled_replicas_without_owner_is_a_warning_and_zero_still_means_no_tf(run: Run) -> None:
    counted = run(make_pod(resources_ok(**{"enabled-replicas": "4"})))
    assert counted.outcome is AdmissionOutcome.MUTATED and counted.warnings
    zero = run(make_pod(resources_ok(**{"enabled-replicas": "0"})))
    assert zero.outcome is AdmissionOutcome.UNTOUCHED and zero.patch == ()


def test_missing_owner_is_409(run: Run) -> None:
    ref = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "controller": True}
    pod = make_pod(resources_ok(**{"enabled-replicas": "1"}), owner=ref)
    assert run(pod, owners={owner_key(ref): None}).code == 409


def test_index_fallback_warning_is_passed_through(run: Run) -> None:
    decision = run(make_pod(resources_ok()), pod_index=77, warnings=("random index 77",))
    assert decision.warnings == ("random index 77",)
    limits = (decision.mutated_pod or {})["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {P + "index_9": "5"}


def test_pod_with_zero_containers_is_400(run: Run) -> None:
    assert run(make_pod(resources_ok(), containers=[])).code == 400


def test_dry_run_has_no_writes(run: Run) -> None:
    decision = run(make_pod(resources_ok()), dry_run=True)
    assert decision.workload is not None
    assert not decision.has_writes


def test_custom_scheduler_is_left_alone_with_a_warning(run: Run) -> None:
    pod = make_pod(
        enabled=None, containers=[native_container("a", 1)], spec={"schedulerName": "volcano"}
    )
    decision = run(pod, progressive_migration=True)
    assert decision.outcome is AdmissionOutcome.UNTOUCHED and decision.patch == ()
    assert any("volcano" in warning for warning in decision.warnings)


def test_profile_values_are_honoured_when_no_annotation(run: Run) -> None:
    profile = make_profile({"isolation": "shared", "isLocalGPU": True}, name="p")
    decision = run(make_pod({"workload-profile": "p"}), profile=profile)
    annotations = (decision.mutated_pod or {})["metadata"]["annotations"]
    assert annotations[P + "isolation"] == "shared"
    assert annotations[P + "is-local-gpu"] == "true"


def test_profile_gpu_indices_reach_the_pod(run: Run) -> None:
    profile = make_profile({"gpuIndices": [1], "isolation": "shared"}, name="p")
    decision = run(make_pod({"workload-profile": "p"}), profile=profile)
    assert (decision.mutated_pod or {})["metadata"]["annotations"][P + "gpu-indices"] == "1"


def test_only_counted_pods_carry_the_counter_key_and_every_tf_pod_the_finalizer(run: Run) -> None:
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True}
    owner = {"metadata": {"name": "rs", "annotations": {}}}
    counted = run(
        make_pod(
            resources_ok(**{"enabled-replicas": "2"}), owner=ref, labels={"pod-template-hash": "h"}
        ),
        owners={owner_key(ref): owner},
    )
    plain = run(make_pod(resources_ok()))
    for decision in (counted, plain):
        assert P + "finalizer" in (decision.mutated_pod or {})["metadata"]["finalizers"]
    assert (counted.mutated_pod or {})["metadata"]["annotations"][P + "pod-counter-key"] == (
        P + "tf-counter-h"
    )
    assert P + "pod-counter-key" not in (plain.mutated_pod or {})["metadata"]["annotations"]
