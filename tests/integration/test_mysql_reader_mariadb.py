"""The MySQL-protocol read path (aiomysql) against a real MariaDB server."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from tensorfusion.adapters.tsdb.greptime_store import GreptimeSettings, GreptimeStore
from tensorfusion.adapters.tsdb.mysql_reader import MySQLReader, ReaderSettings
from tensorfusion.adapters.tsdb.store import StoreQueryError, StoreUnavailableError

from .loopback_peers import MariaDB

pytestmark = pytest.mark.integration


async def test_values_are_decoded(mariadb: MariaDB) -> None:
    reader = MySQLReader(ReaderSettings(host="127.0.0.1", port=mariadb.port, database="mysql"))
    try:
        await reader.execute("CREATE DATABASE IF NOT EXISTS tfread")
        await reader.execute("DROP TABLE IF EXISTS tfread.samples")
        await reader.execute(
            "CREATE TABLE tfread.samples (node VARCHAR(64), raw VARBINARY(16), n BIGINT, "
            "x DOUBLE, d DECIMAL(6,2), ts DATETIME(3), ok BOOLEAN, missing DOUBLE)"
        )
        await reader.execute(
            "INSERT INTO tfread.samples VALUES ('node-ä', X'6e6f64652d61', 85899345920, 97.5, "
            "12.50, '2026-08-20 10:00:00.123', TRUE, NULL)"
        )
        result = await reader.query("SELECT * FROM tfread.samples", 5.0)
        assert result.columns == ("node", "raw", "n", "x", "d", "ts", "ok", "missing")
        node, raw, n, x, d, ts, ok, missing = result.rows[0]
        assert node == "node-ä" and raw == "node-a" and n == 85899345920 and x == 97.5
        assert d == Decimal("12.50")
        assert ts == datetime(2026, 8, 20, 10, 0, 0, 123000, tzinfo=UTC)
        assert ok == 1 and missing is None
        session = await reader.query("SELECT @@session.time_zone, @@character_set_client", 5.0)
        assert session.rows[0] == ("+00:00", "utf8mb4")
    finally:
        await reader.close()


async def test_errors_timeouts_and_reconnect(mariadb: MariaDB) -> None:
    reader = MySQLReader(ReaderSettings(host="127.0.0.1", port=mariadb.port, database="mysql"))
    try:
        with pytest.raises(StoreQueryError):
            await reader.query("SELEC nonsense", 5.0)
        assert (await reader.query("SELECT 1 AS one", 5.0)).rows == [(1,)]
        with pytest.raises(StoreUnavailableError, match="timed out"):
            await reader.query("SELECT SLEEP(5)", 0.3)
        assert (await reader.query("SELECT 2 AS two", 5.0)).rows == [(2,)]
        mariadb.stop()
        with pytest.raises(StoreUnavailableError):
            await reader.query("SELECT 3", 2.0)
        assert not reader.up
        mariadb.start()
        # Backoff: the next attempt is allowed after at most a few seconds.
        deadline = time.monotonic() + 30
        while True:
            try:
                assert (await reader.query("SELECT 4 AS four", 5.0)).rows == [(4,)]
                break
            except StoreUnavailableError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        assert reader.up and reader.connects >= 2
    finally:
        await reader.close()


async def test_unreachable_server_never_raises_raw_errors() -> None:
    reader = MySQLReader(ReaderSettings(host="127.0.0.1", port=1, connect_timeout_s=1))
    with pytest.raises(StoreUnavailableError, match="connect"):
        await reader.query("SELECT 1", 2.0)
    with pytest.raises(StoreUnavailableError, match="next attempt"):
        await reader.query("SELECT 1", 2.0)


async def test_a_database_name_with_quotes_reaches_the_schema_check(mariadb: MariaDB) -> None:
    name = "tf'q\\b"
    admin = MySQLReader(ReaderSettings(host="127.0.0.1", port=mariadb.port, database="mysql"))
    try:
        await admin.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
        await admin.execute(f"CREATE TABLE IF NOT EXISTS `{name}`.tf_gpu_usage (ts DOUBLE)")
    finally:
        await admin.close()
    settings = GreptimeSettings(host="127.0.0.1", port=mariadb.port, db=name)
    store = GreptimeStore(settings)
    try:
        problems = await store.check_schema()
        # The table was found through the quoted name: its time column has the wrong type.
        assert "tf_gpu_usage: time index must be ts (a timestamp), found double" in problems
    finally:
        await store.close()
