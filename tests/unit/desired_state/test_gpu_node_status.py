"""Node-agent readiness, GPUNode status from the allocator's memory, and GPU phases."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.capacity_figures import node_capacity
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.gpu_nodes import (
    AgentReadiness,
    agent_readiness,
    current_hypervisor_pod,
    gpu_node_status,
    gpu_phase,
)
from tensorfusion.domain.desired_state.objects import Exactly
from tensorfusion.domain.timestamps import format_rfc3339

from ..allocator.builders import gpu, request

NOW = 1_800_000_000.0


def gpu_node(heartbeat: float | None = None, **metadata: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending"}
    if heartbeat is not None:
        status["hypervisorStatus"] = {"lastHeartbeatTime": format_rfc3339(heartbeat)}
    return {"metadata": {"name": "n1", **metadata}, "status": status}


def agent_pod(
    name: str, created: float, phase: str = "Running", ready: str = "True", **metadata: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": format_rfc3339(created), **metadata},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]},
    }


def test_heartbeat_readiness_ages_out_at_90_seconds() -> None:
    fresh = agent_readiness("heartbeat", gpu_node(NOW - 30), None, NOW)
    assert fresh.ready and not fresh.stale
    assert fresh.recheck_after == pytest.approx(60.5)
    edge = agent_readiness("heartbeat", gpu_node(NOW - 90), None, NOW)
    assert edge.ready and not edge.stale
    old = agent_readiness("heartbeat", gpu_node(NOW - 91), None, NOW)
    assert not old.ready and old.stale and old.recheck_after is None
    assert "91s old" in old.reason
    never = agent_readiness("heartbeat", gpu_node(), None, NOW)
    assert not never.ready and not never.stale


def test_a_heartbeat_older_than_the_current_agent_pod_does_not_count() -> None:
    replaced = agent_pod("hypervisor-n1", created=NOW - 10)
    verdict = agent_readiness("heartbeat", gpu_node(NOW - 20), replaced, NOW)
    assert not verdict.ready and "since the node's current hypervisor pod" in verdict.reason
    assert agent_readiness("heartbeat", gpu_node(NOW - 5), replaced, NOW).ready


def test_pod_readiness_needs_a_running_ready_pod_and_still_reports_stale() -> None:
    assert agent_readiness("pod", gpu_node(), agent_pod("h", NOW - 5), NOW).ready
    not_ready = agent_readiness("pod", gpu_node(), agent_pod("h", NOW, ready="False"), NOW)
    assert not not_ready.ready and "not Ready" in not_ready.reason
    pending = agent_readiness("pod", gpu_node(), agent_pod("h", NOW, phase="Pending"), NOW)
    assert not pending.ready and "Pending" in pending.reason
    assert not agent_readiness("pod", gpu_node(), None, NOW).ready
    stale = agent_readiness("pod", gpu_node(NOW - 200), agent_pod("h", NOW - 300), NOW)
    assert stale.ready and stale.stale
    watching = agent_readiness("pod", gpu_node(NOW - 80), agent_pod("h", NOW - 300), NOW)
    assert watching.recheck_after == pytest.approx(10.5)


def test_the_current_hypervisor_pod_is_the_newest_not_deleting() -> None:
    old = agent_pod("h-old", NOW - 100)
    new = agent_pod("h-new", NOW - 10)
    going = agent_pod("h-going", NOW, deletionTimestamp=format_rfc3339(NOW))
    chosen = current_hypervisor_pod([old, going, new])
    assert chosen is not None and chosen["metadata"]["name"] == "h-new"
    assert current_hypervisor_pod([going]) is None


def allocator_with_pod() -> Allocator:
    allocator = Allocator()
    allocator.upsert_gpu(gpu("g1", "n1"))
    allocator.upsert_gpu(gpu("g2", "n1"))
    allocator.assume(request("p1", ("100", "10Gi"), namespace="ml"), "n1", ["g1"], 0.0)
    allocator.commit("p1", 0.0)
    return allocator


def test_gpu_node_status_figures_and_pods_come_from_the_allocator() -> None:
    allocator = allocator_with_pod()
    capacity = node_capacity(allocator, allocator.nodes["n1"], allocated_pods=True)
    status = gpu_node_status(gpu_node(), capacity, AgentReadiness(True, "ok"))
    allocated = status.pop("allocatedPods")
    assert status == {
        "phase": "Running",
        "totalTFlops": "624",
        "totalVRAM": "160Gi",
        "availableTFlops": "524",
        "availableVRAM": "150Gi",
        "virtualTFlops": "624",
        "virtualVRAM": "160Gi",
        "virtualAvailableTFlops": "524",
        "virtualAvailableVRAM": "150Gi",
        "totalGPUPods": 1,
    }
    assert isinstance(allocated, Exactly)
    assert [p["uid"] for p in allocated.value["g1"]] == ["p1"]
    assert "g2" not in allocated.value


def test_gpu_node_status_without_gpus_stale_and_deleting() -> None:
    status = gpu_node_status(gpu_node(), None, AgentReadiness(False, "x", stale=True))
    assert status["phase"] == "Pending"
    assert status["totalTFlops"] == "0" and status["totalGPUPods"] == 0
    assert status["hypervisorStatus"] == {"hypervisorState": "Stale"}
    fresh = gpu_node_status(gpu_node(), None, AgentReadiness(True, "ok"))
    assert "hypervisorStatus" not in fresh
    deleting = gpu_node(deletionTimestamp="2027-01-01T00:00:00Z")
    assert gpu_node_status(deleting, None, AgentReadiness(True, "ok"))["phase"] == "Destroying"


def gpu_object(phase: str, **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": "g1", "annotations": annotations}, "status": {"phase": phase}}


def test_gpu_phases_follow_the_agent_except_missing_and_foreign_phases() -> None:
    assert gpu_phase(gpu_object("Pending"), ready=True) == "Running"
    assert gpu_phase(gpu_object("Running"), ready=True) is None
    assert gpu_phase(gpu_object("Running"), ready=False) == "Pending"
    assert gpu_phase({"metadata": {"name": "g1"}}, ready=True) == "Running"
    assert gpu_phase(gpu_object("Unknown"), ready=True) is None
    assert gpu_phase(gpu_object("Destroying"), ready=False) is None
    missing = gpu_object("Pending", **{KEYS.gpu_missing_since: "2027-01-01T00:00:00Z"})
    assert gpu_phase(missing, ready=True) is None
