"""Pipeline steps of admission.md §4-§12, one behaviour per test."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import pytest

from tensorfusion.domain.admission import (
    AdmissionDecision,
    AdmissionOutcome,
    MissingFactError,
    admit,
    facts_needed,
    owner_key,
    read_auto_migration,
)
from tensorfusion.domain.admission.hashing import (
    NAME_SUFFIX_ALPHABET,
    client_config_hash,
    hashed_name_suffix,
    random_name_suffix,
    stable_hash,
)
from tensorfusion.domain.admission.replica_gate import (
    counter_key,
    decremented_count,
    incremented_count,
    read_count,
)
from tensorfusion.domain.annotations import KEYS, build_keys
from tensorfusion.domain.model import GPUPool, load_as

from .admission_builders import (
    DEFAULT_POOL,
    P,
    apply_patch,
    make_facts,
    make_gpu,
    make_pod,
    make_pool,
    make_profile,
    make_quota,
    native_container,
    resources_ok,
)

Run = Callable[..., AdmissionDecision]
RS_REF = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "name": "web-7d9f",
    "uid": "rs-uid",
    "controller": True,
}
DEPLOYMENT_REF = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "name": "web",
    "uid": "dep-uid",
    "controller": True,
    "blockOwnerDeletion": True,
}


def annotations_of(decision: AdmissionDecision) -> dict[str, str]:
    assert decision.mutated_pod is not None, decision.message
    return dict(decision.mutated_pod["metadata"]["annotations"])


def spec_of(decision: AdmissionDecision) -> dict[str, Any]:
    assert decision.workload is not None, decision.message
    return dict(decision.workload.body["spec"])


def replica_set(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "web-7d9f",
            "annotations": annotations or {},
            "ownerReferences": [DEPLOYMENT_REF],
        },
    }


def profile(spec: dict[str, Any], name: str = "small") -> dict[str, Any]:
    return make_profile(spec, name)


# --- step 1: decode -------------------------------------------------------------------------


def test_pod_without_containers_is_denied(run: Run) -> None:
    decision = run(make_pod(resources_ok(), containers=[]))
    assert decision.code == 400
    assert decision.message == "pod has no containers (spec.containers)"


def test_request_namespace_is_used_when_the_pod_has_none(run: Run) -> None:
    pod = make_pod(resources_ok())
    del pod["metadata"]["namespace"]
    decision = run(pod, namespace="team-a")
    assert decision.workload is not None and decision.workload.namespace == "team-a"
    assert (decision.mutated_pod or {})["metadata"]["namespace"] == "team-a"
    assert {"op": "add", "path": "/metadata/namespace", "value": "team-a"} in decision.patch


# --- step 3: workload identity --------------------------------------------------------------


def test_replica_set_owned_by_deployment_gives_the_deployment(run: Run) -> None:
    pod = make_pod(resources_ok(), owner=RS_REF)
    decision = run(pod, owners={owner_key(RS_REF): replica_set()})
    assert decision.workload is not None
    assert decision.workload.name == "web"
    refs = decision.workload.body["metadata"]["ownerReferences"]
    assert refs == [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "web",
            "uid": "dep-uid",
            "controller": True,
        }
    ]
    assert (decision.mutated_pod or {})["metadata"]["labels"][P + "workload"] == "web"
    assert P + "pending-owned-workload" not in annotations_of(decision)


def test_vanished_replica_set_falls_back_to_the_direct_controller(run: Run) -> None:
    decision = run(make_pod(resources_ok(), owner=RS_REF), owners={owner_key(RS_REF): None})
    assert decision.workload is not None and decision.workload.name == "web-7d9f"


def test_job_owned_by_cronjob_gives_the_cronjob(run: Run) -> None:
    job_ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "nightly-1", "controller": True}
    cron_ref = {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "controller": True}
    job = {"metadata": {"name": "nightly-1", "ownerReferences": [cron_ref]}}
    decision = run(make_pod(resources_ok(), owner=job_ref), owners={owner_key(job_ref): job})
    assert decision.workload is not None and decision.workload.name == "nightly"


def test_statefulset_is_the_workload_itself(run: Run) -> None:
    ref = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "controller": True}
    decision = run(make_pod(resources_ok(), owner=ref))
    assert decision.workload is not None and decision.workload.name == "db"


def test_bare_pod_gets_pending_owned_workload(run: Run) -> None:
    decision = run(make_pod(resources_ok(), name="solo"))
    assert annotations_of(decision)[P + "pending-owned-workload"] == "solo"
    assert decision.workload is not None
    assert "ownerReferences" not in decision.workload.body["metadata"]


def test_generate_name_uses_the_given_suffix(run: Run) -> None:
    pod = make_pod(resources_ok(), name=None)
    pod["metadata"]["generateName"] = "train-"
    decision = run(pod, name_suffix="abcd2345")
    assert decision.workload is not None and decision.workload.name == "train-abcd2345"


def test_generate_name_without_suffix_is_derived_deterministically(run: Run) -> None:
    pod = make_pod(resources_ok(), name=None)
    pod["metadata"]["generateName"] = "train-"
    first, second = run(pod), run(pod)
    assert first.workload is not None and second.workload is not None
    assert first.workload.name == second.workload.name
    suffix = first.workload.name.removeprefix("train-")
    assert len(suffix) == 8 and set(suffix) <= set(NAME_SUFFIX_ALPHABET)


def test_name_suffix_helpers_use_the_alphabet() -> None:
    assert set(NAME_SUFFIX_ALPHABET).isdisjoint("0lz")
    suffix = random_name_suffix(random.Random(7))
    assert len(suffix) == 8 and set(suffix) <= set(NAME_SUFFIX_ALPHABET)
    assert hashed_name_suffix("x") == hashed_name_suffix("x") != hashed_name_suffix("y")


# --- step 4: profile ------------------------------------------------------------------------


def test_profile_is_the_base_and_annotations_override_field_by_field(run: Run) -> None:
    base = profile(
        {
            "resources": {
                "requests": {"tflops": "5", "vram": "2Gi"},
                "limits": {"tflops": "10", "vram": "4Gi"},
            },
            "qos": "low",
            "gpuModel": "A100",
            "gpuCount": 2,
        }
    )
    pod = make_pod({"workload-profile": "small", "vram-limit": "8Gi", "qos": "critical"})
    decision = run(pod, profile=base)
    got = annotations_of(decision)
    assert got[P + "tflops-request"] == "5"
    assert got[P + "tflops-limit"] == "10"
    assert got[P + "vram-request"] == "2Gi"
    assert got[P + "vram-limit"] == "8Gi"
    assert got[P + "qos"] == "critical"
    assert got[P + "gpu-model"] == "A100"
    assert got[P + "gpu-count"] == "2"
    assert (decision.mutated_pod or {})["spec"]["priorityClassName"] == "tensor-fusion-critical"


def test_annotation_compute_kind_clears_the_profile_kind_on_that_side(run: Run) -> None:
    base = profile({"resources": {"limits": {"tflops": "10", "vram": "4Gi"}}})
    decision = run(
        make_pod({"workload-profile": "small", "compute-percent-limit": "50"}), profile=base
    )
    got = annotations_of(decision)
    assert P + "tflops-limit" not in got
    assert got[P + "compute-percent-limit"] == "50"
    assert got[P + "compute-percent-request"] == "50"


def test_profile_compute_conflict_is_an_invalid_profile(run: Run) -> None:
    base = profile({"resources": {"limits": {"tflops": "10", "compute": "50"}}})
    decision = run(make_pod({"workload-profile": "small"}), profile=base)
    assert decision.code == 400
    assert decision.message == (
        'WorkloadProfile "small" spec.resources.limits: invalid value '
        '{"compute":"50","tflops":"10"}: tflops and compute are mutually exclusive; set only one'
    )


def test_missing_profile_is_denied(run: Run) -> None:
    decision = run(make_pod(resources_ok(**{"workload-profile": "gone"})))
    assert decision.code == 400
    assert decision.message == (
        f'WorkloadProfile "gone" not found in namespace "default" ({P}workload-profile)'
    )


def test_profile_with_bad_values_names_the_profile_field(run: Run) -> None:
    base = profile({"resources": {"limits": {"vram": "lots"}}, "gpuCount": "two", "qos": "x"})
    decision = run(make_pod({"workload-profile": "small"}), profile=base)
    assert decision.code == 400 and decision.reason == "BadRequest"
    assert decision.message == "; ".join(
        [
            'WorkloadProfile "small" spec.resources.limits.vram: invalid value "lots": '
            'must be a Kubernetes quantity such as "16Gi", "100" or "500m"',
            'WorkloadProfile "small" spec.qos: invalid value "x": '
            "must be one of 'low', 'medium', 'high' or 'critical'",
            'WorkloadProfile "small" spec.gpuCount: invalid value "two": must be an integer',
        ]
    )


def test_profile_isolation_and_local_gpu_are_honoured(run: Run) -> None:
    base = profile(
        {"isolation": "hard", "isLocalGPU": True, "resources": {"limits": {"tflops": "1"}}}
    )
    pool = make_pool(spec={"defaultUsingLocalGPU": False})
    decision = run(
        make_pod({"workload-profile": "small"}), profile=base, pools={DEFAULT_POOL: pool}
    )
    got = annotations_of(decision)
    assert got[P + "isolation"] == "hard"
    assert got[P + "is-local-gpu"] == "true"
    assert got[P + "sidecar-worker"] == "true"


def test_profile_gpu_indices_are_normalised_into_the_pod(run: Run) -> None:
    base = profile({"gpuIndices": [2, 5], "resources": {"limits": {"tflops": "1"}}})
    decision = run(make_pod({"workload-profile": "small"}), profile=base)
    got = annotations_of(decision)
    assert got[P + "gpu-indices"] == "2,5"
    assert got[P + "gpu-count"] == "2"
    assert spec_of(decision)["gpuIndices"] == [2, 5]


def test_profile_passthrough_fields_reach_the_workload(run: Run) -> None:
    affinity: dict[str, Any] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
    }
    base = profile(
        {"replicas": 3, "nodeAffinity": affinity, "resources": {"limits": {"tflops": "1"}}}
    )
    spec = spec_of(run(make_pod({"workload-profile": "small"}), profile=base))
    assert spec["replicas"] == 3
    assert spec["nodeAffinity"] == affinity


# --- step 5: pool ---------------------------------------------------------------------------


def test_annotated_pool_is_used(run: Run) -> None:
    pools = {DEFAULT_POOL: make_pool(), "pool-b": make_pool("pool-b", default=False)}
    decision = run(make_pod(resources_ok(gpupool="pool-b")), pools=pools)
    assert annotations_of(decision)[P + "gpupool"] == "pool-b"
    assert (decision.mutated_pod or {})["metadata"]["labels"][P + "gpupool"] == "pool-b"


def test_missing_annotated_pool_is_denied(run: Run) -> None:
    decision = run(make_pod(resources_ok(gpupool="gpu-a")))
    assert decision.message == f'GPU pool "gpu-a" not found ({P}gpupool)'


def test_profile_pool_is_used_when_not_annotated(run: Run) -> None:
    pools = {DEFAULT_POOL: make_pool(), "pool-b": make_pool("pool-b", default=False)}
    base = profile({"poolName": "pool-b", "resources": {"limits": {"tflops": "1"}}})
    decision = run(make_pod({"workload-profile": "small"}), profile=base, pools=pools)
    assert annotations_of(decision)[P + "gpupool"] == "pool-b"


def test_no_default_pool_is_denied(run: Run) -> None:
    decision = run(make_pod(resources_ok()), pools={"p": make_pool("p", default=False)})
    assert decision.message == f"no default GPU pool; set {P}gpupool"


def test_several_default_pools_pick_the_smallest_name_with_a_warning(run: Run) -> None:
    pools = {"zeta": make_pool("zeta"), "alpha": make_pool("alpha")}
    decision = run(make_pod(resources_ok()), pools=pools)
    assert annotations_of(decision)[P + "gpupool"] == "alpha"
    assert any("several default GPU pools" in warning for warning in decision.warnings)


def test_pod_template_hash_is_the_pool_client_config_hash(run: Run) -> None:
    pool = make_pool(spec={"componentConfig": {"client": {"image": "client:1"}}})
    decision = run(make_pod(resources_ok()), pools={DEFAULT_POOL: pool})
    labels = (decision.mutated_pod or {})["metadata"]["labels"]
    typed = load_as(GPUPool, pool)
    assert labels[P + "pod-template-hash"] == client_config_hash(typed)
    assert client_config_hash(typed) == stable_hash({"image": "client:1"})
    assert client_config_hash(typed) != client_config_hash(load_as(GPUPool, make_pool()))
    assert client_config_hash(None) == client_config_hash(load_as(GPUPool, make_pool()))


# --- step 6: execution mode -----------------------------------------------------------------


def test_pool_default_remote_is_denied_naming_the_pool_field(run: Run) -> None:
    pool = make_pool(spec={"defaultUsingLocalGPU": False})
    decision = run(make_pod(resources_ok()), pools={DEFAULT_POOL: pool})
    assert decision.message == (
        f'GPUPool "{DEFAULT_POOL}" spec.defaultUsingLocalGPU: invalid value "false": '
        "remote vGPU is not supported by this version"
    )


def test_sidecar_worker_forces_local_gpu(run: Run) -> None:
    pod = make_pod(resources_ok(**{"sidecar-worker": "true", "is-local-gpu": "false"}))
    got = annotations_of(run(pod))
    assert got[P + "is-local-gpu"] == "true"
    assert got[P + "sidecar-worker"] == "true"


def test_hard_isolation_uses_a_sidecar_worker(run: Run) -> None:
    got = annotations_of(run(make_pod(resources_ok(isolation="hard"))))
    assert got[P + "sidecar-worker"] == "true"


def test_partitioned_is_denied(run: Run) -> None:
    decision = run(make_pod(resources_ok(isolation="partitioned", **{"partition-id": "1g"})))
    assert decision.message == (
        f'{P}isolation: invalid value "partitioned": '
        "partitioned isolation is not supported by this version"
    )


def test_partition_id_without_partitioned_is_denied(run: Run) -> None:
    decision = run(make_pod(resources_ok(**{"partition-id": "1g"})))
    assert decision.message == (
        f'{P}partition-id: invalid value "1g": only allowed with {P}isolation=partitioned'
    )


# --- steps 7-8, 13: quota, resources, semantic checks ---------------------------------------


def quota(single: dict[str, Any]) -> dict[str, Any]:
    return make_quota(single)


def test_quota_defaults_fill_zero_fields(run: Run) -> None:
    defaults = quota(
        {
            "defaultRequests": {"tflops": "5", "vram": "1Gi"},
            "defaultLimits": {"tflops": "50", "vram": "8Gi"},
        }
    )
    got = annotations_of(run(make_pod({"tflops-limit": "20"}), quota=defaults))
    assert got[P + "tflops-limit"] == "20"
    assert got[P + "tflops-request"] == "5"
    assert got[P + "vram-limit"] == "8Gi"
    assert got[P + "vram-request"] == "1Gi"


def test_quota_single_caps_are_403(run: Run) -> None:
    caps = quota({"maxRequests": {"tflops": "5"}, "maxLimits": {"vram": "2Gi"}, "maxGPUCount": 1})
    decision = run(make_pod(resources_ok(**{"gpu-count": "2"})), quota=caps)
    assert decision.code == 403 and decision.reason == "Forbidden"
    parts = decision.message.split("; ")
    assert parts[0] == (
        f'{P}tflops-request: invalid value "10": exceeds the namespace quota '
        '(GPUResourceQuota "q" spec.single.maxRequests.tflops = 5)'
    )
    assert any(part.startswith(f'{P}vram-limit: invalid value "4Gi"') for part in parts)
    assert any(part.startswith(f'{P}gpu-count: invalid value "2"') for part in parts)


def test_quota_caps_within_limits_pass(run: Run) -> None:
    caps = quota({"maxRequests": {"tflops": "10"}, "maxLimits": {"tflops": "20"}, "maxGPUCount": 0})
    assert run(make_pod(resources_ok()), quota=caps).allowed


def test_no_resources_at_all_is_denied_naming_the_three_annotations(run: Run) -> None:
    decision = run(make_pod())
    assert decision.code == 400
    assert decision.message == (
        f"no GPU resources requested: set {P}tflops-request, {P}compute-percent-request or "
        f"{P}vram-request (or the matching limit)"
    )


def test_shared_needs_no_resources(run: Run) -> None:
    assert run(make_pod({"isolation": "shared"})).allowed


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {"tflops-request": "30", "tflops-limit": "20"},
            f'{P}tflops-request: invalid value "30": must not exceed {P}tflops-limit (20)',
        ),
        (
            {"vram-request": "8Gi", "vram-limit": "4Gi"},
            f'{P}vram-request: invalid value "8Gi": must not exceed {P}vram-limit (4Gi)',
        ),
        (
            {"compute-percent-request": "60", "compute-percent-limit": "50"},
            f'{P}compute-percent-request: invalid value "60": must not exceed '
            f"{P}compute-percent-limit (50)",
        ),
    ],
)
def test_request_above_limit_is_denied(run: Run, annotations: dict[str, str], message: str) -> None:
    assert run(make_pod(annotations)).message == message


def test_request_and_limit_in_different_units_are_not_compared(run: Run) -> None:
    assert run(make_pod({"tflops-request": "300", "compute-percent-limit": "10"})).allowed


def test_quantities_are_normalised(run: Run) -> None:
    got = annotations_of(run(make_pod({"tflops-limit": "1500m", "vram-limit": "16384Mi"})))
    assert got[P + "tflops-limit"] == "1500m"
    assert got[P + "vram-limit"] == "16Gi"
    assert got[P + "vram-request"] == "16Gi"


# --- §9: native GPU resources ---------------------------------------------------------------


def test_native_gpus_set_count_vendor_and_full_compute(run: Run) -> None:
    pod = make_pod(containers=[native_container("train", 2), {"name": "side", "image": "x"}])
    decision = run(pod)
    got = annotations_of(decision)
    assert got[P + "gpu-count"] == "2"
    assert got[P + "container-gpu-count"] == '{"train":2}'
    assert got[P + "vendor"] == "NVIDIA"
    assert got[P + "inject-container"] == "train"
    assert got[P + "compute-percent-limit"] == "100"
    assert got[P + "compute-percent-request"] == "100"
    containers = (decision.mutated_pod or {})["spec"]["containers"]
    assert containers[0]["resources"]["limits"] == {P + "index_0": "1"}
    assert "resources" not in containers[1]
    assert decision.workload is not None
    body_annotations = decision.workload.body["metadata"]["annotations"]
    assert body_annotations[P + "container-gpu-count"] == '{"train":2}'


def test_native_count_gives_way_to_gpu_count(run: Run) -> None:
    got = annotations_of(run(make_pod({"gpu-count": "1"}, containers=[native_container("a", 3)])))
    assert got[P + "gpu-count"] == "1"
    assert P + "container-gpu-count" not in got


def test_native_counts_of_several_containers_add_up(run: Run) -> None:
    pod = make_pod(containers=[native_container("a", 1), native_container("b", "2")])
    got = annotations_of(run(pod))
    assert got[P + "gpu-count"] == "3"
    assert got[P + "inject-container"] == "a,b"
    assert got[P + "container-gpu-count"] == '{"a":1,"b":2}'


def test_native_fraction_is_denied(run: Run) -> None:
    decision = run(make_pod(containers=[native_container("a", "1.5")]))
    assert decision.message == (
        'container "a" limits nvidia.com/gpu: invalid value "1.5": must be a whole number'
    )


def test_native_zero_is_ignored(run: Run) -> None:
    decision = run(make_pod(resources_ok(), containers=[native_container("a", "0")]))
    assert decision.allowed
    assert annotations_of(decision)[P + "gpu-count"] == "1"


def test_native_gpu_in_a_container_that_is_not_injected_is_denied(run: Run) -> None:
    pod = make_pod(
        resources_ok(**{"inject-container": "a"}),
        containers=[{"name": "a", "image": "x"}, native_container("b", 1)],
    )
    assert 'container "b" holds native GPU resources' in run(pod).message


def test_native_gpu_in_an_init_container_is_denied(run: Run) -> None:
    pod = make_pod(resources_ok(), spec={"initContainers": [native_container("init", 1)]})
    assert 'init container "init" holds native GPU resources' in run(pod).message


def test_amd_native_with_soft_isolation_is_denied(run: Run) -> None:
    decision = run(make_pod(containers=[native_container("a", 1, "amd.com/gpu")]))
    assert decision.message == (
        f'{P}isolation: invalid value "soft": soft isolation is not supported for vendor "AMD" '
        "(use shared or hard)"
    )


@pytest.mark.parametrize("vendor", ["hygon", "MetaX", "amd"])
def test_soft_unsupported_vendors_case_insensitive(run: Run, vendor: str) -> None:
    assert run(make_pod(resources_ok(vendor=vendor))).code == 400


def test_other_vendors_pass_soft(run: Run) -> None:
    assert run(make_pod(resources_ok(vendor="NVIDIA"))).allowed


def test_provider_config_resource_names_and_vendor(run: Run) -> None:
    pod = make_pod(containers=[native_container("a", 1, "nvidia.com/mig-1g.10gb")])
    decision = run(pod, native_resources={"nvidia.com/mig-1g.10gb": "NVIDIA"})
    got = annotations_of(decision)
    assert got[P + "vendor"] == "NVIDIA"
    limits = (decision.mutated_pod or {})["spec"]["containers"][0]["resources"]["limits"]
    assert "nvidia.com/mig-1g.10gb" not in limits


# --- step 10: containers --------------------------------------------------------------------


def test_several_containers_need_inject_container(run: Run) -> None:
    pod = make_pod(resources_ok(), containers=[{"name": "a"}, {"name": "b"}])
    assert run(pod).message == (
        f"{P}inject-container: required when the pod has more than one container (a, b)"
    )


def test_inject_container_puts_the_index_on_each_listed_container(run: Run) -> None:
    pod = make_pod(
        resources_ok(**{"inject-container": "a,c"}),
        containers=[{"name": "a"}, {"name": "b"}, {"name": "c"}],
    )
    decision = run(pod, pod_index=20)
    containers = (decision.mutated_pod or {})["spec"]["containers"]
    assert containers[0]["resources"]["limits"] == {P + "index_2": "4"}
    assert containers[0]["resources"]["requests"] == {P + "index_2": "4"}
    assert "resources" not in containers[1]
    assert containers[2]["resources"]["limits"] == {P + "index_2": "4"}


# --- step 11: dedicated GPU -----------------------------------------------------------------


def gpu(model: str, tflops: str, vram: str) -> dict[str, Any]:
    return make_gpu(model, tflops, vram, name=f"{model}-{tflops}-{vram}".lower())


def test_dedicated_gpu_takes_the_largest_capacity_of_the_model(run: Run) -> None:
    gpus = [gpu("A100", "312", "40Gi"), gpu("A100", "312", "80Gi"), gpu("H100", "989", "80Gi")]
    pod = make_pod({"dedicated-gpu": "true", "gpu-model": "A100"})
    got = annotations_of(run(pod, gpus=gpus))
    assert got[P + "tflops-request"] == got[P + "tflops-limit"] == "312"
    assert got[P + "vram-request"] == got[P + "vram-limit"] == "80Gi"
    assert got[P + "qos"] == "high"


def test_dedicated_gpu_without_model_is_denied(run: Run) -> None:
    decision = run(make_pod({"dedicated-gpu": "true"}))
    assert decision.message.startswith(
        f'{P}dedicated-gpu: invalid value "true": requires {P}gpu-model'
    )


def test_dedicated_gpu_with_unknown_model_is_denied(run: Run) -> None:
    decision = run(
        make_pod({"dedicated-gpu": "true", "gpu-model": "B200"}), gpus=[gpu("A100", "312", "80Gi")]
    )
    assert decision.message == (
        f'{P}gpu-model: invalid value "B200": no GPU of this model exists '
        f"(required by {P}dedicated-gpu)"
    )


# --- steps 9, 12: declared features ---------------------------------------------------------


def test_gang_settings_are_copied_with_a_warning(run: Run) -> None:
    pod = make_pod(
        resources_ok(**{"gang-enabled": "true", "gang-min-members": "3", "gang-timeout": "5m"})
    )
    decision = run(pod)
    assert spec_of(decision)["gangScheduling"] == {
        "minMembers": 3,
        "timeout": "5m",
        "mode": "Strict",
    }
    assert any("gang scheduling is not enforced" in warning for warning in decision.warnings)


def test_autoscale_is_recorded_with_a_warning(run: Run) -> None:
    decision = run(make_pod(resources_ok(autoscale="true", **{"autoscale-target": "vram"})))
    assert spec_of(decision)["autoScalingConfig"] == {
        "autoSetResources": {"enable": True, "targetResource": "vram"}
    }
    assert any("autoscaling" in warning for warning in decision.warnings)


def test_autoscale_target_defaults_to_all(run: Run) -> None:
    decision = run(make_pod(resources_ok(autoscale="true")))
    assert spec_of(decision)["autoScalingConfig"]["autoSetResources"]["targetResource"] == "all"


# --- §6: QoS --------------------------------------------------------------------------------


def test_pool_default_qos_is_the_fallback(run: Run) -> None:
    pool = make_pool(spec={"qosConfig": {"defaultQoS": "low"}})
    got = annotations_of(run(make_pod(resources_ok()), pools={DEFAULT_POOL: pool}))
    assert got[P + "qos"] == "low"


def test_percent_requests_do_not_qualify_for_high(run: Run) -> None:
    got = annotations_of(run(make_pod({"compute-percent-limit": "50", "vram-limit": "1Gi"})))
    assert got[P + "qos"] == "medium"


def test_existing_priority_class_is_kept(run: Run) -> None:
    pod = make_pod(
        {"tflops-limit": "20", "vram-limit": "8Gi"},
        spec={"priorityClassName": "mine", "priority": 5},
    )
    spec = (run(pod).mutated_pod or {})["spec"]
    assert spec["priorityClassName"] == "mine"
    assert spec["priority"] == 5


# --- §8, step 14: enabled-replicas ----------------------------------------------------------


def test_counted_pod_under_the_cap_gets_the_counter_key(run: Run) -> None:
    pod = make_pod(
        resources_ok(**{"enabled-replicas": "3"}),
        labels={"pod-template-hash": "7d9f"},
        owner=RS_REF,
    )
    owner = replica_set({P + "tf-counter-7d9f": "2"})
    decision = run(pod, owners={owner_key(RS_REF): owner})
    assert decision.outcome is AdmissionOutcome.MUTATED
    assert annotations_of(decision)[P + "pod-counter-key"] == P + "tf-counter-7d9f"
    increment = decision.counter_increment
    assert increment is not None
    assert (increment.kind, increment.name, increment.namespace) == (
        "ReplicaSet",
        "web-7d9f",
        "default",
    )
    assert increment.key == P + "tf-counter-7d9f" and increment.observed == 2
    assert decision.has_writes


def test_corrupt_counter_counts_as_zero_with_a_warning(run: Run) -> None:
    pod = make_pod(
        resources_ok(**{"enabled-replicas": "1"}), labels={"pod-template-hash": "h"}, owner=RS_REF
    )
    decision = run(pod, owners={owner_key(RS_REF): replica_set({P + "tf-counter-h": "x"})})
    assert decision.counter_increment is not None and decision.counter_increment.observed == 0
    assert any("not a number" in warning for warning in decision.warnings)


def test_enabled_replicas_without_controller_is_ignored_with_a_warning(run: Run) -> None:
    decision = run(make_pod(resources_ok(**{"enabled-replicas": "2"})))
    assert decision.outcome is AdmissionOutcome.MUTATED
    assert decision.counter_increment is None
    assert P + "pod-counter-key" not in annotations_of(decision)
    assert any("enabled-replicas ignored" in warning for warning in decision.warnings)


def test_enabled_replicas_with_missing_owner_is_409(run: Run) -> None:
    pod = make_pod(resources_ok(**{"enabled-replicas": "2"}), owner=RS_REF)
    decision = run(pod, owners={owner_key(RS_REF): None})
    assert decision.code == 409 and decision.reason == "Conflict"
    assert decision.message.startswith('ReplicaSet "web-7d9f" not found')


def test_enabled_replicas_owner_not_gathered_is_a_programming_error() -> None:
    pod = make_pod(resources_ok(**{"enabled-replicas": "2"}), owner=RS_REF)
    with pytest.raises(MissingFactError):
        admit(pod, make_facts())


def test_gated_native_pod_gets_only_the_progressive_patch(run: Run) -> None:
    pod = make_pod({"enabled-replicas": "0"}, containers=[native_container("a", 1)])
    decision = run(pod, progressive_migration=True)
    assert decision.outcome is AdmissionOutcome.SCHEDULER_ONLY
    assert [op["path"] for op in decision.patch] == ["/spec/schedulerName"]


def test_user_supplied_counter_key_is_used_and_removed_when_not_counted(run: Run) -> None:
    pod = make_pod(resources_ok(**{"pod-counter-key": P + "tf-counter-custom"}))
    assert counter_key(pod, KEYS) == P + "tf-counter-custom"
    assert P + "pod-counter-key" not in annotations_of(run(pod))


def test_counter_key_falls_back_to_a_template_hash() -> None:
    first = counter_key(make_pod(resources_ok(), name="a"), KEYS)
    second = counter_key(make_pod(resources_ok(), name="b"), KEYS)
    assert first == second and first.startswith(P + "tf-counter-")
    assert counter_key(make_pod({"qos": "low"}), KEYS) != first


def test_counter_arithmetic() -> None:
    owner = {"metadata": {"annotations": {"k": "2", "bad": "x"}}}
    assert read_count(owner, "k") == (2, False)
    assert read_count(owner, "missing") == (0, False)
    assert read_count(owner, "bad") == (0, True)
    assert incremented_count(owner, "k") == "3"
    assert incremented_count(owner, "bad") == "1"
    assert decremented_count(owner, "k") == "1"
    assert decremented_count({"metadata": {"annotations": {"k": "1"}}}, "k") is None


# --- §11: the patched pod -------------------------------------------------------------------


def test_system_owned_annotations_are_removed(run: Run) -> None:
    pod = make_pod(resources_ok(**{"pending-owned-workload": "x", "other": "kept"}))
    got = annotations_of(run(pod))
    assert got.get(P + "pending-owned-workload") != "x"
    assert got[P + "other"] == "kept"


def test_a_pod_bringing_its_own_allocation_annotations_is_denied(run: Run) -> None:
    decision = run(make_pod(resources_ok(index="5", **{"gpu-ids": "gpu-1"})))
    assert not decision.allowed and decision.code == 403
    assert P + "gpu-ids" in decision.message and P + "index" in decision.message


def test_existing_index_resources_are_replaced(run: Run) -> None:
    container = {"name": "app", "resources": {"limits": {P + "index_3": "2", "cpu": "1"}}}
    decision = run(make_pod(resources_ok(), containers=[container]), pod_index=128)
    limits = (decision.mutated_pod or {})["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "1", P + "index_f": "8"}


def test_existing_toleration_is_not_duplicated(run: Run) -> None:
    toleration = {"key": P + "used-by", "operator": "Exists"}
    decision = run(make_pod(resources_ok(), spec={"tolerations": [toleration]}))
    assert (decision.mutated_pod or {})["spec"]["tolerations"] == [toleration]


def test_existing_finalizers_are_kept(run: Run) -> None:
    pod = make_pod(resources_ok())
    pod["metadata"]["finalizers"] = ["other/finalizer"]
    decision = run(pod)
    assert (decision.mutated_pod or {})["metadata"]["finalizers"] == [
        "other/finalizer",
        P + "finalizer",
    ]


def test_migrated_pod_keeps_its_own_isolation(run: Run) -> None:
    pod = make_pod({"isolation": "hard"}, enabled=None, containers=[native_container("a", 1)])
    got = annotations_of(run(pod, auto_migration={"enable": True}))
    assert got[P + "isolation"] == "hard"
    assert got[P + "compute-percent-limit"] == "100"


def test_custom_domain_keys() -> None:
    keys = build_keys("acme", "io")
    pod = make_pod(enabled=None)
    pod["metadata"]["labels"] = {"acme.io/enabled": "true"}
    pod["metadata"]["annotations"] = {"acme.io/tflops-limit": "10"}
    pools = {"p": make_pool("p", default=False)}
    pools["p"]["metadata"]["annotations"] = {"acme.io/is-default-pool": "true"}
    decision = admit(pod, make_facts(keys=keys, pools=pools))
    assert decision.allowed, decision.message
    mutated = decision.mutated_pod or {}
    assert mutated["spec"]["schedulerName"] == "acme-scheduler"
    assert mutated["metadata"]["finalizers"] == ["acme.io/finalizer"]
    assert mutated["metadata"]["annotations"]["acme.io/gpupool"] == "p"
    assert mutated["spec"]["containers"][0]["resources"]["limits"] == {"acme.io/index_0": "1"}


# --- §12: the workload ----------------------------------------------------------------------


def test_workload_body(run: Run) -> None:
    pod = make_pod(resources_ok(**{"disable-features": "gpu-opt"}))
    decision = run(pod)
    assert decision.workload is not None
    body = decision.workload.body
    assert body["apiVersion"] == "tensor-fusion.ai/v1" and body["kind"] == "TensorFusionWorkload"
    assert body["metadata"]["labels"] == {P + "gpupool": DEFAULT_POOL}
    assert body["metadata"]["annotations"] == {
        P + "workload-mode": "dynamic",
        P + "disable-features": "gpu-opt",
    }
    assert body["spec"] == {
        "poolName": DEFAULT_POOL,
        "resources": {
            "requests": {"tflops": "10", "vram": "4Gi"},
            "limits": {"tflops": "20", "vram": "4Gi"},
        },
        "qos": "medium",
        "isLocalGPU": True,
        "sidecarWorker": False,
        "isolation": "soft",
        "gpuCount": 1,
    }


def test_disable_features_label_is_the_fallback(run: Run) -> None:
    decision = run(make_pod(resources_ok(), labels={P + "disable-features": "mem-manager"}))
    assert decision.workload is not None
    assert (
        decision.workload.body["metadata"]["annotations"][P + "disable-features"] == "mem-manager"
    )


def test_workload_spec_patch_uses_semantic_quantity_equality(run: Run) -> None:
    decision = run(make_pod(resources_ok()))
    assert decision.workload is not None
    existing = {"spec": dict(decision.workload.body["spec"])}
    existing["spec"]["resources"] = {
        "requests": {"tflops": "10000m", "vram": "4096Mi"},
        "limits": {"tflops": 20, "vram": "4294967296"},
    }
    assert decision.workload.spec_patch(existing) is None
    existing["spec"]["qos"] = "low"
    existing["spec"]["gpuModel"] = "A100"
    existing["spec"]["resources"]["limits"]["compute"] = "50"
    assert decision.workload.spec_patch(existing) == {
        "spec": {"gpuModel": None, "resources": {"limits": {"compute": None}}, "qos": "medium"}
    }


# --- dry run and facts ----------------------------------------------------------------------


def test_dry_run_gives_the_same_decision_without_writes(run: Run) -> None:
    pod = make_pod(
        resources_ok(**{"enabled-replicas": "3"}), labels={"pod-template-hash": "h"}, owner=RS_REF
    )
    owners = {owner_key(RS_REF): replica_set()}
    real, dry = run(pod, owners=owners), run(pod, owners=owners, dry_run=True)
    assert real.patch == dry.patch and real.workload == dry.workload
    assert real.counter_increment == dry.counter_increment
    assert real.has_writes and not dry.has_writes and dry.dry_run


def test_gathering_warnings_come_first(run: Run) -> None:
    decision = run(make_pod(resources_ok(autoscale="true")), warnings=("index fallback",))
    assert decision.warnings[0] == "index fallback"


def test_facts_needed_for_a_tf_pod() -> None:
    pod = make_pod(
        resources_ok(**{"workload-profile": "small", "gpupool": "p", "dedicated-gpu": "true"}),
        owner=RS_REF,
    )
    needs = facts_needed(pod)
    assert needs.tf_candidate and needs.quota and needs.gpus and needs.pod_index
    assert needs.profile == "small"
    assert needs.pool_names == ("p",)
    assert needs.owners == (RS_REF,)


def test_facts_needed_lists_every_pool_without_annotation() -> None:
    needs = facts_needed(make_pod(resources_ok()))
    assert needs.pool_names is None and not needs.owners and not needs.gpus


def test_facts_needed_owner_only_for_counting_kinds() -> None:
    ref = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "controller": True}
    assert facts_needed(make_pod(resources_ok(), owner=ref)).owners == ()
    counted = make_pod(resources_ok(**{"enabled-replicas": "1"}), owner=ref)
    assert facts_needed(counted).owners == (ref,)


def test_facts_needed_for_pods_outside_the_pipeline() -> None:
    assert not facts_needed(make_pod(enabled=None)).tf_candidate
    assert not facts_needed(make_pod({"enabled-replicas": "0"})).tf_candidate
    native = make_pod(enabled=None, containers=[native_container("a", 1)])
    assert not facts_needed(native).tf_candidate
    config = read_auto_migration(
        {"enable": True, "scope": {"includes": [{"namespaceSelector": {}}]}}
    )
    needs = facts_needed(native, auto_migration=config)
    assert needs.tf_candidate and needs.namespace_labels
    opted_out = make_pod(enabled=False, containers=[native_container("a", 1)])
    assert not facts_needed(opted_out, auto_migration=config).tf_candidate


def test_the_submitted_pod_is_never_changed_and_the_patch_rebuilds_the_mutated_pod() -> None:
    app = native_container("app", "1")
    app["resources"]["requests"] = {"cpu": "1", "tensor-fusion.ai/index_3": "1"}
    init = {"name": "init", "image": "x", "resources": {"limits": {"cpu": "1"}}}
    pod = make_pod(resources_ok(**{"pending-owned-workload": "x"}), containers=[app],
                   owner=RS_REF, spec={
        "initContainers": [init], "tolerations": [{"key": "a", "operator": "Exists"}],
        "volumes": [{"name": "v", "emptyDir": {}}], "priority": 3,
    })  # fmt: skip
    pod["metadata"]["finalizers"] = ["other.io/keep"]
    pod["status"] = {"phase": "Pending"}
    submitted = copy.deepcopy(pod)
    decision = admit(pod, make_facts(owners={("apps/v1", "ReplicaSet", "web-7d9f"): None}))
    assert decision.allowed, decision.message
    assert pod == submitted, "admission changed the submitted pod"
    assert apply_patch(submitted, decision.patch) == decision.mutated_pod


def test_a_container_setting_mps_variables_is_denied_naming_them(run: Run) -> None:
    containers = [{"name": "main", "image": "img", "env": [
        {"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=80G"},
        {"name": "CUDA_MPS_PIPE_DIRECTORY", "value": "/mine"},
        {"name": "OTHER", "value": "1"}]}]  # fmt: skip
    decision = run(make_pod(resources_ok(), containers=containers))
    assert decision.code == 400
    assert decision.message == (
        "container 'main' sets CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, CUDA_MPS_PIPE_DIRECTORY: the "
        "node agent sets the NVIDIA MPS variables that enforce the worker's limits; remove them"
    )


def test_other_variables_are_admitted(run: Run) -> None:
    containers = [{"name": "main", "image": "img", "env": [{"name": "CUDA_VISIBLE", "value": "1"}]}]
    assert run(make_pod(resources_ok(), containers=containers)).allowed


def test_containers_of_different_users_get_a_warning(run: Run) -> None:
    containers: list[dict[str, Any]] = [
        {"name": "a", "image": "img", "securityContext": {"runAsUser": 1000}},
        {"name": "b", "image": "img"},
    ]
    annotations = {**resources_ok(), KEYS.inject_container: "a"}
    decision = run(make_pod(annotations, containers=containers))
    assert decision.allowed, decision.message
    assert any("NVIDIA MPS serves one user at a time" in w for w in decision.warnings)
    one_user = [{**c, "securityContext": {"runAsUser": 1000}} for c in containers]
    assert not any("MPS" in w for w in run(make_pod(annotations, containers=one_user)).warnings)
