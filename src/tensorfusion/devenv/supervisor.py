"""The dev environment's supervisor: one long-lived process that starts everything, plays the
kubelet while it runs, and stops everything when told (SIGTERM or SIGINT).

In order: the control plane (etcd, kube-apiserver, kube-controller-manager), the chart
(`helm upgrade --install`, the guide's release, with `DEV_VALUES` under the user's files), two
controller replicas from the installed Deployment behind two loopback "Services" (the webhook
and the HTTP API, `tcp_proxy` with failover), the MutatingWebhookConfiguration pointed at the
webhook's, real Alertmanagers when Debian's package is installed, the cluster file's nodes with
their agents on simulated GPUs, and the pods of the workloads marked Running. It is Ready when
every GPU of the cluster file is Running. While it runs it restarts a controller replica that
exits (backoff 5 s doubling to 5 min) and copies a changed ConfigMap into the replicas'
volumes (the controller hot-reloads it). Each step, address and process goes into the
directory's `state.json`; every process has a PID file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
import traceback
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.resources.apps_v1 import Deployment, StatefulSet

from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.devenv.address_ranges import AddressRanges, free_address_ranges
from tensorfusion.devenv.binaries import Binaries
from tensorfusion.devenv.chart_alertmanagers import ChartAlertmanagers, alertmanager_binary
from tensorfusion.devenv.chart_controllers import (
    ChartControllers,
    Replica,
    helm_install,
    point_webhook,
    token_of,
)
from tensorfusion.devenv.control_plane import ControlPlane
from tensorfusion.devenv.fake_nodes import FakeNode, create_node, fake_nodes
from tensorfusion.devenv.node_agents import AgentRunner
from tensorfusion.devenv.processes import Component, free_port, tail
from tensorfusion.devenv.replica_pods import release_ca_file
from tensorfusion.devenv.source_tree import NAMESPACE, RELEASE
from tensorfusion.devenv.state_dir import ComponentInfo, DevDirectory, DevPhase, DevState
from tensorfusion.devenv.tcp_proxy import RoundRobinProxy
from tensorfusion.devenv.workload_pods import WorkloadPods
from tensorfusion.domain.settings.controller_environment import DEFAULT_WEBHOOK_SECRET
from tensorfusion.sim.cluster_file import ClusterFile

__all__ = ["DEV_VALUES", "DevSettings", "serve"]

_log = logging.getLogger(__name__)

DEV_VALUES: Final[dict[str, Any]] = {
    "controller": {"replicaCount": 2},
    # the guide's Verify section: 3 Alertmanager pods (values-production.yaml's count)
    "alert": {"replicaCount": 3},
    # the controller's embedded metrics store: no GreptimeDB here
    "greptime": {"installStandalone": False, "host": ""},
}
"""Values under the user's: two controller replicas, three Alertmanagers and the embedded
metrics store."""

TOKEN_EXPIRATION_S: Final = 30 * 24 * 3600
RESTART_BACKOFF_S: Final = (5.0, 300.0)
RESYNC_PERIOD_S: Final = 5.0
READY_TIMEOUT_S: Final = 300.0


@dataclass(frozen=True, slots=True)
class DevSettings:
    """What `dev up` was asked for."""

    directory: Path
    cluster_file: Path
    cluster: ClusterFile
    values_files: Sequence[Path] = ()


@dataclass
class _Restarts:
    """A controller replica's restart backoff."""

    delay_s: float = RESTART_BACKOFF_S[0]
    not_before: float = 0.0


@dataclass
class DevSupervisor:
    """Everything one dev environment runs (see the module)."""

    settings: DevSettings
    directory: DevDirectory
    state: DevState
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    plane: ControlPlane | None = None
    controllers: ChartControllers | None = None
    alertmanagers: ChartAlertmanagers | None = None
    agents: AgentRunner | None = None
    endpoints: dict[str, str] = field(default_factory=dict)
    restarts: dict[str, _Restarts] = field(default_factory=dict)
    ranges: AddressRanges = field(default_factory=lambda: AddressRanges("", "", ""))

    # -- state

    def save(self) -> None:
        """Write `state.json` and `ports.json`."""
        self.state.components = self._components()
        self.directory.write_state(self.state)
        self.directory.write_ports(self.endpoints)

    def step(self, what: str) -> None:
        """Record that the supervisor now does `what`."""
        if self.state.step:
            self.state.steps_done.append(self.state.step)
        self.state.step = what
        _log.info("dev: %s", what)
        self.save()

    def _components(self) -> dict[str, ComponentInfo]:
        found: dict[str, ComponentInfo] = {}

        def add(component: Component, address: str = "") -> None:
            found[component.name] = ComponentInfo(
                pid=component.pid, log=str(component.log_path), address=address
            )

        if self.plane is not None:
            for component in self.plane.components:
                address = {"etcd": self.plane.etcd_url, "kube-apiserver": self.plane.api_url}.get(
                    component.name, ""
                )
                add(component, address)
        if self.controllers is not None:
            for replica in self.controllers.replicas.values():
                add(replica.component, replica.url(""))
        if self.alertmanagers is not None:
            for component, ip in zip(
                self.alertmanagers.components, self.alertmanagers.addresses, strict=False
            ):
                add(component, f"http://{ip}:9093")
        if self.agents is not None:
            for agent in self.agents.agents.values():
                add(agent.component, f"http://{agent.ip}:{agent.port}")
        return found

    # -- the run

    async def run(self) -> None:
        """Start everything, supervise until told to stop, then stop everything."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                starting = asyncio.create_task(self._start(stack), name="dev-start")
                stopping = asyncio.create_task(self.stop.wait(), name="dev-stop")
                await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                if not starting.done():
                    starting.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await starting
                    self.state.error = f"stopped while {self.state.step}"
                else:
                    starting.result()
                    await self._supervise()
        except Exception as error:
            self.state.phase = DevPhase.FAILED
            self.state.error = f"{self.state.step}: {error}"
            _log.error("dev: %s failed:\n%s", self.state.step, traceback.format_exc())
            self.save()
        finally:
            if self.state.phase != DevPhase.FAILED:
                self.state.phase = DevPhase.STOPPED
            _log.info("dev: every process stopped")
            self.save()

    async def _start(self, stack: contextlib.AsyncExitStack) -> None:
        settings, directory = self.settings, self.directory
        self.state.started_at = time.time()
        self.state.cluster_file = str(settings.cluster_file)
        self.state.values_files = [str(p) for p in settings.values_files]
        nodes = fake_nodes(settings.cluster)
        self.state.nodes = len(nodes)
        self.state.gpus = sum(n.spec.gpus.count for n in nodes)

        self.step("control plane")
        plane = ControlPlane(Binaries.locate(), directory.path / "cluster",
                             pid_dir=directory.pids, detached=True)  # fmt: skip
        self.plane = plane
        stack.callback(self._stop_plane)
        await asyncio.to_thread(plane.start, on_step=lambda name: self.step(f"starting {name}"))
        self.step("starting kube-scheduler (default-scheduler)")
        scheduler = await plane.start_scheduler(
            {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
             "clientConnection": {"kubeconfig": str(plane.kubeconfig)},
             "leaderElection": {"leaderElect": False}},
            plane.log_dir,
        )  # fmt: skip
        plane.components.append(scheduler)
        directory.kubeconfig.write_text(plane.kubeconfig.read_text())
        directory.kubeconfig.chmod(0o600)
        self.state.kubeconfig = str(directory.kubeconfig)
        self.state.api_server = plane.api_url
        self.endpoints.update(etcd=plane.etcd_url.removeprefix("http://"),
                              apiserver=plane.api_url.removeprefix("https://"))  # fmt: skip
        kube = AsyncClient(
            KubeConfig.from_file(plane.kubeconfig), field_manager="tensor-fusion-dev"
        )
        stack.push_async_callback(kube.close)

        self.step("installing the chart")
        values = directory.path / "dev-values.yaml"
        values.write_text(yaml.safe_dump(DEV_VALUES))
        await helm_install(plane, values, *settings.values_files)

        self.step("starting the controllers")
        aliases = directory.path / "hosts"
        aliases.write_text("")
        deployment = await kube.get(Deployment, f"{RELEASE}-controller", namespace=NAMESPACE)
        count = (deployment.spec.replicas if deployment.spec else None) or 1
        self.ranges = ranges = free_address_ranges(count)
        controllers = ChartControllers(
            plane, kube, directory.path / "controllers",
            extra_env={"HOST_ALIASES_FILE": str(aliases)}, ip_prefix=ranges.controllers,
            pid_dir=directory.pids, detached=True, token_expiration_s=TOKEN_EXPIRATION_S,
        )  # fmt: skip
        self.controllers = controllers
        stack.callback(self._stop_controllers)
        for index in range(count):
            await controllers.start(f"{RELEASE}-controller-{index}")
        self.save()
        replicas = list(controllers.replicas.values())
        services = ranges.controllers + "1"
        webhook_port, api_port = free_port(), free_port()
        webhook = RoundRobinProxy([(r.ip, r.webhook_port) for r in replicas], failover=True)
        await webhook.start(services, webhook_port)
        stack.push_async_callback(webhook.close)
        api = RoundRobinProxy([(r.ip, r.api_port) for r in replicas], failover=True)
        await api.start(services, api_port)
        stack.push_async_callback(api.close)
        peer_port = free_port()
        peer = RoundRobinProxy([(r.ip, r.peer_port) for r in replicas], failover=True)
        await peer.start(services, peer_port)
        stack.push_async_callback(peer.close)
        self.state.webhook = f"https://{services}:{webhook_port}/mutate-v1-pod"
        self.state.controller_api = f"http://{services}:{api_port}"
        self.state.controller_peer = f"https://{services}:{peer_port}"
        self.endpoints.update(webhook=f"{services}:{webhook_port}", api=f"{services}:{api_port}")
        for replica in replicas:
            self.endpoints[replica.pod] = f"{replica.ip}:{replica.api_port}"
            self.endpoints[f"{replica.pod}-webhook"] = f"{replica.ip}:{replica.webhook_port}"
            self.endpoints[f"{replica.pod}-health"] = f"{replica.ip}:{replica.health_port}"

        self.step("pointing the webhook at the controllers")
        await point_webhook(kube, self.state.webhook, self._watched(), READY_TIMEOUT_S)

        binary = alertmanager_binary()
        if binary is not None and await _has_alertmanager(kube):
            self.step("starting Alertmanager")
            self.alertmanagers = ChartAlertmanagers(
                kube, directory.path / "alertmanagers", aliases,
                ip_prefix=self.ranges.alertmanagers, pid_dir=directory.pids, detached=True,
            )  # fmt: skip
            stack.callback(self.alertmanagers.stop)
            addresses = await self.alertmanagers.start()
            self.state.alertmanagers = [f"http://{ip}:9093" for ip in addresses]
            for i, ip in enumerate(addresses):
                self.endpoints[f"alertmanager-{i}"] = f"{ip}:9093"
                self.endpoints[f"alertmanager-{i}-cluster"] = f"{ip}:9094"
        else:
            self.state.notes.append(
                "no Alertmanager: Debian's prometheus-alertmanager is not installed"
                if binary is None else "no Alertmanager: alert.enabled is false"
            )  # fmt: skip

        self.step(f"creating {len(nodes)} GPU nodes with their agents")
        await self._start_nodes(stack, kube, nodes)
        self.step("waiting for every GPU to be Running")
        await self._wait_for_gpus(kube)
        self.state.phase = DevPhase.READY
        self.state.ready_at = time.time()
        self.state.steps_done.append(self.state.step)
        self.state.step = ""
        self.save()

    async def _start_nodes(
        self, stack: contextlib.AsyncExitStack, kube: AsyncClient, nodes: list[FakeNode]
    ) -> None:
        assert self.plane is not None
        agents_dir = self.directory.path / "agents"
        agents_dir.mkdir(parents=True, exist_ok=True)
        by_name = {node.name: node for node in nodes}

        def simulation_file(node: str) -> Path:
            return agents_dir / f"{node}-gpus.yaml"

        token = agents_dir / "agent-token"
        token.write_text(await token_of(kube, "tensor-fusion-hypervisor-sa", TOKEN_EXPIRATION_S))
        token.chmod(0o600)
        ca = await release_ca_file(
            kube,
            namespace=NAMESPACE,
            secret=DEFAULT_WEBHOOK_SECRET,
            path=agents_dir / "peer-ca.crt",
            timeout_s=READY_TIMEOUT_S,
        )
        metrics = {
            "TF_METRICS_WRITE_URL": self.state.controller_peer,
            "TF_METRICS_WRITE_TOKEN_FILE": str(token),
            "TF_METRICS_WRITE_CA_FILE": str(ca),
        }
        self.agents = AgentRunner(self.plane, kube, NAMESPACE, agents_dir, simulation_file,
                                  metrics, ip_prefix=self.ranges.nodes, pid_dir=self.directory.pids,
                                  detached=True)  # fmt: skip
        for node in nodes:
            self.agents.node_ip(node.name)
        workloads = WorkloadPods(kube, by_name, simulation_file, self.agents.node_ip,
                                 on_change=self.agents.rediscover)  # fmt: skip
        await stack.enter_async_context(workloads.running())
        await stack.enter_async_context(self._agents_running())
        await asyncio.gather(*(create_node(kube, node) for node in nodes))

    @contextlib.asynccontextmanager
    async def _agents_running(self) -> AsyncIterator[None]:
        assert self.agents is not None
        async with self.agents.running():
            try:
                yield
            finally:
                self.save()

    async def _wait_for_gpus(self, kube: AsyncClient) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        gpu = resource_of("GPU")
        while True:
            self._ensure_running()
            phases = [_phase(g) async for g in kube.list(gpu)]
            running = phases.count("Running")
            if running != self.state.gpus_running:
                self.state.gpus_running = running
                self.save()
            if running >= self.state.gpus:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{running} of {self.state.gpus} GPUs Running after {READY_TIMEOUT_S:.0f}s; "
                    "see `tensor-fusion dev logs`"
                )
            await asyncio.sleep(0.5)

    def _watched(self) -> list[Component]:
        found: list[Component] = []
        if self.plane is not None:
            found += self.plane.components
        if self.controllers is not None:
            found += self.controllers.components()
        return found

    def _ensure_running(self) -> None:
        for component in self._watched():
            component.ensure_running()

    # -- while it runs

    async def _supervise(self) -> None:
        """Until stopped: restart exited controllers, replace deleted or outdated controller
        pods, sync ConfigMaps, record the state."""
        assert self.controllers is not None and self.plane is not None
        while not self.stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), RESYNC_PERIOD_S)
            if self.stop.is_set():
                break
            self.plane.ensure_running()
            for replica in list(self.controllers.replicas.values()):
                await self._restart_if_exited(replica)
            await self._replace_outdated()
            try:
                changed = await self.controllers.sync_config_maps()
            except Exception as error:  # the API server busy: the next pass retries
                _log.warning("dev: ConfigMap sync failed, retrying: %s", error)
                continue
            if changed:
                _log.info("dev: ConfigMaps changed: %s", ", ".join(changed))
        self.state.phase = DevPhase.STOPPING
        _log.info("dev: stopping")
        self.save()

    async def _replace_outdated(self) -> None:
        """A deleted controller Pod's replica, or one started from an older pod template
        (`kubectl rollout restart`), replaced by a new one under a new Pod name: one per pass,
        as a rollout with maxUnavailable 1 would."""
        assert self.controllers is not None
        try:
            outdated = await self.controllers.outdated()
        except Exception as error:  # the API server busy: the next pass retries
            _log.warning("dev: reading the controller pods failed, retrying: %s", error)
            return
        if outdated:
            old = outdated[0]
            new = await self.controllers.replace(old)
            _log.info("dev: controller pod %s replaced by %s (%s)", old.pod, new.pod, new.ip)
            self.save()

    async def _restart_if_exited(self, replica: Replica) -> None:
        assert self.controllers is not None
        code = replica.component.exit_code
        if code is None:
            return
        backoff = self.restarts.setdefault(replica.pod, _Restarts())
        now = time.monotonic()
        if now < backoff.not_before:
            return
        _log.warning("dev: %s exited with code %s, restarting it; last lines:\n%s",
                     replica.pod, code, tail(replica.component.log_path, 10))  # fmt: skip
        self.controllers.stop(replica.pod)
        await self.controllers.start(replica.pod, ip=replica.ip)
        backoff.not_before = now + backoff.delay_s
        backoff.delay_s = min(backoff.delay_s * 2, RESTART_BACKOFF_S[1])
        self.save()

    # -- stopping

    def _stop_controllers(self) -> None:
        if self.controllers is not None:
            self.controllers.stop_all()

    def _stop_plane(self) -> None:
        if self.plane is not None:
            self.plane.stop()


def _phase(resource: Any) -> str:
    body: dict[str, Any] = resource.to_dict()
    return str((body.get("status") or {}).get("phase") or "")


async def _has_alertmanager(kube: AsyncClient) -> bool:
    try:
        await kube.get(StatefulSet, f"{RELEASE}-alert-manager", namespace=NAMESPACE)
    except ApiError as error:
        if error.status.code == 404:
            return False
        raise
    return True


def serve(settings: DevSettings) -> int:
    """Run the supervisor in this process until SIGTERM or SIGINT; 0, or 1 after a failure."""
    directory = DevDirectory(settings.directory)
    directory.create()
    state = DevState()

    async def main() -> DevPhase:
        supervisor = DevSupervisor(settings, directory, state)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, supervisor.stop.set)
        await supervisor.run()
        return supervisor.state.phase

    phase = asyncio.run(main())
    return 1 if phase == DevPhase.FAILED else 0
