"""LightkubeSource and the informer over a real lightkube AsyncClient and a fake API server.

The fake server is an httpx MockTransport: lists are served page by page, each watch request
takes the next scripted reply (or waits for one), so 410 Gone and server-closed watches can be
played exactly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.resources.core_v1 import ConfigMap, Node

from tensorfusion.runtime.informer import Informer, InformerEvent
from tensorfusion.runtime.informer_lightkube import LightkubeSource
from tensorfusion.runtime.informer_source import (
    ApiAnswerError,
    ResourceExpiredError,
    WatchEvent,
    WatchType,
)


def configmap(name: str, version: str, namespace: str = "ns", **data: str) -> dict[str, Any]:
    metadata = {"name": name, "namespace": namespace, "resourceVersion": version, "uid": name}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def status(code: int, message: str, reason: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


GONE = status(410, "too old resource version: 10 (30)", "Expired")


@dataclass
class WatchReply:
    lines: list[dict[str, Any]] = field(default_factory=list)
    status_code: int = 200


class FakeApiServer:
    """Serves lists from ``listings`` (one per list, pages by continue token) and watches from
    ``watch_replies`` (one per watch request; a request waits until one is queued)."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.listings: asyncio.Queue[dict[str, dict[str, Any]]] = asyncio.Queue()
        self.watch_replies: asyncio.Queue[WatchReply] = asyncio.Queue()
        self._listing: dict[str, dict[str, Any]] = {}

    def list_once(self, version: str, *items: dict[str, Any]) -> None:
        self.listings.put_nowait(
            {"": {"kind": "List", "metadata": {"resourceVersion": version}, "items": list(items)}}
        )

    def reply(self, *lines: dict[str, Any], status_code: int = 200) -> None:
        self.watch_replies.put_nowait(WatchReply(list(lines), status_code))

    @property
    def watch_requests(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.params.get("watch") == "true"]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.params.get("watch") == "true":
            reply = await self.watch_replies.get()
            if reply.status_code != 200:
                return httpx.Response(reply.status_code, json=reply.lines[0])
            body = "".join(json.dumps(line) + "\n" for line in reply.lines)
            return httpx.Response(200, content=body.encode())
        token = request.url.params.get("continue", "")
        if not token:
            self._listing = await self.listings.get()
        return httpx.Response(200, json=self._listing[token])


@pytest.fixture
def api() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
async def client(api: FakeApiServer) -> AsyncIterator[AsyncClient]:
    config = KubeConfig.from_one(cluster=Cluster(server="http://apiserver"), user=User(token="t"))

    async def handle(request: httpx.Request) -> httpx.Response:
        return await api.handle(request)

    # lightkube deep-copies its transport: hand it a function (copied as itself), not a method
    lightkube = AsyncClient(config, transport=httpx.MockTransport(handle))
    yield lightkube
    await lightkube.close()


async def first_events(source: LightkubeSource, version: str, count: int) -> list[WatchEvent]:
    events: list[WatchEvent] = []
    async for item in source.watch(version):
        events.append(item)
        if len(events) == count:
            break
    return events


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


async def test_list_follows_pages_and_returns_the_version_of_the_list(
    api: FakeApiServer, client: AsyncClient
) -> None:
    a, b, c = configmap("a", "3"), configmap("b", "4"), configmap("c", "5")
    del a["apiVersion"], a["kind"]  # list items come without them; lightkube fills them in
    api.listings.put_nowait(
        {
            "": {"metadata": {"resourceVersion": "20", "continue": "page-2"}, "items": [a, b]},
            "page-2": {"metadata": {"resourceVersion": "20"}, "items": [c]},
        }
    )
    source = LightkubeSource(
        client,
        ConfigMap,
        namespace="ns",
        labels={"app": "web"},
        fields={"metadata.name": "a"},
        page_size=2,
    )
    listing = await source.list()
    assert listing.resource_version == "20"
    assert listing.objects == [configmap("a", "3"), configmap("b", "4"), configmap("c", "5")]
    first, second = api.requests
    assert first.url.path == "/api/v1/namespaces/ns/configmaps"
    assert dict(first.url.params) == {
        "limit": "2",
        "labelSelector": "app=web",
        "fieldSelector": "metadata.name=a",
    }
    assert second.url.params["continue"] == "page-2"
    assert source.description == "ConfigMap in namespace ns labels app=web fields metadata.name=a"


async def test_no_namespace_means_every_namespace(api: FakeApiServer, client: AsyncClient) -> None:
    api.list_once("7")
    source = LightkubeSource(client, ConfigMap)
    assert (await source.list()).objects == []
    assert api.requests[0].url.path == "/api/v1/configmaps"
    assert source.description == "ConfigMap in all namespaces"


async def test_a_cluster_scoped_resource_takes_no_namespace(
    api: FakeApiServer, client: AsyncClient
) -> None:
    with pytest.raises(ValueError, match="Node is cluster-scoped"):
        LightkubeSource(client, Node, namespace="ns")
    api.list_once("7")
    source = LightkubeSource(client, Node, labels={"gpu": "yes"})
    await source.list()
    assert api.requests[0].url.path == "/api/v1/nodes"
    assert source.description == "Node labels gpu=yes"


async def test_the_watch_resumes_where_a_closed_one_ended(
    api: FakeApiServer, client: AsyncClient
) -> None:
    source = LightkubeSource(
        client, ConfigMap, namespace="ns", labels={"app": "web"}, watch_timeout=30
    )
    bookmark = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": "15"}}
    api.reply(event("ADDED", configmap("a", "11")), event("BOOKMARK", bookmark))
    api.reply(event("MODIFIED", configmap("a", "16", value="x")))
    events = await asyncio.wait_for(first_events(source, "10", 3), timeout=5)
    assert events == [
        WatchEvent(WatchType.ADDED, configmap("a", "11")),
        WatchEvent(WatchType.BOOKMARK, bookmark),
        WatchEvent(WatchType.MODIFIED, configmap("a", "16", value="x")),
    ]
    first, second = api.watch_requests
    assert first.url.params["resourceVersion"] == "10"
    assert second.url.params["resourceVersion"] == "15"
    for request in (first, second):
        assert request.url.params["timeoutSeconds"] == "30"
        assert request.url.params["labelSelector"] == "app=web"


async def test_an_error_event_410_means_the_version_expired(
    api: FakeApiServer, client: AsyncClient
) -> None:
    source = LightkubeSource(client, ConfigMap, namespace="ns")
    api.reply(event("ADDED", configmap("a", "11")), event("ERROR", GONE))
    with pytest.raises(ResourceExpiredError, match="from resourceVersion 10: too old") as info:
        await asyncio.wait_for(first_events(source, "10", 5), timeout=5)
    assert isinstance(info.value.__cause__, ApiError)


async def test_an_http_410_answer_means_the_version_expired(
    api: FakeApiServer, client: AsyncClient
) -> None:
    source = LightkubeSource(client, ConfigMap, namespace="ns")
    api.reply(GONE, status_code=410)
    with pytest.raises(ResourceExpiredError):
        await asyncio.wait_for(first_events(source, "10", 1), timeout=5)


async def test_other_watch_errors_are_raised_as_api_answers(
    api: FakeApiServer, client: AsyncClient
) -> None:
    """Other error statuses become `ApiAnswerError` with the code and message (the informer
    logs them in one line), the HTTP error chained."""
    source = LightkubeSource(client, ConfigMap, namespace="ns")
    api.reply(event("ERROR", status(500, "etcd unavailable", "InternalError")))
    with pytest.raises(ApiAnswerError, match="answered 500: etcd unavailable") as answer:
        await asyncio.wait_for(first_events(source, "10", 1), timeout=5)
    assert answer.value.code == 500 and isinstance(answer.value.__cause__, ApiError)
    api.reply(status(403, "forbidden", "Forbidden"), status_code=403)
    with pytest.raises(ApiAnswerError) as info:
        await asyncio.wait_for(first_events(source, "10", 1), timeout=5)
    assert info.value.code == 403
    assert isinstance(info.value.__cause__, httpx.HTTPStatusError)


def test_a_watch_timeout_under_one_second_is_refused(client: AsyncClient) -> None:
    with pytest.raises(ValueError, match="watch_timeout must be >= 1 s"):
        LightkubeSource(client, ConfigMap, namespace="ns", watch_timeout=0)


async def test_the_informer_relists_after_410_and_delivers_deletes_missed_meanwhile(
    api: FakeApiServer, client: AsyncClient
) -> None:
    informer = Informer(LightkubeSource(client, ConfigMap, namespace="ns"))
    seen: list[InformerEvent] = []
    informer.add_handler(seen.append)
    a, b = configmap("a", "5"), configmap("b", "6")
    api.list_once("10", a, b)
    api.reply(event("MODIFIED", configmap("a", "11", value="x")), event("ERROR", GONE))
    api.list_once("40", configmap("a", "11", value="x"), configmap("c", "30"))
    task = asyncio.create_task(informer.run())
    try:
        await until(lambda: len(api.watch_requests) == 2, "the watch after the relist")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert [(e.kind.value, e.key.name, e.final_state_unknown) for e in seen] == [
        ("ADDED", "a", False),
        ("ADDED", "b", False),
        ("MODIFIED", "a", False),
        ("DELETED", "b", True),
        ("ADDED", "c", False),
    ]
    assert seen[3].obj == b
    assert [r.url.params["resourceVersion"] for r in api.watch_requests] == ["10", "40"]
    assert sorted(o["metadata"]["name"] for o in informer.list()) == ["a", "c"]
    assert informer.stats.expired == 1
    assert informer.stats.lists == 2
