"""Rule SQL on the embedded DuckDB store cannot read the host, fetch over the network, load an
extension or change the database's configuration (docs/rule-sandbox.md)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import duckdb
import pytest

from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore, EmbeddedMetricsStore
from tensorfusion.adapters.tsdb.store import StoreError
from tensorfusion.controller.tsdb_store import TermStore, open_term_store
from tensorfusion.domain.alerting.read_query import ReadQueryError, check_read_query
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.settings.controller_environment import TsdbEnvironment

_SECRET = "tf-sandbox-secret-7f3a"


@pytest.fixture
async def term(tmp_path: Path) -> AsyncIterator[TermStore]:
    """The controller's embedded store, opened as the leader opens it."""
    opened = open_term_store(TsdbEnvironment(), embedded_dir=tmp_path / "tsdb", term_id="t1")
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "token.csv"
    path.write_text(f"{_SECRET}\n{_SECRET},x\n")
    return path


@pytest.fixture
def listener() -> socket.socket:
    """A loopback port that accepts nothing; a connection attempt would queue on it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.setblocking(False)
    return server


def _host_queries(secret: Path, port: int) -> list[str]:
    return [
        "SELECT content AS summary FROM read_text('/etc/hostname')",
        f"SELECT content AS summary FROM read_text('{secret}')",
        f"SELECT * FROM read_csv('{secret}')",
        f"SELECT * FROM read_blob('{secret}')",
        f"SELECT * FROM read_json('{secret}')",
        f"SELECT file FROM glob('{secret.parent}/*')",
        f"SELECT * FROM '{secret}'",
        f"SELECT * FROM query('SELECT * FROM read_text(''{secret}'')')",
        f"SELECT * FROM read_csv('http://127.0.0.1:{port}/rows.csv')",
        f"SELECT * FROM 'http://127.0.0.1:{port}/rows.parquet'",
    ]


async def test_rule_queries_cannot_read_host_files_or_the_network(
    term: TermStore, secret_file: Path, listener: socket.socket
) -> None:
    store = term.store
    assert isinstance(store, EmbeddedMetricsStore)
    for sql in _host_queries(secret_file, listener.getsockname()[1]):
        check_read_query(sql)  # one SELECT: the lexer alone lets these through
        with pytest.raises(StoreError) as refused:
            await store.query(sql, 10.0)
        message = str(refused.value)
        assert "disabled by configuration" in message, (sql, message)
        assert _SECRET not in message
    with pytest.raises(BlockingIOError):  # nobody tried to fetch the http:// paths
        listener.accept()
    listener.close()


@pytest.mark.parametrize(
    ("statement", "refusal"),
    [
        ("INSTALL httpfs", "file system operations are disabled by configuration"),
        ("FORCE INSTALL httpfs", "file system operations are disabled by configuration"),
        ("LOAD httpfs", "Loading external extensions is disabled"),
        ("LOAD '/tmp/evil.duckdb_extension'", "Loading external extensions is disabled"),
    ],
)
def test_no_extension_is_installed_or_loaded(term: TermStore, statement: str, refusal: str) -> None:
    assert term.embedded is not None
    with pytest.raises(duckdb.Error, match=refusal):
        term.embedded.execute(statement)  # the writer's connection: no statement check at all


@pytest.mark.parametrize(
    "statement",
    [
        "SET enable_external_access = true",
        "SET GLOBAL enable_external_access = true",
        "RESET lock_configuration",
        "SET lock_configuration = false",
        "SET autoload_known_extensions = true",
        "SET allowed_directories = ['/']",
        "SET TimeZone = 'Asia/Tokyo'",
    ],
)
async def test_the_configuration_is_locked(term: TermStore, statement: str) -> None:
    store, database = term.store, term.embedded
    assert isinstance(store, EmbeddedMetricsStore) and database is not None
    with pytest.raises(ReadQueryError):
        check_read_query(statement)
    with pytest.raises(StoreError, match="exactly one SELECT"):
        await store.query(statement, 5.0)
    # Even on the writer's connection and on a read cursor, past every statement check:
    with pytest.raises(duckdb.Error, match="configuration has been locked"):
        database.execute(statement)
    reader = database.reader()
    try:
        with pytest.raises(duckdb.Error, match="configuration has been locked"):
            reader._cursor.execute(statement)
    finally:
        reader.close()
    settings = database.query(
        "SELECT current_setting('enable_external_access'), current_setting('TimeZone')"
    )
    assert settings.rows == [(False, "UTC")]


async def test_the_store_still_writes_reads_and_checkpoints_its_own_file(
    term: TermStore,
) -> None:
    assert term.embedded is not None and term.path is not None
    rows = [
        MetricRow("tf_gpu_usage", 1_700_000_000_000 + i, {"node": "n'1", "uuid": f"g{i}"},
                  {"temperature": 50.0 + i})
        for i in range(3)
    ]  # fmt: skip
    await term.write(rows)
    assert term.write_state() == (True, "")
    assert term.embedded.delete_older_than(0) == 0  # DELETE and CHECKPOINT of the file
    result = await term.store.query(
        "SELECT node, max(temperature) AS t FROM tf_gpu_usage GROUP BY node", 5.0
    )
    assert result.rows == [("n'1", 52.0)]
    assert term.path.exists()


def test_an_in_memory_store_is_sandboxed_too(secret_file: Path) -> None:
    database = DuckDBMetricsStore(threads=1)
    try:
        with pytest.raises(StoreError, match="disabled by configuration"):
            database.query(f"SELECT content FROM read_text('{secret_file}')")
        assert database.query("SELECT current_setting('threads')").rows == [(1,)]
    finally:
        database.close()
