"""Alertmanager discovery: one client per resolved address, kept current, or the flag's list."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tensorfusion.adapters.alertmanager.client import AlertmanagerClient
from tensorfusion.adapters.alertmanager.targets import AlertmanagerAddressError
from tensorfusion.alerting.alertmanager_discovery import (
    DiscoveredAlertmanagers,
    StaticAlertmanagers,
    dns_resolver,
    headless_service_host,
    hosts_file_resolver,
    target_url,
)
from tensorfusion.domain.alerting.alerts import AlertNotice


class FakeClient(AlertmanagerClient):
    """Records what reaches it instead of posting."""

    def __init__(self, urls: list[str]) -> None:
        super().__init__(urls)
        self.received: list[AlertNotice] = []
        self.started = self.stopped = False

    async def start(self) -> None:
        self.started = True

    async def stop(self, flush_timeout_s: float = 0.0) -> None:
        assert flush_timeout_s == 0.0  # a leaving target loses its outbox, never drains
        self.stopped = True

    def submit(self, notices: Sequence[AlertNotice]) -> None:
        self.received.extend(notices)


class Answers:
    """A resolver whose answer the test sets; None makes the lookup fail."""

    def __init__(self, *addresses: str) -> None:
        self.addresses: list[str] | None = list(addresses)
        self.asked: list[str] = []

    async def __call__(self, host: str) -> list[str]:
        self.asked.append(host)
        if self.addresses is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(self.addresses)


def notice(fingerprint: str = "f1") -> AlertNotice:
    return AlertNotice("R", fingerprint, {"alertname": "R"}, {}, 1, 2, False)


def discovered(answers: Answers, made: list[FakeClient]) -> DiscoveredAlertmanagers:
    def factory(urls: list[str]) -> AlertmanagerClient:
        client = FakeClient(urls)
        made.append(client)
        return client

    return DiscoveredAlertmanagers(
        headless_service_host("tf-sys"), resolver=answers, interval_s=3600, client_factory=factory
    )


async def test_every_address_gets_its_own_client_and_the_set_follows_the_answer() -> None:
    answers = Answers("127.0.0.2", "127.0.0.3")
    made: list[FakeClient] = []
    targets = discovered(answers, made)
    await targets.start()
    try:
        assert answers.asked == ["alert-manager-headless.tf-sys.svc.cluster.local"]
        assert targets.urls == ["http://127.0.0.2:9093/api/v2/alerts",
                                "http://127.0.0.3:9093/api/v2/alerts"]  # fmt: skip
        assert all(client.started for client in made)
        targets.submit([notice()])
        assert [len(client.received) for client in made] == [1, 1]
        answers.addresses = ["127.0.0.3", "127.0.0.4"]
        assert await targets.refresh()
        first, second, third = made
        assert first.stopped and not second.stopped and third.started
        assert targets.urls == ["http://127.0.0.3:9093/api/v2/alerts",
                                "http://127.0.0.4:9093/api/v2/alerts"]  # fmt: skip
        targets.submit([notice("f2")])
        assert (len(first.received), len(second.received), len(third.received)) == (1, 2, 1)
        answers.addresses = None
        assert not await targets.refresh()
        assert len(targets.urls) == 2 and targets.failed_lookups == 1
        assert "Name or service not known" in targets.last_error
    finally:
        await targets.stop()
    assert all(client.stopped for client in made[1:])
    targets.submit([notice("f3")])  # after stop: nowhere
    assert len(made[2].received) == 1


async def test_a_failed_first_lookup_starts_with_no_target_and_recovers() -> None:
    answers = Answers()
    answers.addresses = None
    made: list[FakeClient] = []
    targets = discovered(answers, made)
    await targets.start()
    try:
        assert targets.urls == [] and targets.status() == []
        answers.addresses = ["10.0.0.9"]
        await targets.refresh()
        assert targets.urls == ["http://10.0.0.9:9093/api/v2/alerts"]
        assert [s["url"] for s in targets.status()] == targets.urls
    finally:
        await targets.stop()


def test_urls_of_addresses_and_of_the_flag() -> None:
    assert target_url("fd00::5") == "http://[fd00::5]:9093/api/v2/alerts"
    assert target_url("10.1.2.3", 19093) == "http://10.1.2.3:19093/api/v2/alerts"
    static = StaticAlertmanagers(["http://am-0:9093", " https://am.example/prefix "])
    assert static.urls == ["http://am-0:9093/api/v2/alerts",
                           "https://am.example/prefix/api/v2/alerts"]  # fmt: skip
    with pytest.raises(AlertmanagerAddressError, match="-alert-manager-addr"):
        StaticAlertmanagers(["am-0:9093"])


async def test_the_dns_resolver_answers_loopback_names() -> None:
    addresses: Any = await dns_resolver("localhost")
    assert "127.0.0.1" in addresses or "::1" in addresses
    with pytest.raises(OSError):
        await dns_resolver("no-such-host.invalid")


async def test_a_hosts_file_answers_before_dns_and_is_read_at_each_lookup(tmp_path: Path) -> None:
    aliases = tmp_path / "hosts"
    asked: list[str] = []

    async def dns(host: str) -> list[str]:
        asked.append(host)
        return ["10.0.0.1"]

    resolve = hosts_file_resolver(str(aliases), fallback=dns)
    name = "alert-manager-headless.tf.svc.cluster.local"
    assert await resolve(name) == ["10.0.0.1"], "no file yet: DNS"
    aliases.write_text(f"# walkthrough\n127.0.0.2 {name}\n127.0.0.3 other {name}\n"
                       f"127.0.0.2 {name}\n")  # fmt: skip
    assert await resolve(name) == ["127.0.0.2", "127.0.0.3"]
    assert await resolve("elsewhere") == ["10.0.0.1"]
    assert asked == [name, "elsewhere"]
