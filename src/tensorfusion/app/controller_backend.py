"""The controller process as the HTTP servers see it (`api_server.ApiBackend`, `HealthBackend`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.adapters.kube.access_reviews import non_resource_allowed, token_review
from tensorfusion.adapters.kube.client import KubeClient
from tensorfusion.adapters.tsdb.store import MetricsStore, StoreError
from tensorfusion.api_server.backend import (
    SimulationInputs,
    TokenReviewResult,
    service_account_username,
)
from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.controller.native_state import NativeState
from tensorfusion.domain.admission.dry_run import PodPreparer
from tensorfusion.domain.admission.pod_index import PodIndexCounter
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.quota_status import choose_effective, read_quota
from tensorfusion.domain.allocator.snapshot import allocator_copy
from tensorfusion.domain.model import GPU, GPUPool, ModelError, load_as
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.domain.vocabulary import IsolationPolicy
from tensorfusion.domain.workloads_view import (
    RecentUsage,
    parse_recent_usage,
    recent_usage_query,
)
from tensorfusion.runtime.http_server import join_host_port
from tensorfusion.runtime.informer import Informer
from tensorfusion.runtime.leader_election import LEASE_NAME, read_leader_ip

__all__ = ["ControllerBackend"]

_log = logging.getLogger(__name__)
TOKEN_CACHE_S: Final = 300.0
ACCESS_CACHE_S: Final = 60.0
"""How long a SubjectAccessReview's answer stands (an RBAC change takes effect after that)."""
CACHE_ENTRIES: Final = 1024
USAGE_TIMEOUT_S: Final = 5.0
USAGE_CACHE_S: Final = 5.0
UsageAnswer = tuple[Mapping[tuple[str, str], RecentUsage] | None, str]


@dataclass(slots=True)
class ControllerBackend:
    """Reads of the controller's state for the `/api/*` handlers and `/readyz`."""

    client: KubeClient
    namespace: str
    service_account_name: str
    peer_port: int
    isolation: IsolationPolicy
    profile: SchedulingProfile
    state: AllocatorState
    native: NativeState
    pools: Informer
    quotas: Informer
    gpus: Informer
    informers: Sequence[Informer]
    leading: Callable[[], bool]
    workloads: Informer | None = None
    store: Callable[[], MetricsStore | None] = lambda: None
    """The leader's metrics store of this term (None while there is none)."""
    alerts: Callable[[], Mapping[str, Any]] = dict
    config: Callable[[], Mapping[str, Any]] = dict
    listeners_up: Callable[[], bool] = lambda: True
    webhook_ready: Callable[[], bool] = lambda: True
    """Whether the webhook's site listens with its certificate (always, with
    ENABLE_WEBHOOKS=false)."""
    peer_ready: Callable[[], bool] = lambda: True
    """Whether the peer port listens with the release certificate."""
    counter: PodIndexCounter = field(default_factory=PodIndexCounter)
    clock: Callable[[], float] = time.monotonic
    _usage: tuple[float, UsageAnswer | None] = (0.0, None)
    _usage_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _reviews: dict[str, tuple[float, TokenReviewResult]] = field(default_factory=dict)
    _access: dict[tuple[str, tuple[str, ...], str, str], tuple[float, bool]] = field(
        default_factory=dict
    )

    # ---- HealthBackend -----------------------------------------------------------------------

    def missing_for_traffic(self) -> Sequence[str]:
        """What keeps this replica from taking traffic; empty when ready."""
        missing = []
        if not self.listeners_up():
            missing.append("HTTP listeners")
        if not self.webhook_ready():
            missing.append("webhook certificate")
        if not self.peer_ready():
            missing.append("peer port")
        unsynced = [i.name for i in self.informers if not i.has_synced]
        if unsynced:
            missing.append(f"informer caches ({', '.join(unsynced)})")
        return missing

    # ---- ApiBackend --------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """Whether this replica leads."""
        return self.leading()

    async def leader_address(self) -> str | None:
        """`ip:port` of the leader's peer port: the Lease holder's Pod IP."""
        ip = await read_leader_ip(self.client, self.namespace, LEASE_NAME)
        return None if ip is None else join_host_port(ip, self.peer_port)

    def allocator(self) -> Allocator | None:
        """The live allocator once recovered (None before)."""
        return self.state.allocator

    def simulation_inputs(self) -> SimulationInputs | None:
        """Copies of the allocator and the native view, and the cache objects the admission
        dry run is built from in the simulation's thread (the cache replaces objects, never
        changes one, so the lists taken here stay as they are)."""
        allocator = self.state.allocator
        if allocator is None:
            return None
        pools, quotas, gpus = self.pools.list(), self.quotas.list(), self.gpus.list()
        return SimulationInputs(
            preparer=lambda: PodPreparer(
                _typed_pools(pools), _effective_quotas(quotas), _typed_gpus(gpus)
            ),
            native=self.native.cluster.copy(),
            allocator=allocator_copy(allocator),
            profile=self.profile,
        )

    def max_worker_per_node(self) -> int:
        """The GPUResourcesFit argument of the profile."""
        return self.profile.gpu_fit.max_worker_per_node

    def isolation_policy(self) -> IsolationPolicy:
        """The controller's isolation policy."""
        return self.isolation

    def take_pod_index(self, preview: bool = False) -> int:
        """The next pod index of the leader's cyclic counter (not advanced on a preview)."""
        return self.counter.peek() if preview else self.counter.take()

    def alerts_status(self) -> Mapping[str, Any]:
        """`GET /api/alerts` of this replica."""
        return self.alerts()

    def workload_objects(self) -> Sequence[Mapping[str, Any]]:
        """The workloads of the informer's cache."""
        return self.workloads.list() if self.workloads is not None else []

    async def recent_usage(self) -> tuple[Mapping[tuple[str, str], RecentUsage] | None, str]:
        """The leader's store's answer to `recent_usage_query` (bounded by `USAGE_TIMEOUT_S`),
        read at most once every `USAGE_CACHE_S` whoever asks (every open console polls it)."""
        async with self._usage_lock:
            at, cached = self._usage
            if cached is not None and self.clock() - at < USAGE_CACHE_S:
                return cached
            answer = await self._read_usage()
            self._usage = (self.clock(), answer)
            return answer

    async def _read_usage(self) -> tuple[Mapping[tuple[str, str], RecentUsage] | None, str]:
        store = self.store()
        if store is None:
            return None, "the metrics store is not open on this replica"
        try:
            answer = await store.query(recent_usage_query(store.dialect), USAGE_TIMEOUT_S)
        except StoreError as error:
            return None, f"the metrics store cannot answer: {error}"[:300]
        return parse_recent_usage(answer.mappings()), ""

    def config_status(self) -> Mapping[str, Any]:
        """`GET /api/config` of this replica."""
        return self.config()

    def service_account(self) -> str:
        """The username of the controller's own ServiceAccount."""
        return service_account_username(self.namespace, self.service_account_name)

    async def review_token(self, token: str) -> TokenReviewResult:
        """A TokenReview of `token`, cached for five minutes."""
        now = self.clock()
        known = self._reviews.get(token)
        if known is not None and now - known[0] < TOKEN_CACHE_S:
            return known[1]
        status = await token_review(self.client, token)
        user = status.user if status else None
        result = TokenReviewResult(
            authenticated=bool(status and status.authenticated),
            username=user.username if user else None,
            error=status.error if status else None,
            uid=user.uid if user else None,
            groups=tuple(user.groups or ()) if user else (),
            extra={k: tuple(v) for k, v in (user.extra or {}).items()} if user else {},
        )
        if len(self._reviews) > CACHE_ENTRIES:
            self._reviews.clear()
        self._reviews[token] = (now, result)
        return result

    async def authorize(self, user: TokenReviewResult, path: str, verb: str) -> bool:
        """A SubjectAccessReview of `verb` on the non-resource URL `path`, cached a minute."""
        key = (user.username or "", user.groups, path, verb)
        now = self.clock()
        known = self._access.get(key)
        if known is not None and now - known[0] < ACCESS_CACHE_S:
            return known[1]
        allowed = await non_resource_allowed(
            self.client, username=user.username, uid=user.uid, groups=user.groups,
            extra=user.extra, path=path, verb=verb,
        )  # fmt: skip
        if len(self._access) > CACHE_ENTRIES:
            self._access.clear()
        self._access[key] = (now, allowed)
        return allowed


# ---- typed objects of the caches (in the simulation's thread) -----------------------------------


def _typed_pools(objects: Sequence[Mapping[str, Any]]) -> dict[str, GPUPool]:
    pools = {}
    for obj in objects:
        try:
            pool = load_as(GPUPool, obj)
        except ModelError as error:
            _log.warning("skipped for admission: %s", error)
            continue
        pools[pool.metadata.name or ""] = pool
    return pools


def _effective_quotas(objects: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    effective, _ = choose_effective(read_quota(q) for q in objects)
    return {
        namespace: reading.quota
        for namespace, reading in effective.items()
        if reading.enforceable and reading.quota is not None
    }


def _typed_gpus(objects: Sequence[Mapping[str, Any]]) -> list[GPU]:
    gpus = []
    for obj in objects:
        try:
            gpus.append(load_as(GPU, obj))
        except ModelError:
            continue
    return gpus
