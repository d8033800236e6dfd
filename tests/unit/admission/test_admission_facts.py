"""Typed admission facts: `load_facts`, objects that do not load, and the typed profile."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tensorfusion.domain.admission import (
    AdmissionDecision,
    AdmissionFacts,
    admit,
    invalid_object_error,
    load_facts,
)
from tensorfusion.domain.admission.profile import read_profile
from tensorfusion.domain.model import (
    GPU,
    GPUPool,
    GPUResourceQuota,
    ModelError,
    ObjectMeta,
    WorkloadProfile,
    load_as,
)
from tensorfusion.domain.vocabulary import IsolationMode

from .admission_builders import (
    DEFAULT_POOL,
    P,
    make_facts,
    make_gpu,
    make_pod,
    make_pool,
    make_profile,
    make_quota,
    resources_ok,
)

Run = Callable[..., AdmissionDecision]


def test_load_facts_holds_typed_objects() -> None:
    facts = load_facts(
        namespace="default",
        pod_index=7,
        pools={DEFAULT_POOL: make_pool()},
        profile=make_profile({"gpuCount": 2}),
        quota=make_quota({"maxGPUCount": 4}),
        gpus=[make_gpu("A100", "312", "80Gi")],
        dry_run=True,
    )
    assert isinstance(facts.pools[DEFAULT_POOL], GPUPool)
    assert isinstance(facts.profile, WorkloadProfile) and facts.profile.spec.gpu_count == 2
    assert isinstance(facts.quota, GPUResourceQuota)
    assert facts.quota.spec.single.max_gpu_count == 4
    assert [type(gpu) for gpu in facts.gpus] == [GPU]
    assert facts.pod_index == 7 and facts.dry_run


def test_facts_built_from_models_directly() -> None:
    pool = GPUPool(
        metadata=ObjectMeta(name="p", annotations={P + "is-default-pool": "true"}),
    )
    facts = AdmissionFacts(namespace="default", pod_index=3, pools={"p": pool})
    decision = admit(make_pod(resources_ok()), facts)
    assert decision.allowed, decision.message
    assert (decision.mutated_pod or {})["metadata"]["annotations"][P + "gpupool"] == "p"


def test_a_pool_that_does_not_load_names_the_object_and_field() -> None:
    pool = make_pool(spec={"defaultUsingLocalGPU": "sometimes", "qosConfig": {"defaultQoS": "x"}})
    with pytest.raises(ModelError) as caught:
        make_facts(pools={DEFAULT_POOL: pool})
    error = invalid_object_error(caught.value)
    assert error.code == 400
    assert error.message == (
        f'GPUPool "{DEFAULT_POOL}": spec.defaultUsingLocalGPU: invalid value "sometimes": '
        f"must be a boolean (true or false); "
        f'GPUPool "{DEFAULT_POOL}": spec.qosConfig.defaultQoS: invalid value "x": '
        "must be one of 'low', 'medium', 'high' or 'critical'"
    )


def test_a_quota_or_gpu_of_another_kind_does_not_load() -> None:
    with pytest.raises(ModelError, match='kind: invalid value "GPUPool": must be "GPU"'):
        make_facts(gpus=[make_pool()])
    bad_quota = make_quota({"maxRequests": {"compute": "150"}})
    with pytest.raises(ModelError, match=r"spec\.single\.maxRequests\.compute: invalid value"):
        make_facts(quota=bad_quota)


def test_profile_fields_not_written_read_as_unset() -> None:
    unset = read_profile(load_as(WorkloadProfile, make_profile({})))
    assert unset.isolation is None and unset.gpu_indices is None and unset.passthrough == {}
    written = read_profile(
        load_as(WorkloadProfile, make_profile({"isolation": "soft", "gpuIndices": [3]}))
    )
    assert written.isolation is IsolationMode.SOFT and written.gpu_indices == (3,)


def test_profile_autoscaling_and_gang_are_merged_with_the_annotations() -> None:
    base = make_profile(
        {
            "resources": {"limits": {"tflops": "1"}},
            "autoScalingConfig": {"autoSetResources": {"targetResource": "vram"}},
            "gangScheduling": {"minMembers": 2},
        }
    )
    facts = make_facts(profile=base)
    pod = make_pod(
        {
            "workload-profile": "small",
            "autoscale": "true",
            "gang-enabled": "true",
            "gang-timeout": "5m",
        }
    )
    for _ in range(2):  # the typed profile is shared, never changed by a decision
        decision = admit(pod, facts)
        assert decision.workload is not None, decision.message
        spec = decision.workload.body["spec"]
        assert spec["autoScalingConfig"] == {
            "autoSetResources": {"targetResource": "vram", "enable": True}
        }
        assert spec["gangScheduling"] == {"minMembers": 2, "timeout": "5m", "mode": "Strict"}
    assert facts.profile is not None
    auto = facts.profile.spec.auto_scaling_config
    assert auto is not None and auto.auto_set_resources is not None
    assert auto.auto_set_resources.enable is None


def test_profile_autoscaling_is_switched_off_by_the_annotation() -> None:
    base = make_profile(
        {
            "resources": {"limits": {"tflops": "1"}},
            "autoScalingConfig": {"autoSetResources": {"enable": True, "targetResource": "all"}},
        }
    )
    decision = admit(
        make_pod({"workload-profile": "small", "autoscale": "false"}), make_facts(profile=base)
    )
    assert decision.workload is not None, decision.message
    assert decision.workload.body["spec"]["autoScalingConfig"] == {
        "autoSetResources": {"enable": False, "targetResource": "all"}
    }
    assert not decision.warnings
