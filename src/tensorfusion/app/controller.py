"""`tensor-fusion controller`: the process that every controller replica runs.

Every replica reads its flags and environment, checks the CRDs, keeps the informer caches and
(through the HTTP servers) answers health probes and the API. With `-leader-elect` the replicas
campaign for the Lease; the leader recovers the allocator from the caches and runs the
leader-only work. A replica that loses the Lease stops that work at once and exits non-zero, so
its pod restarts as a follower (deployment.md §3.1, scheduling.md §15).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from prometheus_client import CollectorRegistry

from tensorfusion.adapters.kube.client import KubeClient, KubeClientError, make_client
from tensorfusion.adapters.kube.custom_resources import missing_crd_message, missing_crds
from tensorfusion.adapters.kube.events import EventRecorder
from tensorfusion.adapters.kube.object_client import LightkubeObjects
from tensorfusion.adapters.kube.secret_reads import SecretContent, read_secret
from tensorfusion.adapters.package_data import default_scheduler_config
from tensorfusion.adapters.tls.peer_client import PeerClient
from tensorfusion.alerting.alertmanager_discovery import dns_resolver, hosts_file_resolver
from tensorfusion.alerting.kube_event_sink import KubernetesEventSink
from tensorfusion.alerting.leader_service import LeaderAlertService
from tensorfusion.alerting.replica_config import ReplicaConfig
from tensorfusion.alerting.self_metrics import EvaluatorMetrics
from tensorfusion.api_server.api_app import API_PREFIX, SIMULATION_THREADS, create_api_app
from tensorfusion.api_server.backend import service_account_username
from tensorfusion.api_server.health_app import create_health_app
from tensorfusion.api_server.metrics_app import create_metrics_app
from tensorfusion.api_server.metrics_write import (
    METRICS_WRITE_PREFIX,
    WRITE_THREADS,
    DroppedRows,
    add_metrics_write_route,
)
from tensorfusion.api_server.offload import BoundedOffload
from tensorfusion.app.controller_backend import ControllerBackend
from tensorfusion.app.controller_informers import ControllerInformers
from tensorfusion.app.controller_metrics import ControllerCollector, LoopLagProbe
from tensorfusion.app.controller_reconcilers import ControllerReconcilers
from tensorfusion.app.controller_scheduling import prepare_scheduling
from tensorfusion.app.controller_tls import TlsSite, peer_client, release_certificates, tls_address
from tensorfusion.app.controller_webhook import WebhookWork
from tensorfusion.app.logging_setup import configure_logging
from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.controller.autoscaler import Autoscaler
from tensorfusion.controller.external_scaler import ExternalScalerCalls
from tensorfusion.controller.fenced_writes import FencedWriter
from tensorfusion.controller.metrics_leader import LeaderMetricsService
from tensorfusion.controller.metrics_recorder import Counts
from tensorfusion.controller.native_state import NativeState
from tensorfusion.controller.seal_key import load_seal_key, seal_secret_name
from tensorfusion.domain.scheduling.native import NativePlugins
from tensorfusion.domain.scheduling.scheduler_config import (
    SchedulerConfigError,
    read_scheduler_settings,
    scheduler_config_from_yaml,
)
from tensorfusion.domain.settings.controller_environment import (
    ControllerEnvironment,
    EnvironmentValueError,
)
from tensorfusion.domain.settings.controller_flags import ControllerFlags, FlagError
from tensorfusion.domain.settings.controller_settings import ControllerSettings
from tensorfusion.extender.kube_scheduler import SchedulerStartError
from tensorfusion.runtime import web
from tensorfusion.runtime.http_server import RunningServer, join_host_port, serve
from tensorfusion.runtime.leader_election import LEASE_NAME, LeaderElector
from tensorfusion.runtime.supervision import Supervisor, TaskFailure

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_LEADERSHIP_LOST",
    "ControllerProcess",
    "LeaderWork",
    "run_controller",
    "start_election",
]

_log = logging.getLogger("tensorfusion.controller")
EXIT_OK: Final = 0
EXIT_LEADERSHIP_LOST: Final = 1
EXIT_BAD_INPUT: Final = 2
EXIT_FATAL: Final = 3

LeaderWork = Callable[["ControllerProcess"], Awaitable[None]]
"""A leader-only task: started when leadership begins, cancelled at once when it ends."""


@dataclass(slots=True)
class ControllerProcess:
    """One replica: settings, client, caches, allocator state, election and tasks."""

    settings: ControllerSettings
    client: KubeClient
    informers: ControllerInformers
    state: AllocatorState
    supervisor: Supervisor = field(default_factory=Supervisor)
    leader_work: list[tuple[str, LeaderWork]] = field(default_factory=list)
    elector: LeaderElector | None = None
    leading: asyncio.Event = field(default_factory=asyncio.Event)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def flags(self) -> ControllerFlags:
        """The replica's flags."""
        return self.settings.flags

    @property
    def env(self) -> ControllerEnvironment:
        """The replica's environment."""
        return self.settings.env

    def fence(self) -> float:
        """Before a leader-only write: raises NotLeaderError unless this replica leads."""
        if self.elector is None:
            return float("inf")
        return self.elector.fence()

    def is_leader(self) -> bool:
        """Whether this replica leads (always, without `-leader-elect`)."""
        return self.leading.is_set()

    async def start_leading(self) -> None:
        """Read the allocation seal's key, recover the allocator from the synced caches, then
        start the leader-only work."""
        self.state.seal_key = await load_seal_key(
            self.client, namespace=self.env.namespace,
            name=seal_secret_name(self.env.release_fullname),
        )  # fmt: skip
        await self.informers.wait_synced()
        report = self.state.recover()
        _log.info(
            "allocator recovered: %d allocations, %d inconsistent, %d pods skipped",
            len(report.restored), len(report.inconsistent), len(report.skipped_pods),
        )  # fmt: skip
        for outcome in report.inconsistent:
            _log.warning("recovery: %s", outcome.message())
        for pod, message in report.skipped_pods.items():
            _log.warning("recovery: pod %s holds no allocation: %s", pod, message)
        self.leading.set()
        for name, work in self.leader_work:
            self.supervisor.start(f"leader {name}", _bind(work, self))

    async def stop_leading(self) -> None:
        """Stop every leader-only task at once."""
        self.leading.clear()
        for name, _ in self.leader_work:
            await self.supervisor.cancel(f"leader {name}")


def _bind(work: LeaderWork, process: ControllerProcess) -> Callable[[], Coroutine[Any, Any, None]]:
    async def run() -> None:
        await work(process)

    return run


async def run_controller(
    argv: Sequence[str],
    environ: Mapping[str, str],
    *,
    leader_work: Sequence[tuple[str, LeaderWork]] = (),
    client: KubeClient | None = None,
) -> int:
    """Run a replica until a signal, a lost Lease or a fatal error; returns the exit code."""
    try:
        process_settings = ControllerSettings.read(argv, environ)
    except (FlagError, EnvironmentValueError) as error:
        configure_logging("text", "info")
        _log.error("%s", error)
        return EXIT_BAD_INPUT
    flags, env = process_settings.flags, process_settings.env
    configure_logging(flags.log_format, flags.log_level)
    for notice in flags.notices:
        _log.info("%s", notice)
    try:
        client = client or make_client(flags.kubeconfig)
    except KubeClientError as error:
        _log.error("%s", error)
        return EXIT_BAD_INPUT
    missing = await missing_crds(client)
    if missing:
        _log.error("%s", missing_crd_message(missing))
        return EXIT_BAD_INPUT
    try:
        scheduler_config = _scheduler_config(flags)
        settings = read_scheduler_settings(scheduler_config)
    except (OSError, SchedulerConfigError) as error:
        _log.error("-scheduler-config %s: %s", flags.scheduler_config, error)
        return EXIT_BAD_INPUT
    informers = ControllerInformers.create(client, env.namespace)
    state = AllocatorState(informers.caches(), env.isolation_policy, time.time)
    native = NativeState(NativePlugins(settings.node_resources_fit))
    process = ControllerProcess(process_settings, client, informers, state)
    registry = CollectorRegistry()
    scale_counts: dict[str, dict[str, int]] = {}
    alerts, config, metrics = _alerting(process, registry, counts=lambda: scale_counts)
    reconcilers = ControllerReconcilers.create(
        client=client,
        fence=process.fence,
        state=state,
        settings=process_settings,
        caches=informers,
        dynamic_config=lambda: config.config,
    )
    reconcilers.register()
    loop_lag = LoopLagProbe()
    registry.register(ControllerCollector(
        state=state, loops=reconcilers.loops(), writers=reconcilers.writers(),
        informers=informers.all(), is_leader=process.is_leader,
        lease_failures=lambda: process.elector.failed_attempts if process.elector else 0,
        loop_lag=loop_lag, clock=asyncio.get_running_loop().time,
    ))  # fmt: skip
    process.leader_work.extend((name, _loop(run)) for name, run in reconcilers.work())
    if flags.enable_auto_scale:

        async def release_secret(name: str) -> SecretContent | None:
            return await read_secret(client, namespace=env.namespace, name=name)

        autoscaler = Autoscaler(
            workloads=informers.workloads, pods=informers.workers, pools=informers.pools,
            templates=informers.templates, state=state, store=metrics.wait_store,
            writer=FencedWriter(LightkubeObjects(client), process.fence),
            recorder=EventRecorder(client, "tensor-fusion-controller"), counts=scale_counts,
            external=ExternalScalerCalls(release_secret, env.namespace), namespace=env.namespace,
        )  # fmt: skip
        process.leader_work.append(("autoscaler", _loop(autoscaler.run)))
    process.leader_work.extend(leader_work)
    if env.enable_scheduler:
        try:
            scheduling = await prepare_scheduling(
                flags=flags, env=env, client=client, scheduler_config=scheduler_config,
                settings=settings, state=state, native=native, workers=informers.workers,
                fence=process.fence, registry=registry,
            )  # fmt: skip
        except SchedulerStartError as error:
            _log.error("%s", error)
            return EXIT_BAD_INPUT
        process.leader_work.append(("scheduler", scheduling.work))
    else:
        _log.info("ENABLE_SCHEDULER=false: no extender and no kube-scheduler on this replica")
    informers.feed(state)
    informers.feed_native(native)
    backend = ControllerBackend(
        client=client, namespace=env.namespace, service_account_name=env.service_account,
        peer_port=env.peer_port, isolation=env.isolation_policy,
        profile=settings.profile, state=state,
        native=native, pools=informers.pools, quotas=informers.quotas, gpus=informers.gpus,
        informers=informers.all(), leading=process.is_leader, workloads=informers.workloads,
        store=lambda: metrics.term.store if metrics.term is not None else None,
        alerts=lambda: alerts.alerts_body(process), config=lambda: _plain(config.config_body()),
    )  # fmt: skip
    certificates = release_certificates(client, env)
    peer = peer_client(env, certificates)
    process.supervisor.start("certificate", certificates.run)
    if env.enable_webhooks:
        webhook = WebhookWork.create(client=client, env=env, informers=informers,
                                     backend=backend, registry=registry, config=config,
                                     certificates=certificates, peer=peer)  # fmt: skip
        backend.webhook_ready = webhook.ready
        process.supervisor.start("webhook", webhook.run)
    informers.start(process.supervisor)
    process.supervisor.start("dynamic-config", config.run)
    process.supervisor.start("loop-lag", loop_lag.run)
    shared = ApiShared.create(registry, shed=loop_lag.shedder(asyncio.get_running_loop().time))
    peer_site = TlsSite("peer port", _api_app(env, backend, metrics, shared, peer=peer, gated=True),
                        tls_address(env, env.peer_port), certificates)  # fmt: skip
    backend.peer_ready = peer_site.ready
    process.supervisor.start("peer-port", peer_site.run)
    try:
        servers = await _start_servers(process_settings, backend, registry, metrics,
                                       shared=shared, peer=peer)  # fmt: skip
    except OSError as error:
        _log.error("cannot listen: %s", error)
        await process.supervisor.stop()
        shared.close()
        return EXIT_BAD_INPUT
    try:
        return await _serve(process)
    finally:
        for server in servers:
            await server.stop()
        shared.close()


def _scheduler_config(flags: ControllerFlags) -> dict[str, Any]:
    """The `scheduler-config.yaml` of the flag; out of a pod, the chart's default."""
    path = Path(flags.scheduler_config)
    if not path.exists() and "scheduler-config" not in flags.given:
        _log.info("%s not found: using the chart's default scheduler configuration", path)
        return default_scheduler_config()
    return scheduler_config_from_yaml(path.read_text(encoding="utf-8"), str(path))


def _loop(run: Callable[[], Awaitable[None]]) -> LeaderWork:
    async def work(_: ControllerProcess) -> None:
        await run()

    return work


def _alerting(
    process: ControllerProcess, registry: CollectorRegistry, *, counts: Counts
) -> tuple[LeaderAlertService, ReplicaConfig, LeaderMetricsService]:
    """The replica's hot-reloaded config, and the leader's alert and metrics work (alerts
    first, so that the evaluator stops before the store closes)."""
    events = KubernetesEventSink(
        EventRecorder(process.client, "tensor-fusion-controller"), process.informers.clusters
    )
    config = ReplicaConfig(
        process.flags.dynamic_config, events=events, metrics=EvaluatorMetrics(registry)
    )
    metrics = LeaderMetricsService(
        dynamic_config=lambda: config.config, registry=registry,
        embedded_dir=process.env.embedded_store_dir, counts=counts,
    )  # fmt: skip
    aliases = process.env.host_aliases_file
    alerts = LeaderAlertService(
        config, store=metrics.wait_store,
        resolver=hosts_file_resolver(aliases) if aliases else dns_resolver,
    )  # fmt: skip
    process.leader_work.extend([("alerts", alerts.work), ("metrics", metrics.work)])
    return alerts, config, metrics


def _plain(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """A body with YAML dates and other non-JSON values as strings."""
    loaded: Mapping[str, Any] = json.loads(json.dumps(body, default=str))
    return loaded


async def _start_servers(
    process_settings: ControllerSettings,
    backend: ControllerBackend,
    registry: CollectorRegistry,
    metrics: LeaderMetricsService,
    *,
    shared: ApiShared,
    peer: PeerClient,
) -> list[RunningServer]:
    flags, env = process_settings.flags, process_settings.env
    servers = [await serve(create_health_app(backend), flags.health_probe_bind_address)]
    api = join_host_port(env.api_host, env.api_port) if env.api_host else f":{env.api_port}"
    public = _api_app(env, backend, metrics, shared, peer=peer, gated=False)
    servers.append(await serve(public, api))
    if flags.metrics_enabled:
        servers.append(await serve(create_metrics_app(registry), flags.metrics_bind_address))
    for server in servers:
        _log.info("listening on %s", server.address)
    return servers


def _api_app(
    env: ControllerEnvironment,
    backend: ControllerBackend,
    metrics: LeaderMetricsService,
    shared: ApiShared,
    *,
    peer: PeerClient,
    gated: bool,
) -> web.Application:
    """`/api/*`, and the embedded store's write path unless GreptimeDB is configured, on the
    work bounds `shared` with the other port; a follower forwards through `peer`; `gated`:
    every request authenticated and authorized (the peer port); the web console on the public
    port only."""
    if env.tsdb.greptime:
        return create_api_app(backend, peer=peer, authenticate_callers=gated,
                              offload=shared.simulations, console=not gated)  # fmt: skip
    app = create_api_app(backend, peer=peer, authenticate_callers=gated,
                         offload=shared.simulations, console=not gated,
                         forward_prefixes=(API_PREFIX, METRICS_WRITE_PREFIX))  # fmt: skip
    writers = {
        service_account_username(env.namespace, env.service_account),
        service_account_username(env.namespace, env.hypervisor_service_account),
    }
    add_metrics_write_route(app, backend, metrics, writers=writers, database=env.tsdb.database,
                            dropped=shared.dropped, offload=shared.writes)  # fmt: skip
    return app


@dataclass(slots=True)
class ApiShared:
    """What the public API and the peer port share: one bound on simulations (refused while
    the event loop is behind), one on metric writes, one drop counter."""

    simulations: BoundedOffload
    writes: BoundedOffload
    dropped: DroppedRows

    @classmethod
    def create(cls, registry: CollectorRegistry, *, shed: Callable[[], str | None]) -> ApiShared:
        """The bounds of the API's defaults; drops counted in `registry`."""
        return cls(
            BoundedOffload(name="simulate-schedule", limit=SIMULATION_THREADS, shed=shed),
            BoundedOffload(name="metrics-write", limit=WRITE_THREADS),
            DroppedRows(registry),
        )

    def close(self) -> None:
        """Stop the worker threads."""
        self.simulations.close()
        self.writes.close()


async def _serve(process: ControllerProcess) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, process.stopping.set)
    flags, env = process.flags, process.env
    lost = asyncio.Event()
    if flags.leader_elect:
        identity = env.pod_name or f"tensor-fusion-controller-{id(process):x}"
        process.elector = LeaderElector(process.client, env.namespace, LEASE_NAME, identity)
        start_election(process, process.elector, lost)
    else:
        process.supervisor.start("leadership", process.start_leading, restart=False, critical=True)
    code = await _wait_for_end(process, lost)
    await _shutdown(process)
    return code


def start_election(process: ControllerProcess, elector: LeaderElector, lost: asyncio.Event) -> None:
    """Campaign under the Supervisor. The task is critical: an elector that raises stops the
    supervisor, so the replica exits with EXIT_FATAL and the kubelet restarts it (an elector
    runs once; a replica whose campaign failed would otherwise never campaign again)."""

    def started() -> None:
        process.supervisor.start("leadership", process.start_leading, restart=False,
                                 critical=True)  # fmt: skip

    def stopped() -> None:
        if not process.stopping.is_set():
            lost.set()

    process.supervisor.start("leader-election", lambda: elector.run(started, stopped),
                             restart=False, critical=True)  # fmt: skip


async def _wait_for_end(process: ControllerProcess, lost: asyncio.Event) -> int:
    waits = {
        asyncio.create_task(process.stopping.wait(), name="wait signal"): EXIT_OK,
        asyncio.create_task(lost.wait(), name="wait lost"): EXIT_LEADERSHIP_LOST,
        asyncio.create_task(process.supervisor.wait_fatal(), name="wait fatal"): EXIT_FATAL,
    }
    done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    finished = next(iter(done))
    code = waits[finished]
    if code == EXIT_LEADERSHIP_LOST:
        _log.error("leadership lost: stopping leader-only work and exiting")
        await process.stop_leading()
    elif code == EXIT_FATAL:
        failure = finished.result()
        assert isinstance(failure, TaskFailure)
        _log.error("fatal: %s", failure)
    else:
        _log.info("signal received: shutting down")
    return code


async def _shutdown(process: ControllerProcess) -> None:
    await process.stop_leading()
    if process.elector is not None:
        await process.elector.stop()
    await process.supervisor.stop()
    with contextlib.suppress(Exception):
        await process.client.close()
