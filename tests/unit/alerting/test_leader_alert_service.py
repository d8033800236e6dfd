"""The leader alert service with fakes: a term evaluates and delivers, stops at once on
cancellation, a new term restores the firing set, reloads apply, failures become Events, and
`/api/alerts` / `/api/config` describe the replica."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from lightkube import AsyncClient

from tensorfusion.adapters.tsdb.store import QueryResult, StoreHealth, StoreUnavailableError
from tensorfusion.alerting.event_sink import RecordingEventSink
from tensorfusion.alerting.leader_service import AlertProcess, LeaderAlertService
from tensorfusion.alerting.replica_config import ReplicaConfig
from tensorfusion.alerting.state_store import MemoryStateStore, StateStore, StateStoreError
from tensorfusion.domain.alerting.alerts import AlertNotice
from tensorfusion.domain.alerting.dynamic_config import DynamicConfig
from tensorfusion.domain.metrics.conditions import Dialect
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment
from tensorfusion.domain.settings.controller_flags import ControllerFlags


class ConstantStore:
    """One row per query (`node-a`), or an outage."""

    kind = "duckdb"
    dialect = Dialect.DUCKDB

    def __init__(self) -> None:
        self.calls = 0
        self.down = False

    async def start(self) -> None:
        """Nothing to start."""

    async def close(self) -> None:
        """Nothing to close."""

    async def query(self, sql: str, timeout_s: float) -> QueryResult:
        self.calls += 1
        if self.down:
            raise StoreUnavailableError("fake store: connection refused")
        return QueryResult(("node",), [("node-a",)])

    async def write(self, rows: Sequence[MetricRow]) -> None:
        """Nothing is written."""

    async def apply_ttl(self, ttl: str) -> None:
        """No retention."""

    def health(self) -> StoreHealth:
        return StoreHealth("duckdb", "fake.duckdb", read_up=not self.down)


@dataclass
class Targets:
    """Alertmanager targets that keep what they are given, with the store's call count."""

    store: ConstantStore
    received: list[tuple[int, AlertNotice]] = field(default_factory=list)
    started: bool = False
    stopped: bool = False
    failures: int = 0

    def submit(self, notices: Sequence[AlertNotice]) -> None:
        self.received.extend((self.store.calls, notice) for notice in notices)

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def status(self) -> list[dict[str, Any]]:
        return [{"url": "http://am-0:9093/api/v2/alerts", "consecutiveFailures": self.failures,
                 "lastError": "HTTP 503" if self.failures else ""}]  # fmt: skip


@dataclass
class Process:
    """The parts of the controller process the service reads."""

    flags: ControllerFlags = field(default_factory=lambda: ControllerFlags(enable_alert=True))
    env: ControllerEnvironment = field(
        default_factory=lambda: ControllerEnvironment(pod_name="replica-a", namespace="tf-sys")
    )
    leading: bool = True

    @property
    def client(self) -> AsyncClient:
        return cast(AsyncClient, None)

    def fence(self) -> float:
        return 10.0

    def is_leader(self) -> bool:
        return self.leading


def rule(name: str, count: int = 1, query: str = "SELECT 'node-a' AS node") -> dict[str, Any]:
    return {"name": name, "query": query, "evaluationInterval": "1s", "consecutiveCount": count,
            "severity": "P1", "alertTargetInstance": "{{ .node }}"}  # fmt: skip


def write_config(directory: Path, rules: list[dict[str, Any]]) -> None:
    temporary = directory / ".config.yaml.tmp"
    temporary.write_text(yaml.safe_dump({"alertRules": rules}))
    os.replace(temporary, directory / "config.yaml")


async def eventually(check: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.01)


@dataclass
class Harness:
    config: ReplicaConfig
    events: RecordingEventSink
    store: ConstantStore
    state: StateStore
    targets: list[Targets] = field(default_factory=list)

    def service(self, **options: Any) -> LeaderAlertService:
        async def store() -> ConstantStore:
            return self.store

        def targets(process: AlertProcess) -> Targets:
            made = Targets(self.store)
            self.targets.append(made)
            return made

        return LeaderAlertService(
            self.config,
            store=store,
            state_store_factory=lambda process: self.state,
            targets_factory=targets,
            max_first_delay_s=0.0,
            persist_interval_s=0.05,
            **options,
        )


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    write_config(tmp_path, [rule("Always", count=3)])
    events = RecordingEventSink()
    config = ReplicaConfig(tmp_path / "config.yaml", events=events, poll_interval_s=0.05)
    await config.start()
    yield Harness(config, events, ConstantStore(), MemoryStateStore())
    await config.stop()


def firing(targets: Targets) -> list[tuple[int, AlertNotice]]:
    return [(calls, n) for calls, n in targets.received if not n.resolved]


async def test_a_term_fires_stops_at_once_and_the_next_term_continues_the_same_alert(
    harness: Harness,
) -> None:
    service = harness.service()
    process = Process()
    work = asyncio.create_task(service.work(process))
    await eventually(lambda: len(harness.targets) == 1 and firing(harness.targets[0]) != [],
                     "the first firing notice")  # fmt: skip
    first = harness.targets[0]
    calls, notice = firing(first)[0]
    assert calls == 3  # consecutiveCount 3: fired at the third evaluation
    await eventually(lambda: harness.state.load() != [], "the firing set saved")
    evaluator = service.evaluator
    assert evaluator is not None and first.started
    work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await work
    assert first.stopped and not evaluator.running and service.evaluator is None
    # A new term (a new leader) with the same state store.
    harness.store.calls = 0
    second_work = asyncio.create_task(service.work(process))
    await eventually(lambda: len(harness.targets) == 2 and firing(harness.targets[1]) != [],
                     "the firing notice of the second term")  # fmt: skip
    calls, again = firing(harness.targets[1])[0]
    assert calls == 1, "restored as firing: re-sent at the first evaluation, not after three"
    assert (again.fingerprint, again.starts_at_ms) == (notice.fingerprint, notice.starts_at_ms)
    assert not any(n.resolved for _, n in harness.targets[1].received)
    second_work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second_work
    assert service.terms == 2


async def test_a_reload_applies_to_the_running_term_and_a_removed_rule_resolves(
    harness: Harness, tmp_path: Path
) -> None:
    service = harness.service()
    work = asyncio.create_task(service.work(Process()))
    try:
        write_config(tmp_path, [rule("Always", count=3), rule("Added")])
        await eventually(
            lambda: any(n.rule == "Added" for t in harness.targets for _, n in t.received),
            "the added rule firing",
        )
        write_config(tmp_path, [rule("Always", count=3)])
        await eventually(
            lambda: any(n.rule == "Added" and n.resolved for _, n in harness.targets[0].received),
            "the removed rule's alert resolved",
        )
        # The console's "recently resolved": the resolution is kept in /api/alerts' history.
        [resolved] = service.alerts_body(Process())["history"]
        assert resolved["rule"] == "Added" and resolved["endsAt"] >= resolved["startsAt"]
    finally:
        work.cancel()
        with pytest.raises(asyncio.CancelledError):
            await work


async def test_store_and_delivery_failures_become_warning_events_once(harness: Harness) -> None:
    service = harness.service(health_interval_s=0.05)
    work = asyncio.create_task(service.work(Process()))
    try:
        await eventually(lambda: harness.store.calls >= 1, "an evaluation")
        harness.store.down = True
        await eventually(
            lambda: any(e.reason == "MetricsStoreUnavailable" for e in harness.events.events),
            "the store outage reported",
        )
        harness.targets[0].failures = 3
        await eventually(
            lambda: any(e.reason == "AlertDeliveryFailing" for e in harness.events.events),
            "the delivery failure reported",
        )
        checks = harness.store.calls
        await eventually(lambda: harness.store.calls >= checks + 3, "more evaluations")
        reasons = [e.reason for e in harness.events.events]
        assert reasons.count("MetricsStoreUnavailable") == 1
        assert reasons.count("AlertDeliveryFailing") == 1
        message = next(e.message for e in harness.events.events if "Alertmanager" in e.message)
        assert "http://am-0:9093/api/v2/alerts" in message and "HTTP 503" in message
    finally:
        work.cancel()
        with pytest.raises(asyncio.CancelledError):
            await work


async def test_the_bodies_of_api_alerts_and_api_config_for_a_follower_and_the_leader(
    harness: Harness, tmp_path: Path
) -> None:
    write_config(tmp_path, [rule("Always", count=3), {"name": "Broken", "query": "SELECT 1",
                                                      "evaluationInterval": "1.5h"}])  # fmt: skip
    await eventually(lambda: len(harness.config.config.rules.problems) == 1, "the reload")
    service = harness.service()
    follower = Process(leading=False)
    body = service.alerts_body(follower)
    assert body["replica"] == {"pod": "replica-a", "leader": False}
    assert body["running"] is False and body["store"]["kind"] == "duckdb"
    assert [(r["name"], r["valid"]) for r in body["rules"]] == [("Always", True), ("Broken", False)]
    assert "1.5h" in body["rules"][1]["error"]
    config = harness.config.config_body()
    assert config["file"] == str(tmp_path / "config.yaml") and len(config["sha256"]) == 64
    assert [r["name"] for r in config["config"]["alertRules"]] == ["Always", "Broken"]
    assert any(e.reason == "AlertRuleInvalid" for e in harness.events.events)
    leader = Process()
    work = asyncio.create_task(service.work(leader))
    try:
        await eventually(lambda: service.alerts_body(leader)["running"] is True, "the evaluator")
        body = service.alerts_body(leader)
        assert body["replica"] == {"pod": "replica-a", "leader": True}
        assert body["alertmanagers"][0]["url"] == "http://am-0:9093/api/v2/alerts"
        assert {r["name"] for r in body["rules"]} == {"Always", "Broken"}
    finally:
        work.cancel()
        with pytest.raises(asyncio.CancelledError):
            await work


async def test_without_enable_alert_the_work_idles_and_touches_no_store(harness: Harness) -> None:
    asked: list[bool] = []

    async def store() -> ConstantStore:
        asked.append(True)
        return harness.store

    service = LeaderAlertService(harness.config, store=store)
    work = asyncio.create_task(service.work(Process(flags=ControllerFlags(enable_alert=False))))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not work.done() and asked == [] and service.evaluator is None
    work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await work


class FlakyState(MemoryStateStore):
    """Unreadable for the first `failures` loads (the API server is down at first)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.loads = 0

    def load(self) -> list[dict[str, Any]]:
        self.loads += 1
        if self.loads <= self.failures:
            raise StateStoreError(f"load {self.loads} failed")
        return super().load()


async def test_the_state_is_read_before_the_first_evaluation_retrying_a_failing_store(
    harness: Harness,
) -> None:
    harness.state = FlakyState(failures=2)
    service = harness.service(state_load_retry_s=0.01)
    work = asyncio.create_task(service.work(Process()))
    try:
        await eventually(lambda: harness.store.calls >= 1, "the first evaluation")
        assert isinstance(harness.state, FlakyState)
        # Two failed reads, one that worked, then the evaluator's own read.
        assert harness.state.loads == 4
    finally:
        work.cancel()
        with pytest.raises(asyncio.CancelledError):
            await work


async def test_a_state_that_stays_unreadable_is_given_up_after_the_patience(
    harness: Harness,
) -> None:
    harness.state = FlakyState(failures=1000)
    service = harness.service(state_load_retry_s=0.01, state_load_patience_s=0.05)
    work = asyncio.create_task(service.work(Process()))
    try:
        await eventually(lambda: harness.store.calls >= 1, "evaluation without the state")
    finally:
        work.cancel()
        with pytest.raises(asyncio.CancelledError):
            await work


async def test_a_failing_listener_never_keeps_the_others_from_a_new_config(
    harness: Harness, tmp_path: Path
) -> None:
    seen: list[list[str]] = []

    async def broken(config: DynamicConfig) -> None:
        raise RuntimeError("listener bug")

    async def keeps(config: DynamicConfig) -> None:
        seen.append([rule.name for rule in config.rules.rules])

    harness.config.listen(broken)
    remove = harness.config.listen(keeps)
    write_config(tmp_path, [rule("Other")])
    await eventually(lambda: seen == [["Other"]], "the new config at the second listener")
    remove()
    write_config(tmp_path, [rule("Third")])
    await eventually(lambda: harness.config.config.rules.rules[0].name == "Third", "the reload")
    assert seen == [["Other"]]
