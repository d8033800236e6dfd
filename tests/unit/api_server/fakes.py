"""A fake controller for the HTTP servers: every answer of `ApiBackend` and `HealthBackend`
is a field the test sets; `spec_inputs()` builds the simulation inputs of the §16.1 examples
(tests/unit/scheduling/data/spec_16_1_cluster.yaml through the simulator's `build_cluster`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tensorfusion.adapters.package_data import default_scheduler_config
from tensorfusion.api_server import SimulationInputs, TokenReviewResult, service_account_username
from tensorfusion.domain.admission.dry_run import PodPreparer
from tensorfusion.domain.admission.pod_index import PodIndexCounter
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.snapshot import allocator_copy
from tensorfusion.domain.scheduling.native import NativePlugins
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster
from tensorfusion.domain.scheduling.scheduler_config import read_scheduler_settings
from tensorfusion.domain.vocabulary import IsolationPolicy
from tensorfusion.domain.workloads_view import RecentUsage
from tensorfusion.sim.cluster_file import load_cluster
from tensorfusion.sim.virtual_cluster import VirtualCluster

from ..scheduling.test_simulate_schedule_examples import CLUSTER, DATA, spec_cluster

__all__ = [
    "DATA",
    "GENERATED_AT",
    "OTHER_ACCOUNT",
    "OWN_ACCOUNT",
    "FakeBackend",
    "spec_inputs",
]

GENERATED_AT = 1767225600.0
"""2026-01-01T00:00:00Z: the clock of the API app under test."""
OWN_ACCOUNT = service_account_username("tensor-fusion-sys", "tensor-fusion-sys")
OTHER_ACCOUNT = service_account_username("tensor-fusion-sys", "tensor-fusion-hypervisor")


def spec_inputs() -> tuple[SimulationInputs, VirtualCluster]:
    """The simulation inputs of scheduling.md §16.1's examples, and their virtual cluster
    (whose allocator the inputs hold a copy of)."""
    cluster = load_cluster(CLUSTER)
    settings = read_scheduler_settings(cluster.scheduler_config or default_scheduler_config())
    virtual = spec_cluster(cluster)
    native = NativeCluster.from_nodes(
        NativePlugins(settings.node_resources_fit), virtual.node_objects
    )
    for name, spec in virtual.nodes.items():
        if spec.requested:
            native.add_requests(name, spec.requested)
    objects = virtual.objects
    preparer = PodPreparer(objects.pools, objects.quotas, objects.gpus)
    inputs = SimulationInputs(
        preparer=lambda: preparer,
        native=native,
        allocator=allocator_copy(virtual.allocator),
        profile=settings.profile,
    )
    return inputs, virtual


@dataclass
class FakeBackend:
    """`ApiBackend` and `HealthBackend` with settable answers and a record of the calls."""

    leader: bool = True
    address: str | None = None
    address_error: Exception | None = None
    live_allocator: Allocator | None = None
    inputs: SimulationInputs | None = None
    inputs_error: Exception | None = None
    max_workers: int = 256
    policy: IsolationPolicy = IsolationPolicy.DYNAMIC
    counter: PodIndexCounter = field(default_factory=PodIndexCounter)
    alerts: Mapping[str, Any] = field(default_factory=dict)
    workloads: list[Mapping[str, Any]] = field(default_factory=list)
    usage: Mapping[tuple[str, str], RecentUsage] | None = None
    usage_error: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    own_account: str = OWN_ACCOUNT
    tokens: dict[str, TokenReviewResult] = field(default_factory=dict)
    review_error: Exception | None = None
    missing: list[str] = field(default_factory=list)
    reviewed: list[str] = field(default_factory=list)
    grants: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    """RBAC of the peer port: username to the (path prefix, verb) pairs it may call."""
    authorize_error: Exception | None = None
    authorized: list[tuple[str, str, str]] = field(default_factory=list)
    address_reads: int = 0

    def is_leader(self) -> bool:
        return self.leader

    async def leader_address(self) -> str | None:
        self.address_reads += 1
        if self.address_error is not None:
            raise self.address_error
        return self.address

    def allocator(self) -> Allocator | None:
        return self.live_allocator

    def simulation_inputs(self) -> SimulationInputs | None:
        if self.inputs_error is not None:
            raise self.inputs_error
        return self.inputs

    def max_worker_per_node(self) -> int:
        return self.max_workers

    def isolation_policy(self) -> IsolationPolicy:
        return self.policy

    def take_pod_index(self, preview: bool = False) -> int:
        return self.counter.peek() if preview else self.counter.take()

    def alerts_status(self) -> Mapping[str, Any]:
        return self.alerts

    def workload_objects(self) -> Sequence[Mapping[str, Any]]:
        return self.workloads

    async def recent_usage(self) -> tuple[Mapping[tuple[str, str], RecentUsage] | None, str]:
        return self.usage, self.usage_error

    def config_status(self) -> Mapping[str, Any]:
        return self.config

    def service_account(self) -> str:
        return self.own_account

    async def review_token(self, token: str) -> TokenReviewResult:
        self.reviewed.append(token)
        if self.review_error is not None:
            raise self.review_error
        return self.tokens.get(token, TokenReviewResult(False, error="token not found"))

    async def authorize(self, user: TokenReviewResult, path: str, verb: str) -> bool:
        self.authorized.append((user.username or "", path, verb))
        if self.authorize_error is not None:
            raise self.authorize_error
        return any(path.startswith(prefix) and verb == allowed
                   for prefix, allowed in self.grants.get(user.username or "", ()))  # fmt: skip

    def missing_for_traffic(self) -> Sequence[str]:
        return self.missing
