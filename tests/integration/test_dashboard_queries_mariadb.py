"""Every dashboard query, expanded exactly as Grafana's MySQL data source expands it, through the
MySQL-protocol read path (`MySQLReader`, aiomysql) against a real MariaDB server.

The tables follow the `tf_*` schema (tags VARCHAR, the schema's field types, the time column
DATETIME(3) in UTC); the rows are the unit tier's fixture (`tests/unit/dashboards/fixture.py`,
made by the project's recorders), inserted as SQL: MariaDB has no line-protocol endpoint. The
expected rows are the unit tier's too, so both stores answer alike. GreptimeDB itself does not
run here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Final

import pytest
import pytest_asyncio

from dashboards.queries import QUERIES, Format
from tensorfusion.adapters.tsdb.mysql_reader import MySQLReader, ReaderSettings
from tensorfusion.domain.metrics.rows import FieldValue, MetricRow
from tensorfusion.domain.metrics.schema import TABLES, ColumnType, TableSchema, table
from tensorfusion.domain.timestamps import format_sql_timestamp
from tests.unit.dashboards.expected import EXPECTED, FILTERED
from tests.unit.dashboards.fixture import TIME_RANGE, all_rows, normalize
from tests.unit.dashboards.grafana_sql import Target, TimeRange, expand

from .loopback_peers import MariaDB

pytestmark = pytest.mark.integration

DATABASE: Final = "tfdashboards"
_MYSQL_TYPES: Final = {
    ColumnType.FLOAT: "DOUBLE",
    ColumnType.INT: "BIGINT",
    ColumnType.BOOL: "BOOLEAN",
    ColumnType.STRING: "VARCHAR(255)",
}


def create_table(schema: TableSchema) -> str:
    columns = [f"{tag} VARCHAR(255)" for tag in schema.tags]
    columns += [f"{name} {_MYSQL_TYPES[kind]}" for name, kind in schema.fields]
    columns.append(f"{schema.time_column} DATETIME(3) NOT NULL")
    return f"CREATE TABLE {schema.name} ({', '.join(columns)})"


def literal(value: FieldValue | None) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def insert(rows: Sequence[MetricRow]) -> list[str]:
    """One INSERT per table with every row of it."""
    statements = []
    for schema in TABLES:
        mine = [row for row in rows if row.table == schema.name]
        if not mine:
            continue
        names = [*schema.tags, *(name for name, _ in schema.fields)]
        values = [
            "("
            + ", ".join(
                [
                    *(literal({**row.tags, **row.fields}.get(name)) for name in names),
                    f"'{format_sql_timestamp(row.ts_ms)}'",
                ]
            )
            + ")"
            for row in mine
        ]
        statements.append(
            f"INSERT INTO {schema.name} ({', '.join([*names, schema.time_column])}) "
            f"VALUES {', '.join(values)}"
        )
    return statements


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def reader(mariadb: MariaDB) -> AsyncIterator[MySQLReader]:
    # The server is this session's own (a fresh data directory): the database is new.
    admin = MySQLReader(ReaderSettings(host="127.0.0.1", port=mariadb.port, database="mysql"))
    try:
        await admin.execute(f"CREATE DATABASE {DATABASE}")
    finally:
        await admin.close()
    store = MySQLReader(ReaderSettings(host="127.0.0.1", port=mariadb.port, database=DATABASE))
    rows = all_rows()
    assert {row.table for row in rows} <= {schema.name for schema in TABLES}
    for schema in TABLES:
        await store.execute(create_table(table(schema.name)))
    for statement in insert(rows):
        await store.execute(statement)
    yield store
    await store.close()


async def run(
    reader: MySQLReader, key: str, variables: Mapping[str, Sequence[str]] | None = None
) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    time_range = TIME_RANGE
    if variables:
        time_range = TimeRange(
            TIME_RANGE.from_s, TIME_RANGE.to_s, {**TIME_RANGE.variables, **variables}
        )
    result = await reader.query(expand(QUERIES[key].sql, time_range, Target.MYSQL), 10.0)
    return result.columns, normalize(result.rows)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("key", list(QUERIES))
async def test_query_returns_the_fixture_rows(reader: MySQLReader, key: str) -> None:
    columns, rows = await run(reader, key)
    assert rows == EXPECTED[key]
    if QUERIES[key].format is Format.TIME_SERIES:
        assert columns[0] == "time"


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(
    ("key", "variables", "expected"), FILTERED, ids=[f"{key}-{sorted(v)}" for key, v, _ in FILTERED]
)
async def test_a_narrowed_variable_filters(
    reader: MySQLReader,
    key: str,
    variables: Mapping[str, Sequence[str]],
    expected: list[tuple[object, ...]],
) -> None:
    _, rows = await run(reader, key, variables)
    assert rows == expected
