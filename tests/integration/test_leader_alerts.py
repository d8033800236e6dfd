"""The leader's alert service and metrics work against real peers on loopback.

- Three real Alertmanagers on 127.0.0.2, .3 and .4, returned by a test resolver for the
  headless Service name: each receives the always-firing rule's alert; a restart of the alert
  service (the old one killed without a last save) continues from the same state store with no
  duplicate notification and no false resolution, and the new service resolves the old one's
  alert when its row disappears.
- The metrics store in MySQL mode (MariaDB for reads, a loopback HTTP server for line-protocol
  writes): a stopped MariaDB and a stopped write endpoint are reported in the condition and
  recover without a restart; rows written meanwhile are delivered afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from aiohttp import web
from lightkube import AsyncClient
from prometheus_client import CollectorRegistry

from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore, EmbeddedMetricsStore
from tensorfusion.adapters.tsdb.greptime_store import GreptimeSettings, GreptimeStore
from tensorfusion.alerting.event_sink import RecordingEventSink
from tensorfusion.alerting.leader_service import LeaderAlertService
from tensorfusion.alerting.replica_config import ReplicaConfig
from tensorfusion.alerting.state_store import FileStateStore, StateStoreError
from tensorfusion.controller.allocator_state import AllocatorState, StateCaches
from tensorfusion.controller.metrics_leader import LeaderMetricsService, MetricsProcess
from tensorfusion.controller.tsdb_condition import StoreCondition
from tensorfusion.controller.tsdb_store import TermStore
from tensorfusion.domain.alerting.dynamic_config import DynamicConfig
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment
from tensorfusion.domain.settings.controller_flags import ControllerFlags
from tensorfusion.domain.vocabulary import IsolationPolicy
from tensorfusion.runtime.informer_store import ObjectKey

from .loopback_peers import (
    AlertmanagersBehind,
    MariaDB,
    WebhookReceiver,
    alertmanagers_on,
    eventually,
    free_port,
)

pytestmark = pytest.mark.integration

ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


@pytest.fixture
async def three_alertmanagers(tmp_path: Path) -> AsyncIterator[AlertmanagersBehind]:
    async with alertmanagers_on(ADDRESSES, tmp_path) as peers:
        yield peers


@dataclass
class Process:
    """What the alert service reads of the controller process."""

    flags: ControllerFlags = field(default_factory=lambda: ControllerFlags(enable_alert=True))
    env: ControllerEnvironment = field(
        default_factory=lambda: ControllerEnvironment(pod_name="replica-a", namespace="tf-it")
    )

    @property
    def client(self) -> AsyncClient:
        return cast(AsyncClient, None)

    def fence(self) -> float:
        return 10.0

    def is_leader(self) -> bool:
        return True


class KillableStateStore(FileStateStore):
    """A file state store whose writes stop when its process is 'killed' (no last save)."""

    alive = True

    def save(self, records: Sequence[Mapping[str, Any]]) -> None:
        if not self.alive:
            raise StateStoreError("killed: nothing more is written")
        super().save(records)


def write_config(directory: Path, query: str) -> None:
    rule = {"name": "AlwaysFiring", "query": query, "evaluationInterval": "1s",
            "consecutiveCount": 2, "severity": "P2", "alertTargetInstance": "{{ .node }}",
            "summary": "{{ .Name }} on {{ .node }}"}  # fmt: skip
    temporary = directory / ".config.yaml.tmp"
    temporary.write_text(yaml.safe_dump({"alertRules": [rule]}))
    os.replace(temporary, directory / "config.yaml")


def notifications(receiver: WebhookReceiver, status: str) -> list[dict[str, Any]]:
    return [
        alert for alert in receiver.alerts(status)
        if alert["labels"].get("alertname") == "AlwaysFiring"
    ]  # fmt: skip


def evaluations(config: ReplicaConfig) -> float:
    labels = {"rule": "AlwaysFiring", "result": "ok"}
    return config.metrics.registry.get_sample_value("tf_alert_evaluations_total", labels) or 0.0


async def test_three_discovered_alertmanagers_and_a_restart_from_the_same_state(
    tmp_path: Path,
    three_alertmanagers: AlertmanagersBehind,
) -> None:
    receivers = three_alertmanagers.receivers
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    write_config(config_dir, "SELECT 'node-a' AS node")
    database = DuckDBMetricsStore()
    store = EmbeddedMetricsStore(database)
    asked: list[str] = []

    async def resolver(host: str) -> list[str]:
        asked.append(host)
        return list(ADDRESSES)

    async def the_store() -> EmbeddedMetricsStore:
        return store

    state_file = tmp_path / "alert-state.json"

    async def run_service(
        state: KillableStateStore,
    ) -> tuple[ReplicaConfig, LeaderAlertService, asyncio.Task[None]]:
        config = ReplicaConfig(config_dir / "config.yaml", events=RecordingEventSink(),
                               poll_interval_s=0.1)  # fmt: skip
        await config.start()
        service = LeaderAlertService(
            config, store=the_store, resolver=resolver,
            alertmanager_port=three_alertmanagers.port,
            state_store_factory=lambda process: state,
            max_first_delay_s=0.1, persist_interval_s=0.2,
        )  # fmt: skip
        return config, service, asyncio.create_task(service.work(Process()))

    first_state = KillableStateStore(state_file)
    config, service, work = await run_service(first_state)
    second_config: ReplicaConfig | None = None
    second_work: asyncio.Task[None] | None = None
    try:
        await eventually(
            lambda: all(notifications(r, "firing") for r in receivers), 60,
            "the firing alert at all three Alertmanagers",
        )  # fmt: skip
        assert asked == ["alert-manager-headless.tf-it.svc.cluster.local"]
        targets = service.targets
        assert targets is not None
        assert sorted(t["url"] for t in targets.status()) == [
            f"http://{host}:{three_alertmanagers.port}/api/v2/alerts" for host in ADDRESSES
        ]
        starts_at = {notifications(r, "firing")[0]["startsAt"] for r in receivers}
        assert len(starts_at) == 1
        await eventually(lambda: state_file.exists() and first_state.load() != [], 20,
                         "the firing set saved")  # fmt: skip
        # kill -9 of the leader: nothing more is written by it, and it stops at once.
        first_state.alive = False
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        await config.stop()
        second_config, second, second_work = await run_service(KillableStateStore(state_file))
        await eventually(lambda: second.evaluator is not None, 20, "the second service")
        evaluator = second.evaluator
        assert evaluator is not None
        restored = evaluator.firing()
        assert [n.rule for n in restored] == ["AlwaysFiring"], "state loaded before evaluating"
        seen = evaluations(second_config)
        await eventually(lambda: evaluations(second_config) >= seen + 3, 30,
                         "three evaluations by the second service")  # fmt: skip
        for receiver in receivers:
            assert len(notifications(receiver, "firing")) == 1, "a duplicate notification"
            assert notifications(receiver, "resolved") == [], "a false resolution"
        # The row disappears: the new leader resolves the alert the old one fired.
        write_config(config_dir, "SELECT 'node-a' AS node WHERE 1 = 0")
        await eventually(
            lambda: all(notifications(r, "resolved") for r in receivers), 60,
            "the resolution at all three Alertmanagers",
        )  # fmt: skip
        for receiver in receivers:
            [resolved] = notifications(receiver, "resolved")
            assert resolved["startsAt"] in starts_at
    finally:
        for task in (work, second_work):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for each in (config, second_config):
            if each is not None:
                await each.stop()
        await store.close()
        database.close()


# --------------------------------------------------------------------------- store outage


class Cache:
    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {ObjectKey.of(obj): obj for obj in objects}

    def list(self, namespace: str | None = None) -> list[Mapping[str, Any]]:
        return list(self.objects.values())

    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None:
        return self.objects.get(ObjectKey(namespace, name))


def one_gpu_state() -> AllocatorState:
    gpu = {"apiVersion": "tensor-fusion.ai/v1", "kind": "GPU",
           "metadata": {"name": "gpu-it-0", "labels": {KEYS.gpupool: "shared"}},
           "status": {"phase": "Running", "capacity": {"tflops": "312", "vram": "80Gi"},
                      "nodeSelector": {"kubernetes.io/hostname": "node-it"}}}  # fmt: skip
    caches = StateCaches(gpus=Cache(gpu), gpu_nodes=Cache(), nodes=Cache(), pools=Cache(),
                         templates=Cache(), quotas=Cache(), pods=Cache())  # fmt: skip
    state = AllocatorState(caches, IsolationPolicy.STATIC, lambda: 0.0)
    state.recover()
    return state


@dataclass
class MetricsTestProcess:
    state: AllocatorState
    env: ControllerEnvironment = field(default_factory=ControllerEnvironment)

    @property
    def client(self) -> AsyncClient:
        return cast(AsyncClient, None)

    @property
    def informers(self) -> Any:
        return None

    def fence(self) -> float:
        return 10.0


class WriteEndpoint:
    """A line-protocol endpoint on loopback that can be stopped and started on its port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.lines: list[str] = []
        self.runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/influxdb/api/v2/write", self._write)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def _write(self, request: web.Request) -> web.Response:
        self.lines.extend((await request.text()).splitlines())
        return web.Response(status=204)

    def rows(self, table: str) -> list[str]:
        return [line for line in self.lines if line.startswith(f"{table},")]


class Conditions:
    def __init__(self) -> None:
        self.seen: list[StoreCondition] = []

    async def publish(self, condition: StoreCondition) -> int:
        self.seen.append(condition)
        return 1

    def reason(self) -> str | None:
        return self.seen[-1].reason if self.seen else None


@pytest.fixture
async def write_endpoint() -> AsyncIterator[WriteEndpoint]:
    endpoint = WriteEndpoint()
    await endpoint.start()
    yield endpoint
    await endpoint.stop()


async def test_a_stopped_store_is_reported_and_recovers_without_restart(
    mariadb: MariaDB, write_endpoint: WriteEndpoint
) -> None:
    settings = GreptimeSettings(host="127.0.0.1", port=mariadb.port, db="mysql",
                                write_base_url=write_endpoint.base_url)  # fmt: skip
    conditions = Conditions()

    def open_store(process: MetricsProcess, ttl: str) -> TermStore:
        store = GreptimeStore(settings, registry=CollectorRegistry())
        return TermStore(store, store.reader.target, CollectorRegistry())

    interval = DynamicConfig(metrics_record_interval="200ms", metrics_record_interval_ms=200)
    service = LeaderMetricsService(
        dynamic_config=lambda: interval, open_store=open_store,
        publisher_factory=lambda process: conditions, probe_timeout_s=5.0,
    )  # fmt: skip
    process = MetricsTestProcess(one_gpu_state())
    work = asyncio.create_task(service.work(cast(MetricsProcess, process)))
    try:
        await eventually(lambda: conditions.reason() == "Connected", 60, "Connected")
        await eventually(lambda: write_endpoint.rows("tf_node_metrics") != [], 30, "rows written")
        # Reads: MariaDB (GreptimeDB's MySQL protocol) stopped for a while.
        mariadb.stop()
        await eventually(lambda: conditions.reason() == "Unreachable", 30, "Unreachable")
        assert conditions.seen[-1].status == "False"
        assert f"127.0.0.1:{mariadb.port}" in conditions.seen[-1].message
        mariadb.start()
        await eventually(lambda: conditions.reason() == "Connected", 90,
                         "Connected again without a restart")  # fmt: skip
        # Writes: the HTTP endpoint stopped; rows stay buffered and arrive afterwards.
        await write_endpoint.stop()
        await eventually(lambda: conditions.reason() == "WriteFailed", 60, "WriteFailed")
        term = service.term
        assert term is not None and term.buffered_rows() > 0
        buffered_cycle = service.last_cycle_ms
        await write_endpoint.start()
        await eventually(lambda: conditions.reason() == "Connected", 90, "writes resumed")
        await eventually(lambda: term.buffered_rows() == 0, 60, "the buffer delivered")
        delivered = write_endpoint.rows("tf_node_metrics")
        assert any(line.endswith(f" {buffered_cycle}") for line in delivered), "a row was lost"
        statuses = [(c.status, c.reason) for c in conditions.seen]
        assert ("False", "Unreachable") in statuses and ("False", "WriteFailed") in statuses
        assert not work.done()
    finally:
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        if mariadb.process is None:
            mariadb.start()
