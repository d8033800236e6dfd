"""The node agent's HTTP endpoints on `HYPERVISOR_PORT` (deployment.md §9.7): `/healthz`,
`/readyz` (after the first discovery is written), and `POST /api/v1/devices/discover`.

The agent's pod uses the node's network, so its port is reachable from the whole cluster: the
probes stay open (they say ready or not), and a discovery is served only to callers on the node
itself (a loopback peer address), 403 to anyone else."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from tensorfusion.domain.devices.gpu_objects import gpu_name
from tensorfusion.hypervisor.agent import NodeAgent
from tensorfusion.runtime import web

__all__ = ["create_agent_app", "on_the_node"]


def on_the_node(remote: str | None) -> bool:
    """Whether a peer address is the node's own loopback."""
    if remote is None:
        return False
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # an IPv4 caller of a dual-stack socket
    return address.is_loopback


def create_agent_app(
    agent: NodeAgent, also_needed: Callable[[], list[str]] = list
) -> web.Application:
    """The agent's aiohttp application; `also_needed` lists what else keeps it unready (the
    device-plugin registration)."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        problems = agent.problems() + also_needed()
        if agent.ready and not agent.provider_error and not problems:
            return web.Response(text="ok\n")
        return web.Response(status=503, text="".join(f"- {p}\n" for p in problems))

    async def discover(request: web.Request) -> web.Response:
        if not on_the_node(request.remote):
            message = "POST /api/v1/devices/discover is served to callers on the node only"
            return web.json_response({"reason": "Forbidden", "message": message}, status=403)
        written = await agent.discover()
        inventory = agent.inventory
        devices = [gpu_name(d.uuid) for d in inventory.devices] if inventory else []
        body = {"written": written, "gpus": devices, "problems": agent.problems()}
        return web.json_response(body, status=200 if written else 503)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_post("/api/v1/devices/discover", discover)
    return app
