"""Issue 22 finding 6: the writes of a bind are bounded by the leadership fence.

A bind whose fence closes after its cleanup patch posts no Binding and leaves a pod the next
leader does not count; each write gets the fence's time left as its timeout and none starts
without time left; a Binding the API server holds is cut off when the fence closes (a real
lightkube client against a loopback server that never answers the Binding), and leaves no GPU
annotation on the pod (they travel in the Binding).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from aiohttp import web
from aiohttp.test_utils import TestServer
from lightkube import AsyncClient, KubeConfig

from tensorfusion.adapters.kube.pod_binding import LightkubePodBinding, capped_timeout
from tensorfusion.domain.allocator.recovery import ClusterInventory, recover
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.vocabulary import IsolationPolicy
from tensorfusion.extender.scheduling import NOT_LEADER

from ..unit.extender.conftest import binding, left_behind, make_harness, place, worker

DEADLINE_S = 30.0
"""How long a test waits for a bind that the fence should have cut off long before."""


async def test_a_fence_that_closes_after_the_patch_posts_no_binding_and_leaves_an_uncounted_pod(
) -> None:  # fmt: skip
    h = make_harness()
    pod = left_behind()
    pod["metadata"]["annotations"][KEYS.gpu_ids] = "zz"
    chosen = await place(h, pod)

    def lose_the_lease(call: str) -> None:
        if call == "patch":
            h.leading[0] = False

    h.pods.after_write = lose_the_lease
    result = await h.extender.bind(binding(pod, chosen))

    assert result.error_message == NOT_LEADER
    assert h.pods.calls == ["get", "patch"], "a Binding or a rollback was sent after the fence"
    assert "u1" not in h.allocator.records
    assert not pod.get("spec", {}).get("nodeName")
    # The next leader's recovery does not count a pod that is not bound...
    _, report = recover(ClusterInventory(), [pod], IsolationPolicy.STATIC, now=0.0)
    assert report.restored == []
    # ...and its bind of the same pod rewrites the annotations the old leader left.
    leftover = pod["metadata"]["annotations"][KEYS.gpu_ids]
    other = "node-b" if chosen == "node-a" else "node-a"
    successor = make_harness()
    successor.pods.add(pod)
    assert (await successor.extender.bind(binding(pod, other))).ok
    assert pod["metadata"]["annotations"][KEYS.gpu_ids] == successor.allocator.records["u1"].gpus[0]
    assert pod["metadata"]["annotations"][KEYS.gpu_ids] != leftover


async def test_each_write_of_a_bind_gets_the_fences_time_left_as_its_timeout() -> None:
    now, deadline = [0.0], 3.0
    h = make_harness(fence=lambda: deadline - now[0])

    def take_one_second(call: str) -> None:
        now[0] += 1.0

    h.pods.after_write = take_one_second
    pod = left_behind()
    chosen = await place(h, pod)
    assert (await h.extender.bind(binding(pod, chosen))).ok
    assert h.pods.timeouts == [("patch", 3.0), ("bind", 2.0)]


async def test_a_binding_with_no_time_left_on_the_fence_is_not_sent() -> None:
    now, deadline = [0.0], 3.0
    h = make_harness(fence=lambda: deadline - now[0])

    def take_the_rest(call: str) -> None:
        now[0] = deadline

    h.pods.after_write = take_the_rest
    pod = left_behind()
    chosen = await place(h, pod)
    result = await h.extender.bind(binding(pod, chosen))
    assert result.error_message == NOT_LEADER
    assert h.pods.calls == ["get", "patch"]


def test_the_request_timeout_is_the_smaller_of_the_clients_and_the_fences() -> None:
    client = httpx.Timeout(30.0, connect=5.0)
    assert capped_timeout(client, 2.0) == httpx.Timeout(2.0)
    assert capped_timeout(client, 10.0) == httpx.Timeout(10.0, connect=5.0)
    assert capped_timeout(client, float("inf")) == client
    assert capped_timeout(httpx.Timeout(None), 4.0) == httpx.Timeout(4.0)


class StallingApiServer:
    """Answers pod GETs and patches; holds every Binding until the test ends."""

    def __init__(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        self.seen: list[str] = []
        self.read = asyncio.Event()
        self.release = asyncio.Event()
        app = web.Application()
        path = "/api/v1/namespaces/{ns}/pods/{name}"
        app.router.add_get(path, self.get)
        app.router.add_patch(path, self.patch)
        app.router.add_post(path + "/binding", self.bind)
        self.server = TestServer(app, host="127.0.0.1")

    async def get(self, request: web.Request) -> web.Response:
        self.seen.append("get")
        self.read.set()
        return web.json_response({"apiVersion": "v1", "kind": "Pod", **self.pod})

    async def patch(self, request: web.Request) -> web.Response:
        self.seen.append("patch")
        annotations = self.pod["metadata"].setdefault("annotations", {})
        for op in await request.json():
            key = op["path"].rsplit("/", 1)[1].replace("~1", "/")
            if op["op"] == "remove":
                annotations.pop(key, None)
            else:
                annotations[key] = op["value"]
        return web.json_response({})

    async def bind(self, request: web.Request) -> web.Response:
        self.seen.append("bind")
        await self.release.wait()
        return web.json_response({"kind": "Status", "status": "Success"})


async def test_a_binding_the_api_server_holds_is_cut_off_when_the_fence_closes() -> None:
    pod = worker()
    api = StallingApiServer(pod)
    await api.server.start_server()
    # A client timeout far beyond the test's deadline: only the fence can end the Binding.
    config = KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": str(api.server.make_url(""))}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    })  # fmt: skip
    client = AsyncClient(config, timeout=httpx.Timeout(600.0))
    fence_closes = [time.monotonic() + 600.0]

    def fence() -> float:
        if api.read.is_set() and fence_closes[0] > time.monotonic() + 1.0:
            fence_closes[0] = time.monotonic() + 1.0  # renewals stopped: 1 s left
        return fence_closes[0] - time.monotonic()

    h = make_harness(fence=fence)
    h.extender._pods = LightkubePodBinding(client)
    h.pods.add(pod)
    chosen = await place(h, pod)
    try:
        result = await asyncio.wait_for(h.extender.bind(binding(pod, chosen)), DEADLINE_S)
    finally:
        api.release.set()
        await client.close()
        await api.server.close()
    assert not result.ok
    assert "binding to node" in result.error_message
    assert api.seen.count("bind") == 1
    assert api.seen[api.seen.index("bind") :].count("patch") == 0, "rollback sent after the fence"
    assert "u1" not in h.allocator.records
    assert KEYS.gpu_ids not in pod["metadata"]["annotations"]


async def test_a_bind_removes_bind_annotations_left_by_an_earlier_bind_without_a_binding() -> None:
    h = make_harness()
    pod = worker()
    pod["metadata"]["annotations"] |= {KEYS.gpu_ids: "zz", KEYS.container_gpus: '{"main":["zz"]}'}
    chosen = await place(h, pod)
    assert (await h.extender.bind(binding(pod, chosen))).ok
    annotations = pod["metadata"]["annotations"]
    assert annotations[KEYS.gpu_ids] == ",".join(h.allocator.records["u1"].gpus)
    assert KEYS.container_gpus not in annotations
