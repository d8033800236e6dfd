"""The hostile load of issue 22 finding 4 against a controller's API, and a watch of its Lease.

`leader_with_gpus` starts a real controller replica leading against a real control plane, with
fake GPU nodes whose agents registered their GPUs and beat. One `hostile_round` sends at once:
deeply nested bodies (10 KB each) and max-size simulations (a Pod just under the 1 MiB body
limit, as YAML) to `POST /api/simulate-schedule`, with valid requests (the guide's pod,
`GET /api/allocation`) among them. Shared by tests/security/test_eventloop_lease.py and
bench/hostile_load.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace

from tensorfusion.api_server.pod_body import MAX_POD_BODY
from tensorfusion.domain.annotations import KEYS
from tensorfusion.runtime.leader_election import LEASE_NAME

from ..cluster.controller_replicas import Replica, install_crds, started_replicas
from ..cluster.controlplane import ControlPlane, eventually
from ..cluster.nodes import create_fake_gpu_node
from ..cluster.test_controller_reconcilers import GPU_NODE, POOL, V1, heartbeat, play_node_agent

__all__ = [
    "DEEP_BODY",
    "GUIDE_POD",
    "LeaseWatch",
    "hostile_round",
    "leader_with_gpus",
    "max_size_pod",
]

GUIDE_POD = (
    Path(__file__).resolve().parents[1] / "unit" / "scheduling" / "data" / "guide_test_pod.yaml"
).read_bytes()
DEEP_BODY = ("a: " + "[" * 5000 + "]" * 5000).encode()
"""The finding's 10 KB body: 5,000 nested flow sequences."""
YAML = {"Content-Type": "application/yaml"}


def max_size_pod() -> bytes:
    """The guide's pod padded with environment variables to just under the body limit."""
    pod = yaml.safe_load(GUIDE_POD)
    container = pod["spec"]["containers"][0]
    value = "x" * 1000
    count = (MAX_POD_BODY - len(GUIDE_POD) - 4096) // (len(value) + 40)
    container["env"] = [{"name": f"PAD_{i:05d}", "value": value} for i in range(count)]
    body = yaml.safe_dump(pod).encode()
    assert len(body) < MAX_POD_BODY, len(body)
    return body


async def _status(session: aiohttp.ClientSession, method: str, url: str, body: bytes) -> str:
    try:
        async with session.request(method, url, data=body or None, headers=YAML) as reply:
            await reply.read()
            return str(reply.status)
    except (aiohttp.ClientError, TimeoutError) as error:
        return type(error).__name__


async def hostile_round(
    session: aiohttp.ClientSession, base_url: str, *, hostile: int = 12, valid: int = 4
) -> dict[str, Counter[str]]:
    """`hostile` deep bodies and `hostile` max-size simulations with `valid` guide-pod
    simulations and `valid` allocation reads, all at once: status counts by kind."""
    simulate, allocation = f"{base_url}/api/simulate-schedule", f"{base_url}/api/allocation"
    big = max_size_pod()
    kinds = (
        [("deep", "POST", simulate, DEEP_BODY)] * hostile
        + [("max-size", "POST", simulate, big)] * hostile
        + [("valid-simulation", "POST", simulate, GUIDE_POD)] * valid
        + [("valid-allocation", "GET", allocation, b"")] * valid
    )
    statuses = await asyncio.gather(*(_status(session, m, u, b) for _, m, u, b in kinds))
    counts: dict[str, Counter[str]] = {}
    for (kind, *_), status in zip(kinds, statuses, strict=True):
        counts.setdefault(kind, Counter())[status] += 1
    return counts


@dataclass
class LeaseWatch:
    """Polls the Lease every `period` seconds: its holders and the renew times seen."""

    kube: AsyncClient
    namespace: str
    period: float = 0.5
    holders: list[str | None] = field(default_factory=list)
    renewals: set[str] = field(default_factory=set)
    errors: int = 0

    async def run(self, until: float) -> None:
        """Poll until `time.monotonic()` passes `until`."""
        while time.monotonic() < until:
            try:
                lease = await self.kube.get(Lease, LEASE_NAME, namespace=self.namespace)
            except Exception:
                self.errors += 1
            else:
                spec = lease.spec
                self.holders.append(spec.holderIdentity if spec else None)
                if spec is not None and spec.renewTime is not None:
                    self.renewals.add(str(spec.renewTime))
            await asyncio.sleep(self.period)


async def _bounded(jobs: list[Callable[[], Awaitable[Any]]], limit: int = 32) -> None:
    """Run the jobs, at most `limit` at once (each coroutine made when its turn comes)."""
    semaphore = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[Any]]) -> None:
        async with semaphore:
            await job()

    await asyncio.gather(*(one(job) for job in jobs))


async def _simulates(replica: Replica) -> bool:
    """Whether the guide's pod is placed through the replica's API."""
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(replica.url("/api/simulate-schedule"), data=GUIDE_POD,
                         headers=YAML) as reply,
        ):  # fmt: skip
            if reply.status != 200:
                return False
            answer = await reply.json()
    except aiohttp.ClientError:
        return False
    return bool(answer["result"]["schedulable"])


@contextlib.asynccontextmanager
async def leader_with_gpus(
    plane: ControlPlane,
    kube: AsyncClient,
    workdir: Path,
    *,
    nodes: int,
    gpus_per_node: int,
    beat_every: float = 30.0,
) -> AsyncIterator[tuple[Replica, str]]:
    """A controller replica that leads (and its namespace), with `nodes` fake GPU nodes in a
    default pool whose agents registered `gpus_per_node` GPUs each and beat every `beat_every`
    seconds (as agents do; the controller's limit is 90 s); ready once the guide's pod is
    placed through its API."""
    await install_crds(plane)
    run = secrets.token_hex(3)
    namespace = f"eventloop-{run}"
    await kube.create(Namespace(metadata=ObjectMeta(name=namespace)))
    pool = f"tf-{run}-default"
    names = [f"eventloop-{run}-{i:04d}" for i in range(nodes)]
    await _bounded([partial(create_fake_gpu_node, kube, name, gpus=gpus_per_node,
                            labels={"tf-run": run}) for name in names])  # fmt: skip
    selector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "tf-run", "operator": "In", "values": [run]}]}]}  # fmt: skip
    await kube.create(POOL({
        "apiVersion": V1, "kind": "GPUPool",
        "metadata": {"name": pool, "annotations": {KEYS.is_default_pool: "true"}},
        "spec": {"nodeManagerConfig": {"nodeSelector": selector}},
    }))  # fmt: skip
    async with started_replicas(plane, kube, namespace, workdir) as start:
        leader = start("eventloop-leader", "-leader-elect", "-agent-readiness", "heartbeat")

        async def gpu_nodes() -> bool:
            try:
                listed = [g async for g in kube.list(GPU_NODE)]
            except ApiError:  # "storage is (re)initializing" just after the CRDs
                return False
            have = {g["metadata"]["name"] for g in listed}
            return have >= set(names)

        await eventually(gpu_nodes, what="a GPUNode per node", timeout=120,
                         components=[leader.component])  # fmt: skip
        gpus = {name: [f"gpu-{run}-{i:04d}-{g}" for g in range(gpus_per_node)]
                for i, name in enumerate(names)}  # fmt: skip
        await _bounded([partial(play_node_agent, kube, name, pool, gpus[name]) for name in names])

        async def beat() -> None:
            while True:
                await _bounded([partial(heartbeat, kube, name, gpus_per_node) for name in names])
                await asyncio.sleep(beat_every)

        beats = asyncio.create_task(beat())
        try:
            await eventually(lambda: _simulates(leader), what="the guide's pod placed",
                             timeout=120, components=[leader.component])  # fmt: skip
            yield leader, namespace
        finally:
            beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beats
