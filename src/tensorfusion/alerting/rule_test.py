"""`tensor-fusion alerts test RULES.yaml --fixture DATA.yaml`: rules against fixture rows.

Fixture format (all offsets are durations from `start`, e.g. `90s`, `5m`):

```yaml
start: 2026-08-20T10:00:00Z   # optional, default 2026-01-01T00:00:00Z
duration: 10m                  # simulated span to evaluate
interval: 10s                  # default sample spacing of series
series:                        # one row every `every` from `from` to `to` (inclusive)
  - table: tf_gpu_usage
    tags: {node: node-a, pool: pool-a, uuid: gpu-1}
    fields: {temperature: 95, memory_percentage: 10}
    increments: {}             # per-sample increase of counters (added to `fields`)
    from: 0s
    to: 5m
    every: 10s
rows:                          # single rows
  - {table: tf_system_metrics, at: 1m, tags: {pool: pool-a}, fields: {total_allocation_fail_cnt: 2}}
```
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tensorfusion.adapters.package_data import default_alert_rule_definitions
from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore
from tensorfusion.domain.alerting.replay import ReplayReport, replay_alerts
from tensorfusion.domain.alerting.rules import RuleSet, load_rules
from tensorfusion.domain.bounded_documents import DocumentError, DocumentLimits, load_yaml_document
from tensorfusion.domain.durations import DurationError
from tensorfusion.domain.metrics.retention import RetentionError, parse_ttl
from tensorfusion.domain.metrics.rows import FieldValue, MetricRow
from tensorfusion.domain.metrics.schema import ColumnType, TableSchema, table

_FIXTURE_LIMITS = DocumentLimits(max_bytes=16 * 1024 * 1024)
"""A fixture holds rows: larger than one object, still bounded."""

__all__ = ["FixtureError", "RuleTestResult", "load_fixture", "load_rule_file", "run_rule_test"]

_DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)


class FixtureError(ValueError):
    """A rules or fixture file that cannot be used; the message names file, key and value."""


@dataclass(frozen=True, slots=True)
class Fixture:
    """Rows plus the simulated time span."""

    start_ms: int
    end_ms: int
    rows: list[MetricRow]


@dataclass(frozen=True, slots=True)
class RuleTestResult:
    """Rule validation and the replay report."""

    rules: RuleSet
    report: ReplayReport
    start_ms: int


def _offset(value: object, source: str, key: str) -> int:
    if value in (0, "0", "0s"):
        return 0
    try:
        return parse_ttl(value)
    except RetentionError:
        raise FixtureError(
            f"{source}: {key}: {value!r} is not a duration (e.g. 0s, 90s, 5m, 1h)"
        ) from None


def _coerce(schema: TableSchema | None, column: str, value: Any, source: str) -> FieldValue:
    column_type = schema.column_type(column) if schema else None
    if column_type is ColumnType.FLOAT and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if column_type is ColumnType.INT and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool | int | float | str):
        return value
    raise FixtureError(f"{source}: field {column}: {value!r} is not a number, boolean or text")


def _schema(name: str) -> TableSchema | None:
    try:
        return table(name)
    except KeyError:
        return None


def load_fixture(path: Path) -> Fixture:
    """Read a fixture file into rows and a time span."""
    source = str(path)
    try:
        document = load_yaml_document(path.read_bytes(), _FIXTURE_LIMITS) or {}
    except (OSError, DocumentError) as error:
        raise FixtureError(f"{source}: cannot read: {error}") from None
    if not isinstance(document, Mapping):
        raise FixtureError(f"{source}: the fixture must be a mapping")
    start_raw = document.get("start", _DEFAULT_START)
    if isinstance(start_raw, str):
        try:
            start_raw = datetime.fromisoformat(start_raw.replace("Z", "+00:00"))
        except ValueError:
            raise FixtureError(f"{source}: start: {start_raw!r} is not an RFC 3339 time") from None
    if not isinstance(start_raw, datetime):
        raise FixtureError(f"{source}: start: {start_raw!r} is not an RFC 3339 time")
    start = start_raw if start_raw.tzinfo else start_raw.replace(tzinfo=UTC)
    start_ms = int(start.timestamp() * 1000)
    duration_ms = _offset(document.get("duration", "10m"), source, "duration")
    interval_ms = _offset(document.get("interval", "10s"), source, "interval")
    rows: list[MetricRow] = []
    for index, series in enumerate(document.get("series") or []):
        where = f"{source}: series #{index + 1}"
        if not isinstance(series, Mapping) or not isinstance(series.get("table"), str):
            raise FixtureError(f"{where}: needs a table name and fields")
        name = series["table"]
        schema = _schema(name)
        tags = {str(k): str(v) for k, v in (series.get("tags") or {}).items()}
        fields = {
            str(k): _coerce(schema, str(k), v, where)
            for k, v in (series.get("fields") or {}).items()
        }
        increments = dict(series.get("increments") or {})
        begin = _offset(series.get("from", 0), where, "from")
        end = _offset(series["to"], where, "to") if "to" in series else duration_ms
        every = _offset(series["every"], where, "every") if "every" in series else interval_ms
        if every <= 0:
            raise FixtureError(f"{where}: every must be longer than zero")
        for step, offset in enumerate(range(begin, end + 1, every)):
            values = dict(fields)
            for column, increase in increments.items():
                base = values.get(column, 0)
                if not isinstance(base, int | float) or not isinstance(increase, int | float):
                    raise FixtureError(
                        f"{where}: increments.{column}: {increase!r} is not a number"
                    )
                values[column] = _coerce(schema, column, base + increase * step, where)
            rows.append(MetricRow(name, start_ms + offset, tags, values))
    for index, single in enumerate(document.get("rows") or []):
        where = f"{source}: rows #{index + 1}"
        if not isinstance(single, Mapping) or not isinstance(single.get("table"), str):
            raise FixtureError(f"{where}: needs a table name")
        schema = _schema(single["table"])
        rows.append(
            MetricRow(
                single["table"],
                start_ms + _offset(single.get("at", "0s"), where, "at"),
                {str(k): str(v) for k, v in (single.get("tags") or {}).items()},
                {
                    str(k): _coerce(schema, str(k), v, where)
                    for k, v in (single.get("fields") or {}).items()
                },
            )
        )
    return Fixture(start_ms, start_ms + duration_ms, rows)


def load_rule_file(path: Path) -> RuleSet:
    """Rules from a file: a list, or a mapping with `alertRules` (a config.yaml), or `defaults`."""
    if str(path) == "defaults":
        return load_rules(default_alert_rule_definitions())
    try:
        document = load_yaml_document(path.read_bytes())
    except (OSError, DocumentError) as error:
        raise FixtureError(f"{path}: cannot read: {error}") from None
    if isinstance(document, Mapping):
        if "dynamicConfig" in document and isinstance(document["dynamicConfig"], Mapping):
            document = document["dynamicConfig"]
        document = document.get("alertRules")
    if not isinstance(document, list):
        raise FixtureError(
            f"{path}: expected a list of rules, or a mapping with alertRules "
            "(config.yaml) or dynamicConfig.alertRules (values.yaml)"
        )
    return load_rules(document)


def run_rule_test(rules_path: Path, fixture_path: Path) -> RuleTestResult:
    """Load rules and fixture into an in-memory DuckDB store and replay the rules over it."""
    try:
        rule_set = load_rule_file(rules_path)
        fixture = load_fixture(fixture_path)
    except DurationError as error:
        raise FixtureError(str(error)) from None
    store = DuckDBMetricsStore(threads=1)
    try:
        store.insert_rows(fixture.rows)
        report = replay_alerts(rule_set.rules, store, fixture.start_ms, fixture.end_ms)
    finally:
        store.close()
    return RuleTestResult(rule_set, report, fixture.start_ms)
