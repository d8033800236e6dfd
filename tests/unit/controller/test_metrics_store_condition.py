"""Condition TimeSeriesDatabaseReady: judged from one cycle, written only on transitions,
fenced, with the resourceVersion read just before and the other conditions kept."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.types import PatchType

from tensorfusion.adapters.tsdb.store import StoreError, StoreQueryError, StoreUnavailableError
from tensorfusion.controller.tsdb_condition import (
    CONDITION_TYPE,
    ClusterConditionWriter,
    StoreCondition,
    judge_store,
)
from tensorfusion.runtime.leader_election import NotLeaderError


def api_error(code: int) -> ApiError:
    return ApiError(
        status={"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
                "reason": "Conflict" if code == 409 else "InternalError", "message": "fake"}
    )  # fmt: skip


def bump(obj: dict[str, Any]) -> None:
    """A new resourceVersion, as every write makes."""
    obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)


class Obj:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.data)


class FakeClusters:
    """TensorFusionCluster objects as the API server and the informer cache hold them."""

    def __init__(self, *names: str) -> None:
        self.objects: dict[str, dict[str, Any]] = {
            name: {"metadata": {"name": name, "resourceVersion": "1", "generation": 3},
                   "status": {"phase": "Running", "conditions": [
                       {"type": "Ready", "status": "True", "reason": "PoolsRunning"}]}}
            for name in names
        }  # fmt: skip
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.conflicts = 0
        self.fail: ApiError | None = None

    def list(self, namespace: str | None = None) -> list[Mapping[str, Any]]:
        return [copy.deepcopy(obj) for obj in self.objects.values()]

    async def get(self, resource: Any, name: str) -> Obj:
        if self.fail is not None:
            raise self.fail
        return Obj(self.objects[name])

    async def patch(self, resource: Any, name: str, body: dict[str, Any], *,
                    patch_type: PatchType) -> Obj:  # fmt: skip
        assert resource.__name__ == "TensorFusionClusterStatus"
        assert patch_type is PatchType.MERGE
        current = self.objects[name]
        if self.conflicts:
            self.conflicts -= 1
            bump(current)
            raise api_error(409)
        if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise api_error(409)
        self.patches.append((name, body))
        current["status"]["conditions"] = body["status"]["conditions"]
        bump(current)
        return Obj(current)

    def condition(self, name: str) -> dict[str, Any]:
        return next(c for c in self.objects[name]["status"]["conditions"]
                    if c["type"] == CONDITION_TYPE)  # fmt: skip


def writer_for(
    api: FakeClusters, clock: list[datetime], leading: list[bool]
) -> ClusterConditionWriter:
    def fence() -> float:
        if not leading[0]:
            raise NotLeaderError("not the leader")
        return 10.0

    return ClusterConditionWriter(cast(AsyncClient, api), api, fence, now=lambda: clock[0])


def judged(
    kind: str = "greptimedb",
    target: str = "db:4002/public",
    probe_error: StoreError | None = None,
    write_up: bool = True,
    write_error: str = "",
    schema_problems: list[str] | None = None,
) -> StoreCondition:
    return judge_store(kind=kind, target=target, probe_error=probe_error, write_up=write_up,
                       write_error=write_error, schema_problems=schema_problems)  # fmt: skip


def test_the_condition_judged_from_a_cycle() -> None:
    assert judged() == StoreCondition("True", "Connected", "GreptimeDB db:4002/public")
    embedded = judged(kind="duckdb", target="/tsdb/metrics-1.duckdb")
    assert embedded.reason == "Embedded" and "/tsdb/metrics-1.duckdb" in embedded.message
    down = judged(probe_error=StoreUnavailableError("connection refused"))
    assert (down.status, down.reason) == ("False", "Unreachable")
    assert "connection refused" in down.message
    assert judged(probe_error=StoreQueryError("no such table")).reason == "QueryFailed"
    schema = judged(schema_problems=["tf_gpu_usage.ready: expected BOOLEAN"])
    assert schema.reason == "SchemaMismatch" and "tf_gpu_usage.ready" in schema.message
    write = judged(write_up=False, write_error="HTTP 503")
    assert (write.reason, write.message) == ("WriteFailed", "db:4002/public: HTTP 503")


async def test_written_on_every_cluster_only_on_transitions_with_transition_times() -> None:
    api = FakeClusters("main", "other")
    clock = [datetime(2026, 8, 20, 10, 0, tzinfo=UTC)]
    writer = writer_for(api, clock, [True])
    up = StoreCondition("True", "Embedded", "embedded DuckDB store /tsdb/a.duckdb")
    assert await writer.publish(up) == 2
    main = api.condition("main")
    assert main == {"type": CONDITION_TYPE, "status": "True", "reason": "Embedded",
                    "message": up.message, "lastTransitionTime": "2026-08-20T10:00:00Z",
                    "observedGeneration": 3}  # fmt: skip
    assert api.objects["main"]["status"]["conditions"][0]["type"] == "Ready"
    assert api.objects["main"]["status"]["phase"] == "Running"
    assert await writer.publish(up) == 0
    clock[0] = datetime(2026, 8, 20, 10, 5, tzinfo=UTC)
    down = StoreCondition("False", "WriteFailed", "/tsdb/a.duckdb: disk full")
    assert await writer.publish(down) == 2
    assert api.condition("main")["lastTransitionTime"] == "2026-08-20T10:05:00Z"
    # The same failure with another text is no transition: nothing is written.
    assert await writer.publish(StoreCondition("False", "WriteFailed", "other text")) == 0
    clock[0] = datetime(2026, 8, 20, 10, 7, tzinfo=UTC)
    # Another reason while still False: rewritten, the transition time stays.
    assert await writer.publish(StoreCondition("False", "Unreachable", "gone")) == 2
    assert api.condition("main")["lastTransitionTime"] == "2026-08-20T10:05:00Z"
    assert api.condition("main")["reason"] == "Unreachable"
    assert all(body["metadata"]["resourceVersion"] for _, body in api.patches)


async def test_a_conflict_reads_again_and_a_refused_fence_writes_nothing() -> None:
    api = FakeClusters("main")
    clock = [datetime(2026, 8, 20, tzinfo=UTC)]
    leading = [True]
    writer = writer_for(api, clock, leading)
    api.conflicts = 1
    assert await writer.publish(StoreCondition("True", "Connected", "GreptimeDB x")) == 1
    assert api.condition("main")["reason"] == "Connected"
    leading[0] = False
    assert await writer.publish(StoreCondition("False", "Unreachable", "x")) == 0
    assert api.condition("main")["reason"] == "Connected" and writer.failures == 0


@pytest.mark.parametrize("code", [500, 403])
async def test_api_errors_are_counted_and_never_raised(code: int) -> None:
    api = FakeClusters("main")
    writer = writer_for(api, [datetime(2026, 8, 20, tzinfo=UTC)], [True])
    api.fail = api_error(code)
    assert await writer.publish(StoreCondition("True", "Connected", "x")) == 0
    assert writer.failures == 1
    api.fail = None
    assert await writer.publish(StoreCondition("True", "Connected", "x")) == 1
