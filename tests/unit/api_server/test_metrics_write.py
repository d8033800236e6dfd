"""`POST /v1/influxdb/api/v2/write` (metrics.md §9.3): the embedded store's write path takes
line protocol from the writers' ServiceAccounts only; a bad body, precision or database is
refused whole, naming what is wrong, and nothing reaches the store; a bad line is dropped
alone (tests/security/test_linep_write_path.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tensorfusion.api_server import (
    METRICS_WRITE_PATH,
    TokenReviewResult,
    add_metrics_write_route,
    create_api_app,
    service_account_username,
)
from tensorfusion.domain.metrics.rows import MetricRow

from .fakes import OWN_ACCOUNT, FakeBackend
from .test_assign_index import bearer, error_of

Client = TestClient[web.Request, web.Application]
AGENT = service_account_username("tensor-fusion-sys", "tensor-fusion-hypervisor-sa")
STRANGER = service_account_username("default", "someone")
LINES = (
    "tf_gpu_usage,node=n1,uuid=GPU-1 compute_percentage=42.5,memory_bytes=1024i 1700000000000\n"
    "tf_gpu_usage,node=n1,uuid=GPU-2 compute_percentage=7.0 1700000000500\n"
)
PARAMS = {"db": "public", "precision": "ms"}


@dataclass
class Sink:
    ready: bool = True
    batches: list[Sequence[MetricRow]] = field(default_factory=list)

    async def accept(self, rows: Sequence[MetricRow]) -> bool:
        if not self.ready:
            return False
        self.batches.append(rows)
        return True


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
async def writer_client(backend: FakeBackend, sink: Sink) -> AsyncIterator[Client]:
    backend.tokens = {
        "own-token": TokenReviewResult(True, OWN_ACCOUNT),
        "agent-token": TokenReviewResult(True, AGENT),
        "stranger-token": TokenReviewResult(True, STRANGER),
    }
    app = create_api_app(backend)
    add_metrics_write_route(app, backend, sink, writers={OWN_ACCOUNT, AGENT})
    async with TestClient(TestServer(app)) as client:
        yield client


@pytest.mark.parametrize("token", ["agent-token", "own-token"])
async def test_a_writers_rows_reach_the_store(
    writer_client: Client, sink: Sink, token: str
) -> None:
    reply = await writer_client.post(METRICS_WRITE_PATH, params=PARAMS, data=LINES,
                                     headers=bearer(token))  # fmt: skip
    assert reply.status == 204, await reply.text()
    [rows] = sink.batches
    assert [(r.table, r.tags["uuid"], r.ts_ms) for r in rows] == [
        ("tf_gpu_usage", "GPU-1", 1_700_000_000_000),
        ("tf_gpu_usage", "GPU-2", 1_700_000_000_500),
    ]
    assert rows[0].fields == {"compute_percentage": 42.5, "memory_bytes": 1024}


async def test_precision_defaults_to_nanoseconds_as_influxdb_does(
    writer_client: Client, sink: Sink
) -> None:
    body = "tf_gpu_usage,uuid=GPU-1 compute_percentage=1 1700000000000000000\n"
    reply = await writer_client.post(METRICS_WRITE_PATH, data=body, headers=bearer("agent-token"))
    assert reply.status == 204, await reply.text()
    assert sink.batches[0][0].ts_ms == 1_700_000_000_000


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "Unauthorized"),
        ({"Authorization": "Bearer unknown-token"}, 401, "Unauthorized"),
        ({"Authorization": "Bearer stranger-token"}, 403, "Forbidden"),
    ],
    ids=["no-token", "invalid-token", "someone-else"],
)
async def test_only_the_writers_service_accounts_may_write(
    writer_client: Client, sink: Sink, headers: dict[str, str], status: int, code: str
) -> None:
    reply = await writer_client.post(METRICS_WRITE_PATH, params=PARAMS, data=LINES,
                                     headers=headers)  # fmt: skip
    message = await error_of(reply, status, code)
    if status == 403:
        assert STRANGER in message and AGENT in message
    assert sink.batches == []


@pytest.mark.parametrize(
    ("params", "body", "status", "expected"),
    [
        (PARAMS, b"tf_gpu_usage v=1 \xff\n", 400, "not UTF-8"),
        ({"db": "public", "precision": "h"}, LINES, 400, "precision 'h' is not supported"),
        ({"db": "metrics", "precision": "ms"}, LINES, 404, "unknown database 'metrics'"),
    ],
    ids=["not-utf8", "bad-precision", "unknown-db"],
)
async def test_a_bad_request_names_the_problem_and_writes_nothing(
    writer_client: Client,
    sink: Sink,
    params: dict[str, str],
    body: str | bytes,
    status: int,
    expected: str,
) -> None:
    reply = await writer_client.post(METRICS_WRITE_PATH, params=params, data=body,
                                     headers=bearer("agent-token"))  # fmt: skip
    assert reply.status == status
    assert expected in (await reply.json())["error"]["message"]
    assert sink.batches == []


async def test_no_store_open_yet_is_503_with_retry_after(writer_client: Client, sink: Sink) -> None:
    sink.ready = False
    reply = await writer_client.post(METRICS_WRITE_PATH, params=PARAMS, data=LINES,
                                     headers=bearer("agent-token"))  # fmt: skip
    await error_of(reply, 503, "StoreNotReady")
    assert reply.headers["Retry-After"] == "5"


async def test_a_body_over_8_mib_is_413(writer_client: Client, sink: Sink) -> None:
    body = b"x" * (8 * 1024 * 1024 + 1)
    reply = await writer_client.post(METRICS_WRITE_PATH, params=PARAMS, data=body,
                                     headers=bearer("agent-token"))  # fmt: skip
    assert reply.status == 413
    assert sink.batches == []


async def test_an_empty_body_is_accepted_without_a_store(writer_client: Client, sink: Sink) -> None:
    sink.ready = False
    reply = await writer_client.post(METRICS_WRITE_PATH, params=PARAMS, data="\n",
                                     headers=bearer("agent-token"))  # fmt: skip
    assert reply.status == 204
