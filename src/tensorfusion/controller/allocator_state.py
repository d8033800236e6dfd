"""The leader's allocator, rebuilt from the informer caches and kept current by their events.

Until :meth:`AllocatorState.recover` has run, the allocator is not ready: `/api/allocation`
says `ready: false` and the extender answers `allocator not ready`. Recovery reads the caches
once they have synced (scheduling.md §12); afterwards every cache change is applied at once.
Handlers and recovery never await, so on the event loop they are atomic with respect to
`filter` and `bind`. An object the state cannot read (a quantity beyond the bounds, say) or a pod
whose allocation was refused is logged once and kept in `problems`; each new problem is queued
in `notices` for the problem reporter's Events; everything else goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.allocator.allocation_seal import UNSEALED_REASON, seal_problem
from tensorfusion.domain.allocator.allocator import Allocator, OverCommitError
from tensorfusion.domain.allocator.change_feed import ChangeCursor
from tensorfusion.domain.allocator.mapping import (
    gpu_state,
    host_facts,
    hypervisor_index0,
    pool_settings,
    quota_spec,
)
from tensorfusion.domain.allocator.quota_status import choose_effective, read_quota
from tensorfusion.domain.allocator.recovery import (
    OVER_COMMIT_REASON,
    RecoveryReport,
    bound_since,
    is_live_worker,
    load_all,
    object_key,
    read_inventory,
    recover,
    worker_gpu_ids,
)
from tensorfusion.domain.annotation_errors import AnnotationError
from tensorfusion.domain.devices.committed_allocation import running_pod_uids
from tensorfusion.domain.model import (
    GPU,
    GPUNode,
    GPUPool,
    ModelError,
    SchedulingConfigTemplate,
    load_as,
)
from tensorfusion.domain.object_views import is_deleting, name_of, namespace_of, uid_of
from tensorfusion.domain.pod_request import request_from_pod
from tensorfusion.domain.vocabulary import IsolationPolicy
from tensorfusion.runtime.informer import ObjectCache
from tensorfusion.runtime.informer_store import EventKind, InformerEvent

__all__ = [
    "UNREADABLE_REASON",
    "AllocatorChanges",
    "AllocatorState",
    "ProblemNotice",
    "StateCaches",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StateCaches:
    """The informer caches the allocator is built from (Pods: the TF workers)."""

    gpus: ObjectCache
    gpu_nodes: ObjectCache
    nodes: ObjectCache
    pools: ObjectCache
    templates: ObjectCache
    quotas: ObjectCache
    pods: ObjectCache


@dataclass(frozen=True, slots=True)
class ProblemNotice:
    """A new problem of one object: `key` is `Kind name` or `Kind namespace/name`; `reason`
    the Event reason."""

    key: str
    reason: str
    message: str


UNREADABLE_REASON = "InvalidObject"
"""Event reason for an object the allocator could not read."""


@dataclass(slots=True)
class AllocatorState:
    """The allocator of the leader and how cache events change it."""

    caches: StateCaches
    isolation_policy: IsolationPolicy
    clock: Callable[[], float]
    allocator: Allocator | None = None
    last_report: RecoveryReport | None = None
    problems: dict[str, str] = field(default_factory=dict)
    """Objects the state could not read, by `Kind namespace/name`: for logs and Events."""
    notices: list[ProblemNotice] = field(default_factory=list)
    """Problems not yet published as Events (the problem reporter drains it)."""
    cleared: list[str] = field(default_factory=list)
    """Keys whose problem went away, not yet published (the reporter clears their condition)."""
    refused: int = 0
    """Allocations refused because they would over-commit a GPU or carry no valid seal (a
    metric)."""
    seal_key: bytes = field(default=b"", repr=False)
    """The allocation seal's key (set before recovery); empty: sealing off."""

    def note(self, key: str, message: str, reason: str = UNREADABLE_REASON) -> bool:
        """Keep an object's problem; log it and queue its Event when it is new (True then)."""
        if self.problems.get(key) == message:
            return False
        self.problems[key] = message
        _log.warning("%s: %s", key, message)
        self.notices.append(ProblemNotice(key, reason, message))
        return True

    def refuse(self, key: str, message: str, reason: str) -> None:
        """An allocation refused: its problem noted, counted once while it stays the same
        (a pod's later informer events do not count it again)."""
        if self.note(key, message, reason):
            self.refused += 1

    def clear(self, key: str) -> None:
        """The object reads well again."""
        if self.problems.pop(key, None) is not None:
            _log.info("%s reads well again", key)
            self.cleared.append(key)

    @property
    def ready(self) -> bool:
        """Whether recovery has run."""
        return self.allocator is not None

    # ---- recovery ------------------------------------------------------------------------

    def recover(self) -> RecoveryReport:
        """Build the allocator from the caches (which must have synced)."""
        caches = self.caches
        inventory, unreadable = read_inventory(
            pools=caches.pools.list(), templates=caches.templates.list(),
            quotas=caches.quotas.list(), gpus=caches.gpus.list(),
            gpu_nodes=caches.gpu_nodes.list(), nodes=caches.nodes.list(),
        )  # fmt: skip
        allocator, report = recover(
            inventory, caches.pods.list(), self.isolation_policy, self.clock(),
            seal_key=self.seal_key, committed=self._committed,
        )  # fmt: skip
        report.unreadable.update(unreadable)
        for key, message in unreadable.items():
            self.note(key, message)
        for name, problems in report.gpu_problems.items():
            self.note(f"GPU {name}", "; ".join(problems))
        for pod, message in report.skipped_pods.items():
            self.note(f"Pod {pod}", message)
        for pod, message in report.refused_pods.items():
            self.refuse(f"Pod {pod}", message, OVER_COMMIT_REASON)
        for pod, message in report.unsealed_pods.items():
            self.refuse(f"Pod {pod}", message, UNSEALED_REASON)
        self.allocator, self.last_report = allocator, report
        return report

    def _committed(self, gpu: str) -> frozenset[str]:
        """The pod uids the GPU object's `runningApps` lists (committed by a leader)."""
        obj = self.caches.gpus.get(gpu)
        return running_pod_uids(obj) if obj is not None else frozenset()

    def _load_all(self, model: type[Any], objects: Iterable[Mapping[str, Any]]) -> list[Any]:
        problems: dict[str, str] = {}
        listed = list(objects)
        loaded = load_all(model, listed, problems)
        for obj in listed:
            key = object_key(model.__name__, obj)
            if key in problems:
                self.note(key, problems[key])
            else:
                self.clear(key)
        return loaded

    def _templates(self) -> dict[str, SchedulingConfigTemplate]:
        templates = self._load_all(SchedulingConfigTemplate, self.caches.templates.list())
        return {t.metadata.name or "": t for t in templates}

    # ---- events --------------------------------------------------------------------------

    def on_gpu(self, event: InformerEvent) -> None:
        """A GPU object changed."""
        allocator = self.allocator
        if allocator is None:
            return
        if event.kind is EventKind.DELETED:
            allocator.remove_gpu(event.key.name)
            return
        try:
            mapped = gpu_state(load_as(GPU, event.obj))
        except ModelError as error:
            self.note(f"GPU {event.key.name}", str(error))
            return
        if mapped.problems:
            self.note(f"GPU {event.key.name}", "; ".join(mapped.problems))
        else:
            self.clear(f"GPU {event.key.name}")
        if mapped.state.node:
            new = mapped.state.name not in allocator.gpus
            allocator.upsert_gpu(mapped.state)
            if new:
                self._charge_new_gpu(mapped.state.name)
        else:
            allocator.remove_gpu(mapped.state.name)

    def _charge_new_gpu(self, gpu: str) -> None:
        """Restore again the live workers whose `gpu-ids` name `gpu` but whose records were
        made before it was known (a worker restored before its GPU object appeared), so the
        GPU is charged for them from the start; one the GPU has no room for is refused, as at
        recovery, and keeps what it held."""
        assert self.allocator is not None
        for pod in self.caches.pods.list():
            record = self.allocator.records.get(uid_of(pod))
            if (record is not None and gpu not in record.gpus and not _ended(pod)
                    and gpu in worker_gpu_ids(pod)):  # fmt: skip
                self._restore(pod, recheck=(gpu,))

    def on_pool_or_template(self, event: InformerEvent) -> None:
        """A GPUPool or SchedulingConfigTemplate changed: re-read every pool's settings."""
        allocator = self.allocator
        if allocator is None:
            return
        templates = self._templates()
        for pool in self._load_all(GPUPool, self.caches.pools.list()):
            settings = pool_settings(pool, templates)
            if allocator.pools.get(settings.name) != settings:
                allocator.set_pool(settings)

    def on_quota(self, event: InformerEvent) -> None:
        """A GPUResourceQuota changed: the namespace's effective quota is chosen again."""
        allocator = self.allocator
        if allocator is None:
            return
        namespace = event.key.namespace
        effective, superseded = choose_effective(
            read_quota(q) for q in self.caches.quotas.list(namespace)
        )
        for read in [*effective.values(), *superseded]:
            key = f"GPUResourceQuota {read.namespace}/{read.name}"
            if read.problems:
                self.note(key, "; ".join(read.problems))
            else:
                self.clear(key)
        reading = effective.get(namespace)
        if reading is not None and reading.enforceable and reading.quota is not None:
            allocator.set_quota(quota_spec(reading.quota))
        else:
            allocator.remove_quota(namespace)

    def on_node(self, event: InformerEvent) -> None:
        """A Node or GPUNode changed: host facts and the agent's index resource."""
        allocator = self.allocator
        name = event.key.name
        if allocator is None or name not in allocator.nodes:
            return
        gpu_node_obj = self.caches.gpu_nodes.get(name)
        gpu_node = None
        if gpu_node_obj is not None:
            key = object_key("GPUNode", gpu_node_obj)
            try:
                gpu_node = load_as(GPUNode, gpu_node_obj)
            except ModelError as error:
                self.note(key, str(error))
            else:
                self.clear(key)
        ram, disk = host_facts(gpu_node)
        allocator.set_node_facts(
            name, ram_bytes=ram, disk_bytes=disk,
            hypervisor_index0=hypervisor_index0(self.caches.nodes.get(name)),
        )  # fmt: skip

    def on_pod(self, event: InformerEvent) -> None:
        """A worker pod changed: release what it held once it ended or went away, restore a
        record bound by another actor, and free its pending index once it runs."""
        allocator = self.allocator
        if allocator is None:
            return
        pod = event.obj
        uid = uid_of(pod)
        if event.kind is EventKind.DELETED:
            allocator.release(uid)
            return
        if _ended(pod):
            allocator.release(uid)
            return
        record = allocator.records.get(uid)
        if record is None and is_live_worker(pod):
            self._restore(pod)
            return
        if record is not None and (pod.get("status") or {}).get("phase") not in (None, "Pending"):
            allocator.mark_running(uid)

    def _restore(self, pod: Mapping[str, Any], recheck: tuple[str, ...] = ()) -> None:
        assert self.allocator is not None
        key = f"{namespace_of(pod)}/{name_of(pod)}"
        try:
            request = request_from_pod(pod)
        except AnnotationError as error:
            self.note(f"Pod {key}", error.message)
            return
        pending = (pod.get("status") or {}).get("phase") in (None, "Pending")
        node = str((pod.get("spec") or {}).get("nodeName"))
        since = bound_since(pod, self.clock())
        gpus = worker_gpu_ids(pod)
        unsealed = seal_problem(pod, gpus, self.seal_key, self._committed)
        if unsealed is not None:
            self.refuse(f"Pod {key}", unsealed, UNSEALED_REASON)
            return
        try:
            self.allocator.restore(request, node, gpus, since, pending=pending, recheck=recheck)
        except OverCommitError as error:
            self.refuse(f"Pod {key}", str(error), OVER_COMMIT_REASON)
            return
        self.clear(f"Pod {key}")


def _ended(pod: Mapping[str, Any]) -> bool:
    """Finished or being deleted: its GPUs are released (its finalizer is removed after)."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return True
    return is_deleting(pod)


@dataclass(slots=True)
class AllocatorChanges:
    """One consumer's change cursor on the state's allocator, made anew when a new term
    rebuilds the allocator (so the new allocator's nodes all count as changed)."""

    state: AllocatorState
    consumer: str
    _cursor: ChangeCursor | None = None
    _source: Allocator | None = None

    def take(self) -> tuple[set[str], set[str]]:
        """(nodes, GPUs) changed since the last call; both empty before recovery."""
        allocator = self.state.allocator
        if allocator is None:
            return set(), set()
        if self._cursor is None or self._source is not allocator:
            self._cursor = allocator.changes(self.consumer, unique=True)
            self._source = allocator
        return self._cursor.take_nodes(), self._cursor.take_gpus()
