"""A real Kubernetes control plane on loopback for the cluster tests.

etcd, kube-apiserver and kube-controller-manager run as local processes built by
``testenv/build.sh`` (``make testenv``); kube-scheduler is started per test with the
KubeSchedulerConfiguration the test needs. There is no kubelet: nodes are fake ``Node``
objects (see ``nodes.py``) and pods are bound but never run.

Every process is started in its own session, writes its log to a file, and is stopped by its
own PID (SIGTERM, then SIGKILL after a grace period). Readiness is polled with a deadline.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml

from .pki import CertificateAuthority, ServiceAccountKeys

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO_ROOT / "testenv" / "versions.env"
LOOPBACK = "127.0.0.1"

#: Seconds each component may take to become ready (2 cores, possibly busy).
START_TIMEOUT = float(os.environ.get("TF_TESTENV_START_TIMEOUT", "180"))
#: Seconds a component gets to exit after SIGTERM before it is killed.
STOP_TIMEOUT = 20.0
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

COMPONENT_BINARIES = {
    "kubernetes": ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl"),
    "etcd": ("etcd",),
    "helm": ("helm",),
}

_PROXY_VARIABLES = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}


class ControlPlaneError(RuntimeError):
    """The control plane (or one of its components) could not be started or used."""


class MissingBinariesError(ControlPlaneError):
    """The testenv binaries have not been built (or were built for other versions)."""


# --------------------------------------------------------------------------- binaries


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """The ``KEY=VALUE`` lines of ``testenv/versions.env``."""
    versions: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip()
    return versions


def binary_directory(kubernetes_version: str) -> Path:
    """Where ``testenv/build.sh`` puts the binaries (keep in step with the script)."""
    root = os.environ.get("TF_TESTENV_CACHE")
    if root:
        return Path(root) / kubernetes_version
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "tensor-fusion" / "testenv" / kubernetes_version


@dataclass(frozen=True)
class Binaries:
    """The built binaries of one testenv version."""

    directory: Path
    versions: Mapping[str, str]

    @property
    def kubernetes_version(self) -> str:
        return self.versions["KUBERNETES_VERSION"]

    def path(self, name: str) -> Path:
        return self.directory / name

    @classmethod
    def locate(cls, versions_file: Path = VERSIONS_FILE) -> Binaries:
        """Finds the binaries for the versions in ``versions_file``, or says how to build them."""
        versions = read_versions(versions_file)
        directory = binary_directory(versions["KUBERNETES_VERSION"])
        problems: list[str] = []
        for component, names in COMPONENT_BINARIES.items():
            wanted = versions[f"{component.upper()}_VERSION"]
            stamp = directory / f".built-{component}"
            built = stamp.read_text().strip() if stamp.is_file() else None
            absent = [name for name in names if not os.access(directory / name, os.X_OK)]
            if absent:
                problems.append(f"{', '.join(absent)} missing")
            elif built != wanted:
                problems.append(f"{component} built for {built}, {wanted} wanted")
        if problems:
            raise MissingBinariesError(
                f"the test control plane is not built in {directory} ({'; '.join(problems)}). "
                "Run `make testenv` (bash testenv/build.sh) to build it from Go modules; the "
                "first build takes about half an hour on 2 cores, later runs reuse it. "
                "`make test` and `make test-cluster` do this for you."
            )
        return cls(directory, versions)


@cache
def taint_admission_plugin(apiserver: Path) -> str:
    """Name of the node-taint admission plugin of this kube-apiserver.

    It was renamed (TaintNodesByCondition, TaintNodesAtCreation), and an unknown name in
    ``--disable-admission-plugins`` aborts startup, so ask the binary.
    """
    help_text = subprocess.run(
        [str(apiserver), "--help"], capture_output=True, text=True, check=False, timeout=60
    ).stdout
    match = re.search(r"\bTaintNodes[A-Za-z]+", help_text)
    if match is None:
        raise ControlPlaneError(f"no TaintNodes* admission plugin in `{apiserver} --help`")
    return match.group(0)


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    """A TCP port on loopback that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


# Looked up once here, so that the child does no library loading between fork and exec.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1


def _stop_with_parent() -> None:
    """In the child, before exec: get SIGKILL if the test process dies without cleaning up."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


def component_environment() -> dict[str, str]:
    """The test process's environment without proxy settings: all traffic stays on loopback."""
    return {key: value for key, value in os.environ.items() if key.lower() not in _PROXY_VARIABLES}


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file ('' if it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Component:
    """One control-plane process, its log file, and the means to stop it by its PID."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str | Path],
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = [str(arg) for arg in argv]
        self.log_path = log_path
        self.env = dict(env or {})
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __repr__(self) -> str:
        return f"<Component {self.name} pid={self.pid} log={self.log_path}>"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"# {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self._process = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**component_environment(), **self.env},
            start_new_session=True,
            preexec_fn=_stop_with_parent,  # noqa: PLW1509 (only calls prctl, looked up beforehand)
        )

    @property
    def exit_code(self) -> int | None:
        """The exit code once the process has ended, else None."""
        return self._process.poll() if self._process is not None else None

    def kill(self) -> None:
        """SIGKILL, as `kill -9` would, and wait for the process to end."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def ensure_running(self) -> None:
        """Raises with the end of the log if the process has exited."""
        if self._process is None:
            raise ControlPlaneError(f"{self.name} was never started")
        code = self._process.poll()
        if code is not None:
            raise ControlPlaneError(
                f"{self.name} (pid {self._process.pid}) exited with code {code}; "
                f"last lines of {self.log_path}:\n{tail(self.log_path)}"
            )

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM to this process's own PID, then SIGKILL if it outlives ``timeout``."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None


def _timeout_message(what: str, timeout: float, components: Sequence[Component]) -> str:
    logs = "".join(f"\n--- last lines of {c.log_path} ---\n{tail(c.log_path)}" for c in components)
    return f"timed out after {timeout:.0f}s waiting for {what}{logs}"


def wait_until(
    check: Callable[[], bool],
    *,
    what: str,
    timeout: float = START_TIMEOUT,
    components: Sequence[Component] = (),
    interval: float = 0.2,
) -> None:
    """Polls ``check`` until it is true; fails early if one of ``components`` exits."""
    deadline = time.monotonic() + timeout
    while True:
        for component in components:
            component.ensure_running()
        if check():
            return
        if time.monotonic() >= deadline:
            raise ControlPlaneError(_timeout_message(what, timeout, components))
        time.sleep(interval)


async def eventually(
    check: Callable[[], Awaitable[T | None]],
    *,
    what: str,
    timeout: float = 60.0,
    interval: float = 0.2,
    components: Sequence[Component] = (),
) -> T:
    """Awaits ``check`` until it returns something other than None or False, and returns that.

    The way to wait for cluster state in tests: poll with a deadline, never sleep for a guess.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        for component in components:
            component.ensure_running()
        last = await check()
        if last is not None and last is not False:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(
                _timeout_message(what, timeout, components) + f"\nlast result: {last!r}"
            )
        await asyncio.sleep(interval)


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    """True when GET ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def insecure_context() -> ssl.SSLContext:
    """For /healthz of components that serve a self-signed certificate on loopback."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


# --------------------------------------------------------------------------- scheduler config


def http_extender(
    url_prefix: str,
    *,
    filter_verb: str | None = "filter",
    prioritize_verb: str | None = None,
    bind_verb: str | None = None,
    preempt_verb: str | None = None,
    weight: int = 1,
    node_cache_capable: bool = True,
    managed_resources: Sequence[str] = (),
    ignorable: bool = False,
    http_timeout: str = "5s",
) -> dict[str, Any]:
    """One entry of ``KubeSchedulerConfiguration.extenders`` (kubescheduler.config.k8s.io/v1)."""
    extender: dict[str, Any] = {
        "urlPrefix": url_prefix,
        "weight": weight,
        "enableHTTPS": url_prefix.startswith("https:"),
        "httpTimeout": http_timeout,
        "nodeCacheCapable": node_cache_capable,
        "ignorable": ignorable,
    }
    verbs = {
        "filterVerb": filter_verb,
        "prioritizeVerb": prioritize_verb,
        "bindVerb": bind_verb,
        "preemptVerb": preempt_verb,
    }
    extender.update({key: verb for key, verb in verbs.items() if verb})
    if managed_resources:
        extender["managedResources"] = [
            {"name": name, "ignoredByScheduler": True} for name in managed_resources
        ]
    return extender


def scheduler_configuration(
    kubeconfig: Path,
    *,
    profiles: Sequence[Mapping[str, Any]] | None = None,
    extenders: Sequence[Mapping[str, Any]] | None = None,
    base: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A KubeSchedulerConfiguration for the test cluster.

    ``base`` is any configuration to start from; ``profiles`` and ``extenders`` replace its
    lists when given. The client connection and leader election are filled in when absent.
    """
    configuration: dict[str, Any] = dict(base or {})
    configuration.setdefault("apiVersion", "kubescheduler.config.k8s.io/v1")
    configuration.setdefault("kind", "KubeSchedulerConfiguration")
    client = dict(configuration.get("clientConnection") or {})
    client.setdefault("kubeconfig", str(kubeconfig))
    configuration["clientConnection"] = client
    election = dict(configuration.get("leaderElection") or {})
    election.setdefault("leaderElect", False)
    configuration["leaderElection"] = election
    if profiles is not None:
        configuration["profiles"] = [dict(profile) for profile in profiles]
    configuration.setdefault("profiles", [{"schedulerName": "default-scheduler"}])
    if extenders is not None:
        configuration["extenders"] = [dict(extender) for extender in extenders]
    return configuration


# --------------------------------------------------------------------------- tools


#: The ``start_scheduler`` fixture: ``await start_scheduler(configuration, profiles=, extenders=)``.
StartScheduler = Callable[..., Awaitable["Component"]]


class ToolError(AssertionError):
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

    def __init__(self, binaries: Binaries, workdir: Path) -> None:
        self.binaries = binaries
        self.workdir = workdir
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

    def start(self, timeout: float = START_TIMEOUT) -> None:
        started = time.monotonic()
        try:
            self._write_pki()
            self._start_etcd(timeout)
            self._start_apiserver(timeout)
            self._write_kubeconfig()
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
        component = Component(name, argv, (log_dir or self.log_dir) / f"{name}.log")
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

    def scheduler_configuration(
        self,
        *,
        profiles: Sequence[Mapping[str, Any]] | None = None,
        extenders: Sequence[Mapping[str, Any]] | None = None,
        base: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A KubeSchedulerConfiguration wired to this control plane (see the module function)."""
        return scheduler_configuration(
            self.kubeconfig, profiles=profiles, extenders=extenders, base=base
        )

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
