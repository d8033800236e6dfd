"""Which Alertmanagers the controller's evaluator posts to (alerting.md §6.1).

Default: every address behind the headless Service
`alert-manager-headless.<namespace>.svc.cluster.local`, each one target
`http://<address>:9093`, resolved at start and every 30 s. Each target is an
`AlertmanagerClient` of its own (one outbox and sender): an address that leaves the answer
loses its outbox at once, a new one starts empty and receives the firing set at the next
evaluation of each rule (the evaluator re-sends firing alerts every evaluation). A failed
lookup is logged and the previous set is kept. `-alert-manager-addr` replaces discovery with
its fixed list (`StaticAlertmanagers`). The resolver is a parameter so that tests can answer
with loopback addresses.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from tensorfusion.adapters.alertmanager.client import AlertmanagerClient, DeliveryMetrics
from tensorfusion.adapters.alertmanager.targets import alerts_url, parse_alertmanager_addresses
from tensorfusion.domain.alerting.alerts import AlertNotice

__all__ = [
    "ALERTMANAGER_PORT",
    "DISCOVERY_INTERVAL_S",
    "HEADLESS_SERVICE",
    "AlertmanagerTargets",
    "DiscoveredAlertmanagers",
    "Resolver",
    "StaticAlertmanagers",
    "dns_resolver",
    "headless_service_host",
    "hosts_file_resolver",
    "target_url",
]

_log = logging.getLogger(__name__)
HEADLESS_SERVICE: Final = "alert-manager-headless"
ALERTMANAGER_PORT: Final = 9093
DISCOVERY_INTERVAL_S: Final = 30.0

Resolver = Callable[[str], Awaitable[Sequence[str]]]
"""Host name -> its addresses (raises OSError, e.g. socket.gaierror, when the lookup fails)."""

ClientFactory = Callable[[list[str]], AlertmanagerClient]


class AlertmanagerTargets(Protocol):
    """A notifier with a lifecycle and a status: what the leader alert service delivers to."""

    def submit(self, notices: Sequence[AlertNotice]) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def status(self) -> list[dict[str, Any]]: ...


def headless_service_host(namespace: str) -> str:
    """`alert-manager-headless.<namespace>.svc.cluster.local`."""
    return f"{HEADLESS_SERVICE}.{namespace}.svc.cluster.local"


def target_url(address: str, port: int = ALERTMANAGER_PORT) -> str:
    """The alerts URL of one resolved address (`[...]` around IPv6)."""
    try:
        host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    except ValueError:
        host = address
    return alerts_url(f"http://{host}:{port}")


async def dns_resolver(host: str) -> list[str]:
    """Every address of `host` (A and AAAA), de-duplicated, in a stable order."""
    answers = await asyncio.get_running_loop().getaddrinfo(
        host, None, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return sorted({str(sockaddr[0]) for *_, sockaddr in answers})


def hosts_file_resolver(path: str, fallback: Resolver = dns_resolver) -> Resolver:
    """A resolver that reads `path` (hosts-file lines `<address> <name>...`) at each lookup and
    answers every address listed for the name, else asks `fallback`; for controllers run
    outside a cluster (`HOST_ALIASES_FILE`), where the headless Service's name has no DNS."""

    async def resolve(host: str) -> list[str]:
        try:
            text = await asyncio.to_thread(Path(path).read_text)
        except OSError as error:
            _log.warning("HOST_ALIASES_FILE %s: %s; using DNS", path, error)
            text = ""
        found = []
        for line in text.splitlines():
            fields = line.split("#", 1)[0].split()
            if len(fields) >= 2 and host in fields[1:] and fields[0] not in found:
                found.append(fields[0])
        return found if found else list(await fallback(host))

    return resolve


def _client(urls: list[str], metrics: DeliveryMetrics) -> AlertmanagerClient:
    return AlertmanagerClient(urls, metrics=metrics)


class StaticAlertmanagers:
    """The targets of `-alert-manager-addr`: one client with one outbox per URL."""

    def __init__(
        self,
        addresses: Iterable[str],
        *,
        metrics: DeliveryMetrics | None = None,
        client_factory: ClientFactory | None = None,
    ) -> None:
        """`addresses` as given on the flag; AlertmanagerAddressError names a bad one."""
        urls = parse_alertmanager_addresses(",".join(addresses), flag="-alert-manager-addr")
        metrics = metrics or DeliveryMetrics()
        self.client = (client_factory or (lambda u: _client(u, metrics)))(urls)

    @property
    def urls(self) -> list[str]:
        """The alert URLs."""
        return self.client.urls

    def submit(self, notices: Sequence[AlertNotice]) -> None:
        """Queue for every target."""
        self.client.submit(notices)

    async def start(self) -> None:
        """Start the senders."""
        await self.client.start()

    async def stop(self) -> None:
        """Stop the senders at once; queued notices are not sent."""
        await self.client.stop()

    def status(self) -> list[dict[str, Any]]:
        """Delivery state of every target."""
        return self.client.status()


class DiscoveredAlertmanagers:
    """One `AlertmanagerClient` per address behind a host name, kept current by re-resolving."""

    def __init__(
        self,
        host: str,
        *,
        port: int = ALERTMANAGER_PORT,
        resolver: Resolver = dns_resolver,
        interval_s: float = DISCOVERY_INTERVAL_S,
        metrics: DeliveryMetrics | None = None,
        client_factory: ClientFactory | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self._resolver = resolver
        self._interval_s = interval_s
        metrics = metrics or DeliveryMetrics()
        self._factory = client_factory or (lambda urls: _client(urls, metrics))
        self._clients: dict[str, AlertmanagerClient] = {}
        self._task: asyncio.Task[None] | None = None
        self._running = False
        self.lookups = 0
        self.failed_lookups = 0
        self.last_error = ""

    @property
    def urls(self) -> list[str]:
        """The alert URLs of the current targets, sorted."""
        return sorted(self._clients)

    async def start(self) -> None:
        """Resolve once now (a failure leaves no target until the next lookup), then every
        interval in the background."""
        if self._running:
            return
        self._running = True
        await self.refresh()
        self._task = asyncio.create_task(self._loop(), name=f"alertmanager-discovery:{self.host}")

    async def stop(self) -> None:
        """Stop re-resolving and every sender at once; queued notices are not sent."""
        self._running = False
        clients, self._clients = list(self._clients.values()), {}
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        # All senders are cancelled in the same turn of the loop, none waits for another.
        await asyncio.gather(*(client.stop() for client in clients))

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.refresh()
            except Exception:  # never let one lookup end discovery
                _log.exception("alertmanager discovery: unexpected error; trying again later")

    async def refresh(self) -> bool:
        """Resolve now and apply the difference; False when the lookup failed (set kept)."""
        self.lookups += 1
        try:
            addresses = list(await self._resolver(self.host))
        except (OSError, TimeoutError) as error:
            self.failed_lookups += 1
            message = f"{type(error).__name__}: {error}"
            if message != self.last_error:
                _log.warning(
                    "alertmanager discovery: looking up %s failed (%s); keeping %d targets",
                    self.host,
                    message,
                    len(self._clients),
                )
            self.last_error = message
            return False
        self.last_error = ""
        if not self._running:
            return True
        wanted = {target_url(address, self.port) for address in addresses}
        gone = [self._clients.pop(url) for url in sorted(set(self._clients) - wanted)]
        for client in gone:
            _log.info(
                "alertmanager discovery: %s left %s; its outbox is dropped",
                client.urls[0],
                self.host,
            )
        await asyncio.gather(*(client.stop() for client in gone))
        for url in sorted(wanted - set(self._clients)):
            if not self._running:
                return True
            client = self._factory([url])
            await client.start()
            if not self._running:  # stopped while starting
                await client.stop()
                return True
            self._clients[url] = client
            _log.info("alertmanager discovery: new target %s behind %s", url, self.host)
        return True

    def submit(self, notices: Sequence[AlertNotice]) -> None:
        """Queue for every current target."""
        for client in list(self._clients.values()):
            client.submit(notices)

    def status(self) -> list[dict[str, Any]]:
        """Delivery state of every current target."""
        return [status for url in sorted(self._clients) for status in self._clients[url].status()]
