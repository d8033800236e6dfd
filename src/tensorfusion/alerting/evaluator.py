"""The alert evaluator: one timer per rule, the state machine, delivery and persisted state.

The controller starts it on the leader only and stops it on losing leadership; the standalone
`tensor-fusion alerts run` starts it at once. `apply_rules` applies a reload as a diff by name
(alerting.md §2.2 step 4) without touching unchanged rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from tensorfusion.adapters.task_ends import task_end_logger
from tensorfusion.adapters.tsdb.store import MetricsStore, StoreError
from tensorfusion.alerting.alerts_status import evaluation_status, rules_status
from tensorfusion.alerting.event_sink import WarningSink
from tensorfusion.alerting.self_metrics import EvaluatorMetrics
from tensorfusion.alerting.state_store import StateStore, StateStoreError
from tensorfusion.domain.alerting.alerts import DEFAULT_JOB, AlertNotice
from tensorfusion.domain.alerting.rules import AlertRule, RuleSet
from tensorfusion.domain.alerting.state import MAX_ROWS, RuleState, resolve_records
from tensorfusion.domain.alerting.templates import TemplateExecutionError
from tensorfusion.domain.metrics.conditions import wall_conditions
from tensorfusion.domain.timestamps import format_rfc3339_ms

__all__ = ["AlertEvaluator", "Notifier"]

_log = logging.getLogger(__name__)
_MAX_FIRST_DELAY_S: Final = 7.0
HISTORY_ENTRIES: Final = 100
"""Resolved alerts kept for `GET /api/alerts` (`history`, newest first; this term only)."""
_MAX_QUERY_TIMEOUT_S: Final = 30.0


class Notifier(Protocol):
    """Where notices go (the Alertmanager client)."""

    def submit(self, notices: Sequence[AlertNotice]) -> None:
        """Queue notices for delivery; never blocks."""


@dataclass(slots=True)
class _RuleRuntime:
    rule: AlertRule
    state: RuleState = field(default_factory=RuleState)
    task: asyncio.Task[None] | None = None
    last_evaluation_ms: int | None = None
    last_duration_ms: float | None = None
    last_error: str = ""
    row_errors: tuple[str, ...] = ()
    busy: bool = False


class AlertEvaluator:
    """Evaluates rules against a metrics store and hands notices to a notifier."""

    def __init__(
        self,
        store: MetricsStore,
        notifier: Notifier,
        *,
        state_store: StateStore,
        events: WarningSink,
        metrics: EvaluatorMetrics | None = None,
        job: str = DEFAULT_JOB,
        clock_ms: Callable[[], int] | None = None,
        rng: random.Random | None = None,
        max_first_delay_s: float = _MAX_FIRST_DELAY_S,
        persist_interval_s: float = 10.0,
    ) -> None:
        self._store = store
        self._notifier = notifier
        self._state_store = state_store
        self._events = events
        self.metrics = metrics or EvaluatorMetrics()
        self._job = job
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._rng = rng or random.Random()
        self._max_first_delay_s = max_first_delay_s
        self._persist_interval_s = persist_interval_s
        self._rules: dict[str, _RuleRuntime] = {}
        self._running = False
        self._dirty = asyncio.Event()
        self._persist_task: asyncio.Task[None] | None = None
        self._pending_rule_set: RuleSet = RuleSet()
        self._store_error = ""
        self._timers = True
        self._history: deque[dict[str, Any]] = deque(maxlen=HISTORY_ENTRIES)

    # ------------------------------------------------------------------ lifecycle

    @property
    def running(self) -> bool:
        """True between start and stop."""
        return self._running

    async def start(self, rule_set: RuleSet | None = None, *, timers: bool = True) -> None:
        """Load the persisted firing set, then start one timer per rule.

        With `timers=False` nothing is scheduled: evaluations happen only through `evaluate`
        (tests and simulated clocks drive it).
        """
        if self._running:
            return
        self._running = True
        self._timers = timers
        if rule_set is not None:
            self._pending_rule_set = rule_set
        self._record_invalid(self._pending_rule_set)
        for rule in self._pending_rule_set.rules:
            self._rules[rule.name] = _RuleRuntime(rule)
        await self._restore()
        for runtime in self._rules.values():
            self._start_timer(runtime)
        self._persist_task = asyncio.create_task(self._persist_loop(), name="alert-state-persist")
        self._persist_task.add_done_callback(task_end_logger(_log))
        self._update_gauges()
        _log.info("alert evaluator started with %d rules", len(self._rules))

    async def stop(self) -> None:
        """Stop every timer at once and send nothing more; persist the firing set."""
        if not self._running:
            return
        self._running = False
        tasks = [rt.task for rt in self._rules.values() if rt.task is not None]
        if self._persist_task is not None:
            tasks.append(self._persist_task)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for runtime in self._rules.values():
            runtime.task = None
        self._persist_task = None
        await self._save()
        _log.info("alert evaluator stopped")

    async def apply_rules(self, rule_set: RuleSet) -> None:
        """Apply a new rule list as a diff by name (works before start, too)."""
        self._pending_rule_set = rule_set
        self._record_invalid(rule_set)
        if not self._running:
            return
        now_ms = self._clock_ms()
        wanted = rule_set.by_name()
        resolved: list[AlertNotice] = []
        for name in [name for name in self._rules if name not in wanted]:
            runtime = self._rules.pop(name)
            if runtime.task is not None:
                runtime.task.cancel()
            resolved.extend(runtime.state.resolve_all(name, now_ms))
            self.metrics.firing.labels(name).set(0)
            _log.info("rule %s removed; %d firing alerts resolved", name, len(resolved))
        if resolved:
            self._send(resolved, test_mode=False)
            self._dirty.set()
        for name, rule in wanted.items():
            existing = self._rules.get(name)
            if existing is None:
                added = self._rules[name] = _RuleRuntime(rule)
                self._start_timer(added)
                _log.info("rule %s added", name)
            elif existing.rule.definition != rule.definition:
                interval_changed = existing.rule.interval_ms != rule.interval_ms
                existing.rule = rule
                if interval_changed:
                    if existing.task is not None:
                        existing.task.cancel()
                    self._start_timer(existing)
                _log.info("rule %s changed", name)
        self._update_gauges()

    # ------------------------------------------------------------------ timers

    def _start_timer(self, runtime: _RuleRuntime) -> None:
        if not self._timers:
            return
        runtime.task = asyncio.create_task(self._timer(runtime), name=f"rule:{runtime.rule.name}")
        runtime.task.add_done_callback(task_end_logger(_log))

    async def _timer(self, runtime: _RuleRuntime) -> None:
        loop = asyncio.get_running_loop()
        interval_s = runtime.rule.interval_ms / 1000
        first = loop.time() + self._rng.uniform(0, min(self._max_first_delay_s, interval_s))
        tick = 0
        while True:
            delay = first + tick * interval_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.evaluate(runtime.rule.name)
            # Skip ticks missed while this evaluation overran.
            elapsed = loop.time() - first
            tick = max(tick + 1, math.ceil(elapsed / interval_s))

    # ------------------------------------------------------------------ evaluation

    async def evaluate(self, name: str) -> None:
        """Evaluate one rule now (also used by tests and the timers).

        An unexpected exception is logged and counted, never raised: the rule's timer goes on.
        """
        runtime = self._rules.get(name)
        if runtime is None or runtime.busy:
            return
        runtime.busy = True
        try:
            await self._evaluate(runtime)
        except Exception as error:
            runtime.last_error = f"evaluation failed: {type(error).__name__}: {error}"
            self.metrics.evaluation_errors.labels(name).inc()
            _log.exception("rule %s: evaluation failed; the rule keeps running", name)
        finally:
            runtime.busy = False

    async def _evaluate(self, runtime: _RuleRuntime) -> None:
        rule = runtime.rule
        started = time.perf_counter()
        now_ms = self._clock_ms()
        runtime.last_evaluation_ms = now_ms
        conditions = wall_conditions(
            self._store.dialect, rule.evaluation_interval, rule.interval_ms
        )
        try:
            sql = rule.render_query(conditions)
        except TemplateExecutionError as error:
            runtime.last_error = f"query template failed: {error}"
            self.metrics.evaluations.labels(rule.name, "template_error").inc()
            _log.error("rule %s: %s", rule.name, runtime.last_error)
            return
        timeout_s = min(rule.interval_ms / 1000, _MAX_QUERY_TIMEOUT_S)
        try:
            result = await self._store.query(sql, timeout_s)
        except StoreError as error:
            if runtime.last_error != str(error):
                _log.error("rule %s: query failed, state kept: %s", rule.name, error)
            runtime.last_error = str(error)
            self._store_error = str(error)
            self.metrics.evaluations.labels(rule.name, "query_error").inc()
            self.metrics.store_up.labels("read").set(0)
            runtime.last_duration_ms = (time.perf_counter() - started) * 1000
            return
        self._store_error = ""
        self.metrics.store_up.labels("read").set(1)
        if not self._running or self._rules.get(rule.name) is not runtime:
            return  # stopped or removed while the query ran: send nothing
        truncated = len(result.rows) > MAX_ROWS
        if truncated:
            _log.warning(
                "rule %s returned %d rows; only the first %d are used and nothing resolves",
                rule.name,
                len(result.rows),
                MAX_ROWS,
            )
        outcome = runtime.state.evaluate(
            rule, result.mappings(MAX_ROWS), now_ms, truncated=truncated, job=self._job
        )
        runtime.row_errors = outcome.row_errors
        for message in outcome.row_errors:
            _log.error("%s", message)
        runtime.last_error = outcome.row_errors[0] if outcome.row_errors else ""
        self.metrics.evaluations.labels(
            rule.name, "template_error" if outcome.row_errors else "ok"
        ).inc()
        self._send(list(outcome.notices), test_mode=rule.test_mode)
        if outcome.firing_changed:
            self._dirty.set()
        self.metrics.firing.labels(rule.name).set(len(runtime.state.firing()))
        duration = time.perf_counter() - started
        runtime.last_duration_ms = duration * 1000
        self.metrics.duration.labels(rule.name).observe(duration)

    def _send(self, notices: list[AlertNotice], *, test_mode: bool) -> None:
        if not notices:
            return
        if test_mode:
            for notice in notices:
                _log.info(
                    "testMode: would send %s alert %s %s: %s",
                    "resolved" if notice.resolved else "firing",
                    notice.rule,
                    notice.labels,
                    notice.annotations.get("summary", ""),
                )
            return
        for notice in notices:
            if notice.resolved:
                self._history.appendleft({
                    "rule": notice.rule, "labels": dict(notice.labels),
                    "summary": notice.annotations.get("summary", ""),
                    "startsAt": format_rfc3339_ms(notice.starts_at_ms),
                    "endsAt": format_rfc3339_ms(notice.ends_at_ms),
                })  # fmt: skip
        self._notifier.submit(notices)

    # ------------------------------------------------------------------ state

    def _records(self) -> list[dict[str, Any]]:
        return [
            entry.to_record(name)
            for name, runtime in self._rules.items()
            for entry in runtime.state.firing()
        ]

    async def _save(self) -> None:
        """Save the firing set; a failure of any kind is logged, counted and retried."""
        try:
            records = self._records()
            await asyncio.to_thread(self._state_store.save, records)
        except StateStoreError as error:
            self.metrics.state_save_errors.inc()
            _log.error("alert state not saved (will retry): %s", error)
            self._dirty.set()
        except Exception:
            self.metrics.state_save_errors.inc()
            _log.exception("alert state not saved, unexpected error (will retry)")
            self._dirty.set()

    async def _persist_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self._save()
            await asyncio.sleep(self._persist_interval_s)

    async def _restore(self) -> None:
        try:
            records = await asyncio.to_thread(self._state_store.load)
        except StateStoreError as error:
            _log.error("alert state not loaded, starting empty: %s", error)
            return
        by_rule: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for record in records:
            by_rule[str(record["rule"])].append(record)
        orphans: list[dict[str, Any]] = []
        for name, rule_records in by_rule.items():
            runtime = self._rules.get(name)
            if runtime is None:
                orphans.extend(rule_records)
            else:
                runtime.state.restore(runtime.rule, rule_records)
        if orphans:
            self._send(resolve_records(orphans, self._clock_ms()), test_mode=False)
            self._dirty.set()
        if records:
            _log.info(
                "restored %d firing alerts (%d of removed rules resolved)",
                len(records) - len(orphans),
                len(orphans),
            )

    # ------------------------------------------------------------------ status

    def _record_invalid(self, rule_set: RuleSet) -> None:
        self.metrics.rules_invalid.set(len(rule_set.problems))

    def _update_gauges(self) -> None:
        self.metrics.rules_loaded.set(len(self._rules))

    def firing(self) -> list[AlertNotice]:
        """The alerts firing now (for tests and status)."""
        return [
            AlertNotice(
                name,
                entry.fingerprint,
                entry.labels,
                entry.annotations,
                entry.starts_at_ms,
                0,
                False,
            )
            for name, runtime in self._rules.items()
            for entry in runtime.state.firing()
        ]

    def status(self) -> dict[str, Any]:
        """The `running`, `store` and `rules` parts of `GET /api/alerts` (alerting.md §9)."""
        health = self._store.health()
        source = self._rules.values() if self._running else []
        evaluated = {runtime.rule.name: _progress(runtime) for runtime in source}
        read_up = health.read_up and not self._store_error
        status = evaluation_status(
            running=self._running,
            kind=health.kind,
            rules=rules_status(self._pending_rule_set, evaluated),
            target=health.target,
            read_up=read_up,
            write_up=health.write_up,
            last_error=self._store_error or health.last_error,
        )
        status["history"] = list(self._history)
        return status


def _progress(runtime: _RuleRuntime) -> dict[str, Any]:
    """A running rule's evaluation state in `GET /api/alerts`."""
    last_ms = runtime.last_evaluation_ms
    return {
        "lastEvaluation": format_rfc3339_ms(last_ms) if last_ms is not None else None,
        "lastDurationMs": runtime.last_duration_ms,
        "lastError": runtime.last_error,
        "pending": [
            {"labels": entry.labels, "count": entry.count} for entry in runtime.state.pending()
        ],
        "firing": [
            {
                "labels": entry.labels,
                "startsAt": format_rfc3339_ms(entry.starts_at_ms),
                "lastSentAt": (
                    format_rfc3339_ms(entry.last_sent_ms)
                    if entry.last_sent_ms is not None
                    else None
                ),
            }
            for entry in runtime.state.firing()
        ],
    }
