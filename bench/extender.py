"""Extender benchmark: one scheduling cycle alone, then pods per second end to end.

1. One cycle in-process, 1,000 nodes x 8 GPUs (the scheduling benchmark's cluster), mixed
   1/2/4/8-GPU workers: kube-scheduler's `filter` body (the pod and 1,000 node names) decoded,
   the decision with its assumption, the answer encoded; then `bind` with the pod calls answered
   in memory. Percentiles per step.
2. End to end on a real control plane: 1,000 fake nodes x 8 GPUs with their GPUNode/GPU objects
   and heartbeats, 5,000 webhook-shaped workers created first; then the controller starts (the
   leader's child kube-scheduler and the extender); pods per second from the first Binding to
   the last, the extender's filter and bind latency from its histogram, and the API server's
   requests and CPU over the same time.

Run: `python bench/extender.py` (about 6 minutes; needs `make testenv`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import orjson
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster.controlplane import Binaries, ControlPlane

from benchmark_doc import write_section
from controller import (
    OPERATOR_NAMESPACE,
    POD,
    POOL,
    Sizes,
    bounded,
    cpu_seconds,
    heartbeat,
    node_name,
    populate,
    sums_by,
)
from scheduling import MIX, cluster_of
from tensorfusion.adapters.kube.client import make_client
from tensorfusion.adapters.package_data import default_scheduler_config
from tensorfusion.domain.annotations import KEYS, encode_index
from tensorfusion.domain.scheduling.extender_protocol import ExtenderArgs, ExtenderBindingArgs
from tensorfusion.domain.scheduling.native import NativePlugins
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster
from tensorfusion.domain.scheduling.scheduler_config import (
    read_scheduler_settings,
    scheduler_name,
)
from tensorfusion.extender.scheduling import Extender
from tensorfusion.sim.virtual_cluster import build_cluster

WORKERS = "bench-workers"
E2E_TARGET = 500.0
FILTER_P99_TARGET_MS = 5.0


def worker_body(uid: str, pool: str, shape: Any, index: int) -> dict[str, Any]:
    resource, value = encode_index(index)
    return {
        "metadata": {
            "name": uid, "namespace": WORKERS, "uid": uid,
            "labels": {KEYS.component: "worker", KEYS.enabled: "true"},
            "annotations": {KEYS.gpupool: pool, KEYS.tflops_request: str(shape.tflops),
                            KEYS.vram_request: f"{shape.vram_gib}Gi",
                            KEYS.gpu_count: str(shape.count)},
        },
        "spec": {"schedulerName": scheduler_name(), "containers": [{
            "name": "main", "image": "busybox",
            "resources": {"requests": {"cpu": shape.cpu, "memory": shape.memory},
                          "limits": {resource: str(value)}}}]},
    }  # fmt: skip


# --------------------------------------------------------------------------- in-process cycle


@dataclass
class MemoryPods:
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get((namespace, name))

    async def patch_pod(
        self,
        namespace: str,
        name: str,
        operations: Sequence[Mapping[str, Any]],
        *,
        timeout_s: float | None = None,
    ) -> None:
        return None

    async def bind_pod(
        self, namespace: str, name: str, uid: str, node: str, *, timeout_s: float | None = None
    ) -> None:
        return None


class NoEvents:
    async def pod_event(
        self, pod: Mapping[str, Any], type_: Literal["Normal", "Warning"], reason: str,
        message: str,
    ) -> None:  # fmt: skip
        return None


class NoCache:
    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None:
        return None

    def list(self, namespace: str | None = None) -> list[Mapping[str, Any]]:
        return []


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_cycle(nodes: int, pods: int, seed: int) -> dict[str, list[float]]:
    """Seconds per step of `pods` filter+bind cycles against `nodes` nodes."""
    settings = read_scheduler_settings(default_scheduler_config())
    cluster = build_cluster(cluster_of(nodes))
    native = NativeCluster.from_nodes(NativePlugins(settings.node_resources_fit),
                                      cluster.node_objects)  # fmt: skip
    memory = MemoryPods()
    extender = Extender(
        allocator=lambda: cluster.allocator, native=native, pods=memory, cache=NoCache(),
        events=NoEvents(), fence=lambda: 10.0, profile=settings.profile,
    )  # fmt: skip
    names = sorted(native.facts)
    pool = next(iter(cluster.allocator.pools))
    rng = random.Random(seed)
    shapes = [s for s in MIX for _ in range(s.weight)]
    stages = ("decode", "decide", "encode", "bind", "filter total")
    steps: dict[str, list[float]] = {stage: [] for stage in stages}
    for i in range(pods):
        pod = worker_body(f"pod-{i}", pool, rng.choice(shapes), i % 128 + 1)
        pod["spec"]["nodeName"] = None
        memory.pods[(WORKERS, pod["metadata"]["name"])] = pod
        raw = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
        t0 = time.perf_counter()
        args = ExtenderArgs.from_json(orjson.loads(raw))
        t1 = time.perf_counter()
        result = await extender.filter(args)
        t2 = time.perf_counter()
        orjson.dumps(result.to_json())
        t3 = time.perf_counter()
        steps["decode"].append(t1 - t0)
        steps["decide"].append(t2 - t1)
        steps["encode"].append(t3 - t2)
        steps["filter total"].append(t3 - t0)
        if result.node_names:
            binding = ExtenderBindingArgs(pod["metadata"]["name"], WORKERS,
                                          pod["metadata"]["uid"], result.node_names[0])  # fmt: skip
            t4 = time.perf_counter()
            answer = await extender.bind(binding)
            steps["bind"].append(time.perf_counter() - t4)
            assert answer.ok, answer.error_message
    return steps


# --------------------------------------------------------------------------- end to end


@dataclass
class EndToEnd:
    pods: int
    bound_s: float
    first_to_last_s: float
    startup_s: float
    filter_ms: dict[str, float]
    bind_ms: dict[str, float]
    api_requests: dict[str, float]
    api_cpu: float
    leader_cpu: float


def histogram_quantiles(text: str, verb: str) -> dict[str, float]:
    """p50/p99 upper bounds (ms) and the mean from the extender's histogram."""
    buckets: list[tuple[float, float]] = []
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("verb") != verb:
                continue
            if sample.name == "tf_extender_request_seconds_bucket":
                buckets.append((float(sample.labels["le"]), sample.value))
            elif sample.name == "tf_extender_request_seconds_sum":
                total = sample.value
            elif sample.name == "tf_extender_request_seconds_count":
                count = sample.value
    buckets.sort()
    result = {"mean": total / count * 1000 if count else 0.0, "calls": count}
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        result[name] = next((le * 1000 for le, c in buckets if c >= q * count), float("inf"))
    return result


def api_requests(raw: str) -> dict[str, float]:
    """apiserver_request_total by verb and resource."""
    return {key.replace("/", " "): value for key, value in
            sums_by(raw, "apiserver_request_total", ("verb", "resource")).items()}  # fmt: skip


async def end_to_end(nodes: int, pods: int) -> EndToEnd:
    workdir = Path(tempfile.mkdtemp(prefix="tf-bench-extender-"))
    plane = ControlPlane(Binaries.locate(), workdir / "plane")
    plane.start()
    controller: subprocess.Popen[bytes] | None = None
    beats: list[asyncio.Task[None]] = []
    try:
        crds = str(Path(__file__).resolve().parents[1] / "charts/tensor-fusion/crds")
        await plane.kubectl("apply", "--server-side", "-f", crds)
        await plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        kube = make_client(str(plane.kubeconfig))
        await kube.create(Namespace(metadata=ObjectMeta(name=OPERATOR_NAMESPACE)))
        await populate(kube, Sizes(nodes, 8, 0))

        async def beat_forever(i: int) -> None:
            while True:
                await heartbeat(kube, node_name(i), 8)
                await asyncio.sleep(30.0)

        beats = [asyncio.create_task(beat_forever(i)) for i in range(nodes)]
        rng = random.Random(7)
        shapes = [s for s in MIX if s.count == 1 for _ in range(s.weight)]
        bodies = [worker_body(f"w{i:05d}", POOL, rng.choice(shapes), i % 128 + 1)
                  for i in range(pods)]  # fmt: skip
        for body in bodies:
            del body["metadata"]["uid"]
        await bounded(kube.create(POD.from_dict(body)) for body in bodies)
        print(f"{pods} workers created", flush=True)
        apiserver = next(c for c in plane.components if c.name == "kube-apiserver")
        assert apiserver.pid is not None
        api_before = api_requests(await plane.kubectl("get", "--raw", "/metrics"))
        api_cpu0 = cpu_seconds(apiserver.pid)
        metrics_port = 18092
        env = {
            **os.environ,
            "POD_NAME": "bench-leader",
            "POD_IP": "127.0.0.1",
            "OPERATOR_NAMESPACE": OPERATOR_NAMESPACE,
            "PORT": "18090",
            "API_BIND_HOST": "127.0.0.1",
            "PEER_BIND_HOST": "127.0.0.1",
            "TSDB_EMBEDDED_DIR": str(workdir / "tsdb"),
        }
        argv = [str(Path(sys.executable).with_name("tensor-fusion")), "controller",
                "--kubeconfig", str(plane.kubeconfig), "-leader-elect",
                "-agent-readiness", "heartbeat", "-health-probe-bind-address", "127.0.0.1:18091",
                "-metrics-bind-address", f"127.0.0.1:{metrics_port}",
                "-dynamic-config", str(workdir / "absent.yaml"),
                "-kube-scheduler-path", str(plane.binaries.path("kube-scheduler"))]  # fmt: skip
        started = time.monotonic()
        with (workdir / "controller.log").open("wb") as log:
            controller = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        leader_cpu0 = 0.0
        first_bound: float | None = None
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        async with aiohttp.ClientSession() as session:
            # Progress from the extender's own bind counter: listing 5,000 pods twice a second
            # would cost the API server and this process more than the scheduling itself.
            while True:
                if controller.poll() is not None:
                    raise RuntimeError((workdir / "controller.log").read_text()[-3000:])
                binds = 0.0
                try:
                    async with session.get(metrics_url) as reply:
                        binds = histogram_quantiles(await reply.text(), "bind")["calls"]
                except aiohttp.ClientError:
                    pass
                now = time.monotonic()
                if binds and first_bound is None:
                    first_bound = now
                    leader_cpu0 = cpu_seconds(controller.pid)
                if binds >= pods:
                    listed = [p async for p in kube.list(POD, namespace=WORKERS)]
                    if sum(1 for p in listed if p.spec and p.spec.nodeName) == pods:
                        break
                if now - started > 900:
                    raise RuntimeError(f"only {binds:.0f} binds of {pods} after 900 s")
                await asyncio.sleep(0.5)
        done = time.monotonic()
        assert first_bound is not None
        leader_cpu = (cpu_seconds(controller.pid) - leader_cpu0) / (done - first_bound)
        api_cpu = (cpu_seconds(apiserver.pid) - api_cpu0) / (done - started)
        api_after = api_requests(await plane.kubectl("get", "--raw", "/metrics"))
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{metrics_port}/metrics") as reply,
        ):
            text = await reply.text()
        await kube.close()
        window = done - first_bound
        requests = {k: (v - api_before.get(k, 0.0)) / window for k, v in api_after.items()
                    if v - api_before.get(k, 0.0) > 0}  # fmt: skip
        return EndToEnd(pods, done - started, window, first_bound - started,
                        histogram_quantiles(text, "filter"), histogram_quantiles(text, "bind"),
                        requests, api_cpu, leader_cpu)  # fmt: skip
    finally:
        for task in beats:
            task.cancel()
        if controller is not None and controller.poll() is None:
            controller.terminate()
            try:
                controller.wait(10)
            except subprocess.TimeoutExpired:
                controller.kill()
        plane.stop()


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def report(nodes: int, steps: dict[str, list[float]], e2e: EndToEnd | None) -> str:
    def ms(values: list[float], q: float) -> str:
        return f"{percentile(values, q) * 1000:.2f}"

    total = steps["filter total"]
    lines = [
        "## Scheduler extender (`bench/extender.py`)",
        "",
        f"One cycle in-process, {nodes:,} nodes x 8 GPUs, mixed 1/2/4/8-GPU workers, "
        f"{len(total):,} cycles (the filter body carries the pod and {nodes:,} node names):",
        "",
        "| step | p50 ms | p99 ms | mean ms |",
        "|---|---|---|---|",
    ]
    for name in ("decode", "decide", "encode", "filter total", "bind"):
        values = steps[name]
        lines.append(f"| {name} | {ms(values, 0.5)} | {ms(values, 0.99)} | "
                     f"{statistics.fmean(values) * 1000:.2f} |")  # fmt: skip
    p99 = percentile(total, 0.99) * 1000
    lines += ["", f"Filter p99 {p99:.2f} ms (target < {FILTER_P99_TARGET_MS:.0f} ms: "
              f"{verdict(p99 < FILTER_P99_TARGET_MS)}). `decode` is orjson plus reading "
              "ExtenderArgs, `decide` the decision with its assumption, `encode` the answer; "
              "`bind` runs §12 with the pod calls answered in memory."]  # fmt: skip
    if e2e is not None:
        rate = e2e.pods / e2e.first_to_last_s
        busiest = sorted(e2e.api_requests.items(), key=lambda kv: -kv[1])[:6]
        lines += [
            "",
            f"End to end on a real control plane: {nodes:,} fake nodes x 8 GPUs, {e2e.pods:,} "
            "single-GPU workers created before the controller starts; the leader's child "
            "kube-scheduler (testenv build) calls the extender.",
            "",
            "| figure | value | target |",
            "|---|---|---|",
            f"| pods per second, first Binding to last | {rate:.0f} | >= {E2E_TARGET:.0f}: "
            f"{verdict(rate >= E2E_TARGET)} |",
            f"| all bound after the controller started | {e2e.bound_s:.1f} s (first Binding at "
            f"{e2e.startup_s:.1f} s) | |",
            f"| extender filter, from its histogram | p50 <= {e2e.filter_ms['p50']:.1f} ms, "
            f"p99 <= {e2e.filter_ms['p99']:.1f} ms, mean {e2e.filter_ms['mean']:.2f} ms | |",
            f"| extender bind (pod patch + Binding) | p50 <= {e2e.bind_ms['p50']:.1f} ms, "
            f"p99 <= {e2e.bind_ms['p99']:.1f} ms, mean {e2e.bind_ms['mean']:.2f} ms | |",
            f"| controller CPU while binding | {e2e.leader_cpu * 100:.0f}% of one core | |",
            f"| kube-apiserver CPU | {e2e.api_cpu * 100:.0f}% of one core | |",
            "",
            "API server requests per second while binding (busiest): "
            + ", ".join(f"{k} {v:.0f}" for k, v in busiest)
            + ".",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=3000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--no-write", action="store_true", help="do not update docs")
    args = parser.parse_args()
    steps = asyncio.run(one_cycle(args.nodes, args.cycles, seed=1))
    e2e = None if args.skip_e2e else asyncio.run(end_to_end(args.nodes, args.pods))
    section = report(args.nodes, steps, e2e)
    print(section)
    if not args.no_write:
        write_section("extender", section)


if __name__ == "__main__":
    main()
