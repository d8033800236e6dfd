"""A TCP relay from this machine's loopback into a network namespace: how the test process,
kubectl and helm reach the API server of the real-node cluster.

    python -m tensorfusion.devenv.real_nodes.forward --listen 127.0.0.1:PORT \
        --netns /run/netns/NAME --to 10.250.0.1:6443

The listening socket is opened first, in the namespace the process starts in; then the process
enters NAME, so every upstream connection is made there. Bytes are relayed untouched (TLS passes
through).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from pathlib import Path

from tensorfusion.devenv.real_nodes.netns import enter
from tensorfusion.devenv.tcp_proxy import pipe


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def _serve(listener: socket.socket, upstream: tuple[str, int]) -> None:
    async def handle(
        client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*upstream)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer)
        )

    server = await asyncio.start_server(handle, sock=listener)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    """Listen, enter the namespace, relay until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--listen", required=True, help="HOST:PORT in this namespace")
    parser.add_argument("--netns", required=True, type=Path, help="the namespace's path")
    parser.add_argument("--to", required=True, help="HOST:PORT inside the namespace")
    args = parser.parse_args(argv)
    listener = socket.create_server(_address(args.listen), reuse_port=False)
    enter(args.netns)
    asyncio.run(_serve(listener, _address(args.to)))


if __name__ == "__main__":
    main()
