"""Node agent benchmark (issue 11): one metrics cycle in-process, and 1,000 agents bringing up
their GPUs against a real control plane.

1. One cycle of the agent's metrics loop on one core (the process pinned to CPU 0): a
   simulated provider with 8 GPUs and 64 worker pods (8 per GPU, with shares and limiter
   counters), `UsageMetrics.cycle` as `usage_metrics()` builds it for the agent (the sample in
   a worker thread, the rows of `tf_gpu_usage` and `tf_worker_usage`, line protocol into the
   writer's buffer, the token file read); no HTTP: the buffer is emptied between cycles, as
   the writer's sender would. p50, p99 and max over `--cycles` cycles after a warm-up.
2. A real control plane (`make testenv`), a GPUPool selecting the fake nodes by a label, one
   controller process (the leader, `-leader-elect -agent-readiness heartbeat`, embedded metrics
   store, its child kube-scheduler), then `--nodes` fake Nodes (8 GPUs each; the controller
   creates the GPUNodes and the agent pods) and, in this process, one `NodeAgent` per node
   (`GPUObjectSync` over one shared lightkube client, a `SimulatedProvider` of 8 GPUs with the
   node's own uuids, heartbeat 30 s, retry 1 s), started as a kubelet would start it: when the
   node's `hypervisor-<node>` pod appears (`--start node`: as soon as the Node exists). At most
   `--concurrency` agents write at once. Measured: the time from the first Node creation to
   every GPU `phase: Running` (read from a watch of the GPUs, confirmed by one list), with the
   CPU of each process and the API server's requests over the bring-up; then, once the
   controller's writes have settled, the controller's CPU over a `--window` while every agent
   beats every 30 s, with the API server's requests and this process's CPU.

Run: `python bench/agent.py` (about 7 minutes on 2 cores; `--profile PATH` adds py-spy stacks
of the controller: PATH for the steady window, PATH with `-bringup` for the bring-up; `--only
cycle` or `--only cluster` runs one part).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod, ServiceAccount

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster.controlplane import Binaries, ControlPlane
from tests.cluster.nodes import create_fake_gpu_node

from benchmark_doc import write_section
from controller import bounded, cpu_seconds, sums_by, until, verdict, writes_by_writer
from tensorfusion import __version__
from tensorfusion.adapters.devices.gpu_catalogue import load_gpu_catalogue
from tensorfusion.adapters.kube.client import make_client, raw_http
from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.adapters.kube.events import EventRecorder
from tensorfusion.adapters.kube.object_client import LightkubeObjects
from tensorfusion.adapters.tsdb.greptime_writer import LineProtocolWriter
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.devices.gpu_objects import gpu_name
from tensorfusion.domain.devices.inventory import DeviceInfo, Inventory
from tensorfusion.domain.devices.simulated_provider import SimulatedProvider
from tensorfusion.domain.devices.simulation import (
    SimulationSpec,
    parse_simulation,
    simulated_uuid,
)
from tensorfusion.domain.devices.tflops import lookup_tflops
from tensorfusion.domain.metrics.recorders import gpu_usage_rows, worker_usage_rows
from tensorfusion.domain.settings.hypervisor_environment import HypervisorEnvironment
from tensorfusion.hypervisor.agent import NodeAgent
from tensorfusion.hypervisor.object_sync import GPUObjectSync, ModelFacts, managed_gpus_of
from tensorfusion.hypervisor.usage_metrics import usage_metrics
from tensorfusion.hypervisor.usage_samples import NodeGPUCapacity, usage_samples, workers_of
from tensorfusion.runtime.informer import Informer, InformerEvent
from tensorfusion.runtime.informer_lightkube import LightkubeSource

ROOT = Path(__file__).resolve().parents[1]
POOL = "bench-agents"
OPERATOR_NAMESPACE = "tensor-fusion-sys"
HYPERVISOR_SA = "tensor-fusion-hypervisor-sa"
WORKERS_NAMESPACE = "bench-workers"
NODE_LABEL = ("tf-bench", "agents")
V1 = "tensor-fusion.ai/v1"
MODEL = "NVIDIA H100 80GB HBM3"
GPUS_PER_NODE = 8
WORKERS_PER_GPU = 8
GPU: Any = resource_of("GPU")
GPU_POOL: Any = resource_of("GPUPool")
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
CYCLE_TARGET_MS = 5.0
BRINGUP_TARGET_S = 60.0
CPU_TARGET = 0.05
HEARTBEAT_S = 30.0
DISCOVERY_S = 3600.0
RETRY_S = 1.0
UNUSED_KUBECONFIG = {
    "clusters": [{"name": "none", "cluster": {"server": "http://127.0.0.1:9"}}],
    "users": [{"name": "none", "user": {}}],
    "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
    "current-context": "none",
}


# =============================================================================== part 1: a cycle


def worker_name(g: int, k: int) -> str:
    return f"worker-{g}-{k}"


def simulation_text(gpus: int = GPUS_PER_NODE, workers: int = WORKERS_PER_GPU) -> str:
    """A simulated GPU file: `gpus` GPUs with usage steps, each shared by `workers` workers."""
    usage = ("{at: 0, compute: 35, memoryUsed: 20Gi, temperature: 48, power: 310, pcieRx: 1200, "
             "pcieTx: 300, nvlinkRx: 5000, nvlinkTx: 5000, graphicsClock: 1755, smClock: 1755, "
             "memoryClock: 2619, videoClock: 1545}")  # fmt: skip
    lines = ["node: {hostRAM: 1Ti, dataDisk: 4Ti}", "gpus:"]
    for g in range(gpus):
        lines += [f"  - model: {MODEL}", "    vram: 80Gi", f"    numaNode: {g * 2 // gpus}",
                  "    usage:", f"      - {usage}", "      - {at: 30s, compute: 80, power: 600}",
                  "      - {at: 1h, compute: 20}"]  # fmt: skip
        if workers:
            lines.append("    workers:")
        for k in range(workers):
            lines += [f"      {worker_name(g, k)}:",
                      "        - {at: 0, compute: 4, memoryUsed: 2Gi}",
                      "        - {at: 60s, computeThrottledPerSecond: 2, "
                      "vramFreezedPerSecond: 0.1, vramResumedPerSecond: 0.1}"]  # fmt: skip
    lines += ["nvlink:", f"  - gpus: [{', '.join(str(g) for g in range(gpus))}]", "    links: 18"]
    return "\n".join(lines) + "\n"


def worker_pod(node: str, g: int, k: int, gpu: str) -> dict[str, Any]:
    """A worker pod bound to `node` holding `gpu`, as the agent's pod cache holds it."""
    name = worker_name(g, k)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": WORKERS_NAMESPACE,
            "uid": f"00000000-0000-0000-{g:04d}-{k:012d}",
            "resourceVersion": str(1000 + 8 * g + k), "creationTimestamp": "2026-12-01T00:00:00Z",
            "labels": {KEYS.component: "worker", KEYS.enabled: "true",
                       KEYS.workload: f"infer-{g}", "app": "bench"},
            "annotations": {KEYS.gpupool: POOL, KEYS.gpu_ids: gpu, KEYS.vram_limit: "8Gi",
                            KEYS.tflops_request: "50", KEYS.vram_request: "8Gi"},
        },
        "spec": {"nodeName": node, "schedulerName": "tensor-fusion-scheduler",
                 "containers": [{"name": "main", "image": "vllm/vllm-openai:latest",
                                 "resources": {"limits": {"tensor-fusion.ai/index_0": "1"}}}]},
        "status": {"phase": "Running", "podIP": f"10.0.{g}.{k + 2}", "qosClass": "BestEffort"},
    }  # fmt: skip


def model_lookup() -> Callable[[DeviceInfo], ModelFacts]:
    """The agent's TFLOPS lookup (no hardware metadata: the packaged catalogue)."""
    catalogue = load_gpu_catalogue()

    def models(device: DeviceInfo) -> ModelFacts:
        found = lookup_tflops(device.model, (), catalogue, vendor=device.vendor)
        return ModelFacts(found.tflops_milli, device.model, None if found.known else found.message)

    return models


def object_sync(
    client: AsyncClient,
    env: HypervisorEnvironment,
    node: str,
    gate: tuple[asyncio.Semaphore, GateStats] | None,
) -> GPUObjectSync:
    """The agent's `GPUObjectSync`, wired as `run_hypervisor` wires it."""
    arguments: dict[str, Any] = {
        "objects": LightkubeObjects(client), "managed_gpus": managed_gpus_of(client),
        "events": EventRecorder(client, "tensor-fusion-hypervisor"), "node": node,
        "pool": env.pool, "isolation_policy": env.isolation_policy.value,
        "isolation_mode": env.isolation_mode.value, "models": model_lookup(),
        "version": __version__, "clock": time.time,
    }  # fmt: skip
    return GPUObjectSync(**arguments) if gate is None else GatedSync(*gate, **arguments)


def drain(writer: LineProtocolWriter) -> int:
    """Empty the writer's buffer (what its sender does every 5 s); returns the bytes."""
    batch = writer.buffer.peek_batch(1 << 30, 1 << 40)
    writer.buffer.acknowledge(batch)
    return sum(len(entry.line) + 1 for entry in batch)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass(frozen=True)
class CycleFigures:
    cycles: int
    rows: int
    line_bytes: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    cpu_p50_ms: float
    cpu_p99_ms: float
    cpu_max_ms: float
    others: float
    """Share of CPU 0 that other processes took while the cycles ran."""
    steps_ms: dict[str, float]


async def time_cycles(cycles: int, warmup: int) -> CycleFigures:
    """The agent's metrics cycle, `cycles` times after `warmup`, on this (pinned) thread."""
    node = "bench-agent-node"
    spec = parse_simulation(simulation_text(), "bench-agent.yaml", node)
    provider = SimulatedProvider(spec, time.time() - 120.0)  # limiter counters counting
    with tempfile.TemporaryDirectory(prefix="tf-bench-agent-") as tmp:
        token = Path(tmp) / "token"
        token.write_text("bench-token\n")
        env = HypervisorEnvironment.from_mapping({
            "GPU_NODE_NAME": node, "TENSOR_FUSION_POOL_NAME": POOL,
            "POD_NAME": f"hypervisor-{node}", "TF_METRICS_WRITE_URL": "http://127.0.0.1:9",
            "TF_METRICS_WRITE_TOKEN_FILE": str(token),
            "TF_KUBELET_DEVICE_PLUGIN": "false",
        })  # fmt: skip
        # A client that is never called: the cycle reads the agent's memory only.
        client = AsyncClient(KubeConfig.from_dict(UNUSED_KUBECONFIG), lazy=True)
        sync = object_sync(client, env, node, None)
        agent = NodeAgent(provider=provider, sync=sync, discovery_interval_s=DISCOVERY_S,
                          heartbeat_interval_s=HEARTBEAT_S, clock=time.time)  # fmt: skip
        inventory = provider.discover()
        # What a written discovery leaves: the inventory and each GPU's TFLOPS.
        agent.inventory = inventory
        models = model_lookup()
        sync.tflops_milli = {gpu_name(d.uuid): models(d).tflops_milli for d in inventory.devices}
        pods = [worker_pod(node, g, k, gpu_name(device.uuid))
                for g, device in enumerate(inventory.devices)
                for k in range(WORKERS_PER_GPU)]  # fmt: skip
        usage = usage_metrics(env, provider=provider, agent=agent, sync=sync, pods=lambda: pods)
        assert usage is not None and usage.log_rows is not None
        root = logging.getLogger()
        root.addHandler(usage.log_rows)  # as UsageMetrics.run does
        durations: list[float] = []
        cpu: list[float] = []
        rows = line_bytes = 0
        try:
            for i in range(warmup + cycles):
                if i == warmup:
                    busy0, own0, wall0 = core_busy(0), time.process_time(), time.monotonic()
                began, began_cpu = time.perf_counter(), time.process_time()
                rows = await usage.cycle(time.time())
                elapsed, used = time.perf_counter() - began, time.process_time() - began_cpu
                line_bytes = drain(usage.writer)
                if i >= warmup:
                    durations.append(elapsed)
                    cpu.append(used)
            others = (core_busy(0) - busy0 - (time.process_time() - own0)) / (
                time.monotonic() - wall0
            )
        finally:
            root.removeHandler(usage.log_rows)
        steps = await time_steps(provider, inventory, sync.tflops_milli, pods, usage.writer, env)
    expected = len(inventory.devices) * (1 + WORKERS_PER_GPU)
    if rows != expected:
        raise RuntimeError(f"a cycle queued {rows} rows, {expected} expected")
    ms = [d * 1000 for d in durations]
    cpu_ms = [c * 1000 for c in cpu]
    return CycleFigures(cycles, rows, line_bytes, percentile(ms, 0.5), percentile(ms, 0.99),
                        max(ms), statistics.fmean(ms), percentile(cpu_ms, 0.5),
                        percentile(cpu_ms, 0.99), max(cpu_ms), max(others, 0.0),
                        steps)  # fmt: skip


def core_busy(cpu: int) -> float:
    """Seconds CPU `cpu` has been busy (not idle, not waiting for I/O) since boot."""
    for line in Path("/proc/stat").read_text().splitlines():
        name, *ticks = line.split()
        if name == f"cpu{cpu}":
            values = [int(t) for t in ticks]
            return (sum(values[:8]) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")
    raise RuntimeError(f"cpu{cpu} not in /proc/stat")


async def time_steps(
    provider: SimulatedProvider,
    inventory: Inventory,
    tflops_milli: Mapping[str, int],
    pods: Sequence[Mapping[str, Any]],
    writer: LineProtocolWriter,
    env: HypervisorEnvironment,
    runs: int = 500,
) -> dict[str, float]:
    """Mean ms of each step of a cycle, calling the functions the cycle calls one at a time."""
    figures = NodeGPUCapacity(env.node, env.pool, dict(tflops_milli),
                          {gpu_name(d.uuid): d.vram_bytes for d in inventory.devices})  # fmt: skip
    now = time.time()
    samples = provider.sample(now)
    gpus, workers = usage_samples(figures, samples, workers_of(pods, env.pool))
    rows = gpu_usage_rows(gpus, int(now * 1000)) + worker_usage_rows(workers, int(now * 1000))

    def noop() -> None:
        return None

    async def hop() -> None:
        await asyncio.to_thread(noop)

    async def write() -> None:
        writer.write(rows)
        drain(writer)

    async def call(function: Callable[[], object]) -> None:
        function()

    steps: dict[str, Callable[[], Any]] = {
        "provider.sample (8 GPUs, 64 workers)": lambda: call(lambda: provider.sample(now)),
        "thread hop (asyncio.to_thread)": hop,
        "workers_of + usage_samples": lambda: call(
            lambda: usage_samples(figures, samples, workers_of(pods, env.pool))),
        "gpu_usage_rows + worker_usage_rows": lambda: call(
            lambda: gpu_usage_rows(gpus, 0) + worker_usage_rows(workers, 0)),
        "writer.write (encode, buffer) of 72 rows": write,
    }  # fmt: skip
    means: dict[str, float] = {}
    for name, step in steps.items():
        for _ in range(50):
            await step()
        began = time.perf_counter()
        for _ in range(runs):
            await step()
        means[name] = (time.perf_counter() - began) / runs * 1000
    return means


def run_cycles(cycles: int, warmup: int) -> CycleFigures:
    """Part 1 on CPU 0, the affinity restored afterwards (the control plane of part 2 would
    inherit it); the event loop and its worker threads end with `asyncio.run`."""
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        return asyncio.run(time_cycles(cycles, warmup))
    finally:
        os.sched_setaffinity(0, previous)


# ============================================================================ part 2: bring-up


@dataclass
class GateStats:
    """How the agents' writes queued for the gate, and how long a discovery's writes took."""

    waiting: int = 0
    most_waiting: int = 0
    syncs: list[float] = field(default_factory=list)
    """Seconds of each discovery written (or failed), the wait for the gate excluded."""


class GatedSync(GPUObjectSync):
    """`GPUObjectSync` whose discoveries and heartbeats wait for a slot of a shared semaphore,
    so that at most that many agents of this process write at once."""

    def __init__(self, gate: asyncio.Semaphore, stats: GateStats, **arguments: Any) -> None:
        super().__init__(**arguments)
        self._gate = gate
        self._stats = stats
        self._holding = False

    async def sync(self, inventory: Inventory, *, state: str) -> None:
        self._stats.waiting += 1
        self._stats.most_waiting = max(self._stats.most_waiting, self._stats.waiting)
        try:
            await self._gate.acquire()
        finally:
            self._stats.waiting -= 1
        began = time.monotonic()
        self._holding = True
        try:
            await super().sync(inventory, state=state)
        finally:
            self._holding = False
            self._gate.release()
            self._stats.syncs.append(time.monotonic() - began)

    async def heartbeat(self, inventory: Inventory, *, state: str) -> None:
        if self._holding:  # the heartbeat that ends a discovery
            await super().heartbeat(inventory, state=state)
            return
        async with self._gate:
            await super().heartbeat(inventory, state=state)


def node_name(i: int) -> str:
    return f"agent-node-{i:04d}"


def spec_of(template: SimulationSpec, node: str) -> SimulationSpec:
    """The template's GPUs with the node's own uuids (`simulated_uuid(node, i)`)."""
    gpus = tuple(replace(gpu, device=replace(gpu.device, uuid=simulated_uuid(node, i)))
                 for i, gpu in enumerate(template.gpus))  # fmt: skip
    return replace(template, source=f"{node}.yaml", gpus=gpus)


@dataclass
class Agents:
    """The node agents of this process, over one shared client."""

    client: AsyncClient
    gate: asyncio.Semaphore
    template: SimulationSpec
    stats: GateStats = field(default_factory=GateStats)
    agents: dict[str, NodeAgent] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    def start(self, node: str) -> None:
        if node in self.tasks:
            return
        env = HypervisorEnvironment.from_mapping({
            "GPU_NODE_NAME": node, "TENSOR_FUSION_POOL_NAME": POOL,
            "POD_NAME": f"hypervisor-{node}", "TF_KUBELET_DEVICE_PLUGIN": "false",
        })  # fmt: skip
        provider = SimulatedProvider(spec_of(self.template, node), time.time())
        sync = object_sync(self.client, env, node, (self.gate, self.stats))
        agent = NodeAgent(provider=provider, sync=sync,
                          discovery_interval_s=DISCOVERY_S, heartbeat_interval_s=HEARTBEAT_S,
                          clock=time.time, retry_s=RETRY_S)  # fmt: skip
        self.agents[node] = agent
        self.tasks[node] = asyncio.create_task(agent.run(), name=f"agent-{node}")

    def on_pod(self, event: InformerEvent) -> None:
        """A kubelet's part: the agent starts when its pod is bound to the node."""
        node = (event.obj.get("spec") or {}).get("nodeName")
        if node and not (event.obj.get("metadata") or {}).get("deletionTimestamp"):
            self.start(str(node))

    def synced(self) -> int:
        return sum(1 for agent in self.agents.values() if agent.synced)

    def problems(self) -> Counter[str]:
        return Counter(p for a in self.agents.values() for p in a.problems() if a.synced)

    async def stop(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


@dataclass
class Sample:
    """CPU seconds of each process and the API server's request counts at one moment."""

    at: float
    cpu: dict[str, float]
    requests: dict[str, float]
    controller_writes: dict[str, float]
    reconciles: dict[str, float]
    first_at: float
    """When the reading began: the CPU of parsing the pages falls before `first_at` of the
    next sample and after `at` of this one, out of the span."""
    first_cpu: dict[str, float]


class Meter:
    """Reads the processes' CPU, the API server's and the controller's counters."""

    def __init__(
        self, kube: AsyncClient, session: aiohttp.ClientSession, pids: dict[str, int], url: str
    ) -> None:
        self.kube = kube
        self.session = session
        self.pids = pids
        self.controller_url = url

    async def api_metrics(self) -> str:
        response = await raw_http(self.kube).get("/metrics")
        response.raise_for_status()
        return response.text

    async def controller_metrics(self) -> str:
        async with self.session.get(self.controller_url) as reply:
            return await reply.text()

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    async def sample(self) -> Sample:
        first_at, first_cpu = time.monotonic(), self.cpu()
        api = sums_by(await self.api_metrics(), "apiserver_request_total",
                      ("verb", "resource", "subresource"))  # fmt: skip
        text = await self.controller_metrics()
        writes = writes_by_writer(text)
        reconciles = sums_by(text, "tf_controller_reconciles_total", ("loop",))
        return Sample(time.monotonic(), self.cpu(), api, writes, reconciles, first_at, first_cpu)


@dataclass(frozen=True)
class Span:
    """What happened between two samples."""

    seconds: float
    cpu_share: dict[str, float]
    requests: dict[str, float]
    """Requests per second by `VERB resource[/subresource]`."""
    controller_writes: dict[str, float]
    """Count by `writer/result`."""
    reconciles: dict[str, float]
    """Count by loop."""

    @classmethod
    def between(cls, before: Sample, after: Sample) -> Span:
        seconds = after.first_at - before.at
        cpu = {k: (after.first_cpu[k] - before.cpu[k]) / seconds for k in after.cpu}
        requests: dict[str, float] = {}
        for key, count in after.requests.items():
            verb, resource, sub = key.split("/", 2)
            label = f"{verb} {resource}{'/' + sub if sub else ''}"
            delta = count - before.requests.get(key, 0.0)
            if delta > 0:
                requests[label] = requests.get(label, 0.0) + delta / seconds
        writes = {k: v - before.controller_writes.get(k, 0.0)
                  for k, v in after.controller_writes.items()}  # fmt: skip
        loops = {k: v - before.reconciles.get(k, 0.0) for k, v in after.reconciles.items()}
        return cls(seconds, cpu, requests, {k: v for k, v in writes.items() if v > 0},
                   {k: v for k, v in loops.items() if v > 0})  # fmt: skip

    def counts(self, attribute: str) -> str:
        found: dict[str, float] = getattr(self, attribute)
        return ", ".join(f"{k} {v:,.0f}" for k, v in sorted(found.items(), key=lambda kv: -kv[1]))

    def writes_per_s(self) -> float:
        return sum(v for k, v in self.requests.items() if k.split(" ")[0] in WRITE_VERBS)

    def listed(self, *, writes_only: bool, limit: int = 10) -> str:
        items = sorted(((k, v) for k, v in self.requests.items()
                        if not writes_only or k.split(" ")[0] in WRITE_VERBS),
                       key=lambda kv: -kv[1])  # fmt: skip
        return ", ".join(f"{k} {v:.1f}" for k, v in items[:limit] if v >= 0.05)


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Milestones:
    nodes_created: float
    agents_started: float
    agents_synced: float
    gpus_created: float
    all_running: float


@dataclass(frozen=True)
class BringUp:
    nodes: int
    gpus: int
    start_mode: str
    concurrency: int
    milestones: Milestones
    bringup: Span
    max_queue: dict[str, float]
    settle_s: float
    steady: Span
    agent_problems: Counter[str]
    gate: GateStats
    profile: list[str]
    bringup_profile: list[str]


def profiler(pid: int, output: Path, seconds: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(Path(sys.executable).with_name("py-spy")), "record", "--format", "raw",
         "--rate", "50", "--nonblocking", "--duration", str(seconds), "--output", str(output),
         "--pid", str(pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


IDLE_FRAMES = (
    "EpollSelector.select (selectors.py)",
    "_worker (concurrent/futures/thread.py)",
    "ThreadedChildWatcher._do_waitpid (asyncio/unix_events.py)",
    "Condition.wait (threading.py)",
)


def profile_summary(raw: Path, limit: int = 12) -> list[str]:
    """Where the busy samples of a py-spy raw file went (idle waits left out): tensorfusion
    functions, inclusive (of a chain of calls where one callee takes nearly all of its caller's
    time, the callee; wrappers around nearly everything left out), and the innermost frame's
    package."""
    if not raw.exists():
        return [f"(no profile written to {raw})"]
    inclusive: Counter[str] = Counter()
    pairs: Counter[tuple[str, str]] = Counter()
    packages: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        frames = [f.rsplit(":", 1)[0] + ")" if ":" in f else f for f in stack.split(";")]
        if frames[-1] in IDLE_FRAMES:
            continue
        count = int(count_text)
        total += count
        ours = [f for f in frames if " (tensorfusion/" in f]
        for frame in set(ours):
            inclusive[frame] += count
        for pair in set(itertools.pairwise(ours)):
            pairs[pair] += count
        where = frames[-1].partition(" (")[2].rstrip(")")
        parts = where.split("/")
        package = "/".join(parts[:2]) if parts[0] == "tensorfusion" else parts[0]
        packages[package.removesuffix(".py")] += count
    if not total:
        return ["(no busy samples)"]
    wrappers = ("Supervisor._supervise (", "_bind.<locals>.run (")
    passed_on = {caller for (caller, callee), n in pairs.items()
                 if caller != callee and n >= 0.9 * inclusive[caller]}  # fmt: skip
    shown = Counter({frame: n for frame, n in inclusive.items()
                     if frame not in passed_on and n < 0.8 * total
                     and not frame.startswith(wrappers)})  # fmt: skip

    def short(frame: str) -> str:
        function, _, where = frame.partition(" (tensorfusion/")
        return f"`{function}` ({where.rstrip(')')})"

    top = ", ".join(f"{short(k)} {n / total:.0%}" for k, n in shown.most_common(limit))
    inner = ", ".join(f"{k} {n / total:.0%}" for k, n in packages.most_common(8))
    return [
        f"{total:,} busy samples at 50 Hz (idle waits left out). Inclusive: {top}.",
        f"Innermost frame by package: {inner}.",
    ]


async def wait_for(
    check: Callable[[], bool], timeout: float, what: str, step: float = 0.1
) -> float:
    """Poll `check` until true (deadline `timeout`); returns the monotonic time it became so."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(step)
    return time.monotonic()


async def bring_up(
    nodes: int,
    start_mode: str,
    concurrency: int,
    window_s: float,
    settle_max_s: float,
    profile: Path | None,
) -> BringUp:
    workdir = Path(tempfile.mkdtemp(prefix="tf-bench-agent-"))
    plane = ControlPlane(Binaries.locate(), workdir / "plane")
    plane.start()
    controller: subprocess.Popen[bytes] | None = None
    gpus_total = nodes * GPUS_PER_NODE
    try:
        await plane.kubectl("apply", "--server-side", "-f", str(ROOT / "charts/tensor-fusion/crds"))
        await plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        kube = make_client(str(plane.kubeconfig))
        await kube.create(Namespace(metadata=ObjectMeta(name=OPERATOR_NAMESPACE)))
        account = ObjectMeta(name=HYPERVISOR_SA, namespace=OPERATOR_NAMESPACE)
        await kube.create(ServiceAccount(metadata=account))
        selector = {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": NODE_LABEL[0], "operator": "In", "values": [NODE_LABEL[1]]}]}]}  # fmt: skip
        spec = {"nodeManagerConfig": {"nodeSelector": selector}}
        await kube.create(GPU_POOL({"apiVersion": V1, "kind": "GPUPool",
                                    "metadata": {"name": POOL}, "spec": spec}))  # fmt: skip
        api_port, health_port, metrics_port = 18180, 18181, 18182
        log = workdir / "controller.log"
        env = {**os.environ, "POD_NAME": "bench-leader", "POD_IP": "127.0.0.1",
               "OPERATOR_NAMESPACE": OPERATOR_NAMESPACE, "PORT": str(api_port),
               "API_BIND_HOST": "127.0.0.1", "PEER_BIND_HOST": "127.0.0.1",
               "TSDB_EMBEDDED_DIR": str(workdir / "tsdb")}  # fmt: skip
        argv = [str(Path(sys.executable).with_name("tensor-fusion")), "controller",
                "--kubeconfig", str(plane.kubeconfig), "-leader-elect",
                "-agent-readiness", "heartbeat",
                "-health-probe-bind-address", f"127.0.0.1:{health_port}",
                "-metrics-bind-address", f"127.0.0.1:{metrics_port}",
                "-dynamic-config", str(workdir / "absent.yaml"),
                "-kube-scheduler-path", str(plane.binaries.path("kube-scheduler"))]  # fmt: skip
        with log.open("wb") as output:
            controller = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=env)
        async with aiohttp.ClientSession() as session:

            async def ready() -> bool:
                assert controller is not None
                if controller.poll() is not None:
                    raise RuntimeError(f"the controller exited: {log.read_text()[-3000:]}")
                try:
                    async with session.get(f"http://127.0.0.1:{api_port}/api/allocation") as reply:
                        return reply.status == 200 and (await reply.json())["ready"] is True
                except aiohttp.ClientError:
                    return False

            await until(ready, 120, "the controller ready")
            pids = {
                "controller": controller.pid,
                **{c.name: c.pid for c in plane.components if c.pid is not None},
                "bench": os.getpid(),
            }

            def scheduler() -> bool:  # the leader's child, started around its readiness
                assert controller is not None
                found = [p for p in children(controller.pid)
                         if command_name(p).startswith("kube-sched")]  # fmt: skip
                if found:
                    pids["kube-scheduler"] = found[0]
                return bool(found)

            with contextlib.suppress(RuntimeError):  # measured without it, should it not come
                await wait_for(scheduler, 20, "the controller's kube-scheduler", 0.5)
            meter = Meter(kube, session, pids, f"http://127.0.0.1:{metrics_port}/metrics")

            template = parse_simulation(simulation_text(workers=0), "template.yaml", "template")
            agents = Agents(make_client(str(plane.kubeconfig)), asyncio.Semaphore(concurrency),
                            template)  # fmt: skip
            pods = Informer(LightkubeSource(kube, Pod, namespace=OPERATOR_NAMESPACE,
                                            labels={KEYS.component: "hypervisor"}),
                            name="hypervisor-pods")  # fmt: skip
            gpus = Informer(LightkubeSource(kube, GPU), name="gpus")
            if start_mode == "pod":
                pods.add_handler(agents.on_pod)
            watchers = [asyncio.create_task(pods.run()), asyncio.create_task(gpus.run())]
            await asyncio.wait_for(asyncio.gather(pods.wait_synced(), gpus.wait_synced()), 60)

            def running() -> int:
                return sum(1 for g in gpus.list()
                           if (g.get("status") or {}).get("phase") == "Running")  # fmt: skip

            max_queue: dict[str, float] = {}
            stop_sampling = asyncio.Event()

            async def queues() -> None:
                while not stop_sampling.is_set():
                    text = await meter.controller_metrics()
                    for loop, depth in sums_by(
                        text, "tf_controller_queue_depth", ("loop",)
                    ).items():
                        max_queue[loop] = max(max_queue.get(loop, 0.0), depth)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop_sampling.wait(), 2.0)

            spy = None
            bringup_raw = None
            if profile is not None:
                bringup_raw = profile.with_name(f"{profile.stem}-bringup{profile.suffix}")
                spy = profiler(controller.pid, bringup_raw, 900)
            before = await meter.sample()
            sampler = asyncio.create_task(queues())
            began = time.monotonic()

            async def node(i: int) -> None:
                name = node_name(i)
                await create_fake_gpu_node(kube, name, gpus=GPUS_PER_NODE,
                                           labels={NODE_LABEL[0]: NODE_LABEL[1]})  # fmt: skip
                if start_mode == "node":
                    agents.start(name)

            await bounded((node(i) for i in range(nodes)), concurrency)
            nodes_created = time.monotonic()
            print(f"{nodes} Nodes created in {nodes_created - began:.1f} s", flush=True)
            agents_started = await wait_for(lambda: len(agents.tasks) >= nodes, 600,
                                            "every agent started")  # fmt: skip
            print(f"agents started at {agents_started - began:.1f} s", flush=True)
            gpus_created = agents_synced = 0.0

            def progress() -> bool:
                nonlocal gpus_created, agents_synced
                now = time.monotonic()
                if not agents_synced and agents.synced() >= nodes:
                    agents_synced = now
                if not gpus_created and len(gpus) >= gpus_total:
                    gpus_created = now
                return bool(agents_synced and gpus_created) and running() >= gpus_total

            all_running = await wait_for(progress, 900, f"all {gpus_total} GPUs Running", 0.2)
            after = await meter.sample()
            stop_sampling.set()
            await sampler
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                await asyncio.to_thread(spy.wait, 60)
            listed = orjson_items(await raw_http(kube).get("/apis/tensor-fusion.ai/v1/gpus"))
            phases = Counter(str((g.get("status") or {}).get("phase")) for g in listed)
            if phases.get("Running", 0) != gpus_total:
                raise RuntimeError(f"the list of GPUs disagrees with the watch: {dict(phases)}")
            print(f"all {gpus_total} GPUs Running after {all_running - began:.1f} s", flush=True)
            milestones = Milestones(*(t - began for t in (nodes_created, agents_started,
                                                          agents_synced, gpus_created,
                                                          all_running)))  # fmt: skip
            bringup = Span.between(before, after)

            # -- steady state ---------------------------------------------------------------
            settle_began = time.monotonic()
            previous = await meter.sample()
            while time.monotonic() - settle_began < settle_max_s:
                await asyncio.sleep(5)
                now = await meter.sample()
                written = sum(now.controller_writes.values()) - sum(
                    previous.controller_writes.values())  # fmt: skip
                previous = now
                if written <= 2 and time.monotonic() - settle_began >= 20:
                    break
            settle_s = time.monotonic() - settle_began
            print(f"settled after {settle_s:.0f} s; measuring {window_s:.0f} s", flush=True)
            spy = profiler(controller.pid, profile, int(window_s)) if profile else None
            start = await meter.sample()
            await asyncio.sleep(window_s)
            end = await meter.sample()
            if spy is not None:
                await asyncio.to_thread(spy.wait, 60)
            steady = Span.between(start, end)
            problems = agents.problems()
            await agents.stop()
            for task in watchers:
                task.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
            await agents.client.close()
        await kube.close()
        return BringUp(
            nodes, gpus_total, start_mode, concurrency, milestones, bringup, max_queue, settle_s,
            steady, problems, agents.stats, profile_summary(profile) if profile else [],
            profile_summary(bringup_raw) if bringup_raw else [],
        )  # fmt: skip
    finally:
        if controller is not None and controller.poll() is None:
            controller.terminate()
            try:
                controller.wait(10)
            except subprocess.TimeoutExpired:
                controller.kill()
        plane.stop()


def orjson_items(response: Any) -> list[dict[str, Any]]:
    response.raise_for_status()
    items: list[dict[str, Any]] = orjson.loads(response.content).get("items") or []
    return items


# ===================================================================================== report


def shares(cpu: Mapping[str, float]) -> str:
    order = ("controller", "kube-scheduler", "kube-apiserver", "etcd", "kube-controller-manager",
             "bench")  # fmt: skip
    return ", ".join(f"{name} {cpu[name] * 100:.0f}%" for name in order if name in cpu)


def report(cycle: CycleFigures | None, run: BringUp | None) -> str:
    lines = ["## Node agent (`bench/agent.py`)", ""]
    if cycle is not None:
        steps = ", ".join(f"{name} {ms:.3f} ms" for name, ms in cycle.steps_ms.items())
        lines += [
            f"**One metrics cycle**, in-process on one core (pinned to CPU 0): a simulated "
            f"provider with {GPUS_PER_NODE} GPUs and {GPUS_PER_NODE * WORKERS_PER_GPU} worker pods "
            f"({WORKERS_PER_GPU} per GPU, with shares and limiter counters), `UsageMetrics.cycle` "
            "as `usage_metrics()` builds it for the agent: the sample in a worker thread, the "
            "`tf_gpu_usage` and `tf_worker_usage` rows, line protocol into the writer's buffer, "
            "the token file read; no HTTP (the buffer is emptied between cycles, as the sender "
            f"does). {cycle.cycles:,} cycles after a warm-up.",
            "",
            "| figure | value | target |",
            "|---|---|---|",
            f"| cycle p50 / p99 / max | {cycle.p50_ms:.2f} / {cycle.p99_ms:.2f} / "
            f"{cycle.max_ms:.2f} ms (mean {cycle.mean_ms:.2f}) | p99 < {CYCLE_TARGET_MS:.0f} ms: "
            f"{verdict(cycle.p99_ms < CYCLE_TARGET_MS)} |",
            f"| CPU time of a cycle (the process, both threads) p50 / p99 / max | "
            f"{cycle.cpu_p50_ms:.2f} / {cycle.cpu_p99_ms:.2f} / {cycle.cpu_max_ms:.2f} ms | |",
            "",
            f"Other processes took {cycle.others:.0%} of CPU 0 while the cycles ran.",
            "",
            f"A cycle queues {cycle.rows} rows ({cycle.line_bytes:,} bytes of line protocol). "
            f"Its steps, each timed alone (mean): {steps}.",
            "",
        ]
    if run is not None:
        m, up, steady = run.milestones, run.bringup, run.steady
        start = ("when its `hypervisor-<node>` pod appears (as a kubelet would start it)"
                 if run.start_mode == "pod" else "as soon as its Node exists")  # fmt: skip
        queue = ", ".join(f"{k} {v:.0f}" for k, v in sorted(run.max_queue.items()) if v)
        writes = ", ".join(f"{k} {v:.0f}" for k, v in sorted(steady.controller_writes.items()))
        heartbeats = steady.requests.get("PATCH gpunodes/status", 0.0)
        problems = "; ".join(f"{k} ({n})" for k, n in run.agent_problems.most_common(3))
        syncs = run.gate.syncs or [0.0]
        sync_p50, sync_p99 = percentile(syncs, 0.5), percentile(syncs, 0.99)
        lines += [
            f"**{run.nodes:,} agents in heartbeat mode** on a real control plane: one controller "
            "process (the leader, `-leader-elect -agent-readiness heartbeat`, embedded metrics "
            f"store, its kube-scheduler), a GPUPool selecting the fake Nodes by a label, then "
            f"{run.nodes:,} Nodes created ({run.concurrency} at a time) and, in the bench "
            f"process, one `NodeAgent` per node ({GPUS_PER_NODE} simulated GPUs, heartbeat every "
            f"{HEARTBEAT_S:.0f} s, retry {RETRY_S:.0f} s) over one shared lightkube client, "
            f"started {start}; at most {run.concurrency} agents write at once. The controller "
            "creates the GPUNodes and the agent pods, the agents the GPUs, the controller makes "
            "them Running on a heartbeat newer than the pod.",
            "",
            "| figure | value | target |",
            "|---|---|---|",
            f"| first Node created → all {run.gpus:,} GPUs `Running` | {m.all_running:.1f} s | "
            f"< {BRINGUP_TARGET_S:.0f} s: {verdict(m.all_running < BRINGUP_TARGET_S)} |",
            f"| kube-apiserver writes during the bring-up | {up.writes_per_s():.0f}/s | |",
            f"| controller CPU, steady state ({run.nodes / HEARTBEAT_S:.0f} heartbeats/s), "
            f"{steady.seconds:.0f} s window | {steady.cpu_share['controller'] * 100:.1f}% of one "
            f"core | < {CPU_TARGET * 100:.0f}%: "
            f"{verdict(steady.cpu_share['controller'] < CPU_TARGET)} |",
            f"| bench process (the {run.nodes:,} agents, its GPU and pod watches), same window | "
            f"{steady.cpu_share['bench'] * 100:.1f}% of one core | |",
            "",
            f"Bring-up milestones (s after the first Node creation): Nodes created "
            f"{m.nodes_created:.1f}, every agent started {m.agents_started:.1f}, every discovery "
            f"written {m.agents_synced:.1f}, all {run.gpus:,} GPUs created {m.gpus_created:.1f}, "
            f"all Running {m.all_running:.1f}.",
            f"CPU during the bring-up (share of one core, 2 cores in all): {shares(up.cpu_share)}. "
            f"Deepest controller queues (sampled every 2 s): {queue or 'none'}.",
            f"API server writes per second during the bring-up: {up.listed(writes_only=True)}. "
            f"The controller's writes (by writer/result): {up.counts('controller_writes')}; its "
            f"reconciles by loop: {up.counts('reconciles')}.",
            f"The agents' discoveries ({len(run.gate.syncs):,}, GPU list, 8 creates and 8 "
            f"status patches, the GPUNode read and heartbeat each) took {sync_p50:.2f} s at the "
            f"median and {sync_p99:.2f} s at p99 once they had a write slot; at most "
            f"{run.gate.most_waiting} agents waited for one.",
            f"Steady window, after {run.settle_s:.0f} s for the controller's writes to settle: "
            f"CPU {shares(steady.cpu_share)}; API server requests per second "
            f"{steady.listed(writes_only=False)} ({heartbeats:.1f} heartbeat patches/s); the "
            f"controller's writes: {writes or 'none'}; its reconciles: "
            f"{steady.counts('reconciles') or 'none'}.",
        ]
        if problems:
            lines.append(f"Agents reporting problems at the end: {problems}.")
        if run.profile:
            lines += ["", "Controller, steady window (py-spy): " + " ".join(run.profile)]
        if run.bringup_profile:
            lines += ["", "Controller, bring-up (py-spy): " + " ".join(run.bringup_profile)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16,
                        help="agents writing at once (and Nodes created at once)")  # fmt: skip
    parser.add_argument("--start", choices=("pod", "node"), default="pod",
                        help="start each agent when its pod appears, or with its Node")  # fmt: skip
    parser.add_argument("--window", type=float, default=60.0, help="steady CPU window, seconds")
    parser.add_argument("--settle-max", type=float, default=150.0)
    parser.add_argument("--only", choices=("cycle", "cluster"), help="run one part only")
    parser.add_argument("--no-write", action="store_true", help="do not update docs")
    parser.add_argument("--profile", type=Path, help="py-spy raw stacks of the controller here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    cycle = run_cycles(args.cycles, args.warmup) if args.only != "cluster" else None
    if cycle is not None:
        print(
            f"cycle p50 {cycle.p50_ms:.2f} ms, p99 {cycle.p99_ms:.2f} ms, CPU p99 "
            f"{cycle.cpu_p99_ms:.2f} ms, others on CPU 0 {cycle.others:.0%}",
            flush=True,
        )
    run = None
    if args.only != "cycle":
        run = asyncio.run(bring_up(args.nodes, args.start, args.concurrency, args.window,
                                   args.settle_max, args.profile))  # fmt: skip
    section = report(cycle, run)
    print(section)
    if not args.no_write:
        write_section("agent", section)


if __name__ == "__main__":
    main()
