"""The extender's bind: re-validation, re-evaluation, the Binding's annotations (scheduling.md
§12, §8)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from tensorfusion.domain.allocation_request import AllocationRequest, ResourceAmount
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.records import RecordState
from tensorfusion.domain.annotations import KEYS, encode_index
from tensorfusion.domain.scheduling.binding import (
    CONTAINER_GPU_ALLOCATION_FAILED,
    BindRefusedError,
    allocated_event,
    container_gpus,
    effective_hard_sm_percent,
    reserve_for_bind,
)
from tensorfusion.domain.scheduling.decision import ScoreWeights
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.domain.vocabulary import GPUPhase, IsolationMode, IsolationPolicy

from ..allocator.builders import AllNodesPass, allocator_with, gpu, request, tflops

ARGS = SchedulingProfile()
WEIGHTS = ScoreWeights()
NODE = "node-a"


def worker(index: int = 7, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    name, value = encode_index(index)
    metadata: dict[str, Any] = {"name": "p", "namespace": "default", "uid": "p"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "metadata": metadata,
        "spec": {"containers": [{"name": "main", "resources": {"limits": {name: str(value)}}}]},
    }


def two_nodes() -> Allocator:
    return allocator_with(gpu("a1", NODE), gpu("a2", NODE), gpu("b1", "node-b"))


def bind(allocator: Allocator, req: AllocationRequest, node: str = NODE, **pod: Any) -> Any:
    return reserve_for_bind(
        allocator, req, node=node, pod=worker(**pod), native=AllNodesPass(), profile=ARGS, now=5
    )


def test_a_valid_assumption_is_kept_and_the_annotations_name_its_gpus_and_index() -> None:
    allocator = two_nodes()
    req = request("p", ("100", "10Gi"))
    allocator.assume(req, NODE, ["a2"], now=0)
    plan = bind(allocator, req, annotations={"other": "x"})
    assert not plan.already_committed
    assert plan.record.gpus == ("a2",) and plan.record.state is RecordState.ASSUMED
    assert plan.annotations == {KEYS.gpu_ids: "a2", KEYS.index: "7"}
    assert plan.cleanup == ()
    allocator.commit("p", now=6)
    assert allocated_event(plan.record).message.endswith("Pod: a2")


def test_only_a_bind_key_this_bind_does_not_set_is_cleaned_up_first() -> None:
    allocator = two_nodes()
    left = {KEYS.gpu_ids: "b1", KEYS.container_gpus: "{}", KEYS.effective_hard_sm_percent: "9",
            "keep": "x"}  # fmt: skip
    plan = bind(allocator, request("p", ("1", "1Gi")), annotations=left)
    prefix = "/metadata/annotations/tensor-fusion.ai~1"
    assert plan.cleanup == (
        {"op": "remove", "path": f"{prefix}effective-hard-sm-percent"},
        {"op": "remove", "path": f"{prefix}container-gpus"},
    )
    assert set(plan.annotations) == {KEYS.gpu_ids, KEYS.index}


def test_an_assumed_gpu_that_left_running_fails_revalidation_and_is_released() -> None:
    allocator = two_nodes()
    req = request("p", ("100", "10Gi"))
    allocator.assume(req, NODE, ["a1"], now=0)
    allocator.upsert_gpu(gpu("a1", NODE, phase=GPUPhase.UNKNOWN))
    with pytest.raises(BindRefusedError, match="PhaseFilter: a1: phase is Unknown"):
        bind(allocator, req)
    assert "p" not in allocator.records
    assert allocator.gpus["a1"].assumed_tflops == 0


def test_an_assumption_on_a_node_whose_agent_went_down_is_refused() -> None:
    allocator = two_nodes()
    req = request("p", ("1", "1Gi"))
    allocator.assume(req, NODE, ["a1"], now=0)
    allocator.set_node_facts(NODE, ram_bytes=0, disk_bytes=0, hypervisor_index0=0)
    with pytest.raises(BindRefusedError, match="HypervisorHealth: node agent is down"):
        bind(allocator, req)


def test_a_missing_gpu_fails_revalidation() -> None:
    allocator = two_nodes()
    req = request("p", ("1", "1Gi"))
    allocator.assume(req, NODE, ["a1"], now=0)
    gone = gpu("a1", NODE)
    gone.missing_since = "2026-12-01T00:00:00Z"
    allocator.upsert_gpu(gone)
    with pytest.raises(BindRefusedError, match="a1: GPU is missing since"):
        bind(allocator, req)


def test_under_the_dynamic_policy_the_pods_own_lock_revalidates() -> None:
    allocator = two_nodes()
    allocator.isolation_policy = IsolationPolicy.DYNAMIC
    req = request("p", ("1", "1Gi"), isolation=IsolationMode.HARD)
    allocator.assume(req, NODE, ["a1"], now=0)
    assert allocator.gpus["a1"].active_isolation_mode == "hard"
    assert bind(allocator, req).record.gpus == ("a1",)


def test_without_an_assumption_the_node_is_evaluated_alone_and_assumed() -> None:
    allocator = two_nodes()
    req = request("p", ("100", "10Gi"))
    allocator.assume(req, "node-b", ["b1"], now=0)  # made for another node
    plan = bind(allocator, req)
    assert plan.record.node == NODE and plan.record.state is RecordState.ASSUMED
    assert allocator.gpus["b1"].assumed_tflops == 0


def test_a_node_that_no_longer_fits_is_refused_with_its_stage_message() -> None:
    allocator = two_nodes()
    allocator.assume(request("big", ("300", "1Gi"), count=2), NODE, ["a1", "a2"], now=0)
    with pytest.raises(BindRefusedError, match="required GPUs left after GPUResourceFilter"):
        bind(allocator, request("p", ("100", "10Gi")))
    assert "p" not in allocator.records


def test_a_committed_record_on_the_node_only_needs_the_binding() -> None:
    allocator = two_nodes()
    req = request("p", ("1", "1Gi"))
    allocator.assume(req, NODE, ["a1"], now=0)
    allocator.commit("p", now=1)
    plan = bind(allocator, req)
    assert plan.already_committed and plan.annotations[KEYS.gpu_ids] == "a1"
    assert plan.events == ()


def test_a_committed_record_on_another_node_is_rolled_back_first() -> None:
    allocator = two_nodes()
    req = request("p", ("100", "1Gi"))
    allocator.assume(req, "node-b", ["b1"], now=0)
    allocator.commit("p", now=1)
    plan = bind(allocator, req)
    assert plan.record.node == NODE
    assert allocator.gpus["b1"].available_tflops == tflops("312")


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({}, re.escape("pod carries no valid tensor-fusion.ai/index_* resource")),
        ({"tensor-fusion.ai/index_0": "9"}, 'invalid value "9"'),
    ],
)
def test_a_pod_without_a_valid_index_is_refused(limits: dict[str, str], message: str) -> None:
    allocator = two_nodes()
    pod = worker()
    pod["spec"]["containers"][0]["resources"]["limits"] = limits
    with pytest.raises(BindRefusedError, match=message):
        reserve_for_bind(
            allocator, request("p"), node=NODE, pod=pod, native=AllNodesPass(), profile=ARGS, now=0
        )
    assert "p" not in allocator.records


def test_effective_hard_sm_percent_rounds_up_and_clamps() -> None:
    hard = request("p", ("10", "1Gi"), limit=("100", "1Gi"), isolation=IsolationMode.HARD)
    assert effective_hard_sm_percent(hard, tflops("312")) == 33
    assert effective_hard_sm_percent(hard, tflops("50")) == 100
    tiny = replace(hard, limit=ResourceAmount(tflops_milli=1))
    assert effective_hard_sm_percent(tiny, tflops("312")) == 1
    percent = replace(hard, limit=ResourceAmount(percent_milli=50_000))
    assert effective_hard_sm_percent(percent, tflops("312")) is None
    soft = replace(hard, isolation=IsolationMode.SOFT)
    assert effective_hard_sm_percent(soft, tflops("312")) is None


def test_a_hard_pod_gets_its_sm_percent_in_the_annotations() -> None:
    allocator = two_nodes()
    req = request("p", ("10", "1Gi"), limit=("156", "1Gi"), isolation=IsolationMode.HARD)
    assert bind(allocator, req).annotations[KEYS.effective_hard_sm_percent] == "50"


def test_container_gpus_slice_the_gpus_by_container_name() -> None:
    req = request("p", count=3, container_gpu_count=(("worker", 2), ("aux", 1)))
    split, event = container_gpus(req, ["g1", "g2", "g3"])
    assert split == {"aux": ["g1"], "worker": ["g2", "g3"]} and event is None
    wrong = request("p", count=3, container_gpu_count=(("worker", 2),))
    split, event = container_gpus(wrong, ["g1", "g2", "g3"])
    assert split is None
    assert event is not None and event.reason == CONTAINER_GPU_ALLOCATION_FAILED
    assert event.type == "Warning" and "asks 2 GPUs" in event.message
