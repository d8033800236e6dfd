"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager.

The binaries are built from Go modules by ``testenv/build.sh`` (``make testenv``) and cached
under ``~/.cache``. There is no kubelet: nodes are fake ``Node`` objects and pods are bound but
never run. The cluster tests and ``tensor-fusion dev up`` both run it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import subprocess
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
        detached: bool = False,
    ) -> None:  # fmt: skip
        """`pid_dir`: where each process's PID file goes; `detached`: the processes outlive
        this one (else they get SIGKILL when it dies)."""
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
            name, argv, (log_dir or self.log_dir) / f"{name}.log",
            pid_file=self.pid_dir / f"{name}.pid" if self.pid_dir else None,
            detached=self.detached,
        )  # fmt: skip
        component.start()
        return component

    # -- pieces

    def _write_pki(self) -> None:
        self.pki_dir.mkdir(parents=True, exist_ok=True)
        self.ca_file.write_bytes(self.ca.cert_pem)
        serving = self.ca.issue(
            "kube-apiserver",
            hosts=(
                LOOPBACK,
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ),
            server=True,
        )
        serving.write(self.pki_dir, "apiserver")
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
            lambda: http_ok(f"{self.etcd_url}/health"),
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

    def _start_apiserver(self, timeout: float) -> None:
        apiserver_binary = self.binaries.path("kube-apiserver")
        port = free_port()
        self.api_url = f"https://{LOOPBACK}:{port}"
        apiserver = self._launch(
            "kube-apiserver",
            [
                apiserver_binary,
                f"--etcd-servers={self.etcd_url}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                # The endpoint reconciler refuses a loopback address for the `kubernetes`
                # Service; nothing runs in the cluster that would use it.
                "--endpoint-reconciler-type=none",
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
                f"--service-account-issuer={self.api_url}",
                f"--service-account-key-file={self.sa_pub}",
                f"--service-account-signing-key-file={self.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
                f"--disable-admission-plugins={taint_admission_plugin(apiserver_binary)}",
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
        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "testenv",
                    "cluster": {
                        "server": self.api_url,
                        "certificate-authority-data": b64(self.ca_file),
                    },
                }
            ],
            "users": [
                {
                    "name": "testenv-admin",
                    "user": {
                        "client-certificate-data": b64(self.admin_cert),
                        "client-key-data": b64(self.admin_key),
                    },
                }
            ],
            "contexts": [
                {"name": "testenv", "context": {"cluster": "testenv", "user": "testenv-admin"}}
            ],
            "current-context": "testenv",
        }
        self.kubeconfig.touch(mode=0o600)
        self.kubeconfig.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))

    def _start_controller_manager(self, timeout: float) -> None:
        port = free_port()
        manager = self._launch(
            "kube-controller-manager",
            [
                self.binaries.path("kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'kube-controller-manager'}",
                "--leader-elect=false",
                f"--controllers={','.join(CONTROLLERS)}",
                f"--root-ca-file={self.ca_file}",
                "--v=1",
            ],
        )
        self.components.append(manager)
        wait_until(
            lambda: http_ok(f"https://{LOOPBACK}:{port}/healthz", insecure_context()),
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
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                f"--cert-dir={directory / name}",
                "--v=2",
            ],
            log_dir=directory,
        )
        try:
            url = f"https://{LOOPBACK}:{port}/healthz"
            context = insecure_context()

            async def healthy() -> bool:
                return await asyncio.to_thread(http_ok, url, context)

            await eventually(healthy, what=f"{name} {url}", timeout=timeout, components=[scheduler])
        except BaseException:
            scheduler.stop()
            raise
        return scheduler

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
