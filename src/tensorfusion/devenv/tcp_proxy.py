"""A round-robin TCP proxy: raw bytes relayed, TLS passed through untouched (a Service of the dev
environment, the replicas of the cluster tier).

A MutatingWebhookConfiguration names one URL; to have the API server call several controller
replicas, register the proxy's address and let it hand each new connection to the next replica.
It counts the connections each upstream received.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence

_CHUNK = 65536


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copies until EOF or an error on either side, then closes ``writer``."""
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


class RoundRobinProxy:
    """Listens on one address; each accepted connection goes to the next upstream in turn."""

    def __init__(self, upstreams: Sequence[tuple[str, int]], *, failover: bool = False) -> None:
        """`failover`: a connection an upstream refuses goes to the next one, as a Service
        skips an endpoint that is down (else it is closed)."""
        self.upstreams = list(upstreams)
        self.failover = failover
        self.connections = [0] * len(self.upstreams)
        self._turn = itertools.cycle(range(len(self.upstreams)))
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._handle, host, port)

    async def _handle(self, client_reader: asyncio.StreamReader,
                      client_writer: asyncio.StreamWriter) -> None:  # fmt: skip
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            tries = len(self.upstreams) if self.failover else 1
            for _ in range(tries):
                index = next(self._turn)
                try:
                    upstream_reader, upstream_writer = await asyncio.open_connection(
                        *self.upstreams[index]
                    )
                    break
                except OSError:
                    continue
            else:
                client_writer.close()
                return
            self.connections[index] += 1
            await asyncio.gather(
                pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer)
            )
        except asyncio.CancelledError:
            # closed by `close` (the pipes closed their writers): a handler that ends
            # cancelled is logged as an error by asyncio's stream server on Python 3.11
            pass
        finally:
            client_writer.close()
            self._handlers.discard(task)

    async def close(self) -> None:
        """Stops listening and drops the connections still open (the API server keeps some)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()


@contextlib.asynccontextmanager
async def round_robin_proxy(
    host: str, port: int, upstreams: Sequence[tuple[str, int]], *, failover: bool = False
) -> AsyncIterator[RoundRobinProxy]:
    """A started ``RoundRobinProxy`` on ``host:port``, closed afterwards."""
    proxy = RoundRobinProxy(upstreams, failover=failover)
    await proxy.start(host, port)
    try:
        yield proxy
    finally:
        await proxy.close()
