"""Running what the chart installs where there is no kubelet (the chart walkthrough).

`helm upgrade --install` puts the chart's objects into a control plane; their pods never run.
`ChartControllers` plays the kubelet for the controller Deployment: for each replica it reads
the Deployment as installed, writes the ConfigMaps it mounts into directories laid out as the
kubelet lays out a ConfigMap volume (`..data` a symlink to a timestamped directory, each key a
symlink through it, so a swap is atomic), and starts `tensor-fusion controller` with the
container's command (`/manager` is the image's entry to it) and env (`fieldRef`s resolved to
the replica's pod name, namespace and loopback IP; `secretKeyRef`s read from the API), plus
what a machine without a kubelet needs: the paths of those directories, its own ports on its
loopback IP, heartbeat readiness for the agents. It talks to the API server with a token of the
chart's ServiceAccount (TokenRequest), never as an administrator, so a permission the chart
forgot fails here as it would in a cluster.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import os
import secrets
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.core_v1 import ConfigMap, Secret, ServiceAccountToken

from ..integration.loopback_peers import stop_process
from .agent_runner import AgentRunner
from .chart_render import CHART, NAMESPACE, RELEASE
from .controller_replicas import EXECUTABLE
from .controlplane import Binaries, Component, ControlPlane, free_port
from .nodes import create_fake_gpu_node

__all__ = [
    "ChartAlertmanagers",
    "ChartControllers",
    "ConfigDirectory",
    "Replica",
    "helm_install",
    "token_of",
]


async def helm_install(
    plane: ControlPlane, *values: Path, sets: Mapping[str, str] | None = None
) -> str:
    """`helm upgrade --install tensor-fusion-sys charts/tensor-fusion -n tensor-fusion-sys
    --create-namespace -f ...` as the guide runs it (the local chart instead of the repo)."""
    args = ["upgrade", "--install", RELEASE, str(CHART), "--namespace", NAMESPACE,
            "--create-namespace"]  # fmt: skip
    for path in values:
        args += ["-f", str(path)]
    for key, value in (sets or {}).items():
        args += ["--set", f"{key}={value}"]
    return await plane.helm(*args)


async def token_of(kube: AsyncClient, account: str) -> str:
    """A token of the release namespace's ServiceAccount `account` (TokenRequest, as the
    kubelet mounts one into a pod)."""
    request = ServiceAccountToken(metadata=ObjectMeta(name=account, namespace=NAMESPACE),
                                  spec=TokenRequestSpec(audiences=[],
                                                        expirationSeconds=7200))  # fmt: skip
    created = await kube.create(request, name=account, namespace=NAMESPACE)
    assert created.status is not None and created.status.token
    return str(created.status.token)


@contextlib.contextmanager
def own_control_plane(workdir: Path) -> Iterator[ControlPlane]:
    """A control plane of a test module's own, so that the chart's cluster-wide objects
    (webhook configuration, default pool, priority classes) stay out of the other tests' way."""
    plane = ControlPlane(Binaries.locate(), workdir)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@contextlib.asynccontextmanager
async def admin_client(plane: ControlPlane, field_manager: str) -> AsyncIterator[AsyncClient]:
    """An administrator's client of `plane`."""
    client = AsyncClient(KubeConfig.from_file(plane.kubeconfig), field_manager=field_manager)
    try:
        yield client
    finally:
        await client.close()


class ConfigDirectory:
    """A directory holding a ConfigMap's keys the way the kubelet mounts a ConfigMap volume."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._generation = 0

    def write(self, data: Mapping[str, str]) -> None:
        """Swap in `data` atomically (a new timestamped directory, then `..data` renamed)."""
        self.path.mkdir(parents=True, exist_ok=True)
        self._generation += 1
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y_%m_%d_%H_%M_%S")
        version = f"..{stamp}.{self._generation}"
        (self.path / version).mkdir()
        for key, text in data.items():
            (self.path / version / key).write_text(text)
        old = os.readlink(self.path / "..data") if (self.path / "..data").is_symlink() else None
        temporary = self.path / "..data_tmp"
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        temporary.symlink_to(version)
        temporary.rename(self.path / "..data")
        for key in data:
            link = self.path / key
            if not link.is_symlink():
                link.symlink_to(Path("..data") / key)
        if old is not None:
            for stale in (self.path / old).iterdir():
                stale.unlink()
            (self.path / old).rmdir()


@dataclass
class Replica:
    """One controller replica started from the Deployment."""

    pod: str
    ip: str
    api_port: int
    health_port: int
    webhook_port: int
    component: Component

    def url(self, path: str, *, health: bool = False) -> str:
        return f"http://{self.ip}:{self.health_port if health else self.api_port}{path}"


@dataclass
class ChartControllers:
    """Controller replicas as the kubelet would run the chart's Deployment (see the module)."""

    plane: ControlPlane
    kube: AsyncClient
    workdir: Path
    extra_flags: Sequence[str] = ("-agent-readiness", "heartbeat")
    extra_env: Mapping[str, str] = field(default_factory=dict)
    replicas: dict[str, Replica] = field(default_factory=dict)
    configs: dict[str, ConfigDirectory] = field(default_factory=dict)
    _kubeconfig: Path | None = None
    _next_ip: int = 2

    @property
    def full_name(self) -> str:
        return RELEASE

    async def deployment(self) -> dict[str, Any]:
        found = await self.kube.get(Deployment, f"{RELEASE}-controller", namespace=NAMESPACE)
        body: dict[str, Any] = found.to_dict()  # type: ignore[no-untyped-call]
        return body

    async def service_account_kubeconfig(self) -> Path:
        """A kubeconfig carrying a token of the Deployment's ServiceAccount."""
        if self._kubeconfig is not None:
            return self._kubeconfig
        pod_spec = (await self.deployment())["spec"]["template"]["spec"]
        account = pod_spec["serviceAccountName"]
        token = await token_of(self.kube, account)
        admin = yaml.safe_load(self.plane.kubeconfig.read_text())
        cluster = admin["clusters"][0]
        config = {
            "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [{"name": account, "context": {"cluster": cluster["name"],
                                                       "user": account}}],
            "current-context": account,
        }  # fmt: skip
        path = self.workdir / f"{account}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        self._kubeconfig = path
        return path

    async def sync_config_maps(self) -> None:
        """Write every ConfigMap the Deployment mounts into its directory (a kubelet's sync)."""
        pod_spec = (await self.deployment())["spec"]["template"]["spec"]
        for volume in pod_spec.get("volumes") or ():
            source = volume.get("configMap")
            if not source:
                continue
            found = await self.kube.get(ConfigMap, source["name"], namespace=NAMESPACE)
            directory = self.configs.setdefault(
                volume["name"], ConfigDirectory(self.workdir / "volumes" / volume["name"])
            )
            directory.write(dict(found.data or {}))

    async def start(self, pod: str) -> Replica:
        """Start a replica named `pod` from the Deployment as it is now."""
        deployment = await self.deployment()
        pod_spec = deployment["spec"]["template"]["spec"]
        [container] = [c for c in pod_spec["containers"] if c["name"] == "controller"]
        await self.sync_config_maps()
        ip = f"127.0.0.{self._next_ip}"
        self._next_ip += 1
        api_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "http")
        health_port, metrics_port = free_port(), free_port()
        mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts") or ()}
        paths = {mounts[name]: directory.path for name, directory in self.configs.items()
                 if name in mounts}  # fmt: skip
        command = list(container.get("command") or ())
        assert command and command[0] == "/manager", command
        argv: list[str | Path] = [
            EXECUTABLE, "controller", *command[1:],
            "--kubeconfig", str(await self.service_account_kubeconfig()),
            "-metrics-bind-address", f"{ip}:{metrics_port}",
            "-health-probe-bind-address", f"{ip}:{health_port}",
            "-kube-scheduler-path", str(self.plane.binaries.path("kube-scheduler")),
            "-scheduler-extender-bind-address", f"{ip}:{free_port()}",
            "-dynamic-config", str(paths["/etc/tensor-fusion/config"] / "config.yaml"),
            "-scheduler-config",
            str(paths["/etc/tensor-fusion/config"] / "scheduler-config.yaml"),
            "-gpu-info-config", str(paths["/etc/tensor-fusion/gpu-info"] / "gpu-info.yaml"),
            *self.extra_flags,
        ]  # fmt: skip
        env = await self._env(container, pod, ip)
        webhook_port = next(p["containerPort"] for p in container["ports"]
                            if p["name"] == "webhook")  # fmt: skip
        # whichever replica issues the webhook certificate names every replica's address
        every_ip = ",".join(f"127.0.0.{i}" for i in range(2, 20))
        env.update({"API_BIND_HOST": ip, "PORT": str(api_port),
                    "TSDB_EMBEDDED_DIR": str(self.workdir / pod / "tsdb"),
                    "WEBHOOK_CERT_EXTRA_HOSTS": every_ip, **self.extra_env})  # fmt: skip
        component = Component(pod, argv, self.workdir / f"{pod}.log", env=env)
        component.start()
        replica = Replica(pod, ip, api_port, health_port, webhook_port, component)
        self.replicas[pod] = replica
        return replica

    async def _env(self, container: Mapping[str, Any], pod: str, ip: str) -> dict[str, str]:
        fields = {"metadata.name": pod, "metadata.namespace": NAMESPACE, "status.podIP": ip}
        env: dict[str, str] = {}
        for item in container.get("env") or ():
            source = item.get("valueFrom") or {}
            if "value" in item:
                env[item["name"]] = str(item["value"])
            elif "fieldRef" in source:
                env[item["name"]] = fields[source["fieldRef"]["fieldPath"]]
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                secret = await self.kube.get(Secret, ref["name"], namespace=NAMESPACE)
                env[item["name"]] = base64.b64decode((secret.data or {})[ref["key"]]).decode()
        return env

    def stop(self, pod: str) -> None:
        self.replicas.pop(pod).component.stop()

    def stop_all(self) -> None:
        for pod in list(self.replicas):
            self.stop(pod)

    def components(self) -> list[Component]:
        return [replica.component for replica in self.replicas.values()]

    @contextlib.contextmanager
    def running(self) -> Iterator[ChartControllers]:
        try:
            yield self
        finally:
            self.stop_all()


HEADLESS = f"alert-manager-headless.{NAMESPACE}.svc.cluster.local"


@dataclass
class ChartAlertmanagers:
    """Real Alertmanagers run as the chart's StatefulSet says: its replica count, its
    configuration from the rendered Secret, gossip between the replicas, each on a loopback
    address of its own at port 9093, listed for the headless Service's name in the controllers'
    `HOST_ALIASES_FILE` (no cluster DNS here)."""

    kube: AsyncClient
    workdir: Path
    aliases: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)

    async def start(self) -> list[str]:
        statefulset = await self.kube.get(StatefulSet, f"{RELEASE}-alert-manager",
                                          namespace=NAMESPACE)  # fmt: skip
        assert statefulset.spec is not None and statefulset.spec.replicas
        secret = await self.kube.get(Secret, f"{RELEASE}-alert-manager-config",
                                     namespace=NAMESPACE)  # fmt: skip
        config = base64.b64decode((secret.data or {})["alertmanager.yml"]).decode()
        binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
        assert binary, "Debian's prometheus-alertmanager (make system-deps)"
        count = statefulset.spec.replicas
        self.addresses = [f"127.0.2.{i + 1}" for i in range(count)]
        self.aliases.write_text("".join(f"{ip} {HEADLESS}\n" for ip in self.addresses))
        for ip in self.addresses:
            directory = self.workdir / f"alertmanager-{ip}"
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "alertmanager.yml").write_text(config)
            peers = [f"--cluster.peer={peer}:9094" for peer in self.addresses if peer != ip]
            log = (directory / "alertmanager.log").open("ab")
            self.processes.append(subprocess.Popen(
                [binary, f"--config.file={directory / 'alertmanager.yml'}",
                 f"--storage.path={directory / 'data'}", f"--web.listen-address={ip}:9093",
                 f"--cluster.listen-address={ip}:9094", f"--cluster.advertise-address={ip}:9094",
                 *peers, "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT,
            ))  # fmt: skip
        return self.addresses

    async def alerts(self, address: str) -> list[dict[str, Any]]:
        """The alerts one replica holds (`GET /api/v2/alerts`)."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                f"http://{address}:9093/api/v2/alerts", timeout=aiohttp.ClientTimeout(5)
            ) as reply,  # fmt: skip
        ):
            found: list[dict[str, Any]] = await reply.json()
            return found

    def stop(self) -> None:
        for process in self.processes:
            stop_process(process)
        self.processes.clear()


async def simulated_gpu_nodes(
    plane: ControlPlane, kube: AsyncClient, workdir: Path, write_url: str, count: int = 2
) -> tuple[list[str], AgentRunner]:
    """`count` fake GPU nodes of 2 simulated H100s each, and the runner that starts their
    agents (not yet running) writing metrics to `write_url` with their ServiceAccount token."""
    run = secrets.token_hex(3)
    nodes = [f"gpu-{run}-{i}" for i in range(count)]
    for name in nodes:
        await create_fake_gpu_node(kube, name, gpus=2)

    def sim_file(node: str) -> Path:
        path = workdir / f"{node}.yaml"
        path.write_text("gpus:\n" + "".join(
            f"  - model: NVIDIA H100 80GB HBM3\n    vram: 80Gi\n    uuid: GPU-{node}-{g}\n"
            "    usage: {temperature: 45}\n" for g in range(2)))  # fmt: skip
        return path

    token = workdir / "agent-token"
    token.write_text(await token_of(kube, "tensor-fusion-hypervisor-sa"))
    metrics = {"TF_METRICS_WRITE_URL": write_url, "TF_METRICS_WRITE_TOKEN_FILE": str(token)}
    return nodes, AgentRunner(plane, kube, NAMESPACE, workdir, sim_file, metrics)
