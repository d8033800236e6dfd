"""Fixtures of the integration tier."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from .loopback_peers import Alertmanager, MariaDB, WebhookReceiver


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    hook = WebhookReceiver()
    await hook.start()
    yield hook
    await hook.stop()


@pytest.fixture
def alertmanager(tmp_path: Path, receiver: WebhookReceiver) -> Iterator[Alertmanager]:
    manager = Alertmanager(tmp_path / "alertmanager", receiver.url)
    manager.start()
    yield manager
    manager.stop()


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDB]:
    server = MariaDB(tmp_path_factory.mktemp("mariadb"))
    server.start()
    yield server
    server.stop()
