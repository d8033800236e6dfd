"""Controller benchmark: start-up against a large cluster, and the leader's steady-state CPU.

A real control plane (etcd, kube-apiserver, kube-controller-manager of `make testenv`) holds
1,000 fake GPU nodes with 8 GPUs each (Node, GPUNode and GPU objects as node agents leave them)
and 5,000 worker pods carrying `tensor-fusion.ai/gpu-ids`, as a restarted controller finds a
busy cluster. Measured:

- start-up: from the process start to `ready: true` of `/api/allocation` (the allocator rebuilt
  from every worker pod), with where the time goes (interpreter and imports, informer lists,
  the Lease, the rebuild), from the controller's log;
- steady state: the leader's CPU (share of one core) over a window while every node's agent
  beats every 30 s (GPUNode `lastHeartbeatTime`), after the start-up writes have settled; with
  the API server's CPU and requests over the same window.

Run: `python bench/controller.py` (about 3 minutes; needs `make testenv`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod, ServiceAccount
from lightkube.types import PatchType
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster.controlplane import Binaries, ControlPlane
from tests.cluster.nodes import create_fake_gpu_node

from benchmark_doc import write_section
from tensorfusion.adapters.kube.client import make_client, raw_http
from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.domain.annotations import KEYS, encode_index
from tensorfusion.domain.timestamps import format_rfc3339

ROOT = Path(__file__).resolve().parents[1]
POOL = "bench-pool"
OPERATOR_NAMESPACE = "tensor-fusion-sys"
WORKERS = "bench-workers"
V1 = "tensor-fusion.ai/v1"
GPU: Any = resource_of("GPU")
GPU_NODE: Any = resource_of("GPUNode")
GPU_POOL: Any = resource_of("GPUPool")
POD: Any = Pod
TICKS = os.sysconf("SC_CLK_TCK")
STARTUP_TARGET_S = 10.0
CPU_TARGET = 0.05


@dataclass(frozen=True)
class Sizes:
    nodes: int
    gpus_per_node: int
    pods: int


def node_name(i: int) -> str:
    return f"bench-node-{i:04d}"


def gpu_name(i: int, g: int) -> str:
    return f"bench-gpu-{i:04d}-{g}"


async def bounded(jobs: Iterable[Awaitable[Any]], limit: int = 128) -> None:
    """Await the jobs (coroutines not started yet) with at most `limit` in flight."""
    semaphore = asyncio.Semaphore(limit)

    async def one(job: Awaitable[Any]) -> None:
        async with semaphore:
            await job

    await asyncio.gather(*(one(job) for job in jobs))


async def populate(kube: AsyncClient, sizes: Sizes) -> None:
    """Nodes, GPUNodes with a heartbeat, GPUs, and worker pods bound with their GPU ids."""
    await kube.create(GPU_POOL({"apiVersion": V1, "kind": "GPUPool", "metadata": {
        "name": POOL, "annotations": {KEYS.is_default_pool: "true"}}}))  # fmt: skip
    await bounded([
        create_fake_gpu_node(kube, node_name(i), gpus=sizes.gpus_per_node)
        for i in range(sizes.nodes)
    ])  # fmt: skip

    async def gpu_node(i: int) -> None:
        name = node_name(i)
        await kube.create(GPU_NODE({"apiVersion": V1, "kind": "GPUNode", "metadata": {
            "name": name, "labels": {KEYS.managed_by: POOL}}}))  # fmt: skip
        await heartbeat(kube, name, sizes.gpus_per_node)

    await bounded(gpu_node(i) for i in range(sizes.nodes))

    async def gpu(i: int, g: int) -> None:
        name = gpu_name(i, g)
        await kube.create(
            GPU(
                {
                    "apiVersion": V1,
                    "kind": "GPU",
                    "metadata": {
                        "name": name,
                        "labels": {KEYS.managed_by: node_name(i), KEYS.gpupool: POOL},
                    },
                }
            )
        )
        await kube.patch(GPU.Status, name, {"status": {
            "phase": "Running", "capacity": {"tflops": "312", "vram": "80Gi"},
            "available": {"tflops": "312", "vram": "80Gi"}, "uuid": name, "index": g,
            "gpuModel": "A100", "nodeSelector": {"kubernetes.io/hostname": node_name(i)},
            "usedBy": "tensor-fusion", "isolationMode": "soft",
        }}, patch_type=PatchType.MERGE)  # fmt: skip

    await bounded(gpu(i, g) for i in range(sizes.nodes) for g in range(sizes.gpus_per_node))
    await kube.create(Namespace(metadata=ObjectMeta(name=WORKERS)))
    await until(lambda: exists(kube, ServiceAccount, "default", WORKERS), 60, "default SA")

    async def worker(p: int) -> None:
        i, slot = p % sizes.nodes, p // sizes.nodes
        index, value = encode_index(slot + 1)
        await kube.create(POD.from_dict({
            "metadata": {
                "name": f"worker-{p:05d}", "namespace": WORKERS,
                "labels": {KEYS.component: "worker", KEYS.enabled: "true"},
                "annotations": {KEYS.gpupool: POOL,
                                KEYS.gpu_ids: gpu_name(i, slot % sizes.gpus_per_node),
                                KEYS.tflops_request: "50", KEYS.vram_request: "8Gi"},
            },
            "spec": {"nodeName": node_name(i), "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"limits": {index: str(value)}}}]},
        }))  # fmt: skip

    await bounded(worker(p) for p in range(sizes.pods))


async def heartbeat(kube: AsyncClient, name: str, gpus: int) -> None:
    """A node agent's heartbeat; plain HTTP, so that 33 a second cost this process little."""
    body = {"status": {
        "totalGPUs": gpus, "managedGPUs": gpus,
        "hypervisorStatus": {"hypervisorState": "Running", "hypervisorVersion": "bench",
                             "lastHeartbeatTime": format_rfc3339(time.time())},
    }}  # fmt: skip
    response = await raw_http(kube).patch(
        f"/apis/tensor-fusion.ai/v1/gpunodes/{name}/status", content=orjson.dumps(body),
        headers={"Content-Type": "application/merge-patch+json"},
    )  # fmt: skip
    response.raise_for_status()


async def exists(kube: AsyncClient, resource: Any, name: str, namespace: str) -> bool:
    try:
        await kube.get(resource, name, namespace=namespace)
    except Exception:
        return False
    return True


async def until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """Sum of each sample name (labels folded) of a Prometheus text page."""
    async with session.get(url) as reply:
        text = await reply.text()
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


def sums_by(text: str, metric: str, labels: tuple[str, ...]) -> dict[str, float]:
    """A Prometheus text page's `metric` summed by the values of `labels` (joined by "/")."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == metric:
                key = "/".join(str(sample.labels.get(label, "?")) for label in labels)
                found[key] = found.get(key, 0.0) + sample.value
    return found


def writes_by_writer(text: str) -> dict[str, float]:
    """The controller's API writes by writer and result."""
    return sums_by(text, "tf_controller_api_writes_total", ("writer", "result"))


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_milestones(log: Path, started_wall: float) -> dict[str, float]:
    """Seconds after the process start at which the log shows each start-up step."""
    marks: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        match = _STAMP.match(line)
        if not match:
            continue
        stamp = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
        at = stamp.timestamp() - started_wall
        if "first log line" not in marks:
            marks["first log line"] = at
        if "informer" in line and ": synced" in line:
            marks["last informer synced"] = at
        if "acquired Lease" in line:
            marks.setdefault("Lease acquired", at)
        if "allocator recovered" in line:
            marks.setdefault("allocator recovered", at)
    return marks


async def run(
    sizes: Sizes, window_s: float, settle_max_s: float, profile: Path | None = None
) -> str:
    workdir = Path(tempfile.mkdtemp(prefix="tf-bench-controller-"))
    plane = ControlPlane(Binaries.locate(), workdir / "plane")
    plane.start()
    controller: subprocess.Popen[bytes] | None = None
    try:
        await plane.kubectl("apply", "--server-side", "-f", str(ROOT / "charts/tensor-fusion/crds"))
        await plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        kube = make_client(str(plane.kubeconfig))
        await kube.create(Namespace(metadata=ObjectMeta(name=OPERATOR_NAMESPACE)))
        began = time.monotonic()
        await populate(kube, sizes)
        populate_s = time.monotonic() - began
        print(f"cluster populated in {populate_s:.1f} s", flush=True)
        apiserver = next(c for c in plane.components if c.name == "kube-apiserver")
        assert apiserver.pid is not None
        api_port, health_port, metrics_port = 18080, 18081, 18082
        log = workdir / "controller.log"
        env = {
            **os.environ,
            "POD_NAME": "bench-leader",
            "POD_IP": "127.0.0.1",
            "OPERATOR_NAMESPACE": OPERATOR_NAMESPACE,
            "PORT": str(api_port),
            "API_BIND_HOST": "127.0.0.1",
            "PEER_BIND_HOST": "127.0.0.1",
            "TSDB_EMBEDDED_DIR": str(workdir / "tsdb"),
        }
        argv = [str(Path(sys.executable).with_name("tensor-fusion")), "controller",
                "--kubeconfig", str(plane.kubeconfig), "-leader-elect",
                "-agent-readiness", "heartbeat",
                "-health-probe-bind-address", f"127.0.0.1:{health_port}",
                "-metrics-bind-address", f"127.0.0.1:{metrics_port}",
                "-dynamic-config", str(workdir / "absent.yaml"),
                "-kube-scheduler-path", str(plane.binaries.path("kube-scheduler"))]  # fmt: skip
        started_wall = time.time()
        started = time.monotonic()
        with log.open("wb") as output:
            controller = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=env)
        ready_url = f"http://127.0.0.1:{api_port}/api/allocation?node={node_name(0)}"
        async with aiohttp.ClientSession() as session:

            async def ready() -> bool:
                assert controller is not None
                if controller.poll() is not None:
                    raise RuntimeError(f"the controller exited: {log.read_text()[-3000:]}")
                try:
                    async with session.get(ready_url) as reply:
                        return reply.status == 200 and (await reply.json())["ready"] is True
                except aiohttp.ClientError:
                    return False

            await until(ready, 300, "the allocator ready")
            startup_s = time.monotonic() - started
            milestones = log_milestones(log, started_wall)
            print(f"ready after {startup_s:.2f} s", flush=True)
            async with session.get(f"http://127.0.0.1:{api_port}/api/allocation") as reply:
                body = await reply.json(content_type=None)
            if "allocations" not in body:
                raise RuntimeError(f"/api/allocation answered {reply.status}: {str(body)[:2000]}")
            allocations = len(body["allocations"])

            # -- steady state: every node beats every 30 s -----------------------------------
            stop = asyncio.Event()

            async def beat_forever(i: int) -> None:
                await asyncio.sleep(30.0 * i / sizes.nodes)
                while not stop.is_set():
                    await heartbeat(kube, node_name(i), sizes.gpus_per_node)
                    await asyncio.sleep(30.0)

            beats = [asyncio.create_task(beat_forever(i)) for i in range(sizes.nodes)]
            metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
            settle_began = time.monotonic()
            previous = await scrape(session, metrics_url)
            while time.monotonic() - settle_began < settle_max_s:
                await asyncio.sleep(5)
                now = await scrape(session, metrics_url)
                written = now.get("tf_controller_api_writes_total", 0) - previous.get(
                    "tf_controller_api_writes_total", 0)  # fmt: skip
                previous = now
                if written < 0.5 * 5 * sizes.nodes / 30 and time.monotonic() - settle_began > 30:
                    break
            settle_s = time.monotonic() - settle_began
            raw = await plane.kubectl("get", "--raw", "/metrics")
            api_before = _requests(raw)
            async with session.get(metrics_url) as reply:
                writes_before = writes_by_writer(await reply.text())
            leader_cpu0, api_cpu0, t0 = (
                cpu_seconds(controller.pid),
                cpu_seconds(apiserver.pid),
                time.monotonic(),
            )
            profiler = None
            if profile is not None:
                profiler = subprocess.Popen(
                    [str(Path(sys.executable).with_name("py-spy")), "record", "--format", "raw",
                     "--rate", "50", "--duration", str(int(window_s)), "--output", str(profile),
                     "--pid", str(controller.pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
            await asyncio.sleep(window_s)
            if profiler is not None:
                profiler.wait(60)
            leader_cpu1, api_cpu1, t1 = (
                cpu_seconds(controller.pid),
                cpu_seconds(apiserver.pid),
                time.monotonic(),
            )
            raw = await plane.kubectl("get", "--raw", "/metrics")
            api_after = _requests(raw)
            async with session.get(metrics_url) as reply:
                writes_after = writes_by_writer(await reply.text())
            stop.set()
            for task in beats:
                task.cancel()
            await asyncio.gather(*beats, return_exceptions=True)
        await kube.close()
        elapsed = t1 - t0
        leader_share = (leader_cpu1 - leader_cpu0) / elapsed
        api_share = (api_cpu1 - api_cpu0) / elapsed
        requests = {k: api_after.get(k, 0) - api_before.get(k, 0) for k in api_after}
        writes = {k: writes_after.get(k, 0) - writes_before.get(k, 0) for k in writes_after}
        return report(sizes, populate_s, startup_s, allocations, milestones, settle_s, elapsed,
                      leader_share, api_share, requests, writes)  # fmt: skip
    finally:
        if controller is not None and controller.poll() is None:
            controller.terminate()
            try:
                controller.wait(10)
            except subprocess.TimeoutExpired:
                controller.kill()
        plane.stop()


def _requests(raw: str) -> dict[str, float]:
    """apiserver_request_total by verb."""
    return sums_by(raw, "apiserver_request_total", ("verb",))


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def report(
    sizes: Sizes,
    populate_s: float,
    startup_s: float,
    allocations: int,
    milestones: dict[str, float],
    settle_s: float,
    window_s: float,
    leader_share: float,
    api_share: float,
    requests: dict[str, float],
    writes: dict[str, float],
) -> str:
    gpus = sizes.nodes * sizes.gpus_per_node
    ordered = sorted(milestones.items(), key=lambda kv: kv[1])
    steps = ", ".join(f"{name} {at:.2f} s" for name, at in ordered)
    per_verb = ", ".join(f"{verb} {count / window_s:.1f}/s"
                         for verb, count in sorted(requests.items()) if count)  # fmt: skip
    written = ", ".join(f"{key} {count:.0f}" for key, count in sorted(writes.items()) if count)
    lines = [
        "## Controller start-up and steady state (`bench/controller.py`)",
        "",
        f"A real control plane with {sizes.nodes:,} fake GPU nodes × {sizes.gpus_per_node} GPUs "
        f"({gpus:,} GPU objects, {sizes.nodes:,} GPUNodes) and {sizes.pods:,} worker pods with "
        f"`gpu-ids` (populated in {populate_s:.0f} s). One controller process, `-leader-elect`, "
        "`-agent-readiness heartbeat`, embedded metrics store.",
        "",
        "| figure | value | target |",
        "|---|---|---|",
        f"| process start → `/api/allocation` `ready: true` | {startup_s:.2f} s "
        f"({allocations:,} allocations) | < {STARTUP_TARGET_S:.0f} s: "
        f"{verdict(startup_s < STARTUP_TARGET_S)} |",
        f"| leader CPU, heartbeat every 30 s per node ({sizes.nodes / 30:.0f}/s), "
        f"{window_s:.0f} s window | {leader_share * 100:.1f}% of one core | < "
        f"{CPU_TARGET * 100:.0f}%: {verdict(leader_share < CPU_TARGET)} |",
        f"| kube-apiserver CPU, same window | {api_share * 100:.1f}% of one core | |",
        "",
        f"Start-up steps (seconds after the process start, from its log): {steps}.",
        f"The window began {settle_s:.0f} s after ready, once the start-up writes had settled.",
        f"API server requests in the window (all clients, the heartbeats included): {per_verb}.",
        f"The controller's writes in the window: {written or 'none'}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--window", type=float, default=60.0, help="CPU window, seconds")
    parser.add_argument("--settle-max", type=float, default=180.0)
    parser.add_argument("--no-write", action="store_true", help="do not update docs")
    parser.add_argument("--profile", type=Path, help="py-spy raw stacks of the window here")
    args = parser.parse_args()
    sizes = Sizes(args.nodes, args.gpus_per_node, args.pods)
    section = asyncio.run(run(sizes, args.window, args.settle_max, args.profile))
    print(section)
    if not args.no_write:
        write_section("controller", section)


if __name__ == "__main__":
    main()
