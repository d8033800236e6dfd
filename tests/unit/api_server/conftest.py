"""Fixtures of the HTTP server tests: a fake backend and a test client of the API app."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tensorfusion.api_server import create_api_app

from .fakes import GENERATED_AT, FakeBackend


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
async def client(backend: FakeBackend) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    app = create_api_app(backend, clock=lambda: GENERATED_AT)
    async with TestClient(TestServer(app)) as test_client:
        yield test_client
