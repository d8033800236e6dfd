"""The controller's alert evaluation, on the Lease leader only (alerting.md §6-§9).

`LeaderAlertService.work` is a leader-only task (`LeaderWork`): started when this replica
begins to lead, cancelled at once when leadership ends. One term:

1. waits for the term's metrics store (shared with the metrics recorder, which opens it);
2. loads the firing set from the ConfigMap state store before the first evaluation
   (retrying a failing API server for a while);
3. starts the Alertmanager targets (every address of the headless Service, re-resolved every
   30 s, or the fixed `-alert-manager-addr` list) and the evaluator with the rules of the
   replica's current `config.yaml`; later configurations are applied as a diff;
4. reports a failing store or failing delivery as a Warning Event (`MetricsStoreUnavailable`,
   `AlertDeliveryFailing`) on each transition to failure.

On cancellation nothing more is sent: reloads are unsubscribed and the evaluator's timers
cancelled before anything awaits, then the senders are cancelled (queued notices are dropped;
the next leader re-sends the firing set). The evaluator's final save is fenced, so a replica
that lost the Lease never writes the state. `alerts_body` is this replica's
`GET /api/alerts`, leader or follower.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from prometheus_client import Counter

from tensorfusion.adapters.alertmanager.client import DeliveryMetrics
from tensorfusion.adapters.kube.client import KubeClient
from tensorfusion.adapters.tsdb.store import MetricsStore
from tensorfusion.alerting.alertmanager_discovery import (
    ALERTMANAGER_PORT,
    DISCOVERY_INTERVAL_S,
    AlertmanagerTargets,
    DiscoveredAlertmanagers,
    Resolver,
    StaticAlertmanagers,
    dns_resolver,
    headless_service_host,
)
from tensorfusion.alerting.alerts_status import alerts_body, evaluation_status, rules_status
from tensorfusion.alerting.configmap_state_store import (
    ConfigMapStateStore,
    state_dropped_counter,
)
from tensorfusion.alerting.evaluator import AlertEvaluator
from tensorfusion.alerting.event_sink import WarningSink
from tensorfusion.alerting.replica_config import ReplicaConfig
from tensorfusion.alerting.standalone import job_label
from tensorfusion.alerting.state_store import StateStore, StateStoreError
from tensorfusion.domain.alerting.dynamic_config import DynamicConfig
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment
from tensorfusion.domain.settings.controller_flags import ControllerFlags

__all__ = ["AlertProcess", "LeaderAlertService"]

_log = logging.getLogger(__name__)
STORE_WAIT_LOG_S: Final = 30.0
DELIVERY_FAILURES_REPORTED: Final = 3


class AlertProcess(Protocol):
    """What the service reads of the controller process (`app.controller.ControllerProcess`)."""

    @property
    def client(self) -> KubeClient: ...

    @property
    def env(self) -> ControllerEnvironment: ...

    @property
    def flags(self) -> ControllerFlags: ...

    def fence(self) -> float: ...

    def is_leader(self) -> bool: ...


StateStoreFactory = Callable[[AlertProcess], StateStore]
TargetsFactory = Callable[[AlertProcess], AlertmanagerTargets]


@dataclass(slots=True)
class _Term:
    evaluator: AlertEvaluator
    targets: AlertmanagerTargets
    started_ms: int


class LeaderAlertService:
    """Builds and runs one evaluator per leadership term; register `work` as leader work."""

    def __init__(
        self,
        config: ReplicaConfig,
        *,
        store: Callable[[], Awaitable[MetricsStore]],
        events: WarningSink | None = None,
        delivery_metrics: DeliveryMetrics | None = None,
        state_dropped: Counter | None = None,
        resolver: Resolver = dns_resolver,
        alertmanager_port: int = ALERTMANAGER_PORT,
        discovery_interval_s: float = DISCOVERY_INTERVAL_S,
        state_store_factory: StateStoreFactory | None = None,
        targets_factory: TargetsFactory | None = None,
        job: str | None = None,
        max_first_delay_s: float = 7.0,
        persist_interval_s: float = 10.0,
        health_interval_s: float = 10.0,
        state_load_patience_s: float = 60.0,
        state_load_retry_s: float = 1.0,
    ) -> None:
        """`store` waits for and returns the term's metrics store (the metrics service's
        `wait_store`); `events` defaults to the replica config's sink; the metrics go to the
        replica config's registry (`config.metrics.registry`)."""
        self.config = config
        self._store = store
        self._events = events or config.events
        registry = config.metrics.registry
        self._delivery_metrics = delivery_metrics or DeliveryMetrics(registry)
        self._state_dropped = state_dropped or state_dropped_counter(registry)
        self._resolver = resolver
        self._port = alertmanager_port
        self._discovery_interval_s = discovery_interval_s
        self._state_store_factory = state_store_factory
        self._targets_factory = targets_factory
        self._job = job or job_label()
        self._max_first_delay_s = max_first_delay_s
        self._persist_interval_s = persist_interval_s
        self._health_interval_s = health_interval_s
        self._state_load_patience_s = state_load_patience_s
        self._state_load_retry_s = state_load_retry_s
        self._term: _Term | None = None
        self.terms = 0

    @property
    def evaluator(self) -> AlertEvaluator | None:
        """The evaluator of the current term (None while not leading)."""
        return self._term.evaluator if self._term else None

    @property
    def targets(self) -> AlertmanagerTargets | None:
        """The Alertmanager targets of the current term."""
        return self._term.targets if self._term else None

    # ------------------------------------------------------------------ parts of a term

    def _state_store(self, process: AlertProcess) -> StateStore:
        if self._state_store_factory is not None:
            return self._state_store_factory(process)
        return ConfigMapStateStore(
            process.client,
            process.env.namespace,
            process.env.release_fullname,
            fence=process.fence,
            dropped=self._state_dropped,
        )

    def _targets(self, process: AlertProcess) -> AlertmanagerTargets:
        if self._targets_factory is not None:
            return self._targets_factory(process)
        if process.flags.alert_manager_addr:
            return StaticAlertmanagers(
                process.flags.alert_manager_addr, metrics=self._delivery_metrics
            )
        return DiscoveredAlertmanagers(
            headless_service_host(process.env.namespace),
            port=self._port,
            resolver=self._resolver,
            interval_s=self._discovery_interval_s,
            metrics=self._delivery_metrics,
        )

    async def _wait_store(self) -> MetricsStore:
        waiting = asyncio.ensure_future(self._store())
        try:
            while True:
                done, _ = await asyncio.wait({waiting}, timeout=STORE_WAIT_LOG_S)
                if done:
                    return waiting.result()
                _log.warning("alert evaluator: still waiting for the metrics store of this term")
        finally:
            if not waiting.done():
                waiting.cancel()

    async def _load_state(self, state_store: StateStore) -> None:
        """Make sure the state can be read before the evaluator starts (the evaluator reads
        it again itself); a store that keeps failing is given up after the patience."""
        deadline = time.monotonic() + self._state_load_patience_s
        delay = self._state_load_retry_s
        while True:
            try:
                await asyncio.to_thread(state_store.load)
                return
            except StateStoreError as error:
                if time.monotonic() + delay > deadline:
                    _log.error("alert state still unreadable, starting anyway: %s", error)
                    return
                _log.warning("alert state unreadable (retrying in %.0fs): %s", delay, error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max(10.0, self._state_load_retry_s))

    # ------------------------------------------------------------------ the leader work

    async def work(self, process: AlertProcess) -> None:
        """Leader work: evaluate until cancelled (leadership ended or shutdown)."""
        if not process.flags.enable_alert:
            _log.info("alert evaluation is off (-enable-alert not given)")
            await asyncio.Event().wait()
        store = await self._wait_store()
        state_store = self._state_store(process)
        targets = self._targets(process)
        evaluator = AlertEvaluator(
            store,
            targets,
            state_store=state_store,
            events=self._events,
            metrics=self.config.metrics,
            job=self._job,
            max_first_delay_s=self._max_first_delay_s,
            persist_interval_s=self._persist_interval_s,
        )
        term = _Term(evaluator, targets, int(time.time() * 1000))
        unlisten = self.config.listen(self._apply(term))
        try:
            await self._load_state(state_store)
            await targets.start()
            self._term = term
            self.terms += 1
            await evaluator.start(self.config.config.rules)
            _log.info(
                "alert evaluation started on the leader: %d rules, store %s, Alertmanagers %s",
                len(self.config.config.rules.rules),
                store.kind,
                _describe(targets),
            )
            await self._watch_health(term)
        finally:
            # Synchronously, before anything awaits: no reload reaches the evaluator, and
            # `stop` cancels every timer in its first step, so nothing more is sent.
            unlisten()
            if self._term is term:
                self._term = None
            try:
                await evaluator.stop()  # the final save is fenced: a lost Lease writes nothing
            finally:
                await targets.stop()  # senders cancelled, queued notices dropped
            _log.info("alert evaluation stopped")

    @staticmethod
    def _apply(term: _Term) -> Callable[[DynamicConfig], Awaitable[None]]:
        async def apply(config: DynamicConfig) -> None:
            await term.evaluator.apply_rules(config.rules)

        return apply

    async def _watch_health(self, term: _Term) -> None:
        """Report the store and each Alertmanager on every transition to failure."""
        store_down = False
        failing: set[str] = set()
        while True:
            await asyncio.sleep(self._health_interval_s)
            status = term.evaluator.status()
            store = status["store"]
            if not store["readUp"] and not store_down:
                self._events.warning(
                    "MetricsStoreUnavailable",
                    f"alert rules cannot query the metrics store ({store['kind']} "
                    f"{store['target']}): {store['lastError']}; firing alerts are kept until "
                    "it is back",
                )
            elif store["readUp"] and store_down:
                _log.info("alert evaluator: the metrics store answers again")
            store_down = not store["readUp"]
            now_failing: set[str] = set()
            for target in term.targets.status():
                if target["consecutiveFailures"] < DELIVERY_FAILURES_REPORTED:
                    continue
                now_failing.add(target["url"])
                if target["url"] not in failing:
                    self._events.warning(
                        "AlertDeliveryFailing",
                        f"Alertmanager {target['url']}: {target['consecutiveFailures']} "
                        f"deliveries failed in a row ({target['lastError']}); retrying with "
                        "backoff",
                    )
            for url in failing - now_failing:
                _log.info("alert delivery to %s works again", url)
            failing = now_failing

    # ------------------------------------------------------------------ GET /api/alerts

    def alerts_body(self, process: AlertProcess) -> dict[str, Any]:
        """This replica's `GET /api/alerts`: `{replica: {pod, leader}, store, rules,
        alertmanagers}`; a follower lists the rules with their validation only."""
        term = self._term
        if term is not None:
            evaluation, alertmanagers = term.evaluator.status(), term.targets.status()
        else:
            kind = "greptimedb" if process.env.tsdb.greptime else "duckdb"
            rules = rules_status(self.config.config.rules)
            evaluation, alertmanagers = evaluation_status(running=False, kind=kind, rules=rules), []
        return alerts_body(
            evaluation,
            pod=process.env.pod_name,
            leader=process.is_leader(),
            alertmanagers=alertmanagers,
            enabled=process.flags.enable_alert,
        )


def _describe(targets: AlertmanagerTargets) -> str:
    if isinstance(targets, DiscoveredAlertmanagers):
        return f"behind {targets.host} ({', '.join(targets.urls) or 'none yet'})"
    if isinstance(targets, StaticAlertmanagers):
        return ", ".join(targets.urls)
    return type(targets).__name__
