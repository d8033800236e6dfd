"""The child kube-scheduler of the leader (scheduling.md §14, §15 "Leadership").

`plan_kube_scheduler` checks everything that can be checked at start-up and derives the
configuration (GPU plugins removed, our profile only, our extender stanza); each problem is a
`SchedulerStartError` with one line for the log, and the controller exits non-zero.
`KubeScheduler.run` is leader work: it writes the configuration to a private directory, starts
the stock binary in its own process group (it dies with us), polls its `/healthz`, re-logs its
output as `component=kube-scheduler`, restarts it with backoff, and stops it (SIGTERM, SIGKILL
2 s later) when leadership ends.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from tensorfusion.adapters.http_client import loopback_tls_probe
from tensorfusion.domain.native_resources import DEFAULT_NATIVE_RESOURCES
from tensorfusion.domain.scheduling.kube_scheduler_config import (
    derive_kube_scheduler_config,
)
from tensorfusion.domain.scheduling.scheduler_config import (
    SchedulerConfigError,
)
from tensorfusion.runtime.child_process import ChildProcess, ChildStats

__all__ = [
    "KubeScheduler",
    "KubeSchedulerPlan",
    "SchedulerStartError",
    "check_versions",
    "plan_kube_scheduler",
]

_log = logging.getLogger(__name__)
CHILD_LOGGER: Final = "tensorfusion.kube_scheduler"
"""kube-scheduler's own lines are logged here, with `component=kube-scheduler`."""
UNSCHEDULABLE_RETRY: Final = "30s"
_VERSION: Final = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


class SchedulerStartError(RuntimeError):
    """The child kube-scheduler cannot be run as configured (one line for the log)."""


@dataclass(frozen=True, slots=True)
class KubeSchedulerPlan:
    """How the leader runs kube-scheduler."""

    binary: str
    config: dict[str, Any]
    warnings: tuple[str, ...]
    kubeconfig: str | None
    """Our kubeconfig out of cluster (also for delegated authentication); None in a pod."""


def plan_kube_scheduler(
    scheduler_config: Mapping[str, Any],
    *,
    binary: str,
    extender_address: str,
    kubeconfig: str | None,
    native_resources: Sequence[str] = tuple(DEFAULT_NATIVE_RESOURCES),
) -> KubeSchedulerPlan:
    """The derived configuration and the binary; SchedulerStartError for what cannot run."""
    path = Path(binary)
    if not path.is_file():
        raise SchedulerStartError(
            f"-kube-scheduler-path: {binary}: no such file (the controller image ships "
            "kube-scheduler there; out of a pod, pass the path of a kube-scheduler binary)"
        )
    if not os.access(path, os.X_OK):
        raise SchedulerStartError(f"-kube-scheduler-path: {binary}: not executable")
    try:
        config, warnings = derive_kube_scheduler_config(
            scheduler_config,
            extender_url=f"http://{extender_address}/scheduler",
            managed_resources=native_resources,
            kubeconfig=kubeconfig or "",
        )
    except SchedulerConfigError as error:
        raise SchedulerStartError(f"-scheduler-config: {error}") from None
    return KubeSchedulerPlan(str(path), config, tuple(warnings), kubeconfig)


def _minor(version: str, what: str) -> tuple[int, int]:
    match = _VERSION.search(version)
    if match is None:
        raise SchedulerStartError(f"{what}: cannot read a version from {version!r}")
    return int(match[1]), int(match[2])


async def binary_version(binary: str) -> str:
    """`kube-scheduler --version` (e.g. `Kubernetes v1.37.2`)."""
    process = await asyncio.create_subprocess_exec(
        binary, "--version", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await asyncio.wait_for(process.communicate(), 30)
    if process.returncode != 0:
        raise SchedulerStartError(
            f"-kube-scheduler-path: {binary} --version failed ({process.returncode}): "
            f"{output.decode(errors='replace').strip()[:200]}"
        )
    return output.decode(errors="replace").strip()


def check_versions(scheduler: str, api_server: str) -> str | None:
    """SchedulerStartError when kube-scheduler is a newer minor than the API server; a
    warning when it is more than one minor older (the supported skew is one)."""
    ours, theirs = _minor(scheduler, "kube-scheduler"), _minor(api_server, "API server")
    supported = f"{theirs[0]}.{theirs[1] - 1} to {theirs[0]}.{theirs[1]}"
    if ours > theirs:
        raise SchedulerStartError(
            f"kube-scheduler {scheduler} is newer than the API server {api_server}: "
            f"kube-scheduler must not be newer than the API server (supported: {supported})"
        )
    if ours[0] != theirs[0] or theirs[1] - ours[1] > 1:
        return (
            f"kube-scheduler {scheduler} is more than one minor older than the API server "
            f"{api_server} (supported: {supported})"
        )
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class KubeScheduler:
    """The child kube-scheduler, as leader work (`run` until cancelled)."""

    def __init__(self, plan: KubeSchedulerPlan) -> None:
        self.plan = plan
        self.stats = ChildStats()
        self.child: ChildProcess | None = None

    async def run(self) -> None:
        """Run the child until cancelled; its files are removed afterwards."""
        for warning in self.plan.warnings:
            _log.warning("scheduler configuration: %s", warning)
        directory = Path(tempfile.mkdtemp(prefix="tf-kube-scheduler-"))
        try:
            config_path = directory / "config.yaml"
            config_path.write_text(yaml.safe_dump(self.plan.config, sort_keys=False))
            config_path.chmod(0o600)
            # Without an allow-list, or with an empty one, kube-scheduler logs an error line at
            # every start ("The manifest file is empty"); one entry for a metric it does not
            # have keeps its output free of error lines and restricts nothing.
            labels_path = directory / "metric-labels.yaml"
            labels_path.write_text('"tensor_fusion_unused_metric,label": "none"\n')
            port = _free_port()
            argv = [
                self.plan.binary, f"--config={config_path}", "--bind-address=127.0.0.1",
                f"--secure-port={port}", f"--cert-dir={directory / 'certs'}",
                f"--pod-max-in-unschedulable-pods-duration={UNSCHEDULABLE_RETRY}",
                f"--allow-metric-labels-manifest={labels_path}",
            ]  # fmt: skip
            if self.plan.kubeconfig:
                argv += [f"--authentication-kubeconfig={self.plan.kubeconfig}",
                         f"--authorization-kubeconfig={self.plan.kubeconfig}"]  # fmt: skip
            child = ChildProcess(
                "kube-scheduler", argv, _child_logger(), health=_healthz(port),
                stats=self.stats,
            )  # fmt: skip
            self.child = child
            await child.run()
        finally:
            self.child = None
            shutil.rmtree(directory, ignore_errors=True)


class _ComponentAdapter(logging.LoggerAdapter[logging.Logger]):
    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs.setdefault("extra", {})["component"] = "kube-scheduler"
        return msg, kwargs


def _child_logger() -> logging.LoggerAdapter[logging.Logger]:
    return _ComponentAdapter(logging.getLogger(CHILD_LOGGER), {})


def _healthz(port: int) -> Callable[[], Awaitable[bool]]:
    # kube-scheduler serves /healthz over TLS with a self-signed certificate on loopback.
    return loopback_tls_probe(port, "/healthz")
