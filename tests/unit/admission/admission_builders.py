"""Shared builders for the admission tests: pods, pools, facts and a tiny RFC 6902 applier."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from tensorfusion.domain.admission import AdmissionDecision, AdmissionFacts, admit, load_facts

P = "tensor-fusion.ai/"
DEFAULT_POOL = "tensor-fusion-shared"


def make_pool(
    name: str = DEFAULT_POOL,
    *,
    default: bool = True,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A GPUPool object."""
    return {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "GPUPool",
        "metadata": {
            "name": name,
            "annotations": {P + "is-default-pool": "true" if default else "false"},
        },
        "spec": dict(spec or {}),
    }


def make_pod(
    annotations: Mapping[str, str] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    enabled: bool | None = True,
    containers: list[dict[str, Any]] | None = None,
    name: str | None = "pod-a",
    namespace: str = "default",
    owner: Mapping[str, Any] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod; annotation keys without a `/` get the `tensor-fusion.ai/` prefix."""
    all_labels = dict(labels or {})
    if enabled is not None:
        all_labels[P + "enabled"] = "true" if enabled else "false"
    metadata: dict[str, Any] = {"namespace": namespace, "labels": all_labels}
    if name is not None:
        metadata["name"] = name
    if annotations:
        metadata["annotations"] = {
            (key if "/" in key else P + key): value for key, value in annotations.items()
        }
    if owner is not None:
        metadata["ownerReferences"] = [dict(owner)]
    pod_spec: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "containers": containers if containers is not None else [{"name": "app", "image": "x"}],
    }
    pod_spec.update(spec or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def native_container(name: str, count: Any, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    """A container with a native GPU limit."""
    return {"name": name, "image": "x", "resources": {"limits": {resource: count}}}


def make_profile(spec: Mapping[str, Any], name: str = "small") -> dict[str, Any]:
    """A WorkloadProfile object in namespace `default`."""
    return {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "WorkloadProfile",
        "metadata": {"name": name, "namespace": "default"},
        "spec": dict(spec),
    }


def make_quota(single: Mapping[str, Any], name: str = "q") -> dict[str, Any]:
    """A GPUResourceQuota object in namespace `default` with the given `spec.single`."""
    return {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "GPUResourceQuota",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"single": dict(single)},
    }


def make_gpu(model: str, tflops: str, vram: str, name: str = "gpu-0") -> dict[str, Any]:
    """A GPU object with a model and a capacity."""
    return {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "GPU",
        "metadata": {"name": name},
        "status": {"gpuModel": model, "capacity": {"tflops": tflops, "vram": vram}},
    }


def make_facts(**overrides: Any) -> AdmissionFacts:
    """Facts from raw objects (`load_facts`): the default pool `tensor-fusion-shared`, index 1."""
    values: dict[str, Any] = {
        "namespace": "default",
        "pod_index": 1,
        "pools": {DEFAULT_POOL: make_pool()},
    }
    values.update(overrides)
    return load_facts(**values)


def resources_ok(**extra: str) -> dict[str, str]:
    """Vector 1's resource annotations plus extras."""
    return {
        "tflops-request": "10",
        "tflops-limit": "20",
        "vram-request": "4Gi",
        "vram-limit": "4Gi",
        **extra,
    }


def _parse_pointer(path: str) -> list[str]:
    if path == "":
        return []
    assert path.startswith("/"), path
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def apply_patch(document: Any, patch: Sequence[Mapping[str, Any]]) -> Any:
    """Apply RFC 6902 add/remove/replace strictly (replace and remove need the target)."""
    doc = copy.deepcopy(document)
    for op in patch:
        tokens = _parse_pointer(op["path"])
        if not tokens:
            assert op["op"] == "replace"
            doc = copy.deepcopy(op["value"])
            continue
        parent = doc
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if op["op"] == "add":
                assert 0 <= index <= len(parent)
                parent.insert(index, copy.deepcopy(op["value"]))
            elif op["op"] == "remove":
                del parent[index]
            else:
                assert op["op"] == "replace"
                assert 0 <= index < len(parent)
                parent[index] = copy.deepcopy(op["value"])
        else:
            assert isinstance(parent, dict)
            if op["op"] == "add":
                parent[last] = copy.deepcopy(op["value"])
            elif op["op"] == "remove":
                del parent[last]
            else:
                assert op["op"] == "replace"
                assert last in parent, f"replace of missing {op['path']}"
                parent[last] = copy.deepcopy(op["value"])
    return doc


@pytest.fixture
def run() -> Callable[..., AdmissionDecision]:
    """Admit a pod and check that its patch turns the original into `mutated_pod`."""

    def _run(pod: dict[str, Any], **facts: Any) -> AdmissionDecision:
        original = copy.deepcopy(pod)
        decision = admit(pod, make_facts(**facts))
        assert pod == original, "admit must not mutate its input"
        if decision.allowed:
            assert decision.mutated_pod is not None
            assert apply_patch(pod, list(decision.patch)) == decision.mutated_pod
        return decision

    return _run
