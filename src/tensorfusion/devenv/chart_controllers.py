"""The chart's controller Deployment run where there is no kubelet.

`ChartControllers` plays the kubelet for the controller Deployment: for each replica it reads
the Deployment as installed, writes the ConfigMaps it mounts into kubelet-style directories
(`config_volumes`), and starts `tensor-fusion controller` with the container's command
(`/manager` is the image's entry to it) and env (`fieldRef`s resolved to the replica's pod name,
namespace and loopback IP; `secretKeyRef`s read from the API), plus what a machine without a
kubelet needs: the paths of those directories, its own ports on its loopback IP (the public
API and the peer port both), the ServiceAccount token in a file of its own (`PEER_TOKEN_FILE`),
a Pod object reporting its IP (`replica_pods`), heartbeat readiness for the agents. It talks
to the API server with a token of the chart's ServiceAccount (TokenRequest), never as an
administrator, so a permission the chart forgot fails here as it would in a cluster.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from lightkube import ApiError, AsyncClient
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Pod, Secret, ServiceAccountToken

from tensorfusion.devenv.config_volumes import ConfigDirectory
from tensorfusion.devenv.control_plane import ControlPlane
from tensorfusion.devenv.processes import Component, eventually, free_port
from tensorfusion.devenv.replica_pods import stand_in_pod
from tensorfusion.devenv.source_tree import CHART, EXECUTABLE, NAMESPACE, RELEASE

__all__ = ["ChartControllers", "Replica", "helm_install", "point_webhook", "token_of"]


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


async def token_of(kube: AsyncClient, account: str, expiration_s: int = 7200) -> str:
    """A token of the release namespace's ServiceAccount `account` (TokenRequest, as the
    kubelet mounts one into a pod)."""
    request = ServiceAccountToken(
        metadata=ObjectMeta(name=account, namespace=NAMESPACE),
        spec=TokenRequestSpec(audiences=[], expirationSeconds=expiration_s),
    )
    created = await kube.create(request, name=account, namespace=NAMESPACE)
    assert created.status is not None and created.status.token
    return str(created.status.token)


async def point_webhook(
    kube: AsyncClient, url: str, components: Sequence[Component], timeout_s: float = 60.0
) -> None:
    """The chart's webhook configuration sent to `url` (a replica, or a stand-in for the
    Service), its caBundle kept; returns once the controllers have it set."""
    name = f"{RELEASE}-mutating-webhook"
    current = await kube.get(MutatingWebhookConfiguration, name)
    body = current.to_dict()  # type: ignore[no-untyped-call]
    for hook in body["webhooks"]:
        hook["clientConfig"].pop("service", None)
        hook["clientConfig"]["url"] = url
    await kube.replace(MutatingWebhookConfiguration.from_dict(body))  # type: ignore[no-untyped-call]

    async def ca_set() -> bool:
        found = await kube.get(MutatingWebhookConfiguration, name)
        return all(hook.clientConfig.caBundle for hook in found.webhooks or ())

    await eventually(ca_set, what=f"the caBundle of {name} kept by the controllers",
                     timeout=timeout_s, components=components)  # fmt: skip


@dataclass
class Replica:
    """One controller replica started from the Deployment."""

    pod: str
    ip: str
    api_port: int
    health_port: int
    webhook_port: int
    component: Component
    peer_port: int = 9444
    template: str = ""
    """The Deployment's pod template the replica was started from (JSON, keys sorted)."""

    def url(self, path: str, *, health: bool = False) -> str:
        return f"http://{self.ip}:{self.health_port if health else self.api_port}{path}"

    def peer_url(self, path: str = "") -> str:
        """`path` on the replica's peer port (HTTPS)."""
        return f"https://{self.ip}:{self.peer_port}{path}"


@dataclass
class ChartControllers:
    """Controller replicas as the kubelet would run the chart's Deployment (see the module)."""

    plane: ControlPlane
    kube: AsyncClient
    workdir: Path
    extra_flags: Sequence[str] = ("-agent-readiness", "heartbeat")
    extra_env: Mapping[str, str] = field(default_factory=dict)
    ip_prefix: str = "127.0.0."
    """Replica addresses: `ip_prefix` + 2, 3, ..."""
    pid_dir: Path | None = None
    detached: bool = False
    token_expiration_s: int = 7200
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
        self._kubeconfig = await self.account_kubeconfig(pod_spec["serviceAccountName"])
        return self._kubeconfig

    async def account_kubeconfig(self, account: str) -> Path:
        """A kubeconfig carrying a token of the release namespace's ServiceAccount `account`."""
        token = await token_of(self.kube, account, self.token_expiration_s)
        (self.workdir / f"{account}.token").write_text(token)
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
        return path

    def token_file(self, account: str) -> Path:
        """The file of the token `account_kubeconfig` issued for `account`."""
        return self.workdir / f"{account}.token"

    async def sync_config_maps(self) -> list[str]:
        """Write every ConfigMap the Deployment mounts into its directory (a kubelet's sync);
        the names of the volumes that changed."""
        changed: list[str] = []
        pod_spec = (await self.deployment())["spec"]["template"]["spec"]
        for volume in pod_spec.get("volumes") or ():
            source = volume.get("configMap")
            if not source:
                continue
            found = await self.kube.get(ConfigMap, source["name"], namespace=NAMESPACE)
            directory = self.configs.setdefault(
                volume["name"], ConfigDirectory(self.workdir / "volumes" / volume["name"])
            )
            if directory.write(dict(found.data or {})):
                changed.append(volume["name"])
        return changed

    async def start(self, pod: str, ip: str | None = None) -> Replica:
        """Start a replica named `pod` from the Deployment as it is now (on the next address
        of its own, or on `ip`)."""
        deployment = await self.deployment()
        pod_spec = deployment["spec"]["template"]["spec"]
        [container] = [c for c in pod_spec["containers"] if c["name"] == "controller"]
        await self.sync_config_maps()
        if ip is None:
            ip = f"{self.ip_prefix}{self._next_ip}"
            self._next_ip += 1
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        api_port, peer_port = ports["http"], ports["peer"]
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
        webhook_port = ports["webhook"]
        account = pod_spec["serviceAccountName"]
        # whichever replica issues the webhook certificate names every replica's address
        every_ip = ",".join(f"{self.ip_prefix}{i}" for i in range(1, 20))
        env.update({"API_BIND_HOST": ip, "PEER_BIND_HOST": ip, "PORT": str(api_port),
                    "PEER_TOKEN_FILE": str(self.token_file(account)),
                    "TSDB_EMBEDDED_DIR": str(self.workdir / pod / "tsdb"),
                    "WEBHOOK_CERT_EXTRA_HOSTS": every_ip, **self.extra_env})  # fmt: skip
        await stand_in_pod(self.kube, namespace=NAMESPACE, name=pod, ip=ip,
                           service_account=account)  # fmt: skip
        component = Component(
            pod, argv, self.workdir / f"{pod}.log", env=env,
            pid_file=self.pid_dir / f"{pod}.pid" if self.pid_dir else None,
            detached=self.detached,
        )  # fmt: skip
        component.start()
        replica = Replica(pod, ip, api_port, health_port, webhook_port, component, peer_port,
                          template=template_of(deployment))  # fmt: skip
        self.replicas[pod] = replica
        return replica

    async def outdated(self) -> list[Replica]:
        """The replicas whose Pod was deleted, then those started from an older pod template
        (`kubectl rollout restart`, a changed Deployment): what a ReplicaSet would replace."""
        template = template_of(await self.deployment())
        deleted, old = [], []
        for replica in self.replicas.values():
            try:
                pod = await self.kube.get(Pod, replica.pod, namespace=NAMESPACE)
            except ApiError as error:
                if error.status.code != 404:
                    raise
                deleted.append(replica)
                continue
            if pod.metadata and pod.metadata.deletionTimestamp:
                deleted.append(replica)
            elif replica.template != template:
                old.append(replica)
        return deleted + old

    async def replace(self, replica: Replica) -> Replica:
        """Stop `replica` and start its successor under a new Pod name on the same address, as
        a ReplicaSet replaces a deleted pod."""
        self.stop(replica.pod)
        with contextlib.suppress(ApiError):
            await self.kube.delete(Pod, replica.pod, namespace=NAMESPACE, grace_period=0)
        return await self.start(f"{RELEASE}-controller-{secrets.token_hex(3)}", ip=replica.ip)

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


def template_of(deployment: Mapping[str, Any]) -> str:
    """A Deployment's pod template as comparable text."""
    return json.dumps(deployment["spec"]["template"], sort_keys=True)
