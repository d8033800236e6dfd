"""The GPU store and the allocation lifecycle: assume, commit, release, rebuild.

Pure and single-threaded: callers serialise access (scheduling.md §3, "one lock").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.change_feed import ChangeCursor, ChangeFeed
from tensorfusion.domain.allocator.gpu_accounting import (
    make_record,
    update_isolation_lock,
    update_running_apps,
)
from tensorfusion.domain.allocator.gpu_state import WHOLE_CARD_MODES, GPUState, room_failure
from tensorfusion.domain.allocator.oversubscription import OversubscriptionSettings
from tensorfusion.domain.allocator.quota import NamespaceQuota, QuotaSpec
from tensorfusion.domain.allocator.records import (
    AllocationRecord,
    NodeState,
    RecordState,
    RestoreOutcome,
)
from tensorfusion.domain.allocator.workload_mix import WorkloadMix
from tensorfusion.domain.model.scheduling import Placement
from tensorfusion.domain.vocabulary import IsolationPolicy, PlacementMode

__all__ = ["AllocationError", "Allocator", "OverCommitError", "PoolSettings"]

ASSUME_TTL_SECONDS = 60.0
_FACTS = (
    "node", "pool", "phase", "used_by", "vendor", "model", "uuid", "index", "numa_node",
    "isolation_mode", "isolation_policy", "capabilities", "peers", "message", "missing_since",
    "capacity_tflops", "capacity_vram",
)  # fmt: skip
"""The informer-copied facts of a GPU (§3); every other field is owned by the allocator."""


def _facts(gpu: GPUState) -> tuple[object, ...]:
    return tuple(getattr(gpu, attr) for attr in _FACTS)


class AllocationError(ValueError):
    """An allocation that cannot be made or found."""


class OverCommitError(AllocationError):
    """A restore that would charge a GPU beyond its room (nothing was changed)."""


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """What the allocator needs of a GPUPool (built from the model by `allocator.mapping`)."""

    name: str
    placement_mode: PlacementMode = Placement.model_fields["mode"].default
    oversubscription: OversubscriptionSettings | None = None


@dataclass(slots=True)
class Allocator:
    """In-memory GPU state indexed by name, node and pool, with allocation records by pod UID."""

    isolation_policy: IsolationPolicy = IsolationPolicy.STATIC
    gpus: dict[str, GPUState] = field(default_factory=dict)
    nodes: dict[str, NodeState] = field(default_factory=dict)
    pools: dict[str, PoolSettings] = field(default_factory=dict)
    quotas: dict[str, NamespaceQuota] = field(default_factory=dict)
    records: dict[str, AllocationRecord] = field(default_factory=dict)
    pool_members: dict[str, set[str]] = field(default_factory=dict)
    _changes: ChangeFeed = field(default_factory=ChangeFeed)
    mixes: dict[str, WorkloadMix] = field(default_factory=dict, compare=False, repr=False)
    """Per pool, the request sizes seen so far (FragmentationAware pools only)."""
    seal_key: bytes = field(default=b"", compare=False, repr=False)
    """The key the bind patch seals allocations with (`allocation_seal`); empty: unsealed."""

    # ---- inventory -------------------------------------------------------------------------

    def changes(self, consumer: str, *, unique: bool = False) -> ChangeCursor:
        """The consumer's own cursor over changed nodes and GPUs (created on first use and
        kept while the consumer holds it); `unique` gives every caller a cursor of its own."""
        return self._changes.subscribe(consumer, self.nodes, self.gpus, unique=unique)

    def workload_mix(self, pool: str) -> WorkloadMix:
        """The pool's learned request mix (created empty on first use)."""
        mix = self.mixes.get(pool)
        if mix is None:
            mix = self.mixes[pool] = WorkloadMix()
        return mix

    def pool(self, name: str) -> PoolSettings:
        """Settings of a pool (defaults when the pool is unknown)."""
        settings = self.pools.get(name)
        return settings if settings is not None else PoolSettings(name)

    def set_pool(self, settings: PoolSettings) -> None:
        """Add or replace a pool's settings."""
        self.pools[settings.name] = settings
        self._changes.nodes_changed(self.nodes)

    def _largest_capacity_tflops(self, pool: str) -> int:
        members = self.pool_members.get(pool, ())
        return max((self.gpus[name].capacity_tflops for name in members), default=0)

    def pool_gpus(self, pool: str) -> list[GPUState]:
        """The GPUs labelled with the pool, by name."""
        return [self.gpus[name] for name in sorted(self.pool_members.get(pool, ()))]

    def node(self, name: str) -> NodeState:
        """The node's state, created empty on first use."""
        state = self.nodes.get(name)
        if state is None:
            state = self.nodes[name] = NodeState(name)
        return state

    def set_node_facts(
        self, name: str, *, ram_bytes: int, disk_bytes: int, hypervisor_index0: int | None
    ) -> None:
        """Host RAM and disk (virtual VRAM) and the agent's `index_0` allocatable; the node is
        marked changed only when one of them changed (a heartbeat changes none)."""
        state = self.node(name)
        if (state.ram_bytes, state.disk_bytes, state.hypervisor_index0) == (
            ram_bytes, disk_bytes, hypervisor_index0):  # fmt: skip
            return
        state.ram_bytes, state.disk_bytes = ram_bytes, disk_bytes
        state.hypervisor_index0 = hypervisor_index0
        self._changes.node_changed(name)

    def upsert_gpu(self, gpu: GPUState) -> None:
        """Add a GPU or copy informer facts onto the known one (never the owned fields).

        A GPU marked missing stays known (its allocations still count) but leaves its node's
        GPU list, so node totals and placement skip it. An update that changes no fact (the
        informer's echo of our own status write) changes nothing.
        """
        known = self.gpus.get(gpu.name)
        if known is None:
            self.gpus[gpu.name] = gpu
            self._rebuild_owned(gpu)
            self._attach(gpu)
            self._changes.gpu_changed(gpu.name)
            self._changes.node_changed(gpu.node)
            return
        if _facts(known) == _facts(gpu):
            return
        capacity = (known.capacity_tflops, known.capacity_vram)
        isolation = (known.isolation_policy, known.isolation_mode)
        self._detach(known)
        self._changes.node_changed(known.node)
        self._copy_facts(known, gpu)
        self._attach(known)
        owned_changed = capacity != (known.capacity_tflops, known.capacity_vram)
        if owned_changed:
            self._recharge_whole_card(known)
        if owned_changed or isolation != (known.isolation_policy, known.isolation_mode):
            # Whole-card charges and the Dynamic lock depend on these facts: re-derive.
            self._rebuild_owned(known)
            owned_changed = True
        if owned_changed:
            self._changes.gpu_changed(known.name)
        self._changes.node_changed(known.node)

    def remove_gpu(self, name: str) -> None:
        """Drop a GPU from every index."""
        gpu = self.gpus.pop(name, None)
        if gpu is not None:
            self._detach(gpu)
            self._changes.node_changed(gpu.node)
            self._changes.gpu_removed(name)

    def set_quota(self, spec: QuotaSpec) -> None:
        """Install a namespace's effective quota, keeping its usage."""
        known = self.quotas.get(spec.namespace)
        if known is None:
            quota = NamespaceQuota(spec)
            for record in self.records.values():
                if record.request.namespace == spec.namespace:
                    target = (
                        quota.committed if record.state is RecordState.COMMITTED else quota.assumed
                    )
                    target.add(record.quota)
            self.quotas[spec.namespace] = quota
        else:
            known.spec = spec

    def remove_quota(self, namespace: str) -> None:
        """Forget a namespace's quota."""
        self.quotas.pop(namespace, None)

    # ---- lifecycle ---------------------------------------------------------------------------

    def assume(
        self,
        request: AllocationRequest,
        node_name: str,
        gpu_names: Iterable[str],
        now: float,
        ttl: float = ASSUME_TTL_SECONDS,
    ) -> AllocationRecord:
        """Record GPUs chosen by `filter` for a pod; they count fully until bound or expired.

        An earlier record of the same pod is replaced, but only once the new one is valid.
        """
        names = tuple(gpu_names)
        self._check_gpus(request, node_name, names)
        self.release(request.pod_uid)
        record = make_record(request, node_name, [self.gpus[n] for n in names], now, ttl)
        self._apply(record, sign=1)
        return record

    def commit(self, uid: str, now: float) -> AllocationRecord:
        """Turn an assumption into a committed allocation (after `gpu-ids` is written)."""
        record = self.records.get(uid)
        if record is None:
            raise AllocationError(f"no allocation for pod UID {uid}")
        if record.state is RecordState.COMMITTED:
            return record
        request = record.request
        for name, (tflops, vram) in zip(record.gpus, record.charged, strict=True):
            gpu = self.gpus.get(name)
            if gpu is None:
                continue
            gpu.assumed_tflops -= tflops
            gpu.assumed_vram -= vram
            gpu.committed_tflops += tflops
            gpu.committed_vram += vram
            gpu.settle_available()
            update_running_apps(gpu, request, 1)
            self._gpu_charged(gpu)
        node = self.node(record.node)
        node.assumed_workers.discard(uid)
        node.committed_workers.add(uid)
        node.committed_limit_tflops += record.effective_limit[0]
        node.committed_limit_vram += record.effective_limit[1]
        quota = self.quotas.get(request.namespace)
        if quota is not None:
            quota.assumed.add(record.quota, -1)
            quota.committed.add(record.quota)
        record.state = RecordState.COMMITTED
        record.since = now
        record.expires_at = None
        self._changes.node_changed(node.name)
        return record

    def restore(
        self,
        request: AllocationRequest,
        node_name: str,
        gpu_names: Iterable[str],
        now: float,
        *,
        pending: bool = True,
        recheck: Iterable[str] = (),
    ) -> RestoreOutcome:
        """Rebuild a committed record from a bound pod's `gpu-ids` on node `node_name`.

        Unknown GPUs are skipped; GPUs known on another node stay charged where they are (as
        a GPU that moves while held does). Both are reported. The pod counts as a worker of
        its node and is charged its full quota (request × count), so quota usage is never
        lost to an inconsistent annotation. `pending`: the pod has not left Pending, so its
        index still blocks others on the node (`PodIndexBusy`).

        OverCommitError, changing nothing, when a GPU lacks room for the pod by the filter's
        own check (a second allocation of a GPU, bound by a leader that lost its Lease); a GPU
        of unknown (zero) capacity is not checked. A pod that already has a record is checked
        only on the GPUs of `recheck` (GPUs it names that were not known when it was restored).
        """
        wanted = tuple(dict.fromkeys(gpu_names))
        unknown = tuple(n for n in wanted if n not in self.gpus)
        elsewhere = tuple(n for n in wanted if n in self.gpus and self.gpus[n].node != node_name)
        names = tuple(n for n in wanted if n not in unknown)
        if request.pod_uid not in self.records:
            self._check_room(request, names)
        else:
            again = set(recheck)
            self._check_room(request, tuple(n for n in names if n in again))
        # Only a record with no known GPU converts percent values with the pool's largest GPU.
        fallback = 0 if names else self._largest_capacity_tflops(request.pool)
        self.release(request.pod_uid)
        record = make_record(
            request, node_name, [self.gpus[n] for n in names], now, None,
            RecordState.COMMITTED, fallback_capacity=fallback,
        )  # fmt: skip
        record.pending = pending
        self._apply(record, sign=1)
        return RestoreOutcome(record, unknown, elsewhere)

    def _check_room(self, request: AllocationRequest, names: tuple[str, ...]) -> None:
        for name in names:
            gpu = self.gpus[name]
            if gpu.capacity_tflops <= 0 or gpu.capacity_vram <= 0:
                continue
            failure = room_failure(gpu, request, explain=True)
            if failure is not None:
                raise OverCommitError(
                    f"pod {request.key}: gpu-ids names GPU {name}, which has no room for it "
                    f"({failure[1]}): the allocation is refused, the GPU keeps its earlier pods"
                )

    def release(self, uid: str) -> AllocationRecord | None:
        """Idempotently undo whatever the pod holds."""
        record = self.records.get(uid)
        if record is None:
            return None
        self._apply(record, sign=-1)
        return record

    def mark_running(self, uid: str) -> None:
        """The pod left Pending: its index no longer blocks others on the node."""
        record = self.records.get(uid)
        if record is None or not record.pending:
            return
        record.pending = False
        index = record.request.pod_index
        node = self.nodes.get(record.node)
        if node is not None and index is not None and node.pending_indices.get(index) == uid:
            del node.pending_indices[index]

    def expire_assumptions(self, now: float) -> list[str]:
        """Release assumptions older than their TTL; returns the released pod UIDs."""
        expired = [
            uid
            for uid, r in self.records.items()
            if r.state is RecordState.ASSUMED and r.expires_at is not None and r.expires_at < now
        ]
        for uid in expired:
            self.release(uid)
        return expired

    # ---- internals ---------------------------------------------------------------------------

    def _check_gpus(
        self, request: AllocationRequest, node_name: str, names: tuple[str, ...]
    ) -> None:
        problems = []
        if len(names) != request.count:
            problems.append(f"{len(names)} GPUs given for gpu-count {request.count}")
        if len(set(names)) != len(names):
            problems.append(f"duplicate GPU names in {list(names)}")
        unknown = [n for n in names if n not in self.gpus]
        if unknown:
            problems.append(f"unknown GPUs {unknown}")
        elsewhere = [n for n in names if n in self.gpus and self.gpus[n].node != node_name]
        if elsewhere:
            problems.append(f"GPUs {elsewhere} are not on node {node_name}")
        if problems:
            raise AllocationError(f"pod {request.key}: cannot allocate: {'; '.join(problems)}")

    def replace_request(self, uid: str, request: AllocationRequest) -> AllocationRecord:
        """Re-charge a record for new requests and limits on the same GPUs (no checks here:
        `allocator.resize` decides whether the change fits)."""
        record = self.records.get(uid)
        if record is None:
            raise AllocationError(f"no allocation for pod UID {uid}")
        if request.pod_uid != uid or request.count != record.request.count:
            raise AllocationError(f"pod UID {uid}: a resize keeps the pod and its GPU count")
        gone = [n for n in record.gpus if n not in self.gpus]
        if gone:
            raise AllocationError(f"pod {request.key}: GPU {', '.join(gone)} no longer exists")
        self._apply(record, sign=-1)
        gpus = [self.gpus[n] for n in record.gpus]
        fresh = make_record(request, record.node, gpus, record.since, None, record.state)
        fresh.expires_at, fresh.pending = record.expires_at, record.pending
        self._apply(fresh, sign=1)
        return fresh

    def _apply(self, record: AllocationRecord, sign: int) -> None:
        """Add (sign 1) or remove (sign −1) a record's effect on every index."""
        uid = record.uid
        committed = record.state is RecordState.COMMITTED
        request = record.request
        node = self.node(record.node)
        for name, (tflops, vram) in zip(record.gpus, record.charged, strict=True):
            gpu = self.gpus.get(name)
            if gpu is None:
                continue
            if committed:
                gpu.committed_tflops += sign * tflops
                gpu.committed_vram += sign * vram
                gpu.settle_available()
                update_running_apps(gpu, request, sign)
            else:
                gpu.assumed_tflops += sign * tflops
                gpu.assumed_vram += sign * vram
            update_isolation_lock(gpu, uid, request, sign, self._policy_of(gpu))
            self._gpu_charged(gpu)
        workers = node.committed_workers if committed else node.assumed_workers
        quota = self.quotas.get(request.namespace)
        usage = None if quota is None else (quota.committed if committed else quota.assumed)
        if sign > 0:
            workers.add(uid)
            self.records[uid] = record
            if record.pending and request.pod_index is not None:
                node.pending_indices[request.pod_index] = uid
        else:
            workers.discard(uid)
            self.records.pop(uid, None)
            index = request.pod_index
            if index is not None and node.pending_indices.get(index) == uid:
                del node.pending_indices[index]
        if usage is not None:
            usage.add(record.quota, sign)
        node.limit_tflops += sign * record.effective_limit[0]
        node.limit_vram += sign * record.effective_limit[1]
        if committed:
            node.committed_limit_tflops += sign * record.effective_limit[0]
            node.committed_limit_vram += sign * record.effective_limit[1]
        self._changes.node_changed(node.name)

    def _recharge_whole_card(self, gpu: GPUState) -> None:
        """Shared and partitioned holders are charged the GPU's current capacity (§3, §5)."""
        for uid, mode in gpu.holders.items():
            record = self.records.get(uid)
            if record is None or mode not in WHOLE_CARD_MODES:
                continue
            charged = list(record.charged)
            position = record.gpus.index(gpu.name)
            old_tflops, old_vram = charged[position]
            charged[position] = (gpu.capacity_tflops, gpu.capacity_vram)
            record.charged = tuple(charged)
            delta = (gpu.capacity_tflops - old_tflops, gpu.capacity_vram - old_vram)
            record.effective_limit = (
                record.effective_limit[0] + delta[0],
                record.effective_limit[1] + delta[1],
            )
            node = self.node(record.node)
            node.limit_tflops += delta[0]
            node.limit_vram += delta[1]
            if record.state is RecordState.COMMITTED:
                node.committed_limit_tflops += delta[0]
                node.committed_limit_vram += delta[1]
            self._changes.node_changed(record.node)

    def _gpu_charged(self, gpu: GPUState) -> None:
        # The GPU's own node changed too: a GPU moved since the record was made is charged
        # on its new node, not on the record's.
        self._changes.gpu_changed(gpu.name)
        self._changes.node_changed(gpu.node)

    def _policy_of(self, gpu: GPUState) -> IsolationPolicy:
        return gpu.isolation_policy or self.isolation_policy

    def _rebuild_owned(self, gpu: GPUState) -> None:
        """Derive every field the allocator owns on a GPU from the allocation records."""
        gpu.committed_tflops = gpu.committed_vram = gpu.assumed_tflops = gpu.assumed_vram = 0
        gpu.holders.clear()
        gpu.whole_holders = 0
        gpu.partitions.clear()
        gpu.running_apps.clear()
        gpu.active_isolation_mode, gpu.dynamic_isolation_conflict = "", False
        for record in self.records.values():
            if gpu.name not in record.gpus:
                continue
            tflops, vram = record.charged[record.gpus.index(gpu.name)]
            if record.state is RecordState.COMMITTED:
                gpu.committed_tflops += tflops
                gpu.committed_vram += vram
                update_running_apps(gpu, record.request, 1)
            else:
                gpu.assumed_tflops += tflops
                gpu.assumed_vram += vram
            update_isolation_lock(gpu, record.uid, record.request, 1, self._policy_of(gpu))
        gpu.settle_available()

    def _copy_facts(self, known: GPUState, fresh: GPUState) -> None:
        for attr in _FACTS:
            setattr(known, attr, getattr(fresh, attr))
        known.settle_available()

    def _attach(self, gpu: GPUState) -> None:
        self.pool_members.setdefault(gpu.pool, set()).add(gpu.name)
        node = self.node(gpu.node)
        members = node.missing_gpus if gpu.missing else node.gpus
        members.append(gpu)
        members.sort(key=lambda g: g.name)

    def _detach(self, gpu: GPUState) -> None:
        self.pool_members.get(gpu.pool, set()).discard(gpu.name)
        node = self.nodes.get(gpu.node)
        if node is not None:
            node.gpus = [g for g in node.gpus if g.name != gpu.name]
            node.missing_gpus = [g for g in node.missing_gpus if g.name != gpu.name]
