"""Validation per kind: accepted values, rejected values and the exact error messages."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.domain.model import (
    API_VERSION,
    GPUPool,
    ModelError,
    TensorFusionWorkload,
    load_as,
    load_object,
)


def _manifest(
    kind: str, name: str = "x", namespace: str | None = None, **body: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, **body}


def _error(data: dict[str, Any]) -> ModelError:
    with pytest.raises(ModelError) as caught:
        load_object(data)
    return caught.value


def test_message_names_kind_object_path_value_and_bounds() -> None:
    spec = {"capacityConfig": {"oversubscription": {"tflopsOversellRatio": 50}}}
    error = _error(_manifest("GPUPool", "p1", spec=spec))
    assert str(error) == (
        'GPUPool "p1": spec.capacityConfig.oversubscription.tflopsOversellRatio: '
        "invalid value 50: must be between 100 and 100000"
    )
    assert error.kind == "GPUPool" and error.name == "p1"
    (issue,) = error.issues
    assert issue.path == "spec.capacityConfig.oversubscription.tflopsOversellRatio"
    assert issue.value == "50"


def test_namespaced_objects_are_named_with_their_namespace() -> None:
    data = _manifest("WorkloadProfile", "p", "team-a", spec={"gpuCount": 129})
    assert str(_error(data)) == (
        'WorkloadProfile "team-a/p": spec.gpuCount: invalid value 129: must be between 1 and 128'
    )


def test_every_problem_is_reported_one_per_line() -> None:
    spec = {
        "capacityConfig": {"oversubscription": {"vramExpandToHostMem": 101}},
        "nodeManagerConfig": {"provisioningMode": "Manual"},
    }
    lines = str(_error(_manifest("GPUPool", "p1", spec=spec))).splitlines()
    assert lines == [
        'GPUPool "p1": spec.capacityConfig.oversubscription.vramExpandToHostMem: '
        "invalid value 101: must be between 0 and 100",
        'GPUPool "p1": spec.nodeManagerConfig.provisioningMode: invalid value "Manual": '
        "must be one of 'Provisioned', 'AutoSelect' or 'Karpenter'",
    ]


@pytest.mark.parametrize(
    ("kind", "body", "expected"),
    [
        (
            "GPUPool",
            {"spec": {"capacityConfig": {"oversubscription": {"tflopsOversellRatio": 100001}}}},
            "spec.capacityConfig.oversubscription.tflopsOversellRatio: invalid value 100001: "
            "must be between 100 and 100000",
        ),
        (
            "GPUPool",
            {"spec": {"capacityConfig": {"oversubscription": {"vramExpandToHostDisk": -1}}}},
            "spec.capacityConfig.oversubscription.vramExpandToHostDisk: invalid value -1: "
            "must be between 0 and 100",
        ),
        (
            "GPUPool",
            {"spec": {"nodeManagerConfig": {"defaultIsolationMode": "strict"}}},
            'spec.nodeManagerConfig.defaultIsolationMode: invalid value "strict": '
            "must be one of 'shared', 'soft', 'hard' or 'partitioned'",
        ),
        (
            "GPUPool",
            {"spec": {"nodeManagerConfig": {"isolationModeRules": [{"mode": "hard"}]}}},
            "spec.nodeManagerConfig.isolationModeRules[0].selector: required field is missing",
        ),
        (
            "GPUPool",
            {
                "spec": {
                    "nodeManagerConfig": {"nodePoolRollingUpdatePolicy": {"batchPercentage": 120}}
                }
            },
            "spec.nodeManagerConfig.nodePoolRollingUpdatePolicy.batchPercentage: "
            "invalid value 120: must be between 0 and 100",
        ),
        (
            "GPUPool",
            {
                "spec": {
                    "nodeManagerConfig": {"nodePoolRollingUpdatePolicy": {"batchInterval": "5"}}
                }
            },
            'spec.nodeManagerConfig.nodePoolRollingUpdatePolicy.batchInterval: invalid value "5": '
            'must be a duration such as "30s", "5m" or "1h30m"',
        ),
        (
            "GPUPool",
            {"spec": {"nodeManagerConfig": {"nodeCompaction": {"defrag": {"enabled": True}}}}},
            "spec.nodeManagerConfig.nodeCompaction.defrag.timezone: required field is missing",
        ),
        (
            "GPUPool",
            {"spec": {"qosConfig": {"defaultQoS": "urgent"}}},
            'spec.qosConfig.defaultQoS: invalid value "urgent": '
            "must be one of 'low', 'medium', 'high' or 'critical'",
        ),
        (
            "GPUPool",
            {"spec": {"qosConfig": {"definitions": [{"name": "low", "priority": 0}]}}},
            "spec.qosConfig.definitions[0].priority: invalid value 0: must be between 1 and 100",
        ),
        (
            "GPUPool",
            {"spec": {"defaultUsingLocalGPU": "sometimes"}},
            'spec.defaultUsingLocalGPU: invalid value "sometimes": '
            "must be a boolean (true or false)",
        ),
        (
            "GPUPool",
            {"spec": {"capacityConfig": {"maxResources": {"vram": "lots"}}}},
            'spec.capacityConfig.maxResources.vram: invalid value "lots": '
            'must be a Kubernetes quantity such as "16Gi", "100" or "500m"',
        ),
        (
            "GPUPool",
            {"spec": {"componentConfig": {"hypervisor": {"portNumber": 70000}}}},
            "spec.componentConfig.hypervisor.portNumber: invalid value 70000: "
            "must be between 0 and 65535",
        ),
        (
            "TensorFusionCluster",
            {"spec": {"gpuPools": [{"name": "shared"}]}},
            "spec.gpuPools[0].specTemplate: required field is missing",
        ),
        (
            "TensorFusionCluster",
            {"spec": {"computingVendor": {"type": "digitalocean"}}},
            'spec.computingVendor.type: invalid value "digitalocean": must be one of',
        ),
        (
            "TensorFusionCluster",
            {"spec": {"computingVendor": {"authType": "password"}}},
            'spec.computingVendor.authType: invalid value "password": '
            "must be one of 'accessKey' or 'serviceAccountRole'",
        ),
        (
            "TensorFusionCluster",
            {"status": {"phase": "Ready"}},
            'status.phase: invalid value "Ready": must be one of',
        ),
        (
            "GPUNode",
            {"spec": {"manageMode": "Auto"}},
            'spec.manageMode: invalid value "Auto": '
            "must be one of 'Manual', 'AutoSelect' or 'Provisioned'",
        ),
        (
            "GPUNode",
            {"status": {"phase": "Ready"}},
            'status.phase: invalid value "Ready": must be one of',
        ),
        (
            "GPU",
            {"status": {"phase": "Succeeded"}},
            'status.phase: invalid value "Succeeded": must be one of',
        ),
        (
            "GPU",
            {"status": {"activeIsolationMode": "partitioned"}},
            'status.activeIsolationMode: invalid value "partitioned": '
            "must be one of 'shared', 'soft' or 'hard'",
        ),
        (
            "GPU",
            {"status": {"topology": {"peers": [{"peerGPUUUID": "gpu-b", "tier": 4}]}}},
            "status.topology.peers[0].tier: invalid value 4: must be between 0 and 3",
        ),
        (
            "GPU",
            {"status": {"capacity": {"tflops": "fast"}}},
            'status.capacity.tflops: invalid value "fast": must be a Kubernetes quantity',
        ),
        (
            "GPU",
            {"status": {"index": "zero"}},
            'status.index: invalid value "zero": must be an integer',
        ),
        (
            "SchedulingConfigTemplate",
            {"spec": {"placement": {"mode": "Spread"}}},
            'spec.placement.mode: invalid value "Spread": '
            "must be one of 'CompactFirst', 'LowLoadFirst', 'NodeCompactGPULowLoad' or "
            "'FragmentationAware'",
        ),
        (
            "WorkloadProfile",
            {"spec": {"gpuCount": 0}},
            "spec.gpuCount: invalid value 0: must be between 1 and 128",
        ),
        (
            "WorkloadProfile",
            {"spec": {"isolation": "none"}},
            'spec.isolation: invalid value "none": '
            "must be one of 'shared', 'soft', 'hard' or 'partitioned'",
        ),
        (
            "WorkloadProfile",
            {"spec": {"qos": "best-effort"}},
            'spec.qos: invalid value "best-effort": '
            "must be one of 'low', 'medium', 'high' or 'critical'",
        ),
        (
            "WorkloadProfile",
            {"spec": {"gpuIndices": [0, -1]}},
            "spec.gpuIndices[1]: invalid value -1: must be at least 0",
        ),
        (
            "WorkloadProfile",
            {"spec": {"gpuIndices": [1, 1]}},
            'spec: invalid value {"gpuIndices":[1,1]}: gpuIndices must not contain duplicates',
        ),
        (
            "TensorFusionWorkload",
            {"spec": {"resources": {"requests": {"compute": "150"}}}},
            'spec.resources.requests.compute: invalid value "150": must be between 0 and 100',
        ),
        (
            "TensorFusionWorkload",
            {"spec": {"resources": {"limits": {"vram": "-1Gi"}}}},
            'spec.resources.limits.vram: invalid value "-1Gi": must be at least 0',
        ),
        (
            "TensorFusionWorkload",
            {"spec": {"resources": {"requests": {"tflops": "10", "compute": "50"}}}},
            "spec.resources.requests: invalid value "
            '{"compute":"50","tflops":"10"}: tflops and compute are mutually exclusive',
        ),
        (
            "TensorFusionWorkload",
            {"spec": {"gangScheduling": {"minMembers": 1}}},
            'spec.gangScheduling: invalid value {"minMembers":1}: '
            "minMembers must be 0 or at least 2",
        ),
        (
            "TensorFusionWorkload",
            {"spec": {"replicas": 2, "gangScheduling": {"minMembers": 3}}},
            "gangScheduling.minMembers 3 exceeds replicas 2",
        ),
        (
            "TensorFusionWorkload",
            {"spec": {"gangScheduling": {"timeout": "forever"}}},
            'spec.gangScheduling.timeout: invalid value "forever": must be a duration',
        ),
        (
            "TensorFusionWorkload",
            {"spec": {"gangScheduling": {"mode": "Loose"}}},
            "spec.gangScheduling.mode: invalid value \"Loose\": must be one of 'Strict'",
        ),
        (
            "TensorFusionWorkload",
            {"status": {"phase": "Succeeded"}},
            'status.phase: invalid value "Succeeded": '
            "must be one of 'Pending', 'Running', 'Failed' or 'Unknown'",
        ),
        (
            "GPUResourceQuota",
            {"spec": {"total": {"alertThresholdPercent": 101}}},
            "spec.total.alertThresholdPercent: invalid value 101: must be between 0 and 100",
        ),
        (
            "GPUResourceQuota",
            {"spec": {"single": {"maxGPUCount": "many"}}},
            'spec.single.maxGPUCount: invalid value "many": must be an integer',
        ),
        (
            "ProviderConfig",
            {"spec": {"vendor": "NVIDIA", "hardwareMetadata": [{"model": "H100"}]}},
            "spec.hardwareMetadata[0].fp16TFlops: required field is missing",
        ),
        (
            "ProviderConfig",
            {},
            "spec: required field is missing",
        ),
        (
            "GPUNodeClaim",
            {"spec": []},
            "spec: invalid value []: must be an object",
        ),
    ],
)
def test_rejected_values(kind: str, body: dict[str, Any], expected: str) -> None:
    error = _error(_manifest(kind, "obj", **body))
    assert str(error).startswith(f'{kind} "obj": ')
    assert expected in str(error)


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        (
            "GPUPool",
            {"spec": {"capacityConfig": {"oversubscription": {"tflopsOversellRatio": 100}}}},
        ),
        (
            "GPUPool",
            {"spec": {"capacityConfig": {"oversubscription": {"tflopsOversellRatio": 100000}}}},
        ),
        (
            "GPUPool",
            {
                "spec": {
                    "nodeManagerConfig": {"nodePoolRollingUpdatePolicy": {"batchPercentage": 0}}
                }
            },
        ),
        (
            "GPUPool",
            {
                "spec": {
                    "nodeManagerConfig": {"nodePoolRollingUpdatePolicy": {"batchInterval": "1h30m"}}
                }
            },
        ),
        (
            "GPUPool",
            {
                "spec": {
                    "nodeManagerConfig": {
                        "isolationModeRules": [
                            {"mode": "hard", "selector": {"matchLabels": {"gpu": "h100"}}}
                        ],
                        "nodeSelector": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
                            ]
                        },
                        "multiVendorNodeSelector": {"AMD": {"nodeSelectorTerms": []}},
                    }
                }
            },
        ),
        ("WorkloadProfile", {"spec": {"gpuCount": 1}}),
        ("WorkloadProfile", {"spec": {"gpuCount": 128, "gpuIndices": [0, 127]}}),
        ("TensorFusionWorkload", {"spec": {"resources": {"requests": {"compute": "100"}}}}),
        (
            "TensorFusionWorkload",
            {"spec": {"resources": {"requests": {"tflops": "0", "compute": "5"}}}},
        ),
        (
            "TensorFusionWorkload",
            {"spec": {"replicas": 4, "gangScheduling": {"minMembers": 4, "timeout": "0"}}},
        ),
        ("TensorFusionWorkload", {"spec": {"gangScheduling": {"minMembers": 2, "timeout": "10m"}}}),
        ("GPUResourceQuota", {"spec": {"total": {"alertThresholdPercent": 0}}}),
        ("GPU", {"status": {"usedBy": "3rd-party-device-plugin", "isolationPolicy": "Dynamic"}}),
        ("GPU", {"status": {"topology": {"peers": [{"peerGPUUUID": "gpu-b", "tier": 3}]}}}),
        ("GPUNodeClaim", {"spec": {"anything": {"goes": [1, 2]}}, "status": {"phase": "Ready"}}),
        ("TensorFusionConnection", {"spec": {"workloadName": "w", "clientPod": "p"}}),
        ("GPUNodeClass", {"spec": {"osImageType": "Private"}}),
    ],
)
def test_accepted_values(kind: str, body: dict[str, Any]) -> None:
    assert load_object(_manifest(kind, **body)).kind == kind


def test_unknown_or_missing_kind() -> None:
    error = _error({"apiVersion": API_VERSION, "kind": "GPUCluster", "metadata": {"name": "c"}})
    assert str(error).startswith(
        'object "c": kind: invalid value "GPUCluster": must be one of GPU,'
    )
    missing = _error({"apiVersion": API_VERSION, "metadata": {"name": "c"}})
    assert str(missing) == 'object "c": kind: required field is missing'


def test_api_version_must_be_tensor_fusion_v1() -> None:
    data = _manifest("GPUPool", "p")
    data["apiVersion"] = "tensor-fusion.ai/v1beta1"
    assert str(_error(data)) == (
        'GPUPool "p": apiVersion: invalid value "tensor-fusion.ai/v1beta1": '
        'must be "tensor-fusion.ai/v1"'
    )
    del data["apiVersion"]
    assert str(_error(data)) == 'GPUPool "p": apiVersion: required field is missing'


def test_unnamed_objects_and_non_objects() -> None:
    data = {"apiVersion": API_VERSION, "kind": "GPUPool", "spec": {"qosConfig": {"defaultQoS": 1}}}
    assert str(_error(data)).startswith("GPUPool <unnamed>: spec.qosConfig.defaultQoS")
    with pytest.raises(ModelError, match="must be an object"):
        load_object([])  # type: ignore[arg-type]


def test_load_as_checks_the_kind() -> None:
    with pytest.raises(ModelError) as caught:
        load_as(GPUPool, _manifest("GPUNode", "n"))
    assert str(caught.value) == 'GPUPool "n": kind: invalid value "GPUNode": must be "GPUPool"'
    workload = load_as(TensorFusionWorkload, {"apiVersion": API_VERSION, "spec": {}})
    assert workload.kind == "TensorFusionWorkload"


def test_long_values_are_shortened() -> None:
    error = _error(_manifest("GPU", "g", status={"phase": "P" * 200}))
    (issue,) = error.issues
    assert issue.value is not None and issue.value.endswith("...") and len(issue.value) == 80
