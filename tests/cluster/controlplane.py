"""The real control plane of the cluster tests (``tensorfusion.devenv``), with the test-only
pieces: KubeSchedulerConfiguration builders and the ``start_scheduler`` fixture's type.

The processes, the control plane and its binaries live in ``tensorfusion.devenv`` so that
``tensor-fusion dev up`` runs the same code; this module re-exports them for the tests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorfusion.devenv import control_plane as _plane
from tensorfusion.devenv.binaries import (
    Binaries,
    MissingBinariesError,
    binary_directory,
    read_versions,
    taint_admission_plugin,
)
from tensorfusion.devenv.control_plane import (
    CONTROLLERS,
    SERVICE_CLUSTER_IP_RANGE,
    ToolError,
    ToolResult,
)
from tensorfusion.devenv.processes import (
    LOOPBACK,
    START_TIMEOUT,
    STOP_TIMEOUT,
    Component,
    ControlPlaneError,
    component_environment,
    eventually,
    free_port,
    http_ok,
    insecure_context,
    tail,
    wait_until,
)
from tensorfusion.devenv.source_tree import SOURCE_DIR, VERSIONS_FILE

__all__ = [
    "CONTROLLERS",
    "LOOPBACK",
    "REPO_ROOT",
    "SERVICE_CLUSTER_IP_RANGE",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "VERSIONS_FILE",
    "Binaries",
    "Component",
    "ControlPlane",
    "ControlPlaneError",
    "MissingBinariesError",
    "StartScheduler",
    "ToolError",
    "ToolResult",
    "binary_directory",
    "component_environment",
    "eventually",
    "free_port",
    "http_extender",
    "http_ok",
    "insecure_context",
    "read_versions",
    "scheduler_configuration",
    "tail",
    "taint_admission_plugin",
    "wait_until",
]

REPO_ROOT = SOURCE_DIR

#: The ``start_scheduler`` fixture: ``await start_scheduler(configuration, profiles=, extenders=)``.
StartScheduler = Callable[..., Awaitable[Component]]


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


class ControlPlane(_plane.ControlPlane):
    """The control plane, with a KubeSchedulerConfiguration builder wired to it."""

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
