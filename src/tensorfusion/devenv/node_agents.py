"""Node agents for the controller's agent pods where there is no kubelet (deployment.md §10).

`AgentRunner` plays the kubelet for the pods labelled `tensor-fusion.ai/component=hypervisor`
in one namespace: for each pod (by UID) it starts `tensor-fusion hypervisor` as a local process
with the pod's env (values and `fieldRef`s resolved; `secretKeyRef`s left out), plus what a
machine without a kubelet needs: `TF_SIMULATED_GPUS` (a simulated provider file per node),
`TF_KUBELET_DEVICE_PLUGIN=false`, `HYPERVISOR_BIND_HOST` (a loopback IP of the node's own,
127.0.1.x), `HYPERVISOR_PORT` (a free port) and the caller's overrides (for example
`TF_METRICS_WRITE_URL` of the controller replica, since the pod's names a Service). It marks the
pod Running, and Ready once the agent's `/readyz` answers 200 (probed every second). A pod
replaced by the controller (new UID) gets a new agent, the old one stopped; a pod being deleted
has its agent stopped and the deletion confirmed (grace period 0), as a kubelet would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType, on_error_retry

from tensorfusion.devenv.control_plane import ControlPlane
from tensorfusion.devenv.processes import Component, free_port
from tensorfusion.devenv.source_tree import EXECUTABLE
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.timestamps import format_rfc3339

__all__ = ["Agent", "AgentRunner"]

_PROBE_PERIOD_S = 1.0
_log = logging.getLogger(__name__)


@dataclass
class Agent:
    """One agent process, started for one pod."""

    node: str
    pod: str
    uid: str
    ip: str
    port: int
    component: Component
    probe: asyncio.Task[None] | None = None


@dataclass
class AgentRunner:
    """Starts, restarts and stops node agents as the controller's agent pods come and go."""

    control_plane: ControlPlane
    kube: AsyncClient
    namespace: str
    logs: Path
    simulation: Callable[[str], Path]
    """The simulated provider file of a node."""
    env: Mapping[str, str] = field(default_factory=dict)
    agents: dict[str, Agent] = field(default_factory=dict)
    """The running agent of each node."""
    started: dict[str, list[str]] = field(default_factory=dict)
    """Per node, the UIDs of the pods an agent was started for, in order."""
    stopped: list[Agent] = field(default_factory=list)
    held: set[str] = field(default_factory=set)
    """Nodes whose new pods get no agent until `release(node)` (a kubelet slow to start it)."""
    ip_prefix: str = "127.0.1."
    """Node addresses: `ip_prefix` + 1, 2, ... in the order nodes get their first agent."""
    pid_dir: Path | None = None
    detached: bool = False
    _waiting: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    _ips: dict[str, str] = field(default_factory=dict)

    def components(self) -> list[Component]:
        """The running agents' processes (for `eventually`: their logs, an early exit)."""
        return [agent.component for agent in self.agents.values()]

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[AgentRunner]:
        """Follow the pods until the block ends; then stop every agent."""
        watch = asyncio.create_task(self._watch(), name="agent-runner")
        try:
            yield self
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            for node in list(self.agents):
                await self._stop(node)

    async def _watch(self) -> None:
        labels: dict[str, Any] = {KEYS.component: "hypervisor"}
        async for op, pod in self.kube.watch(Pod, namespace=self.namespace, labels=labels,
                                             on_error=on_error_retry):  # fmt: skip
            body: dict[str, Any] = pod.to_dict()  # type: ignore[no-untyped-call]
            try:
                await self._on_pod(op, body)
            except Exception:  # one pod's failure must not end the watch: logged, retried
                _log.exception("pod %s: handling %s failed", body["metadata"].get("name"), op)

    async def _on_pod(self, op: str, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        node, uid, name = pod["spec"].get("nodeName", ""), meta["uid"], meta["name"]
        current = self.agents.get(node)
        if op == "DELETED" or meta.get("deletionTimestamp"):
            if current is not None and current.uid == uid:
                await self._stop(node)
            if op != "DELETED" and meta.get("deletionGracePeriodSeconds"):
                # The kubelet's confirmation of a graceful deletion. Only this runner ends a
                # Terminating pod, so the name still means this pod (no newer one can exist).
                with contextlib.suppress(ApiError):
                    await self.kube.delete(Pod, name, namespace=self.namespace, grace_period=0)
            return
        if not node or (current is not None and current.uid == uid):
            return
        if current is not None:
            await self._stop(node)
        if node in self.held:
            self._waiting[node] = pod
            return
        await self._run(node, pod)

    async def release(self, node: str) -> None:
        """Start the agent of a held node's current pod (and no longer hold the node)."""
        self.held.discard(node)
        pod = self._waiting.pop(node, None)
        if pod is not None:
            await self._run(node, pod)

    async def _run(self, node: str, pod: Mapping[str, Any]) -> None:
        self._start(node, pod)
        address = self._ips[node]
        running = {"phase": "Running", "startTime": _now(), "hostIP": address, "podIP": address}
        await self._patch_status(pod["metadata"]["name"], running)

    def node_ip(self, node: str) -> str:
        """The node's loopback address (its agent's and, in the dev environment, its pods')."""
        return self._ips.setdefault(node, f"{self.ip_prefix}{len(self._ips) + 1}")

    def _start(self, node: str, pod: Mapping[str, Any]) -> None:
        ip = self.node_ip(node)
        port = free_port()
        env = {**_pod_env(pod), "TF_SIMULATED_GPUS": str(self.simulation(node)),
               "TF_KUBELET_DEVICE_PLUGIN": "false", "HYPERVISOR_BIND_HOST": ip,
               "HYPERVISOR_PORT": str(port), **self.env}  # fmt: skip
        uids = self.started.setdefault(node, [])
        uids.append(pod["metadata"]["uid"])
        name = f"agent-{node}-{len(uids)}"
        component = Component(
            name,
            [EXECUTABLE, "hypervisor", "--kubeconfig", str(self.control_plane.kubeconfig)],
            self.logs / f"{name}.log",
            env=env,
            pid_file=self.pid_dir / f"{name}.pid" if self.pid_dir else None,
            detached=self.detached,
        )
        component.start()
        agent = Agent(node, pod["metadata"]["name"], pod["metadata"]["uid"], ip, port, component)
        agent.probe = asyncio.create_task(self._probe(agent))
        self.agents[node] = agent

    async def _stop(self, node: str) -> None:
        agent = self.agents.pop(node)
        if agent.probe is not None:
            agent.probe.cancel()
        await asyncio.to_thread(agent.component.stop)
        self.stopped.append(agent)

    async def rediscover(self, node: str) -> None:
        """Have the node's agent re-read its simulated GPU file now (`POST
        /api/v1/devices/discover`); nothing when no agent runs there or it does not answer."""
        agent = self.agents.get(node)
        if agent is None:
            return
        url = f"http://{agent.ip}:{agent.port}/api/v1/devices/discover"
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with (
                aiohttp.ClientSession() as session,
                session.post(url, timeout=aiohttp.ClientTimeout(10)) as reply,
            ):
                await reply.read()

    async def _probe(self, agent: Agent) -> None:
        """The readiness probe: the pod's Ready condition once `/readyz` answers 200."""
        url = f"http://{agent.ip}:{agent.port}/readyz"
        async with aiohttp.ClientSession() as session:
            while True:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(url, timeout=aiohttp.ClientTimeout(2)) as reply:
                        if reply.status == 200:
                            condition = {"type": "Ready", "status": "True",
                                         "lastTransitionTime": _now()}  # fmt: skip
                            await self._patch_status(agent.pod, {"conditions": [condition]})
                            return
                await asyncio.sleep(_PROBE_PERIOD_S)

    async def _patch_status(self, name: str, status: Mapping[str, Any]) -> None:
        with contextlib.suppress(ApiError):  # replaced or deleted meanwhile
            # Strategic: the Ready condition joins the pod's other conditions (merged by type).
            await self.kube.patch(
                Pod.Status, name, {"status": dict(status)},
                namespace=self.namespace, patch_type=PatchType.STRATEGIC,
            )  # fmt: skip


def _pod_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """The first container's env with `fieldRef`s resolved (`secretKeyRef`s left out)."""
    fields = {"metadata.name": pod["metadata"]["name"],
              "metadata.namespace": pod["metadata"]["namespace"],
              "metadata.uid": pod["metadata"]["uid"],
              "spec.nodeName": pod["spec"].get("nodeName", "")}  # fmt: skip
    env: dict[str, str] = {}
    for item in pod["spec"]["containers"][0].get("env") or ():
        source = item.get("valueFrom") or {}
        path = (source.get("fieldRef") or {}).get("fieldPath")
        if "value" in item:
            env[item["name"]] = item["value"]
        elif path in fields:
            env[item["name"]] = fields[path]
    return env


def _now() -> str:
    return format_rfc3339(time.time())
