"""What to do with a GPUNode's agent pod (deployment.md §10 steps 1, 3-5), as one pure decision.

In this order:

1. the Node or the GPUNode is gone or going, or the pod is being deleted: wait (garbage
   collection, or the pod's deletion event, brings the next look);
2. the Node label `nvidia.com/gpu-driver-upgrade-state` set to anything but `upgrade-done`:
   wait, touching nothing;
3. the Node not Ready (its `Ready` condition not True): no pod is created, a pod not Running is
   deleted, a Running one is kept;
4. no pod: create it;
5. a pod that ended (Succeeded, Failed) is deleted for recreation;
6. crash guard: a (init) container restart count above `hypervisorMaxCrashCount` (0 disables)
   deletes the pod for recreation (Event `HypervisorCrashLoopRecreate`);
7. a hash other than the rendered pod's: replaced at once while the GPUNode is not Running;
   on a Running GPUNode only when the rollout (§11) selected the node, otherwise kept and
   reported out of sync.

A replaced pod is deleted; the next look, after its deletion, creates the new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from tensorfusion.domain.alerting.dynamic_config import DEFAULT_MAX_CRASH_COUNT
from tensorfusion.domain.desired_state.hypervisor_pods import pod_hash_of
from tensorfusion.domain.object_views import Obj, is_deleting, labels_of, name_of, status_of

__all__ = [
    "DEFAULT_MAX_CRASH_COUNT",
    "DRIVER_UPGRADE_LABEL",
    "PodAction",
    "PodDecision",
    "Restarts",
    "decide_hypervisor_pod",
    "most_restarts",
    "node_ready",
]

DRIVER_UPGRADE_LABEL: Final = "nvidia.com/gpu-driver-upgrade-state"
UPGRADE_DONE: Final = "upgrade-done"
_ENDED: Final = ("Succeeded", "Failed")


class PodAction(StrEnum):
    """What the reconciler does with the pod."""

    CREATE = "create"
    DELETE = "delete"
    KEEP = "keep"
    WAIT = "wait"


@dataclass(frozen=True, slots=True)
class PodDecision:
    """The action, why, and what the rollout needs to know."""

    action: PodAction
    reason: str
    crash_loop: bool = False
    """Deleted for too many restarts (Event `HypervisorCrashLoopRecreate`)."""
    out_of_sync: bool = False
    """The pod stays although its hash is not the rendered pod's (a Running GPUNode the
    rollout has not selected)."""


@dataclass(frozen=True, slots=True)
class Restarts:
    """The container with the most restarts."""

    container: str
    count: int


def node_ready(node: Obj) -> bool:
    """Whether the Node's `Ready` condition is True (no condition: not Ready)."""
    for condition in status_of(node).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def most_restarts(pod: Obj) -> Restarts:
    """The highest `restartCount` over the pod's init and app containers."""
    status = status_of(pod)
    best = Restarts("", 0)
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or ():
            if not isinstance(container, Mapping):
                continue
            count = container.get("restartCount")
            if isinstance(count, int) and count > best.count:
                best = Restarts(str(container.get("name") or ""), count)
    return best


def decide_hypervisor_pod(
    *,
    gpu_node: Obj,
    node: Obj | None,
    pod: Obj | None,
    desired_hash: str,
    max_crash_count: int = DEFAULT_MAX_CRASH_COUNT,
    selected: bool = False,
) -> PodDecision:
    """The decision for `gpu_node`'s current pod `pod` (None: missing) whose rendered pod has
    `desired_hash`; `selected`: the rollout picked this node for replacement."""
    if node is None or is_deleting(node) or is_deleting(gpu_node):
        return PodDecision(PodAction.WAIT, "the node or its GPUNode is gone or being deleted")
    if pod is not None and is_deleting(pod):
        return PodDecision(PodAction.WAIT, f"pod {name_of(pod)} is being deleted")
    upgrade = labels_of(node).get(DRIVER_UPGRADE_LABEL)
    if upgrade and upgrade != UPGRADE_DONE:
        return PodDecision(
            PodAction.WAIT, f"GPU driver upgrade in progress ({DRIVER_UPGRADE_LABEL}={upgrade})"
        )
    phase = str(status_of(pod).get("phase") or "Pending")
    differs = pod is not None and pod_hash_of(pod) != desired_hash
    if not node_ready(node):
        if pod is None:
            return PodDecision(PodAction.WAIT, "the node is NotReady: no pod is created")
        if phase != "Running":
            return PodDecision(PodAction.DELETE, f"the node is NotReady and the pod is {phase}")
        return PodDecision(PodAction.KEEP, "the node is NotReady; its Running pod is kept",
                           out_of_sync=differs)  # fmt: skip
    if pod is None:
        return PodDecision(PodAction.CREATE, "no agent pod on the node")
    if phase in _ENDED:
        return PodDecision(PodAction.DELETE, f"the pod ended ({phase})")
    restarts = most_restarts(pod)
    if max_crash_count > 0 and restarts.count > max_crash_count:
        return PodDecision(
            PodAction.DELETE,
            f"container {restarts.container} of pod {name_of(pod)} restarted {restarts.count} "
            f"times (hypervisorMaxCrashCount {max_crash_count}): deleted for recreation",
            crash_loop=True,
        )
    if not differs:
        return PodDecision(PodAction.KEEP, "the pod is up to date")
    running = status_of(gpu_node).get("phase") == "Running"
    if running and not selected:
        return PodDecision(
            PodAction.KEEP,
            "configuration changed on a Running GPUNode: kept until the rollout selects it",
            out_of_sync=True,
        )
    why = "selected by the rollout" if running else "the GPUNode is not Running"
    return PodDecision(PodAction.DELETE, f"configuration changed; replaced ({why})")
