"""What the controller's HTTP servers need from the controller process.

The app layer implements `ApiBackend` (the `/api/*` handlers) and `HealthBackend` (`/readyz`);
one object may implement both. Every method but `leader_address` and `review_token` is called
on the event loop and must not block; the allocator and the simulation inputs are read without
an await in between, so a handler sees them as one consistent state. The simulation itself runs
in a worker thread while the loop goes on changing the live state, so `simulation_inputs`
returns copies the loop never touches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tensorfusion.domain.admission.dry_run import PodPreparer
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.domain.vocabulary import IsolationPolicy
from tensorfusion.domain.workloads_view import RecentUsage

__all__ = [
    "ApiBackend",
    "HealthBackend",
    "SimulationInputs",
    "TokenReviewResult",
    "service_account_username",
]


@dataclass(frozen=True, slots=True)
class SimulationInputs:
    """What one `POST /api/simulate-schedule` runs on (scheduling.md §16.1), in a worker thread.

    Taken on the event loop, so cheap to take, and the simulation's own: nothing the loop
    changes afterwards. `native`: a copy of Nodes and the pods bound to them
    (`NativeCluster.copy`); the simulation adds the pod to it. `allocator`: a copy
    (`snapshot.allocator_copy`), only read. `preparer`: builds the admission dry run in the
    thread (typed pools, quotas and GPUs from the cache objects); its index is previewed.
    """

    preparer: Callable[[], PodPreparer]
    native: NativeCluster
    allocator: Allocator
    profile: SchedulingProfile


@dataclass(frozen=True, slots=True)
class TokenReviewResult:
    """The answer of a TokenReview: whether the token is valid and whose it is.

    `error`: why the token was not authenticated (the TokenReview's `status.error`), for the
    401 message.
    """

    authenticated: bool
    username: str | None = None
    error: str | None = None
    uid: str | None = None
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The user's extra attributes (a bound token's pod and node), for SubjectAccessReview."""


def service_account_username(namespace: str, name: str) -> str:
    """The username a ServiceAccount token authenticates as (TokenReview `status.user`)."""
    return f"system:serviceaccount:{namespace}:{name}"


class HealthBackend(Protocol):
    """What `/readyz` reads: never leadership, the allocator or the metrics store."""

    def missing_for_traffic(self) -> Sequence[str]:
        """What keeps this replica from taking traffic (e.g. "webhook listener",
        "informer caches"); empty when the listeners are up and the caches synced."""
        ...


class ApiBackend(Protocol):
    """What the `/api/*` handlers need from the controller process."""

    def is_leader(self) -> bool:
        """Whether this replica leads now (it answers `/api/*` itself)."""
        ...

    async def leader_address(self) -> str | None:
        """The leader's peer address as `ip:port` (`[ip]:port` for IPv6): the Lease holder's
        Pod IP and the peer port; None when no leader is known. May raise (answered 503
        `NotLeader`)."""
        ...

    def allocator(self) -> Allocator | None:
        """The leader's allocator; None until recovery has run."""
        ...

    def simulation_inputs(self) -> SimulationInputs | None:
        """The inputs of one simulation; None until the allocator and caches are ready."""
        ...

    def max_worker_per_node(self) -> int:
        """`GPUResourcesFit.maxWorkerPerNode` of the scheduler configuration."""
        ...

    def isolation_policy(self) -> IsolationPolicy:
        """`TF_ISOLATION_MODE_POLICY` (shown even before recovery)."""
        ...

    def take_pod_index(self, preview: bool = False) -> int:
        """The next pod index from the leader's `PodIndexCounter` (advances it unless
        `preview`, the index of a dry run)."""
        ...

    def alerts_status(self) -> Mapping[str, Any]:
        """The body of `GET /api/alerts` for this replica (alerting.md §9)."""
        ...

    def workload_objects(self) -> Sequence[Mapping[str, Any]]:
        """The TensorFusionWorkloads of the cluster (the informer's cache)."""
        ...

    async def recent_usage(self) -> tuple[Mapping[tuple[str, str], RecentUsage] | None, str]:
        """Each workload's recent usage from the metrics store (`recent_usage_query`), or None
        and why the store could not answer."""
        ...

    def config_status(self) -> Mapping[str, Any]:
        """The body of `GET /api/config` for this replica (alerting.md §9)."""
        ...

    def service_account(self) -> str:
        """The controller's own ServiceAccount as a username (`service_account_username`)."""
        ...

    async def review_token(self, token: str) -> TokenReviewResult:
        """A TokenReview of the bearer token (cached by the implementation, 5 minutes).
        May raise when the API server cannot be asked (answered 503 `TokenReviewFailed`)."""
        ...

    async def authorize(self, user: TokenReviewResult, path: str, verb: str) -> bool:
        """Whether RBAC lets `user` call the non-resource URL `path` with `verb` (a
        SubjectAccessReview, cached by the implementation for a minute). May raise when the
        API server cannot be asked (answered 503 `AuthorizationFailed`)."""
        ...
