"""GPUNode status and phase, GPU phases, and node-agent readiness (api.md §2.3, §2.4,
deployment.md §9 step 3 and §10 step 6).

Readiness of the node agent (`-agent-readiness`):

- `pod`: the node's current hypervisor pod (the newest one not being deleted) is Running and
  its `Ready` condition is True;
- `heartbeat` (no kubelet): `status.hypervisorStatus.lastHeartbeatTime` is at most 90 s old and,
  when the node has a hypervisor pod, not older than that pod's creation.

Ready → GPUNode `Running` and its GPUs `Running`; otherwise both `Pending`. Whatever the mode,
a heartbeat older than 90 s is reported as `hypervisorState: Stale`. The capacity figures,
`totalGPUPods` and `allocatedPods` come from the allocator's memory, never from GPU status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from tensorfusion.domain.allocator.capacity_figures import CapacityTotals, NodeCapacity
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.objects import Exactly
from tensorfusion.domain.model.node import GPUNodePhase
from tensorfusion.domain.model.registry import to_wire
from tensorfusion.domain.object_views import (
    Obj,
    annotations_of,
    is_deleting,
    metadata_of,
    status_of,
)
from tensorfusion.domain.timestamps import parse_rfc3339
from tensorfusion.domain.vocabulary import GPUPhase

__all__ = [
    "HEARTBEAT_TIMEOUT_S",
    "STALE",
    "AgentReadiness",
    "AgentReadinessMode",
    "agent_readiness",
    "current_hypervisor_pod",
    "gpu_node_status",
    "gpu_phase",
    "heartbeat_time",
    "missing_since",
]

HEARTBEAT_TIMEOUT_S: Final = 90.0
STALE: Final = "Stale"
AgentReadinessMode = Literal["pod", "heartbeat"]
_RECHECK_MARGIN_S: Final = 0.5


@dataclass(frozen=True, slots=True)
class AgentReadiness:
    """Whether the node agent is ready, why, and when time alone changes the verdict."""

    ready: bool
    reason: str
    stale: bool = False
    """The heartbeat is older than 90 s (`hypervisorState: Stale`)."""
    recheck_after: float | None = None
    """Seconds after which the verdict changes with no new event (a heartbeat ageing)."""


def current_hypervisor_pod(pods: Iterable[Obj]) -> Obj | None:
    """The newest hypervisor pod not being deleted (by creation time, then name)."""
    live = [pod for pod in pods if not is_deleting(pod)]
    if not live:
        return None
    return max(
        live,
        key=lambda p: (
            parse_rfc3339(metadata_of(p).get("creationTimestamp")) or 0.0,
            str(metadata_of(p).get("name") or ""),
        ),
    )


def heartbeat_time(gpu_node: Obj) -> float | None:
    """When the node agent last beat (`hypervisorStatus.lastHeartbeatTime`), None if never."""
    hypervisor = status_of(gpu_node).get("hypervisorStatus")
    if not isinstance(hypervisor, Mapping):
        return None
    return parse_rfc3339(hypervisor.get("lastHeartbeatTime"))


def _pod_ready(pod: Obj | None) -> tuple[bool, str]:
    if pod is None:
        return False, "no hypervisor pod on the node"
    status = status_of(pod)
    phase = status.get("phase") or "Pending"
    name = metadata_of(pod).get("name")
    if phase != "Running":
        return False, f"hypervisor pod {name} is {phase}"
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            if condition.get("status") == "True":
                return True, f"hypervisor pod {name} is Ready"
            break
    return False, f"hypervisor pod {name} is Running but not Ready"


def agent_readiness(
    mode: AgentReadinessMode, gpu_node: Obj, pod: Obj | None, now: float
) -> AgentReadiness:
    """The node agent's readiness by `mode`, with the staleness of its heartbeat."""
    beat = heartbeat_time(gpu_node)
    age = None if beat is None else max(now - beat, 0.0)
    stale = age is not None and age > HEARTBEAT_TIMEOUT_S
    if mode == "pod":
        ready, reason = _pod_ready(pod)
        recheck = None
        if age is not None and not stale:
            recheck = HEARTBEAT_TIMEOUT_S - age + _RECHECK_MARGIN_S
        return AgentReadiness(ready, reason, stale, recheck)
    if beat is None or age is None:
        return AgentReadiness(False, "the node agent has sent no heartbeat")
    if stale:
        return AgentReadiness(
            False, f"the node agent's last heartbeat is {int(age)}s old (limit 90s)", True
        )
    created = parse_rfc3339(metadata_of(pod).get("creationTimestamp")) if pod is not None else None
    if created is not None and beat < created:
        return AgentReadiness(
            False, "no heartbeat since the node's current hypervisor pod was created"
        )
    recheck = HEARTBEAT_TIMEOUT_S - age + _RECHECK_MARGIN_S
    return AgentReadiness(True, f"heartbeat {int(age)}s ago", False, recheck)


def gpu_node_status(
    gpu_node: Obj, capacity: NodeCapacity | None, readiness: AgentReadiness
) -> dict[str, Any]:
    """The GPUNode status fields the controller owns (for `merge_patch` with the current
    status): phase, capacity figures, `totalGPUPods`, `allocatedPods`, and `Stale`."""
    if is_deleting(gpu_node):
        phase = GPUNodePhase.DESTROYING
    else:
        phase = GPUNodePhase.RUNNING if readiness.ready else GPUNodePhase.PENDING
    totals = capacity.totals if capacity is not None else CapacityTotals()
    allocated = {
        gpu: [to_wire(info) for info in infos]
        for gpu, infos in (capacity.allocated_pods if capacity is not None else {}).items()
    }
    status: dict[str, Any] = {
        "phase": phase.value,
        **to_wire(totals.to_status()),
        "totalGPUPods": len(capacity.pods) if capacity is not None else 0,
        "allocatedPods": Exactly(allocated),
    }
    if readiness.stale:
        status["hypervisorStatus"] = {"hypervisorState": STALE}
    return status


def missing_since(gpu: Obj) -> str:
    """The GPU's `gpu-missing-since` annotation ("" when the device is present)."""
    return str(annotations_of(gpu).get(KEYS.gpu_missing_since) or "")


def gpu_phase(gpu: Obj, ready: bool) -> str | None:
    """The phase to write on a GPU of a node whose agent is (not) ready, or None to leave it.

    Only `Pending` and `Running` follow the agent; a missing device (`Unknown`, written by the
    node agent) and the other phases are the node agent's.
    """
    if missing_since(gpu):
        return None
    current = status_of(gpu).get("phase") or GPUPhase.PENDING.value
    if current not in (GPUPhase.PENDING.value, GPUPhase.RUNNING.value):
        return None
    wanted = GPUPhase.RUNNING.value if ready else GPUPhase.PENDING.value
    return wanted if wanted != current else None
