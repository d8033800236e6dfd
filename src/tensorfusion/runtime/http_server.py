"""Listen addresses (`-metrics-bind-address`, `-health-probe-bind-address`, the API port) and
a running aiohttp server that reports its port and stops cleanly."""

from __future__ import annotations

import errno
import logging
import socket
import ssl
from dataclasses import dataclass

from aiohttp import web

__all__ = [
    "BindAddress",
    "RunningServer",
    "join_host_port",
    "parse_bind_address",
    "parse_host_port",
    "serve",
]

_log = logging.getLogger(__name__)

DISABLED = "0"
MAX_PORT = 65535


@dataclass(frozen=True, slots=True)
class BindAddress:
    """Where a server listens: `host` None means every interface (IPv4 and IPv6)."""

    host: str | None
    port: int

    def __str__(self) -> str:
        return join_host_port(self.host or "", self.port)


def join_host_port(host: str, port: int) -> str:
    """`host:port`, with an IPv6 host in brackets (Go's `net.JoinHostPort`)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_host_port(value: str, what: str = "address") -> tuple[str, int]:
    """Split `host:port`, `[ipv6]:port` or `:port` (host ""); ValueError names the problem."""
    text = value.strip()
    if text.startswith("["):
        close = text.find("]")
        if close < 0 or not text[close + 1 :].startswith(":"):
            raise ValueError(f"{what} {value!r}: expected [IPv6]:port")
        host, port_text = text[1:close], text[close + 2 :]
        if not host:
            raise ValueError(f"{what} {value!r}: empty IPv6 address in brackets")
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            raise ValueError(f"{what} {value!r}: expected host:port or :port (missing port)")
        if ":" in host:
            raise ValueError(f"{what} {value!r}: an IPv6 address must be in brackets: [addr]:port")
    if not port_text.isdigit() or not port_text.isascii() or int(port_text) > MAX_PORT:
        raise ValueError(f"{what} {value!r}: port must be a number between 0 and {MAX_PORT}")
    return host, int(port_text)


def parse_bind_address(value: str, flag: str = "address") -> BindAddress | None:
    """A listen address as controller-runtime flags take it: `:port` (every interface),
    `host:port`, `[ipv6]:port`; None for "0" (the listener is off)."""
    if value.strip() == DISABLED:
        return None
    host, port = parse_host_port(value, flag)
    return BindAddress(host or None, port)


def _wildcard_socket(port: int) -> socket.socket:
    """One socket on every interface: dual-stack IPv6 where the kernel has IPv6, else IPv4
    (one socket, so port 0 gives one port)."""
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True)
        except OSError as exc:
            if exc.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                raise
    return socket.create_server(("", port))


@dataclass(slots=True)
class RunningServer:
    """A started server: `port` is the bound port (the one chosen for port 0)."""

    runner: web.AppRunner
    address: BindAddress
    port: int

    async def stop(self) -> None:
        """Close the listener, let requests in progress finish (up to the shutdown timeout),
        run the app's cleanup. Idempotent."""
        await self.runner.cleanup()


async def serve(
    app: web.Application,
    address: str | BindAddress,
    *,
    access_log: bool = False,
    shutdown_timeout: float = 5.0,
    ssl_context: ssl.SSLContext | None = None,
) -> RunningServer:
    """Start `app` on `address` (a BindAddress or its text); ValueError for an invalid
    address or "0" (off: the caller checks `parse_bind_address` first)."""
    bind = address if isinstance(address, BindAddress) else parse_bind_address(address)
    if bind is None:
        raise ValueError(f"address {address!r} means the listener is off; nothing to serve")
    runner = web.AppRunner(
        app,
        access_log=logging.getLogger("aiohttp.access") if access_log else None,
        shutdown_timeout=shutdown_timeout,
    )
    await runner.setup()
    sock: socket.socket | None = None
    try:
        site: web.BaseSite
        if bind.host is None:
            sock = _wildcard_socket(bind.port)
            site = web.SockSite(runner, sock, ssl_context=ssl_context)
        else:
            site = web.TCPSite(runner, bind.host, bind.port, ssl_context=ssl_context)
        await site.start()
    except BaseException:
        if sock is not None:
            sock.close()
        await runner.cleanup()
        raise
    port = int(runner.addresses[0][1])
    _log.info("listening on %s (port %d)", bind, port)
    return RunningServer(runner, bind, port)
