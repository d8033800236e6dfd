"""Typed admission facts: `load_facts`, objects that do not load, and the typed profile."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tensorfusion.domain.admission import (
    AdmissionDecision,
    AdmissionFacts,
    InvalidObject,
    admit,
    load_facts,
    read_object,
)
from tensorfusion.domain.admission.profile import read_profile
from tensorfusion.domain.model import (
    GPU,
    GPUPool,
    GPUResourceQuota,
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
    facts = make_facts(pools={DEFAULT_POOL: pool})
    assert facts.pools == {}
    decision = admit(make_pod(resources_ok(qos="ultra")), facts)
    assert decision.code == 400
    # Ranked as `gpupool`, before the `qos` annotation (admission.md §2, §5).
    assert decision.message == (
        f'GPUPool "{DEFAULT_POOL}" spec.defaultUsingLocalGPU: invalid value "sometimes": '
        f"must be a boolean (true or false); "
        f'GPUPool "{DEFAULT_POOL}" spec.qosConfig.defaultQoS: invalid value "x": '
        "must be one of 'low', 'medium', 'high' or 'critical'; "
        f'{P}qos: invalid value "ultra": must be one of low, medium, high, critical'
    )


def test_an_invalid_pool_that_is_not_chosen_is_ignored() -> None:
    bad = make_pool("pool-bad", default=False, spec={"qosConfig": {"defaultQoS": "x"}})
    facts = make_facts(pools={DEFAULT_POOL: make_pool(), "pool-bad": bad})
    decision = admit(make_pod(resources_ok()), facts)
    assert decision.allowed, decision.message
    assert not decision.warnings
    named = admit(make_pod(resources_ok(gpupool="pool-bad")), facts)
    assert named.code == 400 and named.message.startswith('GPUPool "pool-bad" spec.qosConfig')


def test_an_invalid_default_pool_is_still_the_default_candidate() -> None:
    bad = make_pool("a-pool", spec={"qosConfig": {"defaultQoS": "x"}})
    facts = make_facts(pools={DEFAULT_POOL: make_pool(), "a-pool": bad})
    decision = admit(make_pod(resources_ok()), facts)
    assert decision.code == 400
    assert decision.message.startswith('GPUPool "a-pool" spec.qosConfig.defaultQoS')
    assert decision.warnings == (
        f"several default GPU pools (a-pool, {DEFAULT_POOL}); using a-pool; "
        f"set {P}gpupool to choose",
    )


@pytest.mark.parametrize(
    ("single", "field"),
    [
        (
            {"maxRequests": {"compute": "150"}, "maxGPUCount": 1},
            'maxRequests.compute: invalid value "150"',
        ),
        (
            {"maxRequests": {"vram": "-1Gi"}, "maxGPUCount": 1},
            'maxRequests.vram: invalid value "-1Gi"',
        ),
    ],
)
def test_an_invalid_quota_is_not_enforced_with_a_warning(
    single: dict[str, object], field: str
) -> None:
    pod = make_pod(resources_ok(**{"gpu-count": "2"}))
    facts = make_facts(quota=make_quota(single))
    assert facts.quota is None
    decision = admit(pod, facts)
    assert decision.allowed, decision.message
    assert decision.warnings == (
        f'namespace quota not enforced: GPUResourceQuota "q" spec.single.{field}: '
        + ("must be between 0 and 100" if "compute" in field else "must be at least 0"),
    )
    # The same quota without the bad field is enforced (maxGPUCount 1).
    enforced = admit(pod, make_facts(quota=make_quota({"maxGPUCount": 1})))
    assert enforced.code == 403 and not enforced.warnings


def test_an_invalid_total_quota_is_not_enforced_either() -> None:
    quota = make_quota({"maxGPUCount": 1})
    quota["spec"]["total"] = {"requests": {"vram": "-1Gi"}}
    decision = admit(make_pod(resources_ok(**{"gpu-count": "2"})), make_facts(quota=quota))
    assert decision.allowed
    assert decision.warnings == (
        'namespace quota not enforced: GPUResourceQuota "q" spec.total.requests.vram: '
        'invalid value "-1Gi": must be at least 0',
    )


def test_an_invalid_gpu_is_skipped_with_a_warning_only_when_it_matters() -> None:
    bad = make_gpu("A100", "lots", "80Gi", name="gpu-bad")
    other = make_gpu("H100", "lots", "80Gi", name="gpu-other")
    facts = make_facts(gpus=[make_gpu("A100", "312", "40Gi"), bad, other, make_pool()])
    assert len(facts.gpus) == 1
    assert [(item.kind, item.name) for item in facts.invalid_objects] == [
        ("GPU", "gpu-bad"),
        ("GPU", "gpu-other"),
        ("GPU", DEFAULT_POOL),
    ]
    decision = admit(make_pod({"dedicated-gpu": "true", "gpu-model": "A100"}), facts)
    assert decision.allowed, decision.message
    assert decision.warnings == (
        f'{P}dedicated-gpu: GPU object left out of the capacity of model "A100": '
        'GPU "gpu-bad" status.capacity.tflops: invalid value "lots": '
        'must be a Kubernetes quantity such as "16Gi", "100" or "500m"',
        f'{P}dedicated-gpu: GPU object left out of the capacity of model "A100": '
        f'GPU "{DEFAULT_POOL}" kind: invalid value "GPUPool": must be "GPU"',
    )
    assert not admit(make_pod(resources_ok()), facts).warnings


def test_read_object_never_raises() -> None:
    bad = read_object(GPUResourceQuota, make_quota({"maxRequests": {"compute": "150"}}))
    assert isinstance(bad, InvalidObject) and bad.kind == "GPUResourceQuota"
    assert bad.details == (
        'GPUResourceQuota "q" spec.single.maxRequests.compute: invalid value "150": '
        "must be between 0 and 100"
    )
    assert isinstance(read_object(GPUPool, make_pool()), GPUPool)


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


# --- profiles read by admission's own rules (admission.md §2, §9.3) ------------------------


def test_a_bad_profile_and_a_bad_annotation_are_reported_together(run: Run) -> None:
    pod = make_pod(resources_ok(**{"workload-profile": "small", "qos": "zzz"}))
    decision = run(pod, profile=make_profile({"qos": "ultra"}))
    assert decision.code == 400
    assert decision.message == (
        'WorkloadProfile "small" spec.qos: invalid value "ultra": '
        "must be one of 'low', 'medium', 'high' or 'critical'; "
        f'{P}qos: invalid value "zzz": must be one of low, medium, high, critical'
    )


def test_profile_gpu_count_is_checked_on_the_final_count(run: Run) -> None:
    base = make_profile({"gpuCount": 0})
    pod = make_pod(resources_ok(**{"workload-profile": "small", "gpu-count": "2"}))
    decision = run(pod, profile=base)
    assert decision.allowed, decision.message
    assert (decision.mutated_pod or {})["metadata"]["annotations"][P + "gpu-count"] == "2"
    for count in (0, 200):
        alone = run(
            make_pod(resources_ok(**{"workload-profile": "small"})),
            profile=make_profile({"gpuCount": count}),
        )
        assert alone.code == 400
        assert alone.message == (
            f'WorkloadProfile "small" spec.gpuCount: invalid value "{count}": '
            "must be an integer between 1 and 128"
        )


def test_profile_gpu_indices_may_repeat_as_the_crd_allows(run: Run) -> None:
    pod = make_pod(resources_ok(**{"workload-profile": "small"}))
    decision = run(pod, profile=make_profile({"gpuIndices": [1, 1]}))
    assert decision.allowed, decision.message
    annotations = (decision.mutated_pod or {})["metadata"]["annotations"]
    assert (annotations[P + "gpu-indices"], annotations[P + "gpu-count"]) == ("1,1", "2")
    bad = run(pod, profile=make_profile({"gpuIndices": [1, -1]}))
    assert bad.message == (
        'WorkloadProfile "small" spec.gpuIndices: invalid value [1,-1]: '
        "must be a list of integers >= 0"
    )


def test_profile_null_fields_read_as_absent_and_booleans_are_strict(run: Run) -> None:
    pod = make_pod(resources_ok(**{"workload-profile": "small"}))
    decision = run(pod, profile=make_profile({"isolation": None, "resources": {"limits": None}}))
    assert decision.allowed, decision.message
    assert (decision.mutated_pod or {})["metadata"]["annotations"][P + "isolation"] == "soft"
    bad = run(pod, profile=make_profile({"isLocalGPU": "true", "sidecarWorker": 1}))
    assert bad.message == (
        'WorkloadProfile "small" spec.isLocalGPU: invalid value "true": '
        "must be a boolean (true or false); "
        'WorkloadProfile "small" spec.sidecarWorker: invalid value "1": '
        "must be a boolean (true or false)"
    )
