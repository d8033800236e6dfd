"""A real Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager.

The binaries are built from Go modules by ``testenv/build.sh`` (``make testenv``) and cached
under ``~/.cache``. On loopback (the default ``Site``) there is no kubelet: nodes are fake
``Node`` objects and pods are bound but never run; the cluster tests and ``tensor-fusion dev up``
run it so. The e2e tier runs it inside a network namespace with real nodes
(``tensorfusion.devenv.real_nodes``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tensorfusion.devenv.binaries import Binaries, taint_admission_plugin
from tensorfusion.devenv.pki import CertificateAuthority, ServiceAccountKeys
from tensorfusion.devenv.processes import (
    LOOPBACK,
    START_TIMEOUT,
    Component,
    ControlPlaneError,
    component_environment,
    eventually,
    free_port,
    http_ok,
    insecure_context,
    wait_until,
)
from tensorfusion.devenv.real_nodes.netns import call_in

#: Service CIDR handed to kube-apiserver (allocation only: nothing is ever sent there).
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"

#: The controllers kube-controller-manager runs. Not node-lifecycle-controller: with no kubelet
#: it would mark the fake nodes NotReady and taint them.
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
)


@dataclass(frozen=True)
class Site:
    """Where the control plane runs. The default: this machine's loopback, no kubelets. With
    `netns`, every process runs inside that network namespace and the API server listens on all
    of its interfaces, advertises `address` (nodes and pods reach it there) and talks to real
    kubelets; this process reaches it through a loopback port relayed into the namespace
    (`tensorfusion.devenv.real_nodes.forward`)."""

    address: str = LOOPBACK
    netns: Path | None = None
    service_cluster_ip_range: str = SERVICE_CLUSTER_IP_RANGE
    api_service_address: str | None = None
    """The `kubernetes` Service's address (in the serving certificate)."""

    @property
    def real_nodes(self) -> bool:
        return self.netns is not None

    def command(self, argv: Sequence[str | Path]) -> list[str | Path]:
        """`argv` as run at this site."""
        if self.netns is None:
            return list(argv)
        return ["nsenter", f"--net={self.netns}", "--", *argv]

    def probe(self, url: str, context: ssl.SSLContext | None = None) -> bool:
        """`http_ok` of a URL at this site."""
        if self.netns is None:
            return http_ok(url, context)
        return call_in(self.netns, http_ok, url, context)


class ToolError(ControlPlaneError):
    """kubectl or helm exited non-zero."""


@dataclass(frozen=True)
class ToolResult:
    argv: Sequence[str]
    returncode: int
    stdout: str
    stderr: str


# --------------------------------------------------------------------------- control plane


class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager on loopback, with an admin kubeconfig."""

    def __init__(
        self, binaries: Binaries, workdir: Path, *, pid_dir: Path | None = None,
        detached: bool = False, site: Site | None = None,
    ) -> None:  # fmt: skip
        """`pid_dir`: where each process's PID file goes; `detached`: the processes outlive
        this one (else they get SIGKILL when it dies); `site`: where it runs (loopback)."""
        self.site = site or Site()
        self.binaries = binaries
        self.workdir = workdir
        self.pid_dir = pid_dir
        self.detached = detached
        self.pki_dir = workdir / "pki"
        self.log_dir = workdir / "logs"
        self.ca = CertificateAuthority()
        self.ca_file = self.pki_dir / "ca.crt"
        self.apiserver_cert = self.pki_dir / "apiserver.crt"
        self.apiserver_key = self.pki_dir / "apiserver.key"
        self.admin_cert = self.pki_dir / "admin.crt"
        self.admin_key = self.pki_dir / "admin.key"
        self.sa_key = self.pki_dir / "sa.key"
        self.sa_pub = self.pki_dir / "sa.pub"
        self.components: list[Component] = []
        self.etcd_url = ""
        self.api_url = ""
        self.kubeconfig = workdir / "admin.kubeconfig"
        self.internal_api_url = ""
        """The API server's URL at its site (for processes there; `api_url` is this process's)."""
        self.internal_kubeconfig = self.kubeconfig
        self.kubelet_client_cert = self.pki_dir / "apiserver-kubelet-client.crt"
        self.kubelet_client_key = self.pki_dir / "apiserver-kubelet-client.key"
        self.startup_seconds = 0.0
        self._admin_context: ssl.SSLContext | None = None

    # -- lifecycle

    def start(
        self, timeout: float = START_TIMEOUT, on_step: Callable[[str], None] | None = None
    ) -> None:
        """Start etcd, kube-apiserver and kube-controller-manager, each ready before the next;
        `on_step` hears the name of each one as it starts."""
        started = time.monotonic()
        step = on_step or (lambda _name: None)
        try:
            self._write_pki()
            step("etcd")
            self._start_etcd(timeout)
            step("kube-apiserver")
            self._start_apiserver(timeout)
            self._write_kubeconfig()
            step("kube-controller-manager")
            self._start_controller_manager(timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started

    def stop(self) -> None:
        """Stops every process this control plane started, newest first, each by its PID."""
        while self.components:
            self.components.pop().stop()

    @property
    def logs(self) -> dict[str, Path]:
        return {component.name: component.log_path for component in self.components}

    def ensure_running(self) -> None:
        for component in self.components:
            component.ensure_running()

    def _launch(
        self, name: str, argv: Sequence[str | Path], log_dir: Path | None = None
    ) -> Component:
        component = Component(
            name, self.site.command(argv), (log_dir or self.log_dir) / f"{name}.log",
            pid_file=self.pid_dir / f"{name}.pid" if self.pid_dir else None,
            detached=self.detached,
        )  # fmt: skip
        component.start()
        return component

    # -- pieces

    def _write_pki(self) -> None:
        self.pki_dir.mkdir(parents=True, exist_ok=True)
        self.ca_file.write_bytes(self.ca.cert_pem)
        site_hosts = (self.site.address, self.site.api_service_address or self.site.address)
        serving = self.ca.issue(
            "kube-apiserver",
            hosts=tuple(dict.fromkeys((
                LOOPBACK,
                "localhost",
                *site_hosts,
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ))),
            server=True,
        )  # fmt: skip
        serving.write(self.pki_dir, "apiserver")
        kubelet_client = self.ca.issue("kube-apiserver-kubelet-client",
                                       organizations=("system:masters",), client=True)  # fmt: skip
        kubelet_client.write(self.pki_dir, "apiserver-kubelet-client")
        admin = self.ca.issue("testenv-admin", organizations=("system:masters",), client=True)
        admin.write(self.pki_dir, "admin")
        accounts = ServiceAccountKeys.generate()
        self.sa_key.touch(mode=0o600)
        self.sa_key.write_bytes(accounts.private_pem)
        self.sa_pub.write_bytes(accounts.public_pem)

    def _start_etcd(self, timeout: float) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://{LOOPBACK}:{client}"
        peer_url = f"http://{LOOPBACK}:{peer}"
        if self.site.real_nodes:  # alone in its namespace: no other process takes these
            client, peer = 2379, 2380
            self.etcd_url = f"http://{LOOPBACK}:{client}"
            peer_url = f"http://{LOOPBACK}:{peer}"
        etcd = self._launch(
            "etcd",
            [
                self.binaries.path("etcd"),
                "--name=testenv",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=testenv={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self.components.append(etcd)
        wait_until(
            lambda: self.site.probe(f"{self.etcd_url}/health"),
            what=f"etcd at {self.etcd_url}/health",
            timeout=timeout,
            components=[etcd],
        )

    def admin_context(self) -> ssl.SSLContext:
        """TLS context that trusts the apiserver and presents the admin certificate."""
        if self._admin_context is None:
            context = ssl.create_default_context(cafile=str(self.ca_file))
            context.load_cert_chain(self.admin_cert, self.admin_key)
            self._admin_context = context
        return self._admin_context

    def _apiserver_site_flags(self, port: int) -> list[str]:
        apiserver_binary = self.binaries.path("kube-apiserver")
        if not self.site.real_nodes:
            return [
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                # The endpoint reconciler refuses a loopback address for the `kubernetes`
                # Service; nothing runs in the cluster that would use it.
                "--endpoint-reconciler-type=none",
                "--authorization-mode=RBAC",
                "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
                f"--disable-admission-plugins={taint_admission_plugin(apiserver_binary)}",
            ]
        return [
            "--bind-address=0.0.0.0",
            f"--advertise-address={self.site.address}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction,MutatingAdmissionWebhook,"
            "ValidatingAdmissionWebhook",
            f"--kubelet-client-certificate={self.kubelet_client_cert}",
            f"--kubelet-client-key={self.kubelet_client_key}",
            # The nodes' names resolve nowhere: reach a kubelet at its address.
            "--kubelet-preferred-address-types=InternalIP",
            # No kube-proxy runs in the API server's namespace: a webhook's Service is reached
            # at its endpoints' addresses, not its ClusterIP.
            "--enable-aggregator-routing=true",
        ]

    def _start_api_forward(self, port: int) -> int:
        """Relays a loopback port of this machine to the API server in the namespace."""
        assert self.site.netns is not None
        local = free_port()
        forward = Component(
            "api-forward",
            [sys.executable, "-m", "tensorfusion.devenv.real_nodes.forward",
             "--listen", f"{LOOPBACK}:{local}", "--netns", str(self.site.netns),
             "--to", f"{self.site.address}:{port}"],
            self.log_dir / "api-forward.log",
            pid_file=self.pid_dir / "api-forward.pid" if self.pid_dir else None,
            detached=self.detached,
        )  # fmt: skip
        forward.start()
        self.components.append(forward)
        return local

    def _start_apiserver(self, timeout: float) -> None:
        if self.site.real_nodes:
            port = 6443
            self.internal_api_url = f"https://{self.site.address}:{port}"
            self.api_url = f"https://{LOOPBACK}:{self._start_api_forward(port)}"
        else:
            port = free_port()
            self.api_url = self.internal_api_url = f"https://{LOOPBACK}:{port}"
        apiserver = self._launch(
            "kube-apiserver",
            [
                self.binaries.path("kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                *self._apiserver_site_flags(port),
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'kube-apiserver'}",
                f"--tls-cert-file={self.apiserver_cert}",
                f"--tls-private-key-file={self.apiserver_key}",
                f"--client-ca-file={self.ca_file}",
                # A front-proxy CA, so that kube-controller-manager and kube-scheduler find one
                # in kube-system/extension-apiserver-authentication (no such client exists).
                f"--requestheader-client-ca-file={self.ca_file}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--service-account-issuer={self.internal_api_url}",
                f"--service-account-key-file={self.sa_pub}",
                f"--service-account-signing-key-file={self.sa_key}",
                f"--service-cluster-ip-range={self.site.service_cluster_ip_range}",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
        )
        self.components.append(apiserver)
        wait_until(
            lambda: http_ok(f"{self.api_url}/readyz", self.admin_context()),
            what=f"kube-apiserver at {self.api_url}/readyz",
            timeout=timeout,
            components=[apiserver],
        )

    def _write_kubeconfig(self) -> None:
        self.write_kubeconfig(self.kubeconfig, self.api_url)
        if self.internal_api_url != self.api_url:
            self.internal_kubeconfig = self.workdir / "admin-internal.kubeconfig"
            self.write_kubeconfig(self.internal_kubeconfig, self.internal_api_url)

    def write_kubeconfig(
        self, path: Path, server: str, *, cert: Path | None = None, key: Path | None = None
    ) -> None:
        """A kubeconfig for `server` with a client certificate (the admin's by default)."""

        def b64(file: Path) -> str:
            return base64.b64encode(file.read_bytes()).decode()

        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "testenv",
                    "cluster": {
                        "server": server,
                        "certificate-authority-data": b64(self.ca_file),
                    },
                }
            ],
            "users": [
                {
                    "name": "testenv-admin",
                    "user": {
                        "client-certificate-data": b64(cert or self.admin_cert),
                        "client-key-data": b64(key or self.admin_key),
                    },
                }
            ],
            "contexts": [
                {"name": "testenv", "context": {"cluster": "testenv", "user": "testenv-admin"}}
            ],
            "current-context": "testenv",
        }
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))

    def _start_controller_manager(self, timeout: float) -> None:
        port = 10257 if self.site.real_nodes else free_port()
        kubeconfig = self.internal_kubeconfig
        # With real kubelets every controller runs (node lifecycle, endpoints, StatefulSets,
        # volumes, Jobs, tokens); on loopback only those that fake nodes do not upset.
        controllers = (
            ["--controllers=*", f"--service-account-private-key-file={self.sa_key}"]
            if self.site.real_nodes
            else [f"--controllers={','.join(CONTROLLERS)}"]
        )
        manager = self._launch(
            "kube-controller-manager",
            [
                self.binaries.path("kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'kube-controller-manager'}",
                "--leader-elect=false",
                *controllers,
                f"--root-ca-file={self.ca_file}",
                "--v=1",
            ],
        )
        self.components.append(manager)
        wait_until(
            lambda: self.site.probe(f"https://{LOOPBACK}:{port}/healthz", insecure_context()),
            what="kube-controller-manager /healthz",
            timeout=timeout,
            components=[manager],
        )

    # -- kube-scheduler

    async def start_scheduler(
        self,
        configuration: Mapping[str, Any],
        directory: Path,
        *,
        name: str = "kube-scheduler",
        timeout: float = START_TIMEOUT,
    ) -> Component:
        """Starts kube-scheduler with ``configuration`` and waits for its /healthz.

        The caller stops the returned component (the ``start_scheduler`` fixture does).
        """
        scheduler, url = self.launch_scheduler(configuration, directory, name=name)
        try:
            context = insecure_context()

            async def healthy() -> bool:
                return await asyncio.to_thread(self.site.probe, url, context)

            await eventually(healthy, what=f"{name} {url}", timeout=timeout, components=[scheduler])
        except BaseException:
            scheduler.stop()
            raise
        return scheduler

    def launch_scheduler(
        self, configuration: Mapping[str, Any], directory: Path, *, name: str = "kube-scheduler"
    ) -> tuple[Component, str]:
        """Starts kube-scheduler with ``configuration`` at this control plane's site; returns it
        and its /healthz URL (the caller waits for it, and stops it)."""
        directory.mkdir(parents=True, exist_ok=True)
        config_path = directory / f"{name}-config.yaml"
        config_path.write_text(yaml.safe_dump(dict(configuration), sort_keys=False))
        port = free_port()
        scheduler = self._launch(
            name,
            [
                self.binaries.path("kube-scheduler"),
                f"--config={config_path}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--authentication-kubeconfig={self.internal_kubeconfig}",
                f"--authorization-kubeconfig={self.internal_kubeconfig}",
                f"--cert-dir={directory / name}",
                "--v=2",
            ],
            log_dir=directory,
        )
        return scheduler, f"https://{LOOPBACK}:{port}/healthz"

    def client_kubeconfig(
        self, directory: Path, name: str, *, user: str, groups: Sequence[str] = ()
    ) -> Path:
        """`directory/<name>.kubeconfig`: the internal API URL and a new client certificate of
        `user` in `groups` (key and certificate beside it)."""
        directory.mkdir(parents=True, exist_ok=True)
        self.ca.issue(user, organizations=tuple(groups), client=True).write(directory, name)
        path = directory / f"{name}.kubeconfig"
        self.write_kubeconfig(path, self.internal_api_url, cert=directory / f"{name}.crt",
                              key=directory / f"{name}.key")  # fmt: skip
        return path

    # -- kubectl and helm

    def tool_environment(self) -> dict[str, str]:
        environment = component_environment()
        environment["KUBECONFIG"] = str(self.kubeconfig)
        helm_home = self.workdir / "helm"
        environment["HELM_CACHE_HOME"] = str(helm_home / "cache")
        environment["HELM_CONFIG_HOME"] = str(helm_home / "config")
        environment["HELM_DATA_HOME"] = str(helm_home / "data")
        return environment

    async def run_tool(
        self, name: str, *args: str, stdin: str | None = None, timeout: float = 120.0
    ) -> ToolResult:
        """Runs a testenv binary (kubectl, helm) against this cluster; raises if it fails."""
        argv = [str(self.binaries.path(name)), *args]
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.tool_environment(),
        )
        try:
            stdout, stderr = await asyncio.wait_for(
                process.communicate(stdin.encode() if stdin is not None else None), timeout
            )
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise ToolError(f"timed out after {timeout:.0f}s: {' '.join(argv)}") from None
        result = ToolResult(argv, process.returncode or 0, stdout.decode(), stderr.decode())
        if result.returncode != 0:
            raise ToolError(
                f"exit {result.returncode}: {' '.join(argv)}\n{result.stderr}{result.stdout}"
            )
        return result

    async def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return (await self.run_tool("kubectl", *args, stdin=stdin)).stdout

    async def helm(self, *args: str, stdin: str | None = None) -> str:
        return (await self.run_tool("helm", *args, stdin=stdin)).stdout
