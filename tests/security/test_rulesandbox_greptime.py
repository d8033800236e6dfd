"""GreptimeDB rule queries run on a pool of their own, as the optional read-only rule user;
the DDL stays on the writer's pool (docs/rule-sandbox.md). Credentials never appear in a repr
or a log line.

The MySQL-protocol side runs against a real MariaDB (the integration tests' peer) started with
its grant tables on, so the rule user's SELECT-only grant is enforced by the server.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tensorfusion.adapters.tsdb.greptime_store import GreptimeSettings, GreptimeStore
from tensorfusion.adapters.tsdb.mysql_reader import MySQLReader, ReaderSettings
from tensorfusion.adapters.tsdb.store import StoreError, StoreQueryError
from tensorfusion.controller.tsdb_store import greptime_settings
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment
from tests.integration.loopback_peers import MariaDB, require_binary, wait_until

_PASSWORD = "rule-pw-4c9e"
_WRITER_PASSWORD = "writer-pw-81d0"
_DB = "tfrule"


class _MariaDBWithGrants(MariaDB):
    """The loopback MariaDB, but with its grant tables on (root@localhost, no password)."""

    def start(self) -> None:
        server = require_binary("mariadbd", "/usr/sbin/mariadbd")
        if not (self.workdir / "data").exists():
            self.install()
        log = (self.workdir / "mariadb.log").open("ab")
        args = [
            server, "--no-defaults", f"--datadir={self.workdir / 'data'}",
            f"--port={self.port}", "--bind-address=127.0.0.1",
            f"--socket={self.workdir / 'mariadb.sock'}",
            f"--pid-file={self.workdir / 'mariadb.pid'}",
            "--skip-networking=0", "--innodb-buffer-pool-size=16M",
        ]  # fmt: skip
        if os.geteuid() == 0:
            args.append("--user=root")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        wait_until(self.ready, 60, f"MariaDB on port {self.port}")


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDB]:
    if shutil.which("mariadbd") is None and not Path("/usr/sbin/mariadbd").exists():
        pytest.skip("MariaDB is not installed")
    server = _MariaDBWithGrants(tmp_path_factory.mktemp("mariadb-grants"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def prepared(mariadb: MariaDB) -> int:
    """Database `tfrule` with one table; user tf_rule may only SELECT on it."""
    admin = MySQLReader(ReaderSettings(host="127.0.0.1", port=mariadb.port, database="mysql"))
    try:
        for statement in (
            f"CREATE OR REPLACE DATABASE {_DB}",
            f"CREATE OR REPLACE TABLE {_DB}.tf_gpu_usage "
            "(node VARCHAR(64), temperature DOUBLE, ts DATETIME(3))",
            f"INSERT INTO {_DB}.tf_gpu_usage VALUES ('n1', 91.0, NOW())",
            f"CREATE OR REPLACE USER 'tf_rule'@'localhost' IDENTIFIED BY '{_PASSWORD}'",
            f"GRANT SELECT ON {_DB}.* TO 'tf_rule'@'localhost'",
            f"CREATE OR REPLACE USER 'tf_writer'@'localhost' IDENTIFIED BY '{_WRITER_PASSWORD}'",
            f"GRANT ALL ON {_DB}.* TO 'tf_writer'@'localhost'",
        ):
            await admin.execute(statement)
    finally:
        await admin.close()
    return mariadb.port


def _settings(port: int, *, rule_password: str = _PASSWORD) -> GreptimeSettings:
    env = ControllerEnvironment.from_mapping(
        {
            "TSDB_MYSQL_HOST": "127.0.0.1",
            "TSDB_MYSQL_PORT": str(port),
            "TSDB_MYSQL_DATABASE": _DB,
            "TSDB_MYSQL_USER": "tf_writer",
            "TSDB_MYSQL_PASSWORD": _WRITER_PASSWORD,
            "TSDB_RULE_USER": "tf_rule",
            "TSDB_RULE_PASSWORD": rule_password,
        }
    )
    return greptime_settings(env.tsdb)


async def test_rule_queries_run_as_the_rule_user_and_ddl_as_the_writer(prepared: int) -> None:
    store = GreptimeStore(_settings(prepared))
    try:
        assert store.reader is not store.schema_reader
        result = await store.query(
            "SELECT CURRENT_USER() AS who, max(temperature) AS t FROM tf_gpu_usage", 5.0
        )
        assert result.rows == [("tf_rule@localhost", 91.0)]
        # The statement check stays in front: a write never reaches the server this way ...
        with pytest.raises(StoreQueryError, match="SELECT"):
            await store.query("INSERT INTO tf_gpu_usage VALUES ('n2', 1.0, NOW())", 5.0)
        # ... and the rule pool itself cannot write or alter, whatever the text.
        for statement in (
            "INSERT INTO tf_gpu_usage VALUES ('n2', 1.0, NOW())",
            "ALTER TABLE tf_gpu_usage ADD COLUMN x DOUBLE",
            "DROP TABLE tf_gpu_usage",
        ):
            with pytest.raises(StoreQueryError, match="denied"):
                await store.reader.execute(statement, 5.0)
        # The DDL and the schema check go through the writer's pool.
        who = await store.schema_reader.query("SELECT CURRENT_USER()", 5.0)
        assert who.rows == [("tf_writer@localhost",)]
        await store.schema_reader.execute("ALTER TABLE tf_gpu_usage ADD COLUMN x DOUBLE", 5.0)
        assert store.health().detail["ruleUser"] is True
    finally:
        await store.close()


async def test_without_a_rule_user_rules_still_get_a_pool_of_their_own(prepared: int) -> None:
    settings = GreptimeSettings(
        host="127.0.0.1", port=prepared, db=_DB, user="tf_writer", password=_WRITER_PASSWORD
    )
    store = GreptimeStore(settings)
    try:
        assert store.reader is not store.schema_reader
        result = await store.query("SELECT CURRENT_USER()", 5.0)
        assert result.rows == [("tf_writer@localhost",)]
        assert store.health().detail["ruleUser"] is False
    finally:
        await store.close()


async def test_credentials_appear_in_no_repr_and_no_log(
    prepared: int, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(prepared, rule_password="wrong-pw-2b7f")
    env = ControllerEnvironment.from_mapping(
        {"TSDB_MYSQL_HOST": "h", "TSDB_MYSQL_PASSWORD": _WRITER_PASSWORD,
         "TSDB_RULE_USER": "tf_rule", "TSDB_RULE_PASSWORD": _PASSWORD}
    )  # fmt: skip
    shown = " ".join(
        repr(value)
        for value in (env, env.tsdb, _settings(prepared), settings.reader(), settings.rule_reader())
    )
    assert "tf_rule" in shown
    for secret in (_PASSWORD, _WRITER_PASSWORD, "wrong-pw-2b7f"):
        assert secret not in shown
    store = GreptimeStore(settings)
    with caplog.at_level(logging.DEBUG):
        try:
            with pytest.raises(StoreError, match="denied") as refused:
                await store.query("SELECT 1", 5.0)
        finally:
            await store.close()
    assert "wrong-pw-2b7f" not in str(refused.value)
    assert "wrong-pw-2b7f" not in caplog.text and _WRITER_PASSWORD not in caplog.text
