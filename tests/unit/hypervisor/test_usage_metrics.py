"""The agent's metrics loop: a row per GPU and per (worker, allocated GPU) for every worker on
the node, idle ones included, with the simulated provider's shares and limiter counters; the
agent's own log records at its level as `tf_system_log` rows; the writer posts them with the
token read anew each cycle and retries a failing endpoint; nothing ends the loop."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import Counter

from tensorfusion.adapters.tsdb.greptime_writer import LineProtocolWriter, WriteEndpoint
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.backoff import Backoff
from tensorfusion.domain.devices.inventory import DeviceInfo, DeviceSample, Inventory, ProviderError
from tensorfusion.domain.devices.simulated_provider import SimulatedProvider
from tensorfusion.domain.devices.simulation import parse_simulation
from tensorfusion.domain.metrics.line_protocol import parse_lines
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.settings.hypervisor_environment import HypervisorEnvironment
from tensorfusion.hypervisor.system_log import SystemLogRows
from tensorfusion.hypervisor.usage_metrics import (
    UsageMetrics,
    WriteCredentials,
    WriteTls,
    usage_metrics,
)
from tensorfusion.hypervisor.usage_samples import NodeGPUCapacity
from tests.peer_tls import release_bundle, serving

GIB = 1 << 30
START_S = 1_800_000_000.0
HOT, COOL = "GPU-AAAA-0", "GPU-BBBB-1"
SIMULATION = f"""
gpus:
  - model: NVIDIA H100 80GB HBM3
    vram: 80Gi
    uuid: {HOT}
    usage: {{compute: 50, memoryUsed: 40Gi, temperature: 95, power: 600}}
    workers:
      busy: {{compute: 30, memoryUsed: 8Gi, computeThrottledPerSecond: 5,
              vramFreezedPerSecond: 0.5, vramResumedPerSecond: 0.25}}
      sharer: {{compute: 10, memoryUsed: 20Gi}}
  - model: NVIDIA H100 80GB HBM3
    vram: 80Gi
    uuid: {COOL}
"""
FIGURES = NodeGPUCapacity("node-1", "shared", {HOT.lower(): 989_500, COOL.lower(): 989_500},
                      {HOT.lower(): 80 * GIB, COOL.lower(): 80 * GIB})  # fmt: skip


def pod(name: str, gpus: str, *, phase: str = "Pending", vram_limit: str = "",
        workload: str = "", owner: str = "") -> dict[str, Any]:  # fmt: skip
    annotations = {KEYS.gpu_ids: gpus, **({KEYS.vram_limit: vram_limit} if vram_limit else {})}
    labels = {KEYS.workload: workload} if workload else {}
    labels.update({"team.example.com/owner": owner} if owner else {})
    return {"metadata": {"name": name, "namespace": "team-a", "labels": labels,
                         "annotations": annotations},
            "status": {"phase": phase}}  # fmt: skip


PODS = [
    pod("busy", HOT.lower(), vram_limit="16Gi", workload="infer", owner="search"),
    pod("sharer", HOT.lower(), phase="Running"),
    pod("idle", f"{HOT.lower()},{COOL.lower()}"),
    pod("done", HOT.lower(), phase="Succeeded"),
    pod("plain", ""),
]


class Failing:
    """A provider whose samples fail."""

    name = "broken"

    def discover(self) -> Any:
        raise ProviderError("unused")

    def sample(self, now_s: float) -> tuple[DeviceSample, ...]:
        raise ProviderError("Xid 79: GPU has fallen off the bus")


def loop(
    writer: LineProtocolWriter,
    *,
    provider: Any = None,
    figures: Callable[[], NodeGPUCapacity] = lambda: FIGURES,
    authorization: Callable[[], str] = lambda: "",
    log_rows: SystemLogRows | None = None,
    interval_s: float = 10.0,
    extra_labels: dict[str, str] | None = None,
    tls: Callable[[], ssl.SSLContext | None] = lambda: None,
) -> UsageMetrics:
    spec = parse_simulation(SIMULATION, "sim.yaml", "node-1")
    return UsageMetrics(provider=provider or SimulatedProvider(spec, START_S), figures=figures,
                        pods=lambda: PODS, writer=writer, authorization=authorization, tls=tls,
                        interval_s=interval_s, log_rows=log_rows,
                        extra_labels=extra_labels)  # fmt: skip


def buffered(writer: LineProtocolWriter) -> list[MetricRow]:
    """The rows waiting in the writer, read back with the line-protocol parser."""
    lines = writer.buffer.peek_batch(100_000, 1 << 30)
    return parse_lines("\n".join(entry.line for entry in lines), precision="ms")


def by_key(rows: list[MetricRow], table: str, *tags: str) -> dict[tuple[str, ...], MetricRow]:
    return {tuple(r.tags[t] for t in tags): r for r in rows if r.table == table}


async def test_a_row_per_gpu_and_per_allocated_worker_idle_ones_included() -> None:
    writer = LineProtocolWriter(WriteEndpoint("http://127.0.0.1:9/unused"))
    usage = loop(writer, extra_labels={"team.example.com/owner": "owner"})
    assert await usage.cycle(START_S + 10) == 6
    rows = buffered(writer)
    assert {r.ts_ms for r in rows} == {int((START_S + 10) * 1000)}, "one timestamp per cycle"

    gpus = by_key(rows, "tf_gpu_usage", "uuid")
    assert set(gpus) == {(HOT.lower(),), (COOL.lower(),)}
    hot = gpus[(HOT.lower(),)]
    assert hot.tags == {"node": "node-1", "pool": "shared", "uuid": HOT.lower()}
    assert hot.fields["compute_percentage"] == 50.0
    assert hot.fields["compute_tflops"] == pytest.approx(494.75)
    assert (hot.fields["memory_bytes"], hot.fields["memory_percentage"]) == (40 * GIB, 50.0)
    assert (hot.fields["temperature"], hot.fields["power_usage"]) == (95.0, 600.0)

    workers = by_key(rows, "tf_worker_usage", "worker", "uuid")
    assert set(workers) == {("busy", HOT.lower()), ("sharer", HOT.lower()),
                            ("idle", HOT.lower()), ("idle", COOL.lower())}  # fmt: skip
    busy = workers[("busy", HOT.lower())]
    assert busy.tags == {"workload": "infer", "worker": "busy", "pod_name": "busy",
                         "namespace": "team-a", "pool": "shared", "node": "node-1",
                         "uuid": HOT.lower(), "owner": "search"}  # fmt: skip
    assert busy.fields["compute_percentage"] == 30.0
    assert busy.fields["usage_known"] == 1, "the simulated provider attributes it"
    assert busy.fields["compute_tflops"] == pytest.approx(296.85)
    assert busy.fields["memory_bytes"] == 8 * GIB
    assert busy.fields["memory_percentage"] == 50.0, "against its 16Gi vram-limit"
    assert (busy.fields["compute_throttled_cnt"], busy.fields["vram_freezed_cnt"],
            busy.fields["vram_resumed_cnt"]) == (50, 5, 2)  # fmt: skip
    sharer = workers[("sharer", HOT.lower())]
    assert sharer.fields["memory_percentage"] == 25.0, "no limit: against the GPU's 80Gi"
    assert sharer.tags["workload"] == "unknown"
    assert "owner" not in sharer.tags, "a pod without the label has no extra tag"
    for gpu in (HOT, COOL):
        idle = workers[("idle", gpu.lower())].fields
        assert idle == {"compute_percentage": 0.0, "compute_tflops": 0.0, "memory_bytes": 0,
                        "memory_percentage": 0.0, "compute_throttled_cnt": 0,
                        "vram_freezed_cnt": 0, "vram_resumed_cnt": 0,
                        "enforced_vram_limit_bytes": 0,
                        "enforced_compute_percent": 0.0, "usage_known": 0}  # fmt: skip


async def test_limiter_counters_grow_and_capacity_follows_the_last_discovery() -> None:
    writer = LineProtocolWriter(WriteEndpoint("http://127.0.0.1:9/unused"))
    figures = [NodeGPUCapacity("node-1", "shared", {}, {})]
    usage = loop(writer, figures=lambda: figures[-1])
    await usage.cycle(START_S + 2)
    figures.append(FIGURES)
    await usage.cycle(START_S + 4)
    rows = [r for r in buffered(writer) if r.tags.get("worker") == "busy"]
    assert [r.fields["compute_throttled_cnt"] for r in rows] == [10, 20]
    assert [r.fields["compute_tflops"] for r in rows] == [0.0, pytest.approx(296.85)]
    assert [r.fields["memory_percentage"] for r in rows] == [50.0, 50.0]


async def test_log_records_at_the_level_become_system_log_rows() -> None:
    writer = LineProtocolWriter(WriteEndpoint("http://127.0.0.1:9/unused"))
    log_rows = SystemLogRows(component="hypervisor", level="warn", pod="hypervisor-node-1",
                             namespace="tf-system", container="hypervisor")  # fmt: skip
    usage = loop(writer, log_rows=log_rows)
    logger = logging.getLogger("tensorfusion.test.usage")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(log_rows)
    try:
        logger.info("not shipped at warn")
        logger.warning('GPU "%s" is hot', HOT)
        logger.error("x" * 9000)
    finally:
        logger.removeHandler(log_rows)
    await usage.cycle(START_S)
    logs = [r for r in buffered(writer) if r.table == "tf_system_log"]
    assert [r.fields["level"] for r in logs] == ["warn", "error"]
    assert logs[0].tags == {"component": "hypervisor", "container": "hypervisor",
                            "namespace": "tf-system", "pod": "hypervisor-node-1"}  # fmt: skip
    assert logs[0].fields["message"] == f'GPU "{HOT}" is hot'
    assert logs[0].fields["stream"] == "stderr"
    assert str(logs[0].fields["timestamp"]).endswith("Z")
    assert len(str(logs[0].fields["timestamp"])) == len("2026-01-01T00:00:00.123456789Z")
    assert len(str(logs[1].fields["message"])) == 8192, "cut at 8 KiB"
    assert log_rows.drain() == [], "drained by the cycle"


def test_log_rows_are_rate_limited_and_counted() -> None:
    log_rows = SystemLogRows(component="hypervisor")
    for _ in range(150):
        log_rows.handle(logging.makeLogRecord({"msg": "burst", "levelno": logging.INFO,
                                               "created": 1000.5}))  # fmt: skip
    assert (len(log_rows.drain()), log_rows.dropped) == (100, 50)


@dataclass
class Endpoint:
    """A loopback store: answers with the scripted statuses, then 204."""

    script: list[int] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.headers.get("Authorization", ""), await request.text()))
        return web.Response(status=self.script.pop(0) if self.script else 204)


@pytest.fixture
async def store() -> AsyncIterator[tuple[Endpoint, str]]:
    endpoint = Endpoint()
    app = web.Application()
    app.router.add_post("/v1/influxdb/api/v2/write", endpoint.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield endpoint, str(server.make_url("/v1/influxdb/api/v2/write?db=public&precision=ms"))
    await server.close()


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def counted(counter: Counter) -> float:
    [metric] = counter.collect()
    return sum(s.value for s in metric.samples if s.name.endswith("_total"))


def fast_writer(url: str) -> LineProtocolWriter:
    return LineProtocolWriter(WriteEndpoint(url), batch_age_s=0.01,
                              backoff=Backoff(initial=0.01, maximum=0.02))  # fmt: skip


@pytest.fixture
async def https_store(tmp_path: Path) -> AsyncIterator[tuple[Endpoint, str, Path]]:
    """The store's write path over HTTPS with a release certificate; the CA's file."""
    bundle = release_bundle("127.0.0.1")
    assert bundle.ca_pem is not None
    ca = tmp_path / "ca.crt"
    ca.write_bytes(bundle.ca_pem)
    endpoint = Endpoint()
    app = web.Application()
    app.router.add_post("/v1/influxdb/api/v2/write", endpoint.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=serving(bundle))
    url = f"https://127.0.0.1:{server.port}/v1/influxdb/api/v2/write?db=public&precision=ms"
    yield endpoint, url, ca
    await server.close()


async def test_the_writer_posts_with_the_token_of_each_cycle_and_retries_a_failing_store(
    https_store: tuple[Endpoint, str, Path], tmp_path: Path
) -> None:
    endpoint, url, ca = https_store
    endpoint.script = [503, 500]
    token = tmp_path / "token"
    token.write_text("first\n")
    writer = fast_writer(url)
    usage = loop(writer, authorization=WriteCredentials(url=url, token_file=str(token)),
                 tls=WriteTls(str(ca)))  # fmt: skip
    await writer.start()
    try:
        await usage.cycle(START_S)
        await until(lambda: len(endpoint.requests) == 3, "two failures and a success")
        assert [auth for auth, _ in endpoint.requests] == ["Bearer first"] * 3
        assert endpoint.requests[0][1] == endpoint.requests[2][1], "the same batch retried"
        rows = parse_lines(endpoint.requests[2][1])
        assert sum(r.table == "tf_worker_usage" for r in rows) == 4
        assert counted(writer.metrics.write_errors) == 2
        token.write_text("rotated")
        await usage.cycle(START_S + 10)
        await until(lambda: len(endpoint.requests) == 4, "the next cycle's batch")
        assert endpoint.requests[3][0] == "Bearer rotated"
    finally:
        await writer.close()


def test_a_token_is_never_sent_over_plain_http(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("secret-token")
    plain = WriteCredentials(url="http://tensor-fusion.tf-sys.svc:8080", token_file=str(token))
    assert plain() == ""
    assert "not sent in cleartext" in plain.error
    assert WriteCredentials(url="https://tf:9444", token_file=str(token))() == "Bearer secret-token"


async def test_a_store_whose_certificate_the_ca_file_does_not_verify_gets_no_rows(
    https_store: tuple[Endpoint, str, Path], tmp_path: Path
) -> None:
    endpoint, url, _ = https_store
    other = release_bundle("127.0.0.1")
    assert other.ca_pem is not None
    (tmp_path / "other-ca.crt").write_bytes(other.ca_pem)
    token = tmp_path / "token"
    token.write_text("secret-token")
    writer = fast_writer(url)
    usage = loop(writer, authorization=WriteCredentials(url=url, token_file=str(token)),
                 tls=WriteTls(str(tmp_path / "other-ca.crt")))  # fmt: skip
    await writer.start()
    try:
        await usage.cycle(START_S)
        await until(lambda: counted(writer.metrics.write_errors) >= 1, "a failed write")
        assert "CERTIFICATE_VERIFY_FAILED" in writer.last_error
        assert endpoint.requests == []
    finally:
        await writer.close()


def test_credentials_cloud_user_or_a_missing_token_file(tmp_path: Path) -> None:
    cloud = WriteCredentials(user="alice", password="s3cret", token_file=str(tmp_path / "x"))
    assert cloud() == "token alice:s3cret"
    missing = WriteCredentials(url="https://tf:9444", token_file=str(tmp_path / "absent"))
    assert missing() == ""
    assert "absent" in missing.error


async def test_failures_never_end_the_loop(store: tuple[Endpoint, str]) -> None:
    endpoint, url = store
    calls: list[int] = []

    def figures() -> NodeGPUCapacity:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug in one cycle")
        return FIGURES

    broken = loop(fast_writer(url), provider=Failing(), interval_s=0.02)
    buggy = loop(fast_writer(url), figures=figures, interval_s=0.02)
    tasks = [asyncio.create_task(u.run()) for u in (broken, buggy)]
    try:
        await until(lambda: broken.sample_failures >= 3 and buggy.cycles >= 2, "more cycles")
        assert buggy.cycle_errors == 1
        assert broken.rows == 0 and broken.cycles >= 3
        await until(lambda: any("tf_gpu_usage" in body for _, body in endpoint.requests),
                    "the buggy loop's later rows written")  # fmt: skip
        assert not any(task.done() for task in tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_stopped_loop_ends_at_once_after_a_final_flush(
    store: tuple[Endpoint, str],
) -> None:
    endpoint, url = store
    writer = LineProtocolWriter(WriteEndpoint(url), batch_age_s=5.0)
    usage = loop(writer, log_rows=SystemLogRows(component="hypervisor"))
    task = asyncio.create_task(usage.run())
    await until(lambda: usage.cycles >= 1, "a cycle's rows waiting for their batch")
    logging.getLogger("tensorfusion.test.usage").warning("node agent stopping")
    task.cancel()
    await asyncio.wait({task}, timeout=3)
    assert task.done(), "close() hung"
    [request] = endpoint.requests
    last = parse_lines(request[1])
    assert {r.table for r in last} >= {"tf_gpu_usage", "tf_worker_usage"}
    assert [r.fields["message"] for r in last if r.table == "tf_system_log"] == [
        "node agent stopping"
    ]


def test_the_loop_from_the_agent_environment(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t")
    (tmp_path / "namespace").write_text("tf-system\n")
    env = {"GPU_NODE_NAME": "node-1", "TENSOR_FUSION_POOL_NAME": "shared", "POD_NAME": "hv-1",
           "TF_METRICS_INTERVAL": "1s", "TF_LOG_LEVEL": "ERROR"}  # fmt: skip
    agent = SimpleNamespace(inventory=Inventory((DeviceInfo(HOT, 0, "H100", "NVIDIA", 80 * GIB),)))
    sync = SimpleNamespace(tflops_milli={HOT.lower(): 989_500})
    spec = parse_simulation(SIMULATION, "sim.yaml", "node-1")

    def made(**extra: str) -> UsageMetrics | None:
        settings = HypervisorEnvironment.from_mapping({**env, **extra})
        return usage_metrics(settings, provider=SimulatedProvider(spec, START_S),
                             agent=cast(Any, agent), sync=cast(Any, sync), pods=list)  # fmt: skip

    assert made() is None, "no TF_METRICS_WRITE_URL: no loop"
    assert HypervisorEnvironment.from_mapping(env).metrics_write_token_file == "", (
        "no token unless the controller names one (never for GreptimeDB)"
    )
    usage = made(TF_METRICS_WRITE_URL="http://tf.tf-system:8080/",
                 TF_METRICS_WRITE_TOKEN_FILE=str(tmp_path / "token"))  # fmt: skip
    assert usage is not None and usage.log_rows is not None
    assert usage.writer.endpoint.url == (
        "http://tf.tf-system:8080/v1/influxdb/api/v2/write?db=public&precision=ms"
    )
    assert usage.log_rows.level == logging.ERROR
    log_rows = usage.log_rows
    log_rows.handle(logging.makeLogRecord({"msg": "m", "levelno": logging.ERROR}))
    assert log_rows.drain()[0].tags == {"component": "hypervisor", "container": "hypervisor",
                                        "namespace": "tf-system", "pod": "hv-1"}  # fmt: skip
