"""Listen addresses and `serve`: bound port, port 0, IPv6, every interface, clean stop."""

from __future__ import annotations

import socket

import aiohttp
import pytest
from aiohttp import web

from tensorfusion.api_server import (
    BindAddress,
    create_health_app,
    join_host_port,
    parse_bind_address,
    parse_host_port,
    serve,
)

from .fakes import FakeBackend


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", None),
        (" 0 ", None),
        (":9000", BindAddress(None, 9000)),
        (":0", BindAddress(None, 0)),
        ("127.0.0.1:8081", BindAddress("127.0.0.1", 8081)),
        ("localhost:8080", BindAddress("localhost", 8080)),
        ("[::1]:8082", BindAddress("::1", 8082)),
        ("[::]:65535", BindAddress("::", 65535)),
    ],
)
def test_bind_addresses(text: str, expected: BindAddress | None) -> None:
    assert parse_bind_address(text, "-metrics-bind-address") == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "missing port"),
        ("9000", "missing port"),
        ("::1:8080", "must be in brackets"),
        ("[::1]8080", "expected [IPv6]:port"),
        ("[::1", "expected [IPv6]:port"),
        ("[]:80", "empty IPv6 address"),
        ("host:http", "port must be a number"),
        ("host:65536", "port must be a number"),
        ("host:-1", "port must be a number"),
        ("host:", "port must be a number"),
        ("host:٣", "port must be a number"),  # a non-ASCII digit
    ],
)
def test_invalid_bind_addresses_name_the_flag_and_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="-health-probe-bind-address") as caught:
        parse_bind_address(text, "-health-probe-bind-address")
    assert problem in str(caught.value)


def test_host_port_round_trip() -> None:
    assert join_host_port("::1", 8080) == "[::1]:8080"
    assert join_host_port("10.0.0.7", 8080) == "10.0.0.7:8080"
    for host in ("::1", "10.0.0.7", "fd00::7"):
        assert parse_host_port(join_host_port(host, 80)) == (host, 80)
    assert str(BindAddress(None, 9000)) == ":9000"
    assert str(BindAddress("::1", 9000)) == "[::1]:9000"


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not ipv6_loopback(), reason="this host has no IPv6 loopback")


def health() -> web.Application:
    return create_health_app(FakeBackend())


async def get_text(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return await response.text()


def refused(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        return probe.connect_ex((host, port)) != 0


async def test_serve_binds_port_0_reports_the_port_and_stops() -> None:
    server = await serve(health(), "127.0.0.1:0")
    assert server.port > 0
    assert server.address == BindAddress("127.0.0.1", 0)
    assert await get_text(f"http://127.0.0.1:{server.port}/healthz") == "ok"
    await server.stop()
    assert refused("127.0.0.1", server.port)
    await server.stop()  # twice is fine


@needs_ipv6
async def test_serve_on_ipv6_loopback() -> None:
    server = await serve(health(), BindAddress("::1", 0))
    try:
        assert await get_text(f"http://[::1]:{server.port}/healthz") == "ok"
    finally:
        await server.stop()


@needs_ipv6
async def test_serve_on_every_interface_is_one_port_for_ipv4_and_ipv6() -> None:
    server = await serve(health(), ":0")
    try:
        assert await get_text(f"http://127.0.0.1:{server.port}/healthz") == "ok"
        assert await get_text(f"http://[::1]:{server.port}/healthz") == "ok"
    finally:
        await server.stop()
    assert refused("127.0.0.1", server.port)


async def test_serve_refuses_an_address_that_means_off() -> None:
    with pytest.raises(ValueError, match="off"):
        await serve(health(), "0")


async def test_a_port_in_use_is_an_error_and_leaves_nothing_running() -> None:
    first = await serve(health(), "127.0.0.1:0")
    try:
        with pytest.raises(OSError):
            await serve(health(), f"127.0.0.1:{first.port}")
        with pytest.raises(OSError):
            await serve(health(), f":{first.port}")
    finally:
        await first.stop()
