"""What a replica that is not the leader does with each request when the leader cannot be
reached (the forwarding itself, between two servers, is in
tests/integration/test_api_server_forwarding.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient, TestServer

from tensorfusion.api_server import (
    ALERTS_PATH,
    ALLOCATION_PATH,
    ASSIGN_INDEX_PATH,
    CONFIG_PATH,
    FORWARDED_HEADER,
    NODES_PATH,
    POOLS_PATH,
    SIMULATE_SCHEDULE_PATH,
    create_api_app,
)

from .fakes import FakeBackend, spec_inputs

Client = TestClient[web.Request, web.Application]
LEADER_ONLY = [
    ("POST", SIMULATE_SCHEDULE_PATH),
    ("GET", ALLOCATION_PATH),
    ("GET", POOLS_PATH),
    ("GET", NODES_PATH),
    ("GET", ASSIGN_INDEX_PATH + "?podName=p"),
    ("GET", "/api/not-a-route"),
    ("PUT", "/v1/write"),
]


@pytest.fixture
def follower(backend: FakeBackend) -> FakeBackend:
    """A follower that has every state a leader has, so a local answer would be a 200."""
    backend.leader = False
    backend.inputs, virtual = spec_inputs()
    backend.live_allocator = virtual.allocator
    backend.alerts = {"replica": {"pod": "controller-1", "leader": False}}
    backend.config = {"file": "config.yaml", "error": None}
    return backend


@pytest.fixture
async def with_write_path(follower: FakeBackend) -> AsyncIterator[Client]:
    """The API app with a route the app layer adds (the embedded store's write path)."""
    app = create_api_app(follower, forward_prefixes=("/api/", "/v1/"))

    async def write(_: web.Request) -> web.Response:
        return web.Response(status=204)

    app.router.add_put("/v1/write", write)
    async with TestClient(TestServer(app)) as client:
        yield client


async def not_leader(response: ClientResponse) -> str:
    assert response.status == 503, await response.text()
    assert response.headers["Retry-After"] == "5"
    body = await response.json()
    assert body["error"]["code"] == "NotLeader"
    message: str = body["error"]["message"]
    return message


@pytest.mark.parametrize(("method", "path"), LEADER_ONLY)
async def test_without_a_leader_address_every_leader_request_is_503_not_leader(
    with_write_path: Client, follower: FakeBackend, method: str, path: str
) -> None:
    response = await with_write_path.request(method, path, data=b"kind: Pod\n")
    assert "no leader is known" in await not_leader(response)
    assert follower.address_reads == 1


async def test_an_unreadable_leader_address_is_503(client: Client, follower: FakeBackend) -> None:
    follower.address_error = PermissionError("configmaps is forbidden")
    response = await client.get(ALLOCATION_PATH)
    assert "configmaps is forbidden" in await not_leader(response)


@pytest.mark.parametrize("address", ["10.0.0.7", "fd00::7:8080", ":8080", "10.0.0.7:http"])
async def test_an_invalid_leader_address_is_503(
    client: Client, follower: FakeBackend, address: str
) -> None:
    follower.address = address
    response = await client.get(ALLOCATION_PATH)
    assert "leader address" in await not_leader(response)


async def test_a_forwarded_request_is_never_forwarded_again(
    client: Client, follower: FakeBackend
) -> None:
    follower.address = "127.0.0.1:1"
    response = await client.get(ALLOCATION_PATH, headers={FORWARDED_HEADER: "1"})
    assert "changed meanwhile" in await not_leader(response)
    assert follower.address_reads == 0


@pytest.mark.parametrize(("path", "pod"), [(ALERTS_PATH, "controller-1"), (CONFIG_PATH, None)])
async def test_alerts_and_config_are_answered_by_the_follower_itself(
    client: Client, follower: FakeBackend, path: str, pod: str | None
) -> None:
    response = await client.get(path)
    assert response.status == 200
    body = await response.json()
    assert body == (follower.alerts if pod else follower.config)
    assert follower.address_reads == 0


async def test_a_leader_answers_the_added_route_itself(
    with_write_path: Client, follower: FakeBackend
) -> None:
    follower.leader = True
    response = await with_write_path.put("/v1/write", data=b"tf_gpu_usage x=1")
    assert response.status == 204
    assert follower.address_reads == 0


async def test_a_body_over_the_forwarding_limit_is_413(follower: FakeBackend) -> None:
    follower.address = "127.0.0.1:1"  # never reached: the body is refused first
    app = create_api_app(follower, max_body=1000)
    async with TestClient(TestServer(app)) as client:
        response = await client.post(SIMULATE_SCHEDULE_PATH, data=b"#" * 1001)
        assert response.status == 413
        body = await response.json()
        assert body["error"]["code"] == "RequestEntityTooLarge"
        assert "1000" in body["error"]["message"]
