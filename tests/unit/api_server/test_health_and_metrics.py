"""`/healthz`, `/readyz` (deployment.md §3.1) and `/metrics` (prometheus-client exposition)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, Counter, Gauge

from tensorfusion.api_server import (
    HEALTHZ_PATH,
    METRICS_PATH,
    READYZ_PATH,
    create_health_app,
    create_metrics_app,
)

from .fakes import FakeBackend

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def health(backend: FakeBackend) -> AsyncIterator[Client]:
    async with TestClient(TestServer(create_health_app(backend))) as client:
        yield client


class BrokenReadiness:
    def missing_for_traffic(self) -> list[str]:
        raise RuntimeError("cache handle gone")


async def test_healthz_answers_while_the_process_runs(health: Client, backend: FakeBackend) -> None:
    backend.missing = ["webhook listener"]
    response = await health.get(HEALTHZ_PATH)
    assert response.status == 200
    assert await response.text() == "ok"


async def test_readyz_says_what_is_missing_until_nothing_is(
    health: Client, backend: FakeBackend
) -> None:
    backend.missing = ["webhook listener", "informer caches"]
    response = await health.get(READYZ_PATH)
    assert response.status == 503
    assert await response.text() == "not ready: webhook listener, informer caches"
    backend.missing = ["informer caches"]
    response = await health.get(READYZ_PATH)
    assert (response.status, await response.text()) == (503, "not ready: informer caches")
    backend.missing = []
    response = await health.get(READYZ_PATH)
    assert (response.status, await response.text()) == (200, "ok")
    backend.missing = ["webhook certificate"]  # e.g. the certificate is being replaced
    assert (await health.get(READYZ_PATH)).status == 503


async def test_readyz_never_depends_on_leadership_or_the_allocator(
    health: Client, backend: FakeBackend
) -> None:
    backend.leader, backend.live_allocator, backend.inputs = False, None, None
    backend.address_error = RuntimeError("no leader-info")
    response = await health.get(READYZ_PATH)
    assert (response.status, await response.text()) == (200, "ok")
    assert backend.address_reads == 0


async def test_readyz_reports_a_failing_check() -> None:
    async with TestClient(TestServer(create_health_app(BrokenReadiness()))) as client:
        response = await client.get(READYZ_PATH)
        assert response.status == 503
        assert "cache handle gone" in await response.text()
        assert (await client.get(HEALTHZ_PATH)).status == 200


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    counter = Counter("tf_controller_reconciles", "Reconciles.", ["controller"], registry=registry)
    counter.labels("gpupool").inc(3)
    Gauge("tf_controller_leader", "1 on the leader.", registry=registry).set(1)
    return registry


async def test_metrics_expose_the_given_registry(registry: CollectorRegistry) -> None:
    elsewhere = CollectorRegistry()
    Gauge("tf_not_in_this_registry", "Other.", registry=elsewhere).set(7)
    async with TestClient(TestServer(create_metrics_app(registry))) as client:
        response = await client.get(METRICS_PATH)
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        text = await response.text()
        assert 'tf_controller_reconciles_total{controller="gpupool"} 3.0' in text
        assert "tf_controller_leader 1.0" in text
        assert "tf_not_in_this_registry" not in text
        assert "python_gc" not in text  # not the default registry


async def test_metrics_speak_openmetrics_when_asked(registry: CollectorRegistry) -> None:
    async with TestClient(TestServer(create_metrics_app(registry))) as client:
        response = await client.get(
            METRICS_PATH, headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        text = await response.text()
        assert text.endswith("# EOF\n")
        assert 'tf_controller_reconciles_total{controller="gpupool"} 3.0' in text
