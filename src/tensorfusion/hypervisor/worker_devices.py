"""The node agent's answer to the kubelet's Allocate (hypervisor.md, *Allocate*): the GPUs of the
worker pod holding the index, given only for an allocation the leader committed.

A pod's `gpu-ids` is a claim anyone who can write a pod can make (a pod with `nodeName` set
skips the webhook and the scheduler). The devices are given only when every GPU it names lists
the pod's uid in `status.runningApps`, which the leader's status write-back writes. The leader
binds the pod (its annotations travel in the Binding) and writes GPU status up to about a
second later (longer when that write is retried), so a miss re-reads the GPU objects every
`poll_s` until `commit_wait_s` has passed, then refuses: a log line, a Warning Event
`UncommittedGPUAllocation` on the pod, and FAILED_PRECONDITION to the kubelet. Two live Pending
pods with the same index are refused at once (`AmbiguousPodIndex`): the kubelet's Allocate does
not say which pod asks.

On a node whose MPS control daemon runs (`mps`), the answer also carries what holds the worker
to its limits: the MPS variables and the pipe, log and shared-memory mounts, computed from the
limits and isolation mode the leader committed (`committed_limits`), never from the pod's
annotations, and `CUDA_VISIBLE_DEVICES` naming its GPUs (the daemon serves every GPU of the
node; the client's device ordinals 0..n-1 are these, in order). While the daemon does not serve,
Allocate waits for it as for a commit (`commit_wait_s`), then refuses (`MPSNotReady`): a worker
never starts unenforced; the kubelet fails the pod's admission and its controller creates it
again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.adapters.kube.events import EventSink, InvolvedObject
from tensorfusion.adapters.kubelet.device_plugin import AllocateAnswer, AllocationRefusedError
from tensorfusion.domain.devices.committed_allocation import index_rivals, uncommitted_gpus
from tensorfusion.domain.devices.worker_allocation import (
    VISIBLE_DEVICES,
    WorkerAllocation,
    WorkerAllocationError,
    allocate_worker,
)
from tensorfusion.domain.isolation.committed_limits import annotated_limits, committed_limits
from tensorfusion.domain.isolation.mps_client import (
    ClientLimits,
    client_env,
    client_limits,
    client_mounts,
)
from tensorfusion.domain.isolation.mps_daemon import MpsStatus
from tensorfusion.domain.object_views import annotations_of, name_of, namespace_of, uid_of
from tensorfusion.hypervisor.object_sync import ManagedGPUs

__all__ = [
    "AMBIGUOUS_INDEX",
    "COMMIT_WAIT_S",
    "MPS_NOT_READY",
    "UNCOMMITTED",
    "MpsEnforcement",
    "WorkerDevices",
]

_log = logging.getLogger(__name__)
COMMIT_WAIT_S: Final = 10.0
"""How long a miss waits for the leader's GPU status write-back before refusing."""
POLL_S: Final = 0.5
UNCOMMITTED: Final = "UncommittedGPUAllocation"
AMBIGUOUS_INDEX: Final = "AmbiguousPodIndex"
MPS_NOT_READY: Final = "MPSNotReady"


@dataclass(frozen=True, slots=True)
class MpsEnforcement:
    """The node's MPS daemon as Allocate needs it: its status and the host directories the
    workers get."""

    status: Callable[[], MpsStatus]
    pipe_dir: str
    log_dir: str
    shm_dir: str


@dataclass(slots=True)
class WorkerDevices:
    """`allocate` is the device plugins' callback; `pods` lists the node's pods (informer),
    `native_uuids` maps GPU object names to device uuids, `gpu_objects` reads the node's GPUs."""

    node: str
    pods: Callable[[], Sequence[Mapping[str, Any]]]
    native_uuids: Callable[[], Mapping[str, str]]
    gpu_objects: ManagedGPUs
    events: EventSink
    commit_wait_s: float = COMMIT_WAIT_S
    poll_s: float = POLL_S
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    mps: MpsEnforcement | None = None
    refusals: dict[str, int] = field(default_factory=dict)
    """Refusals by Event reason, for tests and `/readyz` detail."""
    enforced: dict[tuple[str, str], ClientLimits] = field(default_factory=dict)
    """What the last Allocate of each worker (namespace, pod) enforced through MPS."""

    async def allocate(self, resource: str, device_ids: tuple[str, ...]) -> AllocateAnswer:
        """The container's environment, or AllocationRefusedError."""
        pods = list(self.pods())
        try:
            found = allocate_worker(resource, len(device_ids), pods, self.native_uuids())
        except WorkerAllocationError as error:
            raise AllocationRefusedError(str(error)) from None
        pod = _find(pods, found)
        rivals = index_rivals(resource, len(device_ids), pods)
        if len(rivals) > 1:
            await self._refuse(pod, AMBIGUOUS_INDEX, f"pods {', '.join(rivals)} carry the same "
                               f"index ({resource}={len(device_ids)}); refused all")  # fmt: skip
        uid = uid_of(pod)
        missing, objects = await self._wait_committed(uid, found.gpus)
        if missing:
            await self._refuse(pod, UNCOMMITTED, f"GPUs {', '.join(missing)} do not list pod "
                               f"{found.namespace}/{found.pod} in status.runningApps after "
                               f"{self.commit_wait_s:g}s: no allocation committed by the "
                               "leader")  # fmt: skip
        answer = AllocateAnswer(envs=found.envs)
        if self.mps is not None:
            answer = await self._enforced(pod, pods, found.gpus, objects, answer)
        _log.info("allocated %s to pod %s/%s", ",".join(found.gpus), found.namespace, found.pod)
        return answer

    async def _enforced(
        self,
        pod: Mapping[str, Any],
        pods: Sequence[Mapping[str, Any]],
        gpus: tuple[str, ...],
        objects: Mapping[str, Mapping[str, Any]],
        answer: AllocateAnswer,
    ) -> AllocateAnswer:
        """`answer` with the MPS variables and mounts of the worker's committed limits (`pods`:
        the node's pods, whose gone ones are dropped from `enforced`)."""
        assert self.mps is not None
        deadline = self.clock() + self.commit_wait_s
        status = self.mps.status()
        while not status.serving and self.clock() < deadline:
            await self.sleep(self.poll_s)
            status = self.mps.status()
        if not status.serving:
            detail = f": {status.message}" if status.message else ""
            await self._refuse(pod, MPS_NOT_READY, f"the node's MPS control daemon is "
                               f"{status.state.value}{detail}; the worker would run without "
                               "its limits")  # fmt: skip
        fallback, _ = annotated_limits(annotations_of(pod))
        committed = committed_limits(uid_of(pod), gpus, objects, fallback)
        limits = client_limits(committed.isolation, committed.limit,
                               committed.capacities_tflops_milli)  # fmt: skip
        live = {(namespace_of(p), name_of(p)) for p in pods}
        for gone in [k for k in self.enforced if k not in live]:
            del self.enforced[gone]
        self.enforced[(namespace_of(pod), name_of(pod))] = limits
        mounts = client_mounts(self.mps.pipe_dir, self.mps.log_dir, self.mps.shm_dir)
        visible = {"CUDA_VISIBLE_DEVICES": answer.envs.get(VISIBLE_DEVICES, "")}
        return AllocateAnswer(envs={**answer.envs, **client_env(limits), **visible},
                              mounts=mounts)  # fmt: skip

    async def _wait_committed(
        self, uid: str, gpus: tuple[str, ...]
    ) -> tuple[tuple[str, ...], Mapping[str, Mapping[str, Any]]]:
        deadline = self.clock() + self.commit_wait_s
        while True:
            objects: Mapping[str, Mapping[str, Any]] = {}
            try:
                objects = await self.gpu_objects(self.node)
                missing = uncommitted_gpus(uid, gpus, objects)
            except Exception as error:  # an unreadable API server is a miss, not a crash
                _log.warning("Allocate: cannot read the GPU objects of %s: %s", self.node, error)
                missing = gpus
            if not missing or self.clock() >= deadline:
                return missing, objects
            await self.sleep(self.poll_s)

    async def _refuse(self, pod: Mapping[str, Any], reason: str, message: str) -> None:
        involved = InvolvedObject("Pod", name_of(pod), namespace_of(pod), uid_of(pod), "v1")
        _log.warning("Allocate refused for pod %s/%s: %s", involved.namespace, involved.name,
                     message)  # fmt: skip
        self.refusals[reason] = self.refusals.get(reason, 0) + 1
        await self.events.record(involved, "Warning", reason, message)
        raise AllocationRefusedError(message)


def _find(pods: Sequence[Mapping[str, Any]], found: WorkerAllocation) -> Mapping[str, Any]:
    for pod in pods:
        if namespace_of(pod) == found.namespace and name_of(pod) == found.pod:
            return pod
    return {"metadata": {"namespace": found.namespace, "name": found.pod}}
