"""The extender's HTTP site as kube-scheduler calls it: Go field names read case-insensitively,
answers always 200 JSON with `Error` for a bad body, and each call timed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from tensorfusion.extender.app import ExtenderMetrics, create_extender_app

from .conftest import NODES, Harness, worker

Client = TestClient[web.Request, web.Application]


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
async def client(h: Harness, registry: CollectorRegistry) -> AsyncIterator[Client]:
    app = create_extender_app(h.extender, ExtenderMetrics(registry))
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


async def test_filter_prioritize_bind_as_kube_scheduler_sends_them(
    client: Client, h: Harness, registry: CollectorRegistry
) -> None:
    pod = worker()
    h.pods.add(pod)
    # Go's decoder matches field names case-insensitively.
    reply = await client.post("/scheduler/filter", json={"pod": pod, "nodenames": list(NODES)})
    assert reply.status == 200
    answer = await reply.json()
    assert answer["Error"] == "" and len(answer["NodeNames"]) == 1
    [chosen] = answer["NodeNames"]
    assert answer["FailedAndUnresolvableNodes"] == {} == answer["FailedNodes"]
    reply = await client.post("/scheduler/prioritize", json={"Pod": pod, "NodeNames": list(NODES)})
    assert {p["Host"]: p["Score"] for p in await reply.json()}[chosen] == 10
    reply = await client.post("/scheduler/bind", json={
        "PodName": "pod-u1", "PodNamespace": "ns", "PodUID": "u1", "Node": chosen})  # fmt: skip
    assert await reply.json() == {"Error": ""}
    count = registry.get_sample_value("tf_extender_request_seconds_count", {"verb": "bind"})
    assert count == 1


@pytest.mark.parametrize(
    ("verb", "body", "expected"),
    [
        ("filter", b"{not json", "body must be a JSON document"),
        ("filter", b'{"NodeNames": ["a"]}', "ExtenderArgs.Pod must be"),
        (
            "bind",
            b'{"PodName": "p", "PodNamespace": "ns", "PodUID": "u"}',
            "ExtenderBindingArgs.Node",
        ),
    ],
    ids=["not-json", "no-pod", "no-node"],
)  # fmt: skip
async def test_a_bad_body_is_an_error_answer_naming_the_field(
    client: Client, h: Harness, registry: CollectorRegistry, verb: str, body: bytes, expected: str
) -> None:
    reply = await client.post(f"/scheduler/{verb}", data=body)
    assert reply.status == 200
    assert expected in (await reply.json())["Error"]
    assert registry.get_sample_value("tf_extender_bad_requests_total", {"verb": verb}) == 1
    assert h.allocator.records == {}


async def test_a_bad_prioritize_body_is_400(client: Client) -> None:
    reply = await client.post("/scheduler/prioritize", data=b"[]")
    assert reply.status == 400
