"""The autoscaler (`-enable-auto-scale`, docs/autoscaling.md): a leader-only loop that right-sizes
TensorFusionWorkloads from measured usage.

Every `TICK_S` it looks at each workload whose config in force (`resolve_config`) enables
`autoSetResources`, and for those past `initialDelayPeriod` since creation and `interval` since
their last round: their usage percentiles come from the leader's usage histograms
(`UsageHistories`: filled once a term from the store with aggregated rows, then each round from
the rows written since the last), `recommend` says what their per-GPU request and limit should
be, and a change is applied in place to every worker pod of the workload: the allocator
re-charges the record on the same GPUs (a dry run for every pod first: if one does not fit, none
is resized, an Event `ResizeDoesNotFit` says why, nothing is evicted), then each pod's request
and limit annotations are patched (so a new leader recovers the new values) and the GPU status
follows through the status write-back. The workload's `status.recommendation` holds the last
recommendation with its reason and time, and its condition `AutoScaled` the last outcome.

Cron scaling rules come first: while one is in force (`active_cron_rule`), the workload's
resources are its `desiredResources` (applied the same way, the rule kept in
`status.activeCronScalingRule`) and the recommendation waits; when it ends, the workload's own
`spec.resources` come back and the field is cleared. Overlapping rules change nothing and are
reported (`CronRuleRefused`).

A store that cannot answer (a fill or the round's read of new rows) changes nothing: the round's
workloads get `AutoScaled=False` with reason `MetricsUnavailable`, the histories keep what they
held, and the next round reads again from the same cut, so no change is made on a history with
a gap. A bad config gets reason `InvalidConfig` naming the field. Nothing here ends the leader:
a failing workload is logged and retried at its next round.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import ValidationError

from tensorfusion.adapters.kube.events import EventSink, InvolvedObject
from tensorfusion.adapters.tsdb.store import MetricsStore, StoreError, StoreQueryError
from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.controller.external_scaler import ExternalScalerCalls, ExternalScalerError
from tensorfusion.controller.fenced_writes import FencedWriter
from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.allocator.resize import resize_allocation
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.autoscaling.config_resolution import resolve_config
from tensorfusion.domain.autoscaling.cron_rules import active_cron_rule
from tensorfusion.domain.autoscaling.external_scaler import (
    ExternalScalerSettings,
    UsageSummary,
    parse_external,
    scale_request,
)
from tensorfusion.domain.autoscaling.recommendation import (
    Recommendation,
    UsagePercentiles,
    recommend,
)
from tensorfusion.domain.autoscaling.settings import (
    AutoScaleConfigError,
    AutoSetSettings,
    parse_auto_set,
)
from tensorfusion.domain.autoscaling.usage_history import (
    OVERLAP_MS,
    UsageHistories,
    WorkloadHistory,
    fill_rows,
    fill_spans,
)
from tensorfusion.domain.autoscaling.usage_query import (
    MAX_FILL_ROWS,
    MAX_RECENT_ROWS,
    WorkloadUsage,
    fill_query,
    percentile_set,
    recent_query,
)
from tensorfusion.domain.backoff import Backoff
from tensorfusion.domain.model.autoscaling import AutoScalingConfig, CronScalingRule
from tensorfusion.domain.model.scheduling import VerticalScalingRule
from tensorfusion.domain.object_views import labels_of, name_of, namespace_of, uid_of
from tensorfusion.domain.quantities import format_bytes, format_milli
from tensorfusion.domain.timestamps import format_rfc3339, parse_rfc3339
from tensorfusion.runtime.informer import ObjectCache

__all__ = ["SCALED", "Autoscaler", "WorkloadOutcome"]

_log = logging.getLogger(__name__)
TICK_S: Final = 10.0
QUERY_TIMEOUT_S: Final = 20.0
OVERLAP_S: Final = OVERLAP_MS / 1000
FILL_RETRY: Final = Backoff(initial=10.0, maximum=300.0)
SCALED: Final = "AutoScaled"
RESIZED: Final = "Resized"
DOES_NOT_FIT: Final = "ResizeDoesNotFit"
EXTERNAL_FAILED: Final = "ExternalScalerFailed"


_KEEP: Final = object()


@dataclass(frozen=True, slots=True)
class WorkloadOutcome:
    """What one round did for one workload (for tests and logs); `cron_rule` is the new
    `status.activeCronScalingRule` (None clears it; left alone by default)."""

    key: tuple[str, str]
    reason: str
    message: str
    recommendation: Recommendation | None = None
    cron_rule: Any = _KEEP


@dataclass(slots=True)
class _Due:
    workload: Mapping[str, Any]
    settings: AutoSetSettings
    """`autoSetResources` (its window and percentiles also make the external scaler's usage)."""
    recommend: bool
    """The percentile recommendation is due this round."""
    external: ExternalScalerSettings | None
    """The external scaler is due this round (it replaces the percentile recommendation)."""
    pods: list[Mapping[str, Any]]
    cron: list[CronScalingRule] = field(default_factory=list)

    @property
    def sized(self) -> bool:
        """A recommendation, the external scaler's or the percentiles', is due."""
        return self.recommend or self.external is not None

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name) of the workload."""
        return namespace_of(self.workload), name_of(self.workload)


def _rules(pool: Mapping[str, Any] | None, templates: ObjectCache) -> list[VerticalScalingRule]:
    spec = (pool or {}).get("spec") or {}
    name = spec.get("schedulingConfigTemplate")
    template = templates.get(str(name)) if name else None
    raw = ((template or {}).get("spec") or {}).get("verticalScalingRules") or []
    rules = []
    for item in raw if isinstance(raw, list) else ():
        try:
            rules.append(VerticalScalingRule.model_validate(item))
        except ValidationError:
            continue  # a malformed rule is the template's own condition (problem reporter)
    return rules


def _resources(workload: Mapping[str, Any]) -> tuple[ResourceAmount, ResourceAmount]:
    resources = (workload.get("spec") or {}).get("resources") or {}
    return (ResourceAmount.from_json(resources.get("requests")),
            ResourceAmount.from_json(resources.get("limits")))  # fmt: skip


def _annotations(requests: ResourceAmount, limits: ResourceAmount) -> dict[str, str | None]:
    """The pod's request and limit annotations for the new values (absent ones removed)."""

    def text(value: int, shown: Callable[[int], str]) -> str | None:
        return shown(value) if value else None

    return {
        KEYS.tflops_request: text(requests.tflops_milli, format_milli),
        KEYS.tflops_limit: text(limits.tflops_milli, format_milli),
        KEYS.vram_request: text(requests.vram_bytes, format_bytes),
        KEYS.vram_limit: text(limits.vram_bytes, format_bytes),
    }


def _pair(usage: WorkloadUsage | None) -> tuple[UsagePercentiles | None, UsagePercentiles | None]:
    """Each resource's usage; None for one without samples."""
    if usage is None:
        return None, None
    return (usage.compute if usage.compute.samples else None,
            usage.vram if usage.vram.samples else None)  # fmt: skip


def _summary(found: Recommendation) -> str:
    parts = [r.reason for r in (found.compute, found.vram) if r is not None]
    return "; ".join(parts) or "nothing targeted"


@dataclass(slots=True)
class Autoscaler:
    """The leader's autoscaler over the replica's caches."""

    workloads: ObjectCache
    pods: ObjectCache
    pools: ObjectCache
    templates: ObjectCache
    state: AllocatorState
    store: Callable[[], Awaitable[MetricsStore]]
    writer: FencedWriter
    recorder: EventSink
    external: ExternalScalerCalls | None = None
    """Calls to external scalers (None: an enabled one is reported as unavailable)."""
    namespace: str = ""
    """The release namespace: external scalers' key Secrets must be there."""
    clock: Callable[[], float] = time.time
    tick_s: float = TICK_S
    last_round: dict[tuple[str, str], float] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    """Pool -> `total_scale_up_cnt` / `total_scale_down_cnt` -> resizes this term."""
    histories: UsageHistories = field(default_factory=UsageHistories)
    """The usage histories of this term (filled from its store)."""
    fill_failures: int = 0
    fill_retry_at: float = 0.0
    """After a failed fill, no fill is tried before this time (`FILL_RETRY`)."""

    async def run(self) -> None:
        """Rounds every `tick_s` until cancelled (waits for the term's store first)."""
        store = await self.store()
        self.counts.clear()  # this term's store seeds the counters; count from there
        self.histories.reset()  # and fills the histories
        self.fill_failures, self.fill_retry_at = 0, 0.0
        while True:
            try:
                await self.round(store)
            except Exception:  # a round never ends the loop
                _log.exception("autoscaler round failed; retried at the next tick")
            await asyncio.sleep(self.tick_s)

    def _due(
        self, now: float
    ) -> tuple[list[_Due], list[WorkloadOutcome], dict[tuple[str, str], float]]:
        """The due workloads, the outcomes of bad configs, and the history window of every
        workload a recommendation or an external scaler is enabled for."""
        due, outcomes = [], []
        windows: dict[tuple[str, str], float] = {}
        using_external: set[tuple[str, str]] = set()
        workers: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for pod in self.pods.list():
            workload_label = labels_of(pod).get(KEYS.workload)
            if workload_label:
                workers.setdefault((namespace_of(pod), str(workload_label)), []).append(pod)
        rules_of: dict[str, list[VerticalScalingRule]] = {}  # per pool, parsed once a round
        for workload in self.workloads.list():
            key = (namespace_of(workload), name_of(workload))
            spec = workload.get("spec") or {}
            pods = workers.get(key, [])
            pool = str(spec.get("poolName") or "")
            if pool not in rules_of:
                rules_of[pool] = _rules(self.pools.get(pool), self.templates)
            active = (workload.get("status") or {}).get("activeCronScalingRule")
            try:
                own = AutoScalingConfig.model_validate(spec["autoScalingConfig"]) if spec.get(
                    "autoScalingConfig") else None  # fmt: skip
                labels = labels_of(pods[0]) if pods else {}
                resolved = resolve_config(own, rules_of[pool], labels)
                config = resolved.config if resolved is not None else AutoScalingConfig()
                settings = parse_auto_set(config.auto_set_resources)
                external = parse_external(config.external_scaler,
                                          release_namespace=self.namespace)  # fmt: skip
            except (ValidationError, AutoScaleConfigError) as error:
                outcomes.append(WorkloadOutcome(key, "InvalidConfig", str(error)[:500]))
                continue
            if settings.enable or external is not None:
                windows[key] = settings.history_data_period_s
            cron = [rule for rule in config.cron_scaling_rules if rule.enable]
            created = parse_rfc3339(str((workload.get("metadata") or {}).get(
                "creationTimestamp") or "")) or now  # fmt: skip
            since = now - self.last_round.get(key, 0.0)
            if external is not None:  # it replaces the percentile recommendation
                using_external.add(key)
                waiting = self.external is not None and self.external.waiting(
                    key, external.url, now)  # fmt: skip
                if (now - created < external.initial_delay_period_s
                        or since < external.interval_s or waiting):  # fmt: skip
                    external = None
                auto_due = False
            else:
                auto_due = (settings.enable and now - created >= settings.initial_delay_period_s
                            and since >= settings.interval_s)  # fmt: skip
            if auto_due or external is not None or cron or active:
                due.append(_Due(workload, settings, auto_due, external, pods, cron))
        if self.external is not None:
            self.external.keep_only(using_external)
        return due, outcomes, windows

    async def round(self, store: MetricsStore) -> list[WorkloadOutcome]:
        """One round over every due workload; what it did to each."""
        now = self.clock()
        due, outcomes, windows = self._due(now)
        self.histories.keep_only(windows)
        sized: list[_Due] = []
        for item in due:
            try:
                cron = await self._cron(item, now)
            except Exception as error:  # one workload never stops the others
                cron = self._failed(item, error)
            if cron is not None:
                outcomes.append(cron)
            elif item.sized:
                sized.append(item)
        try:
            usage = await self.read_usage(store, sized, now)
        except StoreError as error:
            outcomes += [WorkloadOutcome(item.key, "MetricsUnavailable",
                                         f"the metrics store cannot answer ({error}); "
                                         "nothing changed") for item in sized]  # fmt: skip
            sized = []
            usage = {}
        # The external scalers are asked at once (each call bounded, a few at a time), so one
        # slow scaler delays no other workload; their answers are applied in turn below.
        externals = [item for item in sized if item.external is not None]
        answers = dict(zip([item.key for item in externals], await asyncio.gather(
            *(self._ask_external(item, usage.get(item.key), now) for item in externals)),
            strict=True))  # fmt: skip
        for item in sized:
            key = item.key
            self.last_round[key] = now
            try:
                if key in answers:
                    answer = answers[key]
                    outcomes.append(answer if isinstance(answer, WorkloadOutcome) else
                                    await self._apply(item, *answer, _KEEP))  # fmt: skip
                else:
                    outcomes.append(await self._one(item, usage.get(key)))
            except Exception as error:  # one workload never stops the others
                outcomes.append(self._failed(item, error))
        for outcome in outcomes:
            await self._report(outcome, now)
        return outcomes

    async def read_usage(
        self, store: MetricsStore, items: Sequence[_Due], now: float
    ) -> dict[tuple[str, str], WorkloadUsage]:
        """The usage of `items` over their windows, from the histories: the workloads without
        one are filled first, then every history takes the rows written since the last read.
        Runs every round (with no item too), so each read stays short. Raises StoreError when
        the store cannot answer: the histories then keep what they held, and nothing is
        decided on them this round."""
        now_ms = int(now * 1000)
        windows = {item.key: item.settings.history_data_period_s for item in items}
        if now < self.fill_retry_at and self.histories.missing(windows):
            raise StoreQueryError(f"the usage histories could not be filled; retried in "
                                  f"{self.fill_retry_at - now:.0f} s")  # fmt: skip
        for _ in range(2):
            try:
                await self._fill(store, windows, now_ms)
            except StoreError:  # a fill is the costly read: the next waits, doubling
                self.fill_failures += 1
                self.fill_retry_at = now + FILL_RETRY.delay(self.fill_failures)
                raise
            self.fill_failures = 0
            if await self._read_recent(store, now_ms):
                break
            _log.warning("autoscaler: more than %d new usage rows since the last read; the "
                         "histories are filled again", MAX_RECENT_ROWS)  # fmt: skip
            self.histories.reset()
        else:
            raise StoreQueryError(f"more than {MAX_RECENT_ROWS} usage rows in {OVERLAP_S:g} s")
        found = {}
        for item in items:
            history = self.histories.workloads.get(item.key)
            usage = history.usage(percentile_set(item.settings)) if history else None
            if usage is not None:
                found[item.key] = usage
        return found

    async def _fill(
        self, store: MetricsStore, windows: Mapping[tuple[str, str], float], now_ms: int
    ) -> None:
        """Fill the histories `windows` asks for and lacks, one query per slice of each window;
        a history is kept only once all its slices are in."""
        for window, keys in self.histories.missing(windows).items():
            cut = self.histories.fill_cut(now_ms)
            named = keys if self.histories.workloads else None  # a new term reads them all
            filling = {key: WorkloadHistory(window, now_ms) for key in keys}
            for span in fill_spans(window, now_ms, cut):
                sql = fill_query(store.dialect, start_ms=span.start_ms, end_ms=span.end_ms,
                                 cut_ms=span.cut_ms, keys=named)  # fmt: skip
                answer = await store.query(sql, QUERY_TIMEOUT_S)
                if len(answer.rows) > MAX_FILL_ROWS:
                    raise StoreQueryError(f"more than {MAX_FILL_ROWS} rows in one usage slice")
                try:
                    fill_rows(filling, span, answer.columns, answer.rows)
                except ValueError as error:
                    raise StoreQueryError(str(error)) from None
            self.histories.adopt(filling)

    async def _read_recent(self, store: MetricsStore, now_ms: int) -> bool:
        """Add the rows written after the cut to the histories; False when there are more than
        `MAX_RECENT_ROWS` (nothing added)."""
        cut = self.histories.cut_ms
        if cut is None or not self.histories.workloads:
            return True
        answer = await store.query(recent_query(store.dialect, cut), QUERY_TIMEOUT_S)
        if len(answer.rows) > MAX_RECENT_ROWS:
            return False
        try:
            self.histories.add_recent(answer.columns, answer.rows, now_ms)
        except ValueError as error:
            raise StoreQueryError(str(error)) from None
        return True

    def _current(
        self, pods: Sequence[Mapping[str, Any]]
    ) -> tuple[ResourceAmount, ResourceAmount] | None:
        allocator = self.state.allocator
        if allocator is None:
            return None
        for pod in pods:
            record = allocator.records.get(uid_of(pod))
            if record is not None:
                return record.request.request, record.request.limit
        return None

    async def _cron(self, item: _Due, now: float) -> WorkloadOutcome | None:
        """The cron rules' outcome, or None when no rule is or was in force (then the
        recommendation may act)."""
        active = (item.workload.get("status") or {}).get("activeCronScalingRule")
        decision = active_cron_rule(item.cron, datetime.fromtimestamp(now, UTC))
        if decision.problem:
            return WorkloadOutcome(item.key, "CronRuleRefused", decision.problem)
        if decision.rule is None and not active:
            return None
        current = self._current(item.pods)
        if current is None:
            return WorkloadOutcome(item.key, "NoWorkers", "no allocated worker pod to size")
        if decision.rule is not None and decision.rule.desired_resources is not None:
            desired = decision.rule.desired_resources.model_dump(by_alias=True, mode="json")
            target = (ResourceAmount.from_json(desired.get("requests")),
                      ResourceAmount.from_json(desired.get("limits")))  # fmt: skip
            rule = decision.rule.model_dump(by_alias=True, mode="json", exclude_none=True)
            name = decision.rule.name or "(unnamed)"
            if current == target:
                return WorkloadOutcome(item.key, "CronScaled", f"cron rule {name} in force",
                                       cron_rule=rule)  # fmt: skip
            return await self._apply(item, current, Recommendation(*target, None, None),
                                     f"cron rule {name} started", rule)  # fmt: skip
        original = _resources(item.workload)
        if current == original:
            return WorkloadOutcome(item.key, "CronEnded", "cron rule ended", cron_rule=None)
        return await self._apply(item, current, Recommendation(*original, None, None),
                                 "cron rule ended: resources restored", None)  # fmt: skip

    async def _one(self, item: _Due, usage: WorkloadUsage | None) -> WorkloadOutcome:
        current = self._current(item.pods)
        if current is None:
            return WorkloadOutcome(item.key, "NoWorkers", "no allocated worker pod to size")
        found = recommend(item.settings, original=_resources(item.workload), current=current,
                          compute=usage.compute if usage else None,
                          vram=usage.vram if usage else None)  # fmt: skip
        if not found.change:
            return WorkloadOutcome(item.key, "NoChange", _summary(found), found)
        return await self._apply(item, current, found, _summary(found), _KEEP)

    async def _ask_external(
        self, item: _Due, usage: WorkloadUsage | None, now: float
    ) -> WorkloadOutcome | tuple[tuple[ResourceAmount, ResourceAmount], Recommendation, str]:
        """The workload's outcome, or what to apply: (current, recommendation, why)."""
        settings = item.external
        assert settings is not None
        try:
            current = self._current(item.pods)
            if current is None:
                return WorkloadOutcome(item.key, "NoWorkers", "no allocated worker pod to size")
            if self.external is None:
                return WorkloadOutcome(item.key, EXTERNAL_FAILED,
                                       "external scalers are not set up")  # fmt: skip
            summary = UsageSummary(item.settings.history_data_period_s,
                                   percentile_set(item.settings), *_pair(usage))  # fmt: skip
            body = scale_request(
                workload=item.key, pool=str((item.workload.get("spec") or {}).get("poolName")
                                            or ""),
                original=_resources(item.workload), current=current, usage=summary,
                time=format_rfc3339(now),
            )  # fmt: skip
            try:
                found, why = await self.external.recommend(item.key, settings, body=body,
                                                           current=current, now=now)  # fmt: skip
            except ExternalScalerError as error:
                return WorkloadOutcome(item.key, EXTERNAL_FAILED, f"external scaler: {error}")
        except Exception as error:  # one workload never stops the others
            return self._failed(item, error)
        if found is None:
            return WorkloadOutcome(item.key, "NoChange", f"external scaler: {why}")
        return current, found, f"external scaler: {why}"

    def _failed(self, item: _Due, error: Exception) -> WorkloadOutcome:
        _log.warning("autoscaler: workload %s/%s failed: %s", *item.key, error)
        return WorkloadOutcome(item.key, "Failed", f"the round failed: {error}"[:500])

    async def _apply(
        self,
        item: _Due,
        current: tuple[ResourceAmount, ResourceAmount],
        found: Recommendation,
        why: str,
        cron_rule: Any,
    ) -> WorkloadOutcome:
        """Resize every worker of the workload in place from `current` to `found`, or none."""
        key = item.key
        problem = self._resize_all(item.pods, found)
        if problem:
            return WorkloadOutcome(key, DOES_NOT_FIT, f"{why}: {problem}; nothing evicted", found)
        patch = {"metadata": {"annotations": _annotations(found.requests, found.limits)}}
        unwritten = []
        for pod in item.pods:
            if self.state.allocator is None or uid_of(pod) not in self.state.allocator.records:
                continue
            try:
                await self.writer.patch("Pod", name_of(pod), patch, namespace=key[0])
            except Exception as error:  # the allocator holds the new values; a new leader
                unwritten.append(f"{name_of(pod)} ({error})")  # would recover the old ones
        pool = str((item.workload.get("spec") or {}).get("poolName") or "")
        grew = (found.requests.tflops_milli > current[0].tflops_milli
                or found.requests.vram_bytes > current[0].vram_bytes)  # fmt: skip
        column = "total_scale_up_cnt" if grew else "total_scale_down_cnt"
        tally = self.counts.setdefault(pool, {})
        tally[column] = tally.get(column, 0) + 1
        if unwritten:
            why += f"; annotations not written on {', '.join(unwritten)}"[:300]
        return WorkloadOutcome(key, RESIZED, why, found, cron_rule)

    def _resize_all(self, pods: Sequence[Mapping[str, Any]], found: Recommendation) -> str:
        """Resize every allocated worker, or none: each is applied in turn (so two workers on
        one GPU or under one quota are checked together), and the ones done are put back when
        one does not fit."""
        allocator = self.state.allocator
        if allocator is None:
            return "the allocator is not ready"
        done: list[tuple[str, ResourceAmount, ResourceAmount]] = []
        for pod in pods:
            uid = uid_of(pod)
            record = allocator.records.get(uid)
            if record is None:
                continue
            before = (record.request.request, record.request.limit)
            outcome = resize_allocation(allocator, uid, found.requests, found.limits)
            if not outcome.allowed or not outcome.applied:
                for done_uid, request, limit in reversed(done):
                    resize_allocation(allocator, done_uid, request, limit)
                return outcome.message or "refused"
            done.append((uid, *before))
        return ""

    async def _report(self, outcome: WorkloadOutcome, now: float) -> None:
        namespace, name = outcome.key
        workload = self.workloads.get(name, namespace) or {}
        known = workload.get("status") or {}
        last = next((c for c in known.get("conditions") or [] if isinstance(c, Mapping)
                     and c.get("type") == SCALED), {})  # fmt: skip
        recommended = outcome.recommendation
        same_recommendation = recommended is None or known.get("recommendation") == {
            "requests": recommended.requests.to_json(),
            "limits": recommended.limits.to_json(),
        }
        same_rule = outcome.cron_rule is _KEEP or known.get(
            "activeCronScalingRule") == outcome.cron_rule  # fmt: skip
        if (
            outcome.reason not in (RESIZED, DOES_NOT_FIT)
            and same_recommendation
            and same_rule
            and (last.get("reason"), last.get("message"))
            == (outcome.reason, outcome.message[:1024])
        ):
            return  # nothing new to write (a rule in force, no change, the same problem)
        healthy = outcome.reason in (RESIZED, "NoChange", "CronScaled", "CronEnded")
        condition = {"type": SCALED, "status": "True" if healthy else "False",
                     "reason": outcome.reason, "message": outcome.message[:1024],
                     "lastTransitionTime": format_rfc3339(now)}  # fmt: skip
        status: dict[str, Any] = {"conditions": _with_condition(workload, condition)}
        if outcome.recommendation is not None:
            found = outcome.recommendation
            status["recommendation"] = {"requests": found.requests.to_json(),
                                        "limits": found.limits.to_json()}  # fmt: skip
        if outcome.cron_rule is not _KEEP:
            status["activeCronScalingRule"] = outcome.cron_rule
        try:
            await self.writer.patch("TensorFusionWorkload", name, {"status": status},
                                    namespace=namespace, status=True)  # fmt: skip
            if outcome.reason in (RESIZED, DOES_NOT_FIT):
                involved = InvolvedObject("TensorFusionWorkload", name, namespace,
                                          uid_of(workload), "tensor-fusion.ai/v1")  # fmt: skip
                if outcome.reason == RESIZED:
                    await self.recorder.record(involved, "Normal", RESIZED, outcome.message)
                else:
                    await self.recorder.record(involved, "Warning", DOES_NOT_FIT, outcome.message)
        except Exception as error:  # the next round writes again
            _log.warning("workload %s/%s: cannot write the autoscaler's status: %s",
                         namespace, name, error)  # fmt: skip


def _with_condition(workload: Mapping[str, Any], condition: dict[str, Any]) -> list[Any]:
    """The workload's conditions with `condition` in place of its type (time kept when the
    status and reason do not change)."""
    kept = []
    for item in (workload.get("status") or {}).get("conditions") or []:
        if not isinstance(item, Mapping) or item.get("type") != condition["type"]:
            kept.append(item)
            continue
        if (item.get("status"), item.get("reason")) == (condition["status"], condition["reason"]):
            condition["lastTransitionTime"] = item.get("lastTransitionTime",
                                                       condition["lastTransitionTime"])  # fmt: skip
    return [*kept, condition]
