"""The dev environment's Services: a connection an upstream refuses goes to the next one."""

from __future__ import annotations

import asyncio
import socket

from tensorfusion.devenv.tcp_proxy import round_robin_proxy


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(await reader.readline())
    await writer.drain()
    writer.close()


async def _ask(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"hello\n")
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


async def test_failover_skips_an_upstream_that_is_down() -> None:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    live = server.sockets[0].getsockname()[1]
    dead, port = _free_port(), _free_port()
    upstreams = [("127.0.0.1", dead), ("127.0.0.1", live)]
    try:
        async with round_robin_proxy("127.0.0.1", port, upstreams, failover=True) as proxy:
            assert [await _ask(port) for _ in range(3)] == [b"hello\n"] * 3
            assert proxy.connections == [0, 3]
        async with round_robin_proxy("127.0.0.1", port, upstreams) as plain:
            assert await _ask(port) == b""  # the dead upstream's turn: closed
            assert plain.connections == [0, 0]
    finally:
        server.close()
        await server.wait_closed()
