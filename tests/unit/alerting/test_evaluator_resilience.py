"""An unexpected exception in one tick neither stops a rule's timer nor the state saver."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tensorfusion.adapters.tsdb.store import QueryResult, StoreHealth
from tensorfusion.alerting.evaluator import AlertEvaluator
from tensorfusion.alerting.event_sink import RecordingEventSink
from tensorfusion.alerting.self_metrics import EvaluatorMetrics
from tensorfusion.domain.alerting.alerts import AlertNotice
from tensorfusion.domain.alerting.rules import RuleSet, load_rules
from tensorfusion.domain.metrics.conditions import Dialect
from tensorfusion.domain.metrics.rows import MetricRow


class _FlakyStore:
    """Answers one row per query, except that the listed calls raise an unexpected error."""

    kind = "duckdb"
    dialect = Dialect.DUCKDB

    def __init__(self, failing_calls: set[int]) -> None:
        self.failing_calls = failing_calls
        self.calls = 0
        self.rows: list[tuple[Any, ...]] = [("node-a",)]

    async def start(self) -> None:
        """Nothing to start."""

    async def close(self) -> None:
        """Nothing to close."""

    async def query(self, sql: str, timeout_s: float) -> QueryResult:
        self.calls += 1
        if self.calls in self.failing_calls:
            raise RuntimeError(f"unexpected failure in call {self.calls}")
        return QueryResult(("node",), list(self.rows))

    async def write(self, rows: Sequence[MetricRow]) -> None:
        """Nothing is written."""

    async def apply_ttl(self, ttl: str) -> None:
        """No retention."""

    def health(self) -> StoreHealth:
        return StoreHealth("duckdb", "fake")


class _FlakyStateStore:
    """Raises an unexpected error on the first save, then keeps what it is given."""

    def __init__(self) -> None:
        self.saves = 0
        self.saved: list[list[dict[str, Any]]] = []

    def load(self) -> list[dict[str, Any]]:
        return []

    def save(self, records: Sequence[Mapping[str, Any]]) -> None:
        self.saves += 1
        if self.saves == 1:
            raise RuntimeError("unexpected failure while saving")
        self.saved.append([dict(record) for record in records])


class _Notices:
    def __init__(self) -> None:
        self.notices: list[AlertNotice] = []

    def submit(self, notices: Sequence[AlertNotice]) -> None:
        self.notices.extend(notices)


def _rules() -> RuleSet:
    return load_rules(
        [
            {
                "name": "Flaky",
                "query": "SELECT 'node-a' AS node",
                "evaluationInterval": "1s",
                "consecutiveCount": 1,
                "severity": "P2",
                "alertTargetInstance": "{{ .node }}",
            }
        ]
    )


async def _eventually(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.01)


def _errors(metrics: EvaluatorMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_a_rule_keeps_its_timer_after_an_unexpected_exception() -> None:
    store = _FlakyStore(failing_calls={1})
    notices = _Notices()
    metrics = EvaluatorMetrics()
    evaluator = AlertEvaluator(
        store,
        notices,
        state_store=_FlakyStateStore(),
        events=RecordingEventSink(),
        metrics=metrics,
        max_first_delay_s=0.0,
    )
    await evaluator.start(_rules())
    try:
        await _eventually(lambda: store.calls >= 1, 10, "the first tick")
        await _eventually(lambda: notices.notices != [], 10, "a later tick that fires")
        assert store.calls >= 2
        assert _errors(metrics, "tf_alert_evaluation_errors_total", rule="Flaky") == 1
        assert _errors(metrics, "tf_alert_evaluations_total", rule="Flaky", result="ok") >= 1
        assert [notice.labels["node"] for notice in notices.notices] == ["node-a"]
    finally:
        await evaluator.stop()


async def test_the_state_saver_keeps_running_after_an_unexpected_exception() -> None:
    store = _FlakyStore(failing_calls=set())
    state = _FlakyStateStore()
    metrics = EvaluatorMetrics()
    evaluator = AlertEvaluator(
        store,
        _Notices(),
        state_store=state,
        events=RecordingEventSink(),
        metrics=metrics,
        persist_interval_s=0.01,
    )
    await evaluator.start(_rules(), timers=False)
    try:
        await evaluator.evaluate("Flaky")  # fires: the firing set changed
        await _eventually(lambda: state.saved != [], 10, "the retried save")
        assert _errors(metrics, "tf_alert_state_save_errors_total") == 1
        assert [record["rule"] for record in state.saved[-1]] == ["Flaky"]
        store.rows = []
        await evaluator.evaluate("Flaky")  # resolves: changed again, saved by the same loop
        await _eventually(lambda: state.saved[-1] == [], 10, "the save after the resolution")
        assert _errors(metrics, "tf_alert_state_save_errors_total") == 1
    finally:
        await evaluator.stop()
