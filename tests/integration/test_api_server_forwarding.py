"""A follower's API forwards `/api/*` to the leader's peer port over loopback (scheduling.md
§16, security.md): HTTPS verified against the release CA, the follower's own token in
`Authorization` and the caller's in a header of its own; method, path, query and body go
there, the leader's answer comes back; alerts and config stay on the follower; no leader, a
dead, hung or unverifiable leader is 503 `NotLeader`. The peer port authenticates and
authorizes every request before anything runs."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from tensorfusion.adapters.tls.peer_client import client_context
from tensorfusion.api_server import (
    ALERTS_PATH,
    ALLOCATION_PATH,
    ASSIGN_INDEX_PATH,
    CONFIG_PATH,
    FORWARDED_HEADER,
    SIMULATE_SCHEDULE_PATH,
    RunningServer,
    TokenReviewResult,
    create_api_app,
    join_host_port,
    serve,
)
from tensorfusion.api_server.forwarding import CALLER_AUTHORIZATION_HEADER
from tests.peer_tls import SERVICE_HOST, peer_client, release_bundle, serving

from ..unit.api_server.fakes import DATA, OWN_ACCOUNT, FakeBackend, spec_inputs

pytestmark = pytest.mark.integration

GUIDE_POD = (DATA / "guide_test_pod.yaml").read_bytes()
SUCCESS = json.loads((DATA / "spec_16_1_success.json").read_text(encoding="utf-8"))
CLOCK = 1767225600.0
BUNDLE = release_bundle()
AGENT = "system:serviceaccount:tf-sys:tensor-fusion-hypervisor-sa"
PEER_TOKENS = {
    "own-token": TokenReviewResult(True, OWN_ACCOUNT),
    "agent-token": TokenReviewResult(True, AGENT),
}
PEER_GRANTS = {OWN_ACCOUNT: {("/tensor-fusion-peer/api/", "get"),
                             ("/tensor-fusion-peer/api/", "post")},
               AGENT: {("/tensor-fusion-peer/v1/influxdb/", "post")}}  # fmt: skip


def serving_client() -> ssl.SSLContext:
    """A client context trusting the release CA."""
    assert BUNDLE.ca_pem is not None
    return client_context(BUNDLE.ca_pem)


async def peer_site(app: web.Application) -> RunningServer:
    """`app` on loopback over HTTPS with the release certificate."""
    return await serve(app, "127.0.0.1:0", ssl_context=serving(BUNDLE))


@dataclass
class Replicas:
    leader: FakeBackend
    follower: FakeBackend
    leader_server: RunningServer
    follower_server: RunningServer
    session: aiohttp.ClientSession

    def follower_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.follower_server.port}{path}"

    def leader_url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.leader_server.port}{path}"


def follower_backend() -> FakeBackend:
    return FakeBackend(
        leader=False,
        alerts={"replica": {"pod": "controller-1", "leader": False}},
        config={"file": "follower.yaml", "error": None},
    )


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[Replicas]:
    """The leader's peer port (HTTPS, gated) and a follower's public port."""
    leader = FakeBackend(
        leader=True, tokens=PEER_TOKENS, grants=PEER_GRANTS,
        alerts={"replica": {"pod": "controller-0", "leader": True}},
    )  # fmt: skip
    leader.inputs, virtual = spec_inputs()
    leader.live_allocator = virtual.allocator
    leader_server = await peer_site(
        create_api_app(leader, authenticate_callers=True, clock=lambda: CLOCK)
    )
    follower = follower_backend()
    follower.address = join_host_port("127.0.0.1", leader_server.port)
    follower_app = create_api_app(follower, peer=peer_client(BUNDLE, tmp_path), clock=lambda: CLOCK)
    follower_server = await serve(follower_app, "127.0.0.1:0")
    async with aiohttp.ClientSession() as session:
        yield Replicas(leader, follower, leader_server, follower_server, session)
    await follower_server.stop()
    await leader_server.stop()


async def test_simulate_schedule_on_the_follower_is_the_leaders_answer(
    replicas: Replicas,
) -> None:
    async with replicas.session.post(
        replicas.follower_url(SIMULATE_SCHEDULE_PATH),
        data=GUIDE_POD,
        headers={"Content-Type": "application/yaml"},
    ) as response:
        assert response.status == 200, await response.text()
        assert response.content_type == "application/json"
        assert await response.json() == SUCCESS
    assert replicas.follower.address_reads == 1
    assert replicas.leader.address_reads == 0


async def test_queries_and_errors_come_back_as_the_leader_answers_them(
    replicas: Replicas,
) -> None:
    path = ALLOCATION_PATH + "?node=node-a&namespace=other"
    async with replicas.session.get(
        replicas.leader_url(path),
        ssl=serving_client(),
        server_hostname=SERVICE_HOST,
        headers={"Authorization": "Bearer own-token"},
    ) as direct:
        expected = await direct.json()  # fmt: skip
    async with replicas.session.get(replicas.follower_url(path)) as forwarded:
        assert forwarded.status == 200
        assert await forwarded.json() == expected
    assert [a["name"] for a in expected["allocations"]] == ["holder"]
    async with replicas.session.post(
        replicas.follower_url(SIMULATE_SCHEDULE_PATH + "?nodes=node-z"), data=GUIDE_POD
    ) as unknown:
        assert unknown.status == 400
        assert (await unknown.json())["error"]["code"] == "UnknownNodes"
    async with replicas.session.get(replicas.follower_url("/api/nothing")) as missing:
        assert missing.status == 404
        assert (await missing.json())["error"]["code"] == "NotFound"


async def test_assign_index_through_the_follower_uses_the_leaders_counter(
    replicas: Replicas,
) -> None:
    url = replicas.follower_url(ASSIGN_INDEX_PATH + "?podName=worker-0")
    headers = {"Authorization": "Bearer own-token"}
    async with replicas.session.get(url, headers=headers) as response:
        assert response.status == 200
        assert response.content_type == "text/plain"
        assert await response.text() == "1"
    assert replicas.leader.counter.peek() == 2
    assert replicas.follower.counter.peek() == 1
    assert replicas.leader.reviewed == ["own-token", "own-token"], "the follower, then the caller"
    assert replicas.follower.reviewed == []
    async with replicas.session.get(url) as anonymous:
        assert anonymous.status == 401
        assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
        assert (await anonymous.json())["error"]["code"] == "Unauthorized"
    assert replicas.leader.counter.peek() == 2


@pytest.mark.parametrize(("path", "key"), [(ALERTS_PATH, "replica"), (CONFIG_PATH, "file")])
async def test_alerts_and_config_describe_the_follower(
    replicas: Replicas, path: str, key: str
) -> None:
    async with replicas.session.get(replicas.follower_url(path)) as response:
        assert response.status == 200
        body = await response.json()
    own = replicas.follower.alerts if path == ALERTS_PATH else replicas.follower.config
    assert body[key] == own[key]
    assert replicas.follower.address_reads == 0


async def test_a_stopped_leader_is_503_not_leader(replicas: Replicas) -> None:
    await replicas.leader_server.stop()
    async with replicas.session.get(replicas.follower_url(ALLOCATION_PATH)) as response:
        assert response.status == 503
        assert response.headers["Retry-After"] == "5"
        body = await response.json()
    assert body["error"]["code"] == "NotLeader"
    assert replicas.follower.address in body["error"]["message"]


async def test_no_leader_address_is_503_not_leader(replicas: Replicas) -> None:
    replicas.follower.address = None
    async with replicas.session.get(replicas.follower_url(ALLOCATION_PATH)) as response:
        assert response.status == 503
        assert (await response.json())["error"]["code"] == "NotLeader"


async def test_two_followers_pointing_at_each_other_do_not_loop(tmp_path: Path) -> None:
    first, second = follower_backend(), follower_backend()
    second.tokens, second.grants = PEER_TOKENS, PEER_GRANTS
    peer = peer_client(BUNDLE, tmp_path)
    first_server = await serve(create_api_app(first, peer=peer), "127.0.0.1:0")
    second_server = await peer_site(create_api_app(second, peer=peer, authenticate_callers=True))
    first.address = f"127.0.0.1:{second_server.port}"
    second.address = f"127.0.0.1:{first_server.port}"
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{first_server.port}{ALLOCATION_PATH}") as response,
        ):
            assert response.status == 503
            body = await response.json()
        assert body["error"]["code"] == "NotLeader"
        assert "changed meanwhile" in body["error"]["message"]
        assert (first.address_reads, second.address_reads) == (1, 0)
    finally:
        await first_server.stop()
        await second_server.stop()


@dataclass
class RecordingLeader:
    """Stands in for the leader: records what arrives, answers 201 or hangs."""

    seen: list[dict[str, Any]] = field(default_factory=list)
    hang: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append({
            "method": request.method,
            "raw_path": request.raw_path,
            "body": await request.read(),
            "headers": dict(request.headers),
        })  # fmt: skip
        if self.hang:
            await self.release.wait()
        return web.Response(
            status=201, body=b"leader says hi", content_type="application/x-leader",
            headers={"Retry-After": "7", "X-Internal": "not passed on"},
        )  # fmt: skip

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app


async def test_method_path_query_body_and_headers_reach_the_leader(tmp_path: Path) -> None:
    leader = RecordingLeader()
    leader_server = await peer_site(leader.app())
    follower = follower_backend()
    follower.address = f"127.0.0.1:{leader_server.port}"
    follower_server = await serve(create_api_app(follower, peer=peer_client(BUNDLE, tmp_path)),
                                  "127.0.0.1:0")  # fmt: skip
    query = SIMULATE_SCHEDULE_PATH + "?mutate=false&nodes=node-a%2Cnode-b&x=%C3%A9"
    url = URL(f"http://127.0.0.1:{follower_server.port}{query}", encoded=True)
    headers = {
        "Authorization": "Bearer some-token",
        "Content-Type": "application/yaml",
        "Cookie": "not=forwarded",
    }
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, data=GUIDE_POD, headers=headers) as response,
        ):
            assert response.status == 201
            assert await response.read() == b"leader says hi"
            assert response.headers["Content-Type"] == "application/x-leader"
            assert response.headers["Retry-After"] == "7"
            assert "X-Internal" not in response.headers
    finally:
        await follower_server.stop()
        await leader_server.stop()
    [seen] = leader.seen
    assert seen["method"] == "POST"
    assert seen["raw_path"] == query
    assert seen["body"] == GUIDE_POD
    assert seen["headers"]["Authorization"] == "Bearer own-token", "the follower's own token"
    assert seen["headers"][CALLER_AUTHORIZATION_HEADER] == "Bearer some-token"
    assert seen["headers"]["Content-Type"] == "application/yaml"
    assert seen["headers"][FORWARDED_HEADER] == "1"
    assert "Cookie" not in seen["headers"]


async def test_a_hung_leader_is_cut_off_with_503(tmp_path: Path) -> None:
    leader = RecordingLeader(hang=True)
    leader_server = await peer_site(leader.app())
    follower = follower_backend()
    follower.address = f"127.0.0.1:{leader_server.port}"
    app = create_api_app(follower, peer=peer_client(BUNDLE, tmp_path), forward_timeout=0.5)
    follower_server = await serve(app, "127.0.0.1:0")
    try:
        async with (
            asyncio.timeout(30),  # a deadline for the test, not a measurement
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{follower_server.port}{ALLOCATION_PATH}") as response,
        ):
            assert response.status == 503
            body = await response.json()
        assert body["error"]["code"] == "NotLeader"
        assert "failed" in body["error"]["message"]
        assert len(leader.seen) == 1
    finally:
        leader.release.set()
        await follower_server.stop()
        await leader_server.stop()


async def test_an_ipv6_leader_address_is_reached(tmp_path: Path) -> None:
    leader = RecordingLeader()
    try:
        leader_server = await serve(leader.app(), "[::1]:0", ssl_context=serving(BUNDLE))
    except OSError:
        pytest.skip("this host has no IPv6 loopback")
    follower = follower_backend()
    follower.address = join_host_port("::1", leader_server.port)
    follower_server = await serve(create_api_app(follower, peer=peer_client(BUNDLE, tmp_path)),
                                  "127.0.0.1:0")  # fmt: skip
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{follower_server.port}{ALLOCATION_PATH}") as response,
        ):
            assert response.status == 201
    finally:
        await follower_server.stop()
        await leader_server.stop()
    assert [s["raw_path"] for s in leader.seen] == [ALLOCATION_PATH]


async def test_a_leader_whose_certificate_is_not_the_releases_gets_nothing(
    tmp_path: Path,
) -> None:
    """A follower that dials an address with another CA's certificate (a ConfigMap or a Pod IP
    pointed elsewhere) answers 503 and sends neither its token nor the caller's."""
    stranger = RecordingLeader()
    server = await serve(stranger.app(), "127.0.0.1:0", ssl_context=serving(release_bundle()))
    follower = follower_backend()
    follower.address = f"127.0.0.1:{server.port}"
    follower_server = await serve(create_api_app(follower, peer=peer_client(BUNDLE, tmp_path)),
                                  "127.0.0.1:0")  # fmt: skip
    url = f"http://127.0.0.1:{follower_server.port}{ALLOCATION_PATH}"
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, headers={"Authorization": "Bearer caller"}) as response,
        ):
            assert response.status == 503
            body = await response.json()
    finally:
        await follower_server.stop()
        await server.stop()
    assert "CERTIFICATE_VERIFY_FAILED" in body["error"]["message"]
    assert stranger.seen == []


@dataclass
class PeerCall:
    token: str | None
    path: str
    method: str = "GET"
    forwarded: bool = False
    caller: str | None = None


@pytest.mark.parametrize(
    ("call", "status", "code"),
    [
        (PeerCall(None, ALLOCATION_PATH), 401, "Unauthorized"),
        (PeerCall("forged", ALLOCATION_PATH), 401, "Unauthorized"),
        (PeerCall("agent-token", ALLOCATION_PATH), 403, "Forbidden"),
        (PeerCall("agent-token", SIMULATE_SCHEDULE_PATH, "POST"), 403, "Forbidden"),
        (PeerCall("agent-token", ALLOCATION_PATH, forwarded=True, caller="Bearer own-token"),
         403, "Forbidden"),
        (PeerCall("own-token", ASSIGN_INDEX_PATH + "?podName=p", forwarded=True), 401,
         "Unauthorized"),
        (PeerCall("own-token", ASSIGN_INDEX_PATH + "?podName=p", forwarded=True,
                  caller="Bearer agent-token"), 403, "Forbidden"),
        (PeerCall("own-token", ALLOCATION_PATH), 200, None),
        (PeerCall("own-token", ASSIGN_INDEX_PATH + "?podName=p"), 200, None),
    ],
)  # fmt: skip
async def test_the_peer_port_authenticates_and_authorizes_every_request(
    call: PeerCall, status: int, code: str | None
) -> None:
    """No token or a bad one: 401; an account RBAC does not allow on the path: 403; only the
    controller's account may forward, and a forwarded request is judged by its caller."""
    leader = FakeBackend(leader=True, tokens=PEER_TOKENS, grants=PEER_GRANTS)
    leader.inputs, virtual = spec_inputs()
    leader.live_allocator = virtual.allocator
    server = await peer_site(create_api_app(leader, authenticate_callers=True))
    headers = {"Authorization": f"Bearer {call.token}"} if call.token else {}
    if call.forwarded:
        headers[FORWARDED_HEADER] = "1"
    if call.caller:
        headers[CALLER_AUTHORIZATION_HEADER] = call.caller
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.request(call.method, f"https://127.0.0.1:{server.port}{call.path}",
                            headers=headers, data=GUIDE_POD, ssl=serving_client(),
                            server_hostname=SERVICE_HOST) as response,
        ):  # fmt: skip
            assert response.status == status, await response.text()
            if code is not None:
                assert (await response.json())["error"]["code"] == code
    finally:
        await server.stop()
    counter_moved = leader.counter.peek() != 1
    assert counter_moved == (status == 200 and call.path.startswith(ASSIGN_INDEX_PATH))
