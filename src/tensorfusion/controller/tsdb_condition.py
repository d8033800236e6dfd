"""Condition `TimeSeriesDatabaseReady` on the TensorFusionClusters (metrics.md §10).

`judge_store` turns what one recording cycle saw (the probe query, the last write, the schema
check) into the condition: `True` with reason `Connected` (GreptimeDB, naming host, port and
database) or `Embedded` (naming the file), else `False` with `Unreachable`, `QueryFailed`,
`WriteFailed` or `SchemaMismatch` and the error. `ClusterConditionWriter` writes it into the
status of every TensorFusionCluster whose condition differs: a fenced JSON merge patch of the
status subresource carrying the `resourceVersion` read just before (a conflict reads again),
the other conditions kept, `lastTransitionTime` moved only when the status changes. A `False`
condition whose reason stays the same is not rewritten for a new error text, so the object
changes only on transitions. It never touches `phase`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, Protocol

from tensorfusion.adapters.kube.client import (
    KUBE_CALL_ERRORS,
    KubeClient,
    api_status_code,
    api_status_message,
)
from tensorfusion.adapters.kube.custom_resources import merge_patch_status, resource_of
from tensorfusion.adapters.tsdb.store import StoreError, StoreUnavailableError
from tensorfusion.domain.object_views import generation_of, metadata_of, name_of
from tensorfusion.domain.timestamps import format_rfc3339

__all__ = [
    "CONDITION_TYPE",
    "ClusterConditionWriter",
    "ClusterObjects",
    "StoreCondition",
    "judge_store",
]

_log = logging.getLogger(__name__)
CONDITION_TYPE: Final = "TimeSeriesDatabaseReady"
_ATTEMPTS: Final = 3
_REQUEST_TIMEOUT_S: Final = 30.0


@dataclass(frozen=True, slots=True)
class StoreCondition:
    """The condition as the leader judges it now."""

    status: Literal["True", "False"]
    reason: str
    message: str

    @property
    def ready(self) -> bool:
        """True when the store works."""
        return self.status == "True"

    def same_as(self, current: Mapping[str, Any] | None) -> bool:
        """Whether `current` (a condition of an object) needs no rewrite: same status and
        reason, and, while True, the same message (a new file or host is news)."""
        if current is None:
            return False
        if current.get("status") != self.status or current.get("reason") != self.reason:
            return False
        return not self.ready or current.get("message") == self.message


def judge_store(
    *,
    kind: str,
    target: str,
    probe_error: StoreError | None,
    write_up: bool,
    write_error: str,
    schema_problems: list[str] | None = None,
) -> StoreCondition:
    """The condition from one cycle's observations (reads first, then schema, then writes)."""
    if isinstance(probe_error, StoreUnavailableError):
        return StoreCondition("False", "Unreachable", f"{target}: {probe_error}")
    if probe_error is not None:
        return StoreCondition("False", "QueryFailed", f"{target}: {probe_error}")
    if schema_problems:
        return StoreCondition(
            "False",
            "SchemaMismatch",
            "; ".join(schema_problems)
            + " (drop the table, the leader re-creates it, or use a fresh database)",
        )
    if not write_up:
        return StoreCondition("False", "WriteFailed", f"{target}: {write_error}")
    if kind == "duckdb":
        return StoreCondition(
            "True",
            "Embedded",
            f"embedded DuckDB store {target} (kept by this leader only: its data is lost when "
            "the leader changes, and dashboards need GreptimeDB)",
        )
    return StoreCondition("True", "Connected", f"GreptimeDB {target}")


class ClusterObjects(Protocol):
    """The TensorFusionCluster informer, or any cache that lists the objects."""

    def list(self, namespace: str | None = None) -> list[Mapping[str, Any]]: ...


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _condition_of(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


class ClusterConditionWriter:
    """Writes one condition type into the status of every TensorFusionCluster."""

    def __init__(
        self,
        client: KubeClient,
        clusters: ClusterObjects,
        fence: Callable[[], float],
        *,
        condition_type: str = CONDITION_TYPE,
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._client = client
        self._clusters = clusters
        self._fence = fence
        self.condition_type = condition_type
        self._now = now
        self._resource = resource_of("TensorFusionCluster")
        self.patches = 0
        self.failures = 0

    async def publish(self, condition: StoreCondition) -> int:
        """Bring every cluster's condition to `condition`; returns how many were patched.

        Never raises: API failures are logged and counted (the next cycle tries again); a
        refused fence stops this round.
        """
        patched = 0
        for obj in self._clusters.list():
            name = name_of(obj)
            if not name or condition.same_as(_condition_of(obj, self.condition_type)):
                continue
            try:
                if await self._patch(name, condition):
                    patched += 1
            except _FencedError as error:
                _log.info("%s not written: %s", self.condition_type, error)
                break
            except _WRITE_ERRORS as error:
                self.failures += 1
                _log.warning(
                    "%s on TensorFusionCluster %s not written: %s",
                    self.condition_type,
                    name,
                    _describe(error),
                )
        return patched

    async def _patch(self, name: str, condition: StoreCondition) -> bool:
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                left = self._fence()
            except Exception as error:  # NotLeaderError
                raise _FencedError(str(error)) from None
            async with asyncio.timeout(min(max(left, 0.0), _REQUEST_TIMEOUT_S)):
                fresh = await self._client.get(self._resource, name)
                current_obj = _as_dict(fresh)
                current = _condition_of(current_obj, self.condition_type)
                if condition.same_as(current):
                    return False
                body = self._body(current_obj, current, condition)
                try:
                    await merge_patch_status(self._client, self._resource, name, body)
                except KUBE_CALL_ERRORS as error:
                    if api_status_code(error) == 409 and attempt < _ATTEMPTS:
                        continue
                    raise
            self.patches += 1
            _log.info(
                "TensorFusionCluster %s: %s=%s (%s)",
                name,
                self.condition_type,
                condition.status,
                condition.reason,
            )
            return True
        return False

    def _body(
        self,
        obj: Mapping[str, Any],
        current: Mapping[str, Any] | None,
        condition: StoreCondition,
    ) -> dict[str, Any]:
        changed = current is None or current.get("status") != condition.status
        transition = (
            format_rfc3339(self._now().timestamp())
            if changed or current is None
            else current.get("lastTransitionTime")
        )
        written: dict[str, Any] = {
            "type": self.condition_type,
            "status": condition.status,
            "reason": condition.reason,
            "message": condition.message[:32768],
        }
        if transition:
            written["lastTransitionTime"] = transition
        generation = generation_of(obj)
        if generation is not None:
            written["observedGeneration"] = generation
        conditions = [
            written if c.get("type") == self.condition_type else dict(c)
            for c in (obj.get("status") or {}).get("conditions") or []
            if isinstance(c, Mapping)
        ]
        if current is None:
            conditions.append(written)
        return {
            "metadata": {"resourceVersion": metadata_of(obj).get("resourceVersion")},
            "status": {"conditions": conditions},
        }


_WRITE_ERRORS: Final[tuple[type[Exception], ...]] = (*KUBE_CALL_ERRORS, TimeoutError, OSError)
"""What a cluster's condition write may fail with (logged and counted, never raised)."""


class _FencedError(Exception):
    """The fence refused the write."""


def _as_dict(obj: Any) -> dict[str, Any]:
    """A lightkube object as the API's JSON."""
    result: dict[str, Any] = obj.to_dict()
    return result


def _describe(error: BaseException) -> str:
    code = api_status_code(error)
    if code is not None:
        return f"{code}: {api_status_message(error)}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
