"""Admission webhook benchmark: AdmissionReviews per second and their latency, one leader.

A real control plane (etcd, kube-apiserver, kube-controller-manager of `make testenv`), a GPUPool,
a Deployment and a StatefulSet (0 replicas: their owner objects exist, no pod is created), and
one controller process, the leader, pinned to CPU 0 (`taskset -c 0`), serving
`POST /mutate-v1-pod` over HTTPS with the certificate it issued itself. The control plane and
the load generator share CPU 1.

Each shape is a typical TensorFusion pod whose TensorFusionWorkload already exists: the pod as
the API server hands it to a webhook (defaults and the built-in admission plugins applied,
taken from a server-side dry run), `tensor-fusion.ai/enabled`, the pool, tflops 10/20 and VRAM
4Gi/4Gi; each request has a pod name and uid of its own and the same owner, so the same
workload. One admission is sent first (it creates the workload), then `wrk` (one thread, 50
kept-alive TLS connections) warms up and measures for a fixed time; p50/p99 from wrk's
per-request latencies. Shapes:

- `deployment`: owned by the Deployment's ReplicaSet (admission reads the ReplicaSet);
- `statefulset`: owned by a StatefulSet (no owner read).

Checked: every answer of the run counted as `mutated` by the webhook's own counter, a sample of
answers (through the controller's CA) allowed with a JSONPatch setting `/spec/schedulerName`,
one workload per shape. Also measured: the API server's requests per admission
(`apiserver_request_total` before and after), the CPU of the controller, wrk and the API server,
and wrk's own ceiling against a trivial aiohttp HTTPS endpoint on CPU 0 with the same bodies.
`--profile PATH` records the controller with py-spy during one more run of each shape
(`PATH-<shape>`), and the section lists the top frames.

Run: `python bench/webhook.py` (about 2 minutes; needs `make testenv` and `wrk`, e.g.
`apt-get install wrk`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import itertools
import os
import resource
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment, ReplicaSet, StatefulSet
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace, Pod, Secret, ServiceAccount

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster.controlplane import Binaries, ControlPlane, free_port
from tests.unit.admission.admission_builders import make_pod, make_pool, resources_ok

from benchmark_doc import write_section
from controller import OPERATOR_NAMESPACE, cpu_seconds, sums_by
from tensorfusion.adapters.kube.client import make_client
from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.runtime.leader_election import LEASE_NAME

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench-webhook"
POOL = "bench-pool"
LEADER = "bench-leader"
HOST = "127.0.0.1"
CONTROLLER_CPU = 0
CLIENT_CPU = 1
CONNECTIONS = 50
RATE_TARGET = 8000.0
P99_TARGET_MS = 5.0
SAMPLES = 20
ID = "@ID@"
"""Replaced by wrk with a 12-digit request number: the pod's name and the request's uid."""
WORKLOAD: Any = resource_of("TensorFusionWorkload")
GPU_POOL: Any = resource_of("GPUPool")
POD: Any = Pod
DEPLOYMENT: Any = Deployment
STATEFUL_SET: Any = StatefulSet

WRK_SCRIPT = r"""
-- One AdmissionReview per request, each with its own number in place of @ID@.
local parts, from = {}, 1
do
  local file = assert(io.open(os.getenv("WRK_BODY"), "rb"))
  local text = file:read("*a")
  file:close()
  while true do
    local i, j = string.find(text, "@ID@", from, true)
    if not i then break end
    parts[#parts + 1] = string.sub(text, from, i - 1)
    from = j + 1
  end
  parts[#parts + 1] = string.sub(text, from)
end
local counter = tonumber(os.getenv("WRK_START") or "0")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

request = function()
  counter = counter + 1
  return wrk.format(nil, nil, nil, table.concat(parts, string.format("%012d", counter)))
end

done = function(summary, latency, requests)
  local e = summary.errors
  local out = assert(io.open(os.getenv("WRK_OUT"), "w"))
  out:write(string.format(
    '{"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,' ..
    '"timeout":%d,"mean_us":%f,"max_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,' ..
    '"p999_us":%d}',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.max, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
  out:close()
end
"""


# --------------------------------------------------------------------------- the load


@dataclass(frozen=True)
class Load:
    """One wrk run."""

    requests: int
    seconds: float
    errors: dict[str, int]
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    client_cpu: float
    """wrk's CPU, share of one core."""

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_wrk(url: str, body: Path, seconds: float, start: int, workdir: Path) -> Load:
    """wrk on CLIENT_CPU, one thread, CONNECTIONS kept-alive connections, for `seconds`."""
    wrk = shutil.which("wrk")
    if wrk is None:
        raise RuntimeError("wrk not found on PATH: `apt-get install wrk`")
    script, out = workdir / "admission.lua", workdir / "wrk-result.json"
    script.write_text(WRK_SCRIPT)
    out.unlink(missing_ok=True)
    env = {**os.environ, "WRK_BODY": str(body), "WRK_START": str(start), "WRK_OUT": str(out)}
    cpu0 = children_cpu()
    finished = subprocess.run(
        ["taskset", "-c", str(CLIENT_CPU), wrk, "-t1", f"-c{CONNECTIONS}", f"-d{seconds:.0f}s",
         "--timeout", "10s", "-s", str(script), url],
        env=env, capture_output=True, text=True, timeout=seconds + 60, check=False,
    )  # fmt: skip
    cpu = children_cpu() - cpu0
    if finished.returncode != 0 or not out.exists():
        raise RuntimeError(f"wrk failed ({finished.returncode}): {finished.stderr[-2000:]}")
    raw = orjson.loads(out.read_bytes())
    duration = raw["duration_us"] / 1e6
    errors = {k: int(raw[k]) for k in ("connect", "read", "write", "status", "timeout")}
    return Load(
        requests=int(raw["requests"]), seconds=duration, errors=errors,
        mean_ms=raw["mean_us"] / 1000, p50_ms=raw["p50_us"] / 1000, p90_ms=raw["p90_us"] / 1000,
        p99_ms=raw["p99_us"] / 1000, p999_ms=raw["p999_us"] / 1000,
        max_ms=raw["max_us"] / 1000, client_cpu=cpu / duration,
    )  # fmt: skip


# --------------------------------------------------------------------------- the requests


@dataclass(frozen=True)
class Shape:
    """A pod shape: its name, what the table calls it, and the AdmissionReview template."""

    name: str
    title: str
    workload: str
    review: bytes

    def body(self, n: int) -> bytes:
        return self.review.replace(ID.encode(), f"{n:012d}".encode())


def review_of(pod: Mapping[str, Any], user: str) -> bytes:
    """The AdmissionReview the API server would send for this pod's CREATE, with @ID@ in the
    request uid and the pod name."""
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return orjson.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": f"9b0c5e2a-4f1d-4c3b-8a7e-{ID}", "kind": gvk, "resource": gvr,
            "requestKind": gvk, "requestResource": gvr, "name": pod["metadata"]["name"],
            "namespace": NAMESPACE, "operation": "CREATE",
            "userInfo": {"username": user, "uid": "3f6a7c1e-2b8d-4e5f-9a0b-1c2d3e4f5a6b",
                         "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                                    "system:authenticated"]},
            "object": pod, "oldObject": None, "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    })  # fmt: skip


async def as_admitted(kube: AsyncClient, pod: dict[str, Any], name: str) -> dict[str, Any]:
    """The pod as a webhook receives it: a server-side dry run (defaults, service account
    volume, default tolerations), less what is only set on storing, named `name`."""
    deadline = time.monotonic() + 60
    while True:
        try:
            created = await kube.create(POD.from_dict(pod), dry_run=True)
            break
        except Exception:  # the namespace's default ServiceAccount is made asynchronously
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    admitted: dict[str, Any] = created.to_dict()
    metadata = admitted["metadata"]
    for stored_only in ("uid", "resourceVersion", "creationTimestamp", "generation"):
        metadata.pop(stored_only, None)
    metadata["name"] = name
    admitted.pop("status", None)
    return admitted


def tf_pod(
    owner: Mapping[str, Any], labels: Mapping[str, str], name: str = "template"
) -> dict[str, Any]:
    pod = make_pod(resources_ok(gpupool=POOL), labels=labels, name=name, namespace=NAMESPACE,
                   owner=owner, containers=[{
                       "name": "app", "image": "registry.example/inference:1.4",
                       "ports": [{"containerPort": 8080}],
                       "env": [{"name": "MODEL", "value": "llama-8b"}],
                       "resources": {"requests": {"cpu": "2", "memory": "8Gi"},
                                     "limits": {"memory": "8Gi"}}}])  # fmt: skip
    pod["spec"]["schedulerName"] = "default-scheduler"
    return pod


async def shapes(kube: AsyncClient) -> list[Shape]:
    """The Deployment (its ReplicaSet) and the StatefulSet the pods belong to, and one
    AdmissionReview template of each."""
    labels = {"app": "bench-app"}
    template = {"metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "busybox"}]}}  # fmt: skip
    await kube.create(DEPLOYMENT.from_dict({
        "metadata": {"name": "bench-app", "namespace": NAMESPACE},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": template},
    }))  # fmt: skip
    db = {"app": "bench-db"}
    stateful = await kube.create(STATEFUL_SET.from_dict({
        "metadata": {"name": "bench-db", "namespace": NAMESPACE},
        "spec": {"replicas": 0, "serviceName": "bench-db", "selector": {"matchLabels": db},
                 "template": {"metadata": {"labels": db}, "spec": template["spec"]}},
    }))  # fmt: skip
    deadline = time.monotonic() + 60
    while not (sets := [r async for r in kube.list(ReplicaSet, namespace=NAMESPACE)]):
        if time.monotonic() > deadline:
            raise RuntimeError("the Deployment's ReplicaSet did not appear in 60 s")
        await asyncio.sleep(0.2)
    replica_set = sets[0]
    assert replica_set.metadata is not None and stateful.metadata is not None
    rs_name = str(replica_set.metadata.name)
    rs_labels = dict(replica_set.metadata.labels or {})
    rs_owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name,
                "uid": replica_set.metadata.uid, "controller": True,
                "blockOwnerDeletion": True}  # fmt: skip
    sts_owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "bench-db",
                 "uid": stateful.metadata.uid, "controller": True,
                 "blockOwnerDeletion": True}  # fmt: skip
    deployment_pod = await as_admitted(kube, tf_pod(rs_owner, rs_labels), f"{rs_name}-{ID}")
    stateful_pod = await as_admitted(
        kube, tf_pod(sts_owner, {**db, "apps.kubernetes.io/pod-index": "0"}), f"bench-db-{ID}"
    )
    return [
        Shape("deployment", "Deployment pod (owner ReplicaSet read)", "bench-app",
              review_of(deployment_pod, "system:serviceaccount:kube-system:replicaset-controller")),
        Shape("statefulset", "StatefulSet pod (no owner read)", "bench-db",
              review_of(stateful_pod, "system:serviceaccount:kube-system:statefulset-controller")),
    ]  # fmt: skip


def check_answer(raw: bytes, uid: str) -> None:
    """Allowed, for this uid, with a JSONPatch that sets `/spec/schedulerName`."""
    response = orjson.loads(raw)["response"]
    if response.get("uid") != uid or response.get("allowed") is not True:
        raise RuntimeError(f"not allowed, or another uid: {raw[:600]!r}")
    if response.get("patchType") != "JSONPatch":
        raise RuntimeError(f"no JSONPatch: {raw[:600]!r}")
    patch = orjson.loads(base64.b64decode(response["patch"]))
    if not any(op.get("path") == "/spec/schedulerName" for op in patch):
        raise RuntimeError(f"the patch does not set /spec/schedulerName: {patch}")


async def sample(url: str, context: ssl.SSLContext, shape: Shape, first: int) -> None:
    """SAMPLES admissions through the controller's CA, each answer checked."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        for n in range(first, first + SAMPLES):
            body = shape.body(n)
            uid = orjson.loads(body)["request"]["uid"]
            async with session.post(
                url, data=body, headers={"Content-Type": "application/json"}
            ) as reply:
                if reply.status != 200:
                    raise RuntimeError(f"HTTP {reply.status}: {(await reply.text())[:600]}")
                check_answer(await reply.read(), uid)


# --------------------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Result:
    shape: Shape
    load: Load
    controller_cpu: float
    others_cpu: float
    """Other processes' share of the controller's core (this machine is shared)."""
    api_cpu: float
    api_calls: dict[str, float]
    """The API server's requests per admission, by verb and resource."""
    outcomes: dict[str, float]
    server_mean_ms: float
    """The webhook's own histogram: mean time in the handler."""


async def until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.1)


def core_busy(cpu: int) -> float:
    """Seconds CPU `cpu` has been busy (not idle, not waiting for I/O) since boot."""
    for line in Path("/proc/stat").read_text().splitlines():
        name, *ticks = line.split()
        if name == f"cpu{cpu}":
            values = [int(t) for t in ticks]
            return (sum(values[:8]) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")
    raise RuntimeError(f"cpu{cpu} not in /proc/stat")


def pin(pid: int, cpu: int) -> None:
    """Every thread of `pid` onto `cpu` (threads made later inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            os.sched_setaffinity(int(task.name), {cpu})


async def text_of(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as reply:
        return await reply.text()


@dataclass
class Bench:
    plane: ControlPlane
    kube: AsyncClient
    controller_pid: int
    url: str
    metrics_url: str
    context: ssl.SSLContext
    workdir: Path
    shapes: list[Shape]
    next_id: int = 1

    def take_ids(self, count: int) -> int:
        first, self.next_id = self.next_id, self.next_id + count
        return first

    @property
    def apiserver_pid(self) -> int:
        pid = next(c.pid for c in self.plane.components if c.name == "kube-apiserver")
        assert pid is not None
        return pid

    async def snapshot(
        self, session: aiohttp.ClientSession
    ) -> tuple[dict[str, float], dict[str, float], float]:
        """API server requests by verb/resource, webhook outcomes, seconds in the handler."""
        api = sums_by(await self.plane.kubectl("get", "--raw", "/metrics"),
                      "apiserver_request_total", ("verb", "resource"))  # fmt: skip
        own = await text_of(session, self.metrics_url)
        outcomes = sums_by(own, "tf_webhook_admissions_total", ("outcome",))
        handler = sum(sums_by(own, "tf_webhook_admission_seconds_sum", ()).values())
        return api, outcomes, handler

    async def measure(self, shape: Shape, warmup_s: float, seconds: float) -> Result:
        await sample(self.url, self.context, shape, self.take_ids(SAMPLES))  # the workload

        async def workload_exists() -> bool:
            try:
                await self.kube.get(WORKLOAD, shape.workload, namespace=NAMESPACE)
            except Exception:
                return False
            return True

        await until(workload_exists, 30, f"workload {shape.workload}")
        body = self.workdir / f"{shape.name}.json"
        body.write_bytes(shape.review)
        await asyncio.to_thread(run_wrk, self.url, body, warmup_s, self.take_ids(10**7),
                                self.workdir)  # fmt: skip
        async with aiohttp.ClientSession() as session:
            api0, outcomes0, handler0 = await self.snapshot(session)
            cpu0 = cpu_seconds(self.controller_pid), cpu_seconds(self.apiserver_pid)
            busy0 = core_busy(CONTROLLER_CPU)
            load = await asyncio.to_thread(run_wrk, self.url, body, seconds,
                                           self.take_ids(10**7), self.workdir)  # fmt: skip
            cpu1 = cpu_seconds(self.controller_pid), cpu_seconds(self.apiserver_pid)
            busy1 = core_busy(CONTROLLER_CPU)
            api1, outcomes1, handler1 = await self.snapshot(session)
        await sample(self.url, self.context, shape, self.take_ids(SAMPLES))
        workloads = [w async for w in self.kube.list(WORKLOAD, namespace=NAMESPACE)]
        names = {w.metadata.name for w in workloads if w.metadata is not None}
        if shape.workload not in names or not names <= {s.workload for s in self.shapes}:
            raise RuntimeError(f"workloads after the run: {sorted(names)}")
        outcomes = {k: v - outcomes0.get(k, 0.0) for k, v in outcomes1.items()
                    if v - outcomes0.get(k, 0.0) > 0}  # fmt: skip
        answered = sum(outcomes.values())
        if set(outcomes) != {"mutated"} or answered < load.requests:
            raise RuntimeError(f"outcomes in the run: {outcomes} for {load.requests} requests")
        if any(load.errors.values()):
            raise RuntimeError(f"wrk errors: {load.errors}")
        calls = {k.replace("/", " "): (v - api0.get(k, 0.0)) / answered for k, v in api1.items()
                 if v - api0.get(k, 0.0) > 0}  # fmt: skip
        return Result(
            shape, load, controller_cpu=(cpu1[0] - cpu0[0]) / load.seconds,
            others_cpu=max(0.0, (busy1 - busy0) - (cpu1[0] - cpu0[0])) / load.seconds,
            api_cpu=(cpu1[1] - cpu0[1]) / load.seconds, api_calls=calls, outcomes=outcomes,
            server_mean_ms=(handler1 - handler0) / answered * 1000,
        )  # fmt: skip

    async def profile(self, shape: Shape, seconds: float, output: Path) -> None:
        """One more run of `shape` with py-spy recording the controller (on CLIENT_CPU)."""
        body = self.workdir / f"{shape.name}.json"
        output.parent.mkdir(parents=True, exist_ok=True)
        errors = self.workdir / "py-spy.log"
        with errors.open("wb") as log:
            profiler = subprocess.Popen(
                ["taskset", "-c", str(CLIENT_CPU), str(Path(sys.executable).with_name("py-spy")),
                 "record", "--format", "raw", "--rate", "100", "--duration", str(int(seconds)),
                 "--output", str(output), "--pid", str(self.controller_pid)],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            await asyncio.to_thread(run_wrk, self.url, body, seconds, self.take_ids(10**7),
                                    self.workdir)  # fmt: skip
        finally:
            await asyncio.to_thread(profiler.wait, 60)
        if profiler.returncode != 0 or not output.exists():
            raise RuntimeError(f"py-spy failed: {errors.read_text()[-2000:]}")


LOOP_FRAME = "BaseEventLoop.run_forever (asyncio/base_events.py)"
HANDLER_FRAME = "create_webhook_app.<locals>.mutate (tensorfusion/admission/webhook_app.py)"


@dataclass(frozen=True)
class Frames:
    """Shares of the event-loop thread's busy samples of a py-spy raw file."""

    samples: int
    handler: float
    """In the webhook handler (the rest: HTTP, TLS, the loop, other work)."""
    in_handler: list[tuple[str, float]]
    """Functions under the handler, inclusive; one of a chain of calls that each take nearly
    all of their caller's time is listed, the outermost."""
    packages: list[tuple[str, float]]
    """Package of the innermost frame."""
    innermost: list[tuple[str, float]]


def short(frame: str) -> str:
    """`function (file.py)` without the directories or the line."""
    function, _, where = frame.partition(" (")
    return f"{function} ({where.split(':')[0].rsplit('/', 1)[-1].rstrip(')')})"


def top_frames(raw: Path, limit: int = 10) -> Frames:
    """Where the event loop's time went, from a py-spy raw file (other threads left out)."""
    innermost: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    in_handler: Counter[str] = Counter()
    callers: dict[str, Counter[str]] = {}
    total = handler = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        frames = [frame.rsplit(":", 1)[0] + ")" for frame in stack.split(";")]
        if LOOP_FRAME not in frames:
            continue
        count = int(count_text)
        total += count
        innermost[short(frames[-1])] += count
        parts = frames[-1].rpartition(" (")[2].rstrip(")").split("/")
        package = "/".join(parts[:2]) if parts[0] == "tensorfusion" else parts[0]
        packages[package.removesuffix(".py")] += count
        if HANDLER_FRAME in frames:
            handler += count
            below = [short(frame) for frame in frames[frames.index(HANDLER_FRAME) :]]
            for frame in set(below[1:]):
                in_handler[frame] += count
            for caller, frame in itertools.pairwise(below):
                callers.setdefault(frame, Counter())[caller] += count
    if not total:
        raise RuntimeError(f"no sample of the event loop in {raw}")

    def shares(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(name, n / total) for name, n in counter.most_common(limit)]

    def chained(frame: str, n: int) -> bool:
        caller = callers[frame].most_common(1)[0][0]
        return n >= 0.9 * in_handler.get(caller, handler)

    heads = Counter({frame: n for frame, n in in_handler.items() if not chained(frame, n)})
    return Frames(total, handler / total, shares(heads), shares(packages), shares(innermost))


# --------------------------------------------------------------------------- the trivial endpoint


def serve_trivial(port: int, cert: Path, key: Path) -> None:
    """An aiohttp HTTPS endpoint that decodes the body and answers `allowed` with its uid."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def mutate(request: web.Request) -> web.Response:
        review = orjson.loads(await request.read())
        answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "response": {"uid": review["request"]["uid"], "allowed": True}}  # fmt: skip
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/mutate-v1-pod", mutate)
    web.run_app(app, host=HOST, port=port, ssl_context=context, print=None,
                access_log=None)  # fmt: skip


async def ceiling(
    workdir: Path, cert: Path, key: Path, shape: Shape, warmup_s: float, seconds: float
) -> Load:
    """wrk against the trivial endpoint on CONTROLLER_CPU, with the first shape's bodies."""
    port = free_port()
    server = subprocess.Popen(
        ["taskset", "-c", str(CONTROLLER_CPU), sys.executable, __file__, "--trivial-server",
         str(port), str(cert), str(key)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"https://{HOST}:{port}/mutate-v1-pod"
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE

    async def up() -> bool:
        if server.poll() is not None:
            raise RuntimeError("the trivial endpoint exited")
        try:
            async with (
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
                session.post(url, data=shape.body(0)) as reply,
            ):
                return reply.status == 200
        except aiohttp.ClientError:
            return False

    try:
        await until(up, 30, "the trivial endpoint")
        body = workdir / "ceiling.json"
        body.write_bytes(shape.review)
        await asyncio.to_thread(run_wrk, url, body, warmup_s, 0, workdir)
        return await asyncio.to_thread(run_wrk, url, body, seconds, 0, workdir)
    finally:
        server.terminate()
        server.wait(10)


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Outcome:
    results: list[Result]
    ceiling: Load
    profiles: dict[str, Frames]
    """Top frames by shape, with `--profile`."""
    body_bytes: int


async def run(warmup_s: float, seconds: float, profile: Path | None) -> Outcome:
    workdir = Path(tempfile.mkdtemp(prefix="tf-bench-webhook-"))
    plane = ControlPlane(Binaries.locate(), workdir / "plane")
    plane.start()
    controller: subprocess.Popen[bytes] | None = None
    try:
        for component in plane.components:
            assert component.pid is not None
            pin(component.pid, CLIENT_CPU)
        await plane.kubectl("apply", "--server-side", "-f", str(ROOT / "charts/tensor-fusion/crds"))
        await plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        kube = make_client(str(plane.kubeconfig))
        for namespace in (OPERATOR_NAMESPACE, NAMESPACE):
            await kube.create(Namespace(metadata=ObjectMeta(name=namespace)))
        await kube.create(GPU_POOL.from_dict(make_pool(POOL)))

        async def default_sa() -> bool:
            try:
                await kube.get(ServiceAccount, "default", namespace=NAMESPACE)
            except Exception:
                return False
            return True

        await until(default_sa, 60, "the default ServiceAccount")
        templates = await shapes(kube)

        webhook_port, health_port, metrics_port = free_port(), free_port(), free_port()
        log = workdir / "controller.log"
        env = {
            **os.environ,
            "POD_NAME": LEADER,
            "POD_IP": HOST,
            "OPERATOR_NAMESPACE": OPERATOR_NAMESPACE,
            "PORT": str(free_port()),
            "API_BIND_HOST": HOST,
            "PEER_BIND_HOST": HOST,
            "WEBHOOK_PORT": str(webhook_port),
            "WEBHOOK_CERT_EXTRA_HOSTS": HOST,
            "TSDB_EMBEDDED_DIR": str(workdir / "tsdb"),
        }
        argv = ["taskset", "-c", str(CONTROLLER_CPU),
                str(Path(sys.executable).with_name("tensor-fusion")), "controller",
                "--kubeconfig", str(plane.kubeconfig), "-leader-elect",
                "-health-probe-bind-address", f"{HOST}:{health_port}",
                "-metrics-bind-address", f"{HOST}:{metrics_port}",
                "-scheduler-extender-bind-address", f"{HOST}:{free_port()}",
                "-dynamic-config", str(workdir / "absent.yaml"),
                "-kube-scheduler-path", str(plane.binaries.path("kube-scheduler"))]  # fmt: skip
        with log.open("wb") as output:
            controller = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=env)

        async def ready() -> bool:
            assert controller is not None
            if controller.poll() is not None:
                raise RuntimeError(f"the controller exited: {log.read_text()[-3000:]}")
            try:
                async with (
                    aiohttp.ClientSession() as session,
                    session.get(f"http://{HOST}:{health_port}/readyz") as reply,
                ):
                    if reply.status != 200:
                        return False
                lease = await kube.get(Lease, LEASE_NAME, namespace=OPERATOR_NAMESPACE)
            except Exception:
                return False
            return lease.spec is not None and lease.spec.holderIdentity == LEADER

        await until(ready, 120, "the controller ready and leading")
        print("controller ready and leading", flush=True)
        secret = await kube.get(
            Secret, "tensor-fusion-webhook-secret", namespace=OPERATOR_NAMESPACE
        )
        assert secret.data is not None
        files = {}
        for key in ("ca.crt", "tls.crt", "tls.key"):
            files[key] = workdir / key
            files[key].write_bytes(base64.b64decode(secret.data[key]))
        context = ssl.create_default_context(cafile=str(files["ca.crt"]))
        url = f"https://{HOST}:{webhook_port}/mutate-v1-pod"
        metrics_url = f"http://{HOST}:{metrics_port}/metrics"
        bench = Bench(plane, kube, controller.pid, url, metrics_url, context, workdir, templates)
        results = []
        for shape in templates:
            result = await bench.measure(shape, warmup_s, seconds)
            print(f"{shape.name}: {result.load.rate:,.0f} req/s, p50 {result.load.p50_ms:.2f} ms,"
                  f" p99 {result.load.p99_ms:.2f} ms", flush=True)  # fmt: skip
            results.append(result)
        frames: dict[str, Frames] = {}
        if profile is not None:
            for shape in templates:
                stacks = profile.with_name(f"{profile.stem}-{shape.name}{profile.suffix}")
                await bench.profile(shape, seconds, stacks)
                frames[shape.name] = top_frames(stacks)
                print(f"py-spy stacks of the {shape.name} pod in {stacks}", flush=True)
        await kube.close()
        controller.terminate()
        controller.wait(30)
        limit = await ceiling(workdir, files["tls.crt"], files["tls.key"], templates[0],
                              warmup_s, seconds)  # fmt: skip
        body_bytes = len(templates[0].body(1))
        return Outcome(results, limit, frames, body_bytes)
    finally:
        if controller is not None and controller.poll() is None:
            controller.terminate()
            try:
                controller.wait(10)
            except subprocess.TimeoutExpired:
                controller.kill()
        plane.stop()


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def report(outcome: Outcome, seconds: float) -> str:
    lines = [
        "## Admission webhook (`bench/webhook.py`)",
        "",
        f"One controller process, the leader, on one core (`taskset -c {CONTROLLER_CPU}`), "
        f"serving `POST /mutate-v1-pod` over HTTPS; wrk (one thread, {CONNECTIONS} kept-alive "
        f"TLS connections) and the control plane on the other core. Typical TensorFusion pods "
        f"whose workload already exists (as the API server sends them after its defaults and "
        f"built-in admission, {outcome.body_bytes:,} bytes a review), each with its own name "
        f"and uid; {seconds:.0f} s per shape after a warm-up. Targets: >= {RATE_TARGET:,.0f} "
        f"req/s and p99 < {P99_TARGET_MS:.0f} ms.",
        "",
        "| pod | requests | req/s | p50 ms | p90 ms | p99 ms | max ms | in the handler, mean ms "
        "| controller CPU (others on its core) | req/s per controller core | API calls per "
        "request | target |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in outcome.results:
        load = result.load
        calls = ", ".join(
            f"{k} {v:.2f}"
            for k, v in sorted(result.api_calls.items(), key=lambda kv: -kv[1])
            if v >= 0.005
        )
        total = sum(result.api_calls.values())
        ok = load.rate >= RATE_TARGET and load.p99_ms < P99_TARGET_MS
        lines.append(
            f"| {result.shape.title} | {load.requests:,} | {load.rate:,.0f} | {load.p50_ms:.2f} "
            f"| {load.p90_ms:.2f} | {load.p99_ms:.2f} | {load.max_ms:.1f} "
            f"| {result.server_mean_ms:.2f} | {result.controller_cpu * 100:.0f}% "
            f"({result.others_cpu * 100:.0f}%) | {load.rate / result.controller_cpu:,.0f} "
            f"| {total:.2f} ({calls or 'none'}) | {verdict(ok)} |"
        )  # fmt: skip
    limit = outcome.ceiling
    api_cpu = ", ".join(f"{r.shape.name} {r.api_cpu * 100:.0f}%" for r in outcome.results)
    client_cpu = ", ".join(f"{r.shape.name} {r.load.client_cpu * 100:.0f}%"
                           for r in outcome.results)  # fmt: skip
    lines += [
        "",
        f"Load generator ceiling: wrk drove {limit.rate:,.0f} req/s (p50 {limit.p50_ms:.2f} ms, "
        f"p99 {limit.p99_ms:.2f} ms) with the same bodies against a trivial aiohttp HTTPS "
        f"endpoint (orjson decode, a small answer) on the controller's core, using "
        f"{limit.client_cpu * 100:.0f}% of its own core; during the runs above it used "
        f"{client_cpu}, and kube-apiserver {api_cpu} (on the same core as wrk).",
        "Every answer of each run was counted `mutated` by the webhook's own counter; "
        f"{2 * SAMPLES} answers per shape (before and after) were checked through the "
        "controller's CA: allowed, the request's uid, a JSONPatch setting `/spec/schedulerName`.",
        "API calls per request: the API server's `apiserver_request_total` over the run, all "
        "clients (the controller's lease renewals and informers included), per admission. "
        "Req/s per controller core: req/s divided by the controller's CPU share, what it would "
        "serve with the core to itself (this machine is shared: `others` is what other "
        "processes took of that core during the run).",
    ]
    if outcome.profiles:

        def listed(items: list[tuple[str, float]]) -> str:
            return ", ".join(f"`{name}` {share * 100:.0f}%" for name, share in items)

        lines += [
            "",
            "Where the controller's event loop spends its busy time (py-spy at 100 Hz, one more "
            "run of each shape; shares of the loop's busy samples):",
            "",
        ]
        for name, frames in outcome.profiles.items():
            lines.append(
                f"- {name} ({frames.samples:,} samples): the webhook handler {frames.handler:.0%}"
                f", the rest HTTP, TLS and the loop. Under the handler, inclusive: "
                f"{listed(frames.in_handler)}. Innermost frame by package: "
                f"{listed(frames.packages[:8])}; by function: {listed(frames.innermost[:8])}."
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measured, per shape")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds, per shape")
    parser.add_argument("--no-write", action="store_true", help="do not update docs")
    parser.add_argument("--profile", type=Path, help="py-spy stacks, one more run: PATH-<shape>")
    parser.add_argument("--trivial-server", nargs=3, metavar=("PORT", "CERT", "KEY"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    if args.trivial_server:
        port, cert, key = args.trivial_server
        serve_trivial(int(port), Path(cert), Path(key))
        return
    outcome = asyncio.run(run(args.warmup, args.seconds, args.profile))
    section = report(outcome, args.seconds)
    print(section)
    if not args.no_write:
        write_section("webhook", section)


if __name__ == "__main__":
    main()
