"""The line-protocol writer against a loopback HTTP server standing in for GreptimeDB."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from line_protocol_parser import parse_line  # type: ignore[import-untyped]

from tensorfusion.adapters.tsdb.greptime_store import GreptimeSettings
from tensorfusion.adapters.tsdb.greptime_writer import LineProtocolWriter, WriteEndpoint
from tensorfusion.domain.backoff import Backoff
from tensorfusion.domain.metrics.rows import MetricRow

from .loopback_peers import eventually, free_port

pytestmark = pytest.mark.integration


@dataclass
class FakeGreptime:
    """Answers each write with the next scripted status (then 204)."""

    script: list[tuple[int, str]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str], str]] = field(default_factory=list)
    port: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.text()
        self.requests.append((str(request.rel_url), dict(request.headers), body))
        if self.script:
            status, text = self.script.pop(0)
            return web.Response(status=status, text=text)
        return web.Response(status=204)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
async def fake() -> AsyncIterator[FakeGreptime]:
    server = FakeGreptime()
    app = web.Application()
    app.router.add_post("/v1/influxdb/api/v2/write", server.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    server.port = free_port()
    await web.TCPSite(runner, "127.0.0.1", server.port).start()
    yield server
    await runner.cleanup()


ROW = MetricRow(
    "tf_gpu_usage",
    1_700_000_000_000,
    {"node": "node a", "pool": "p", "uuid": "u"},
    {"temperature": 61.5, "memory_bytes": 1024},
)


def _writer(settings: GreptimeSettings, **extra: object) -> LineProtocolWriter:
    return LineProtocolWriter(
        WriteEndpoint(settings.write_url(), settings.authorization()),
        batch_age_s=0.05,
        backoff=Backoff(initial=0.05, maximum=0.1),
        **extra,  # type: ignore[arg-type]
    )


async def test_url_body_and_cloud_authorization(fake: FakeGreptime) -> None:
    settings = GreptimeSettings(
        host="ignored",
        is_cloud=True,
        user="alice",
        password="s3cret",
        db="tf",
        write_base_url=fake.base,
    )
    writer = _writer(settings)
    await writer.start()
    writer.write([ROW])
    await eventually(lambda: len(fake.requests) == 1, 10, "one write")
    await writer.close()
    url, headers, body = fake.requests[0]
    assert url == "/v1/influxdb/api/v2/write?db=tf&precision=ms"
    assert headers["Authorization"] == "token alice:s3cret"
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    parsed = parse_line(body)
    assert parsed["tags"]["node"] == "node a"
    assert parsed["fields"] == {"temperature": 61.5, "memory_bytes": 1024}


def test_urls_of_both_modes() -> None:
    assert GreptimeSettings(host="db.local", http_port=4444).write_url() == (
        "http://db.local:4444/v1/influxdb/api/v2/write?db=public&precision=ms"
    )
    cloud = GreptimeSettings(host="x.greptime.cloud", is_cloud=True, user="u", password="p")
    assert cloud.write_url().startswith("https://x.greptime.cloud/v1/influxdb/api/v2/write?")
    assert GreptimeSettings(host="h", user="u", password="p").authorization() == ""


@pytest.mark.parametrize("status", [500, 503, 408, 429])
async def test_retryable_statuses_are_retried(fake: FakeGreptime, status: int) -> None:
    fake.script = [(status, "busy"), (status, "busy")]
    writer = _writer(GreptimeSettings(host="h", write_base_url=fake.base))
    await writer.start()
    writer.write([ROW])
    await eventually(lambda: len(fake.requests) == 3, 10, "two retries then success")
    await eventually(lambda: len(writer.buffer) == 0, 10, "buffer drained")
    await writer.close()
    assert len({body for _, _, body in fake.requests}) == 1  # the same batch each time
    assert writer.metrics.write_errors._value.get() == 2


async def test_missing_table_recreates_and_retries(fake: FakeGreptime) -> None:
    fake.script = [(400, "Table not found: greptime.public.tf_gpu_usage")]
    created: list[int] = []

    async def recreate() -> None:
        created.append(1)

    writer = _writer(
        GreptimeSettings(host="h", write_base_url=fake.base), on_missing_table=recreate
    )
    await writer.start()
    writer.write([ROW])
    await eventually(lambda: len(fake.requests) == 2, 10, "retry after re-creation")
    await writer.close()
    assert created == [1]


async def test_other_4xx_drops_without_retry(fake: FakeGreptime) -> None:
    fake.script = [(400, "invalid column type")]
    writer = _writer(GreptimeSettings(host="h", write_base_url=fake.base))
    await writer.start()
    writer.write([ROW])
    await eventually(lambda: len(writer.buffer) == 0, 10, "batch dropped")
    writer.write([ROW])
    await eventually(lambda: len(fake.requests) == 2, 10, "next batch sent")
    await writer.close()
    assert writer.metrics.rows_dropped.labels("tf_gpu_usage", "rejected")._value.get() == 1


async def test_connection_errors_are_retried_until_the_server_is_up(fake: FakeGreptime) -> None:
    closed_port = free_port()
    writer = _writer(GreptimeSettings(host="h", write_base_url=f"http://127.0.0.1:{closed_port}"))
    await writer.start()
    writer.write([ROW])
    await eventually(lambda: writer.requests >= 3, 10, "repeated attempts")
    assert not writer.up and "Connect" in writer.last_error and len(writer.buffer) == 1
    await writer.close(flush_timeout_s=0.1)


async def test_full_buffer_drops_oldest_and_counts() -> None:
    writer = _writer(GreptimeSettings(host="h", write_base_url="http://127.0.0.1:9"))
    writer.buffer.max_rows = 2
    writer.write([ROW, ROW, ROW])
    assert len(writer.buffer) == 2
    assert writer.metrics.rows_dropped.labels("tf_gpu_usage", "buffer_full")._value.get() == 1
