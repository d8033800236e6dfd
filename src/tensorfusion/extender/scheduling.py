"""The extender's verbs on the leader's live allocator (scheduling.md §12, §15).

`Extender.filter`, `.prioritize` and `.bind` take the decoded requests and return the answers;
the HTTP layer (`extender.app`) only decodes, times and encodes. The decisions are the domain's
(`extender_verbs`, `binding`); this shell adds the pod calls, the Events and the fence: a
replica that lost the Lease refuses `bind` before it writes anything, and every write of a bind
goes through `fenced_call`: read the fence just before it, send nothing once it is closed, and
cut the request off when it closes.

A bind is one API write: the Binding, which carries the pod's GPU annotations (the API server
sets them with `nodeName`), so a pod never holds `gpu-ids` without being bound, and a Binding
that failed or was never sent leaves nothing to take back. A pod patch comes first only when the
pod carries a bind annotation this bind does not set (`BindPlan.cleanup`). Events are queued
(`PodEvents`) and written off the bind's path.

The allocator is only touched between awaits, so a `filter` decision and its assumption are
one step; a `bind` holds its pod's assumption (committed just before the Binding is posted)
while it posts the Binding.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.progressive_migration import SCHEDULE_WITH_NATIVE_GPU
from tensorfusion.domain.annotation_errors import AnnotationError
from tensorfusion.domain.object_views import uid_of
from tensorfusion.domain.pod_request import request_from_pod
from tensorfusion.domain.scheduling.binding import (
    GPU_DEVICE_ALLOCATED_FAILED,
    BindEvent,
    BindRefusedError,
    allocated_event,
    reserve_for_bind,
)
from tensorfusion.domain.scheduling.extender_protocol import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    HostPriorityList,
    host_priorities,
)
from tensorfusion.domain.scheduling.extender_verbs import (
    ALLOCATOR_NOT_READY,
    FilterAnswer,
    PodKind,
    filter_native_gpu_pod,
    filter_worker,
    pod_kind,
    prioritize,
)
from tensorfusion.domain.scheduling.native import NativeInputError
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster, PodNativeView
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.runtime.fence import Fence, fenced_call
from tensorfusion.runtime.informer import ObjectCache
from tensorfusion.runtime.leader_election import NotLeaderError

__all__ = [
    "FAILED_GPU_SCHEDULING",
    "NOT_LEADER",
    "STALE_BINDING",
    "Extender",
    "PodCalls",
    "PodEvents",
]

_log = logging.getLogger(__name__)

NOT_LEADER: Final = "not leader"
STALE_BINDING: Final = "stale binding request"
FAILED_GPU_SCHEDULING: Final = "FailedGPUScheduling"
"""Warning Event on a pod no node could take, with the per-stage summary."""
SWEEP_INTERVAL_S: Final = 10.0
PATCH_ATTEMPTS: Final = 3
PATCH_BACKOFF_S: Final = 1.0
MAX_BINDS_IN_FLIGHT: Final = 16
"""The default; the controller gives its client's kept-alive connections less its Event
writers (`app.controller_scheduling`)."""


class PodCalls(Protocol):
    """The API calls of `bind` (`adapters.kube.pod_binding.LightkubePodBinding`); `timeout_s`
    of a write is the seconds the fence has left, a bound on that request (inf: none)."""

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def patch_pod(
        self,
        namespace: str,
        name: str,
        operations: Sequence[Mapping[str, Any]],
        *,
        timeout_s: float | None = None,
    ) -> None: ...

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        *,
        annotations: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> None: ...


class PodEvents(Protocol):
    """Queues an Event on a pod, written later under the fence; never blocks nor raises."""

    def pod_event(
        self,
        pod: Mapping[str, Any],
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None: ...


@dataclass(slots=True)
class ExtenderCounters:
    """Outcomes by verb and result, read by the metrics collector."""

    results: dict[tuple[str, str], int] = field(default_factory=dict)
    expired_assumptions: int = 0

    def count(self, verb: str, result: str) -> None:
        key = (verb, result)
        self.results[key] = self.results.get(key, 0) + 1


class Extender:
    """filter, prioritize and bind for the child kube-scheduler, on the leader."""

    def __init__(
        self,
        *,
        allocator: Callable[[], Allocator | None],
        native: NativeCluster,
        pods: PodCalls,
        cache: ObjectCache,
        events: PodEvents,
        fence: Fence,
        profile: SchedulingProfile,
        progressive_migration: bool = False,
        max_binds_in_flight: int = MAX_BINDS_IN_FLIGHT,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        self._allocator = allocator
        self._native = native
        self._pods = pods
        self._cache = cache
        self._events = events
        self._fence = fence
        self._profile = profile
        self._progressive = progressive_migration
        self._clock = clock
        self._sleep = sleep
        self._index: NodeScoreIndex | None = None
        self._binding: dict[str, asyncio.Lock] = {}
        # kube-scheduler binds every assumed pod at once; a bounded number of binds keeps the
        # API calls on kept-alive connections instead of a TLS handshake each.
        self._in_flight = asyncio.Semaphore(max_binds_in_flight)
        self.counters = ExtenderCounters()

    # ---- filter / prioritize -----------------------------------------------------------------

    def _node_index(self, allocator: Allocator) -> NodeScoreIndex:
        if self._index is None or self._index.allocator is not allocator:
            self._index = NodeScoreIndex(allocator, self._profile.gpu_fit.weights)
        return self._index

    async def filter(self, request: ExtenderArgs) -> ExtenderFilterResult:
        """One node for a TF worker (its GPUs assumed), all candidates for other pods."""
        allocator = self._allocator()
        if allocator is None:
            self.counters.count("filter", "not-ready")
            return ExtenderFilterResult.error(ALLOCATOR_NOT_READY)
        pod = request.pod
        kind = self._kind(pod)
        if kind is PodKind.OTHER:
            self.counters.count("filter", "passed")
            return ExtenderFilterResult.all_pass(request.node_names)
        if kind is PodKind.NATIVE_GPU:
            answer = filter_native_gpu_pod(allocator, request.node_names)
        else:
            answer = self._filter_worker(allocator, request)
        if answer.unschedulable is not None:
            self.counters.count("filter", "unschedulable")
            self._events.pod_event(pod, "Warning", FAILED_GPU_SCHEDULING, answer.unschedulable)
        else:
            self.counters.count("filter", "placed" if kind is PodKind.WORKER else "passed")
        return answer.result

    def _filter_worker(self, allocator: Allocator, request: ExtenderArgs) -> FilterAnswer:
        uid = request.pod_uid
        try:
            with self._native_view(uid, request.pod) as native:
                return filter_worker(
                    self._node_index(allocator),
                    request.pod,
                    node_names=request.node_names,
                    native=native,
                    profile=self._profile,
                    now=self._clock(),
                )
        except NativeInputError as error:
            message = f"pod resources: {error}"
            return FilterAnswer(
                ExtenderFilterResult.none_pass(dict.fromkeys(request.node_names, message)),
                unschedulable=f"0/{len(request.node_names)} nodes are available: {message}",
            )

    def _native_view(self, uid: str, pod: Mapping[str, Any]) -> _CompiledPod:
        return _CompiledPod(self._native, uid, pod)

    async def prioritize(self, request: ExtenderArgs) -> HostPriorityList:
        """10 for the node the pod was assumed on, 0 elsewhere and for other pods."""
        allocator = self._allocator()
        if allocator is None:
            return host_priorities(dict.fromkeys(request.node_names, 0))
        return prioritize(allocator, request.pod_uid, request.node_names)

    # ---- bind ---------------------------------------------------------------------------------

    async def bind(self, request: ExtenderBindingArgs) -> ExtenderBindingResult:
        """§12 for a TF worker; a plain Binding for other pods."""
        lock = self._binding.setdefault(request.pod_uid, asyncio.Lock())
        try:
            async with lock, self._in_flight:
                result = await self._bind(request)
        finally:
            if not lock.locked():
                self._binding.pop(request.pod_uid, None)
        self.counters.count("bind", "bound" if result.ok else "refused")
        return result

    async def _bind(self, request: ExtenderBindingArgs) -> ExtenderBindingResult:
        refused = self._not_leader()
        if refused is not None:
            return refused
        allocator = self._allocator()
        if allocator is None:
            return ExtenderBindingResult.error(ALLOCATOR_NOT_READY)
        pod = await self._load_pod(request)
        if pod is None:
            return ExtenderBindingResult.error(
                f"{STALE_BINDING}: pod {request.pod_namespace}/{request.pod_name} with UID "
                f"{request.pod_uid} does not exist"
            )
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to:
            # A retried bind whose first attempt went through after kube-scheduler gave up on
            # it: nothing to write (and the pod's gpu-ids must not change).
            if bound_to == request.node:
                return ExtenderBindingResult()
            return ExtenderBindingResult.error(f"pod is already bound to node {bound_to}")
        kind = self._kind(pod)
        if kind is not PodKind.WORKER:
            failure = await self._post_binding(request)
            if failure is None and kind is PodKind.NATIVE_GPU:
                message = f"Scheduled with native GPUs on {request.node}"
                self._event(pod, BindEvent("Normal", SCHEDULE_WITH_NATIVE_GPU, message))
            return ExtenderBindingResult.error(failure) if failure else ExtenderBindingResult()
        return await self._bind_worker(allocator, request, pod)

    def _not_leader(self) -> ExtenderBindingResult | None:
        try:
            self._fence()
        except Exception as error:
            _log.warning("bind refused: %s", error)
            return ExtenderBindingResult.error(NOT_LEADER)
        return None

    async def _load_pod(self, request: ExtenderBindingArgs) -> Mapping[str, Any] | None:
        pod = self._cache.get(request.pod_name, request.pod_namespace)
        if pod is None or _uid(pod) != request.pod_uid:
            pod = await self._pods.get_pod(request.pod_namespace, request.pod_name)
        if pod is None or _uid(pod) != request.pod_uid:
            return None
        return pod

    async def _bind_worker(
        self, allocator: Allocator, request: ExtenderBindingArgs, pod: Mapping[str, Any]
    ) -> ExtenderBindingResult:
        uid = request.pod_uid
        try:
            allocation = request_from_pod(pod)
            with self._native_view(uid, pod) as native:
                plan = reserve_for_bind(allocator, allocation, node=request.node, pod=pod,
                                        native=native, profile=self._profile,
                                        now=self._clock())  # fmt: skip
        except (BindRefusedError, AnnotationError, NativeInputError) as error:
            return ExtenderBindingResult.error(str(error))
        if plan.cleanup:
            problem = await self._patch_with_retries(request, plan.cleanup)
            if problem is not None:
                allocator.release(uid)
                self._event(pod, BindEvent("Warning", GPU_DEVICE_ALLOCATED_FAILED, problem))
                return ExtenderBindingResult.error(problem)
        if not plan.already_committed:
            allocator.commit(uid, self._clock())
            for event in plan.events:
                self._event(pod, event)
        failure = await self._post_binding(request, plan.annotations)
        if failure == NOT_LEADER:
            # The fence closed first: no Binding was sent and this replica's record goes.
            allocator.release(uid)
            return ExtenderBindingResult.error(NOT_LEADER)
        if failure is not None and not await self._bound_anyway(request):
            allocator.release(uid)
            return ExtenderBindingResult.error(failure)
        self._event(pod, allocated_event(plan.record))
        return ExtenderBindingResult()

    async def _patch_with_retries(
        self, request: ExtenderBindingArgs, operations: Sequence[Mapping[str, Any]]
    ) -> str | None:
        """None once patched; else why not (after 3 attempts, 1 s then 2 s apart, ±10%)."""
        last = ""
        for attempt in range(1, PATCH_ATTEMPTS + 1):
            try:
                await self._patch(request, operations)
            except NotLeaderError as error:
                _log.warning("pod %s/%s: GPU annotations not written: %s",
                             request.pod_namespace, request.pod_name, error)  # fmt: skip
                return NOT_LEADER
            except Exception as error:
                last = str(error)
                _log.warning("pod %s/%s: GPU annotations not written (attempt %d): %s",
                             request.pod_namespace, request.pod_name, attempt, error)  # fmt: skip
                if attempt < PATCH_ATTEMPTS:
                    delay = PATCH_BACKOFF_S * 2 ** (attempt - 1)
                    await self._sleep(delay * random.uniform(0.9, 1.1))
                continue
            return None
        return f"cannot write the GPU annotations of the pod: {last}"

    async def _patch(
        self, request: ExtenderBindingArgs, operations: Sequence[Mapping[str, Any]]
    ) -> None:
        """The pod's JSON patch under the fence (NotLeaderError: not sent)."""
        await fenced_call(self._fence, lambda left: self._pods.patch_pod(
            request.pod_namespace, request.pod_name, operations, timeout_s=left))  # fmt: skip

    async def _post_binding(
        self, request: ExtenderBindingArgs, annotations: Mapping[str, str] | None = None
    ) -> str | None:
        """None once bound; NOT_LEADER when the fence closed first (nothing sent); else why not."""
        try:
            await fenced_call(self._fence, lambda left: self._pods.bind_pod(
                request.pod_namespace, request.pod_name, request.pod_uid, request.node,
                annotations=annotations, timeout_s=left))  # fmt: skip
        except NotLeaderError as error:
            _log.warning("binding of pod %s/%s to %s not posted: %s", request.pod_namespace,
                         request.pod_name, request.node, error)  # fmt: skip
            return NOT_LEADER
        except Exception as error:
            _log.warning("binding of pod %s/%s to %s failed: %s", request.pod_namespace,
                         request.pod_name, request.node, error)  # fmt: skip
            return f"binding to node {request.node} failed: {error}"
        return None

    async def _bound_anyway(self, request: ExtenderBindingArgs) -> bool:
        """After a failed Binding: whether the pod is on the node all the same."""
        try:
            pod = await self._pods.get_pod(request.pod_namespace, request.pod_name)
        except Exception:
            return False
        return pod is not None and (pod.get("spec") or {}).get("nodeName") == request.node

    def _event(self, pod: Mapping[str, Any], event: BindEvent) -> None:
        """Queue an Event of the bind."""
        type_: Literal["Normal", "Warning"] = "Warning" if event.type == "Warning" else "Normal"
        self._events.pod_event(pod, type_, event.reason, event.message)

    # ---- assumptions ------------------------------------------------------------------------

    def expire_assumptions(self) -> list[str]:
        """Release assumptions older than their 60 s TTL; the released pod UIDs."""
        allocator = self._allocator()
        if allocator is None:
            return []
        expired = allocator.expire_assumptions(self._clock())
        if expired:
            self.counters.expired_assumptions += len(expired)
            _log.info("released %d assumptions that no bind followed: %s", len(expired),
                      ", ".join(expired))  # fmt: skip
        return expired

    async def sweep_forever(self) -> None:
        """`expire_assumptions` every 10 s until cancelled."""
        while True:
            await self._sleep(SWEEP_INTERVAL_S)
            self.expire_assumptions()

    def _kind(self, pod: Mapping[str, Any]) -> PodKind:
        return pod_kind(pod, progressive_migration=self._progressive)


class _CompiledPod:
    """The pod compiled into the native view for one decision, forgotten afterwards unless the
    informer has bound it meanwhile."""

    def __init__(self, cluster: NativeCluster, uid: str, pod: Mapping[str, Any]) -> None:
        self._cluster, self._uid, self._pod = cluster, uid, pod
        self._added = False

    def __enter__(self) -> PodNativeView:
        if self._uid not in self._cluster.pods:
            self._cluster.add_pod(self._uid, self._pod)
            self._added = True
        return self._cluster.view(self._uid)

    def __exit__(self, *exc: object) -> None:
        if self._added and self._uid not in self._cluster.bound:
            self._cluster.forget_pod(self._uid)


def _uid(pod: Mapping[str, Any]) -> str:
    return uid_of(pod)
