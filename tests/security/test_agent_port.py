"""The node agent's port is on the node's network: a discovery only for callers on the node
(issue 23, scope 3); the probes stay open."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest
from aiohttp.test_utils import make_mocked_request

from tensorfusion.hypervisor.agent_http import create_agent_app, on_the_node


@pytest.mark.parametrize(
    ("remote", "allowed"),
    [("127.0.0.1", True), ("127.0.0.9", True), ("::1", True), ("10.0.0.7", False),
     ("192.168.1.2", False), ("::ffff:10.0.0.7", False),
     ("::ffff:127.0.0.1", True), (None, False), ("garbage", False)],
)  # fmt: skip
def test_only_loopback_peers_are_on_the_node(remote: str | None, allowed: bool) -> None:
    assert on_the_node(remote) is allowed


async def test_a_discovery_from_another_host_is_refused_without_running() -> None:
    agent = MagicMock()
    app = create_agent_app(agent)
    transport = MagicMock()
    transport.get_extra_info.side_effect = lambda key, default=None: (
        ("10.1.2.3", 40000) if key == "peername" else default
    )
    request = make_mocked_request("POST", "/api/v1/devices/discover", app=app,
                                  transport=transport)  # fmt: skip
    match = await app.router.resolve(request)
    response = await match.handler(request)
    assert response.status == 403
    agent.discover.assert_not_called()
