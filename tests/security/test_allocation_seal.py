"""Sealed allocations: a bound worker whose `gpu-ids` the TensorFusion scheduler did not write is
neither restored nor adopted (issue 22, scope 6: the device plugin then refuses it)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.domain.admission.allocation_claims import allocation_claims
from tensorfusion.domain.allocator.allocation_seal import (
    UNSEALED_REASON,
    SealKeyError,
    read_seal_key,
    seal,
    seal_key_data,
    seal_problem,
)
from tensorfusion.domain.annotations import KEYS

from ..unit.allocator.builders import request
from ..unit.controller.test_allocator_state import FakeCache, gpu, state_with, worker
from ..unit.scheduling.test_binding import bind, two_nodes

KEY = b"k" * 32
OTHER_KEY = b"o" * 32


def sealed(pod: dict[str, Any], key: bytes = KEY) -> dict[str, Any]:
    metadata = pod["metadata"]
    gpus = metadata["annotations"][KEYS.gpu_ids].split(",")
    metadata["annotations"][KEYS.allocation_seal] = seal(
        key, uid=metadata["uid"], node=pod["spec"]["nodeName"], gpus=gpus
    )
    return pod


def committed_to(name: str, *uids: str) -> dict[str, Any]:
    obj = gpu(name)
    obj["status"]["runningApps"] = [
        {"name": "w", "namespace": "ml", "pods": [{"uid": uid} for uid in uids]}
    ]
    return obj


def keyed(**caches: FakeCache) -> AllocatorState:
    state = state_with(**caches)
    state.seal_key = KEY
    return state


def test_the_binding_carries_a_seal_that_verifies_only_for_its_pod() -> None:
    allocator = two_nodes()
    allocator.seal_key = KEY
    plan = bind(allocator, request("p", ("1", "1Gi")))
    written = dict(plan.annotations)
    pod: dict[str, Any] = {
        "metadata": {"uid": "p", "annotations": written},
        "spec": {"nodeName": "node-a"},
    }
    gpus = written[KEYS.gpu_ids].split(",")
    nothing: Any = lambda _gpu: frozenset()  # noqa: E731
    assert seal_problem(pod, gpus, KEY, nothing) is None
    other_pod = copy.deepcopy(pod)
    other_pod["metadata"]["uid"] = "q"
    other_node = copy.deepcopy(pod)
    other_node["spec"]["nodeName"] = "node-b"
    for other in (other_pod, other_node):
        assert seal_problem(other, gpus, KEY, nothing) is not None
    assert seal_problem(pod, ["a1", "a2"], KEY, nothing) is not None
    assert seal_problem(pod, gpus, OTHER_KEY, nothing) is not None


def test_recovery_refuses_a_forged_allocation_and_keeps_the_sealed_and_committed_ones() -> None:
    forged = worker("p-forged", "a1", "Running")
    copied_seal = worker("p-copy", "a1", "Running")
    good = sealed(worker("p-good", "a1", "Running"))
    copied_seal["metadata"]["annotations"][KEYS.allocation_seal] = good["metadata"]["annotations"][
        KEYS.allocation_seal
    ]
    old = worker("p-before-sealing", "a2", "Running")  # committed by an earlier leader
    state = keyed(
        gpus=FakeCache(gpu("a1"), committed_to("a2", "uid-p-before-sealing")),
        pods=FakeCache(forged, copied_seal, good, old),
    )
    report = state.recover()
    assert state.allocator is not None
    assert set(state.allocator.records) == {"uid-p-good", "uid-p-before-sealing"}
    assert set(report.unsealed_pods) == {"ml/p-forged", "ml/p-copy"}
    assert "allocation-seal is missing" in report.unsealed_pods["ml/p-forged"]
    assert "does not match" in report.unsealed_pods["ml/p-copy"]
    assert {(n.key, n.reason) for n in state.notices} == {
        ("Pod ml/p-forged", UNSEALED_REASON), ("Pod ml/p-copy", UNSEALED_REASON),
    }  # fmt: skip
    assert state.refused == 2


def test_a_forged_pod_bound_after_recovery_is_not_adopted() -> None:
    pods = FakeCache()
    state = keyed(gpus=FakeCache(gpu("a1")), pods=pods)
    state.recover()
    assert state.allocator is not None
    forged = worker("p-forged", "a1", "Running")
    state.on_pod(pods.put(forged))
    state.on_pod(pods.put(sealed(worker("p-other-leader", "a1", "Pending"))))
    assert set(state.allocator.records) == {"uid-p-other-leader"}
    assert "Pod ml/p-forged" in state.problems
    state.on_pod(pods.put(forged))  # a later event of the same pod: refused, not recounted
    assert state.refused == 1 and len(state.notices) == 1


def test_without_a_key_sealing_is_off() -> None:
    state = state_with(gpus=FakeCache(gpu("a1")), pods=FakeCache(worker("p", "a1", "Running")))
    state.recover()
    assert state.allocator is not None and set(state.allocator.records) == {"uid-p"}


def test_the_webhook_denies_a_pod_that_brings_its_own_seal() -> None:
    pod = {"metadata": {"annotations": {KEYS.allocation_seal: "v1.x"}}}
    [problem] = allocation_claims(pod, KEYS)
    assert KEYS.allocation_seal in str(problem)


@pytest.mark.parametrize(
    ("data", "message"),
    [(None, "missing"), ({"key": "!!"}, "not base64"), ({"key": "c2hvcnQ="}, "at least 32")],
)
def test_an_unusable_key_is_named(data: dict[str, str] | None, message: str) -> None:
    with pytest.raises(SealKeyError, match=message):
        read_seal_key(data)
    assert read_seal_key(seal_key_data(KEY)) == KEY
