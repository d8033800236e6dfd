"""The web console's files (docs/observability.md) and `GET /api/workloads`: served only by the
public app, only the three files, with a policy that loads nothing from elsewhere; the workloads
view joins the workload objects, the allocator and the store's recent usage."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tensorfusion.api_server import WORKLOADS_PATH, create_api_app
from tensorfusion.api_server.console import CONSOLE_PATH
from tensorfusion.domain.workloads_view import RecentUsage

from .fakes import GENERATED_AT, FakeBackend, spec_inputs

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def console(backend: FakeBackend) -> AsyncIterator[Client]:
    app = create_api_app(backend, clock=lambda: GENERATED_AT, console=True)
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


async def test_the_page_and_its_files_are_served_with_a_strict_policy(console: Client) -> None:
    page = await console.get(CONSOLE_PATH)
    assert page.status == 200 and page.content_type == "text/html"
    html = await page.text()
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    # Every file the page loads is one of ours, on this origin: no network at view time.
    loaded = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sorted(loaded) == ["console.css", "console.js"]
    for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
        answer = await console.get(CONSOLE_PATH + name)
        assert (answer.status, answer.content_type) == (200, kind)
    script = await (await console.get(CONSOLE_PATH + "console.js")).text()
    assert "innerHTML" not in script and "http://" not in script and "https://" not in script


OTHER_PATHS = ["console/other.js", "console/..%2fapi_app.py",
               "console/%2e%2e/data/gpu_info.yaml", "console/index.html/x"]  # fmt: skip


@pytest.mark.parametrize("path", OTHER_PATHS)
async def test_nothing_else_is_served(console: Client, path: str) -> None:
    answer = await console.get("/" + path)
    assert answer.status == 404


async def test_the_root_leads_to_the_console_and_the_peer_app_has_none(
    console: Client, client: Client
) -> None:
    answer = await console.get("/", allow_redirects=False)
    assert (answer.status, answer.headers["Location"]) == (302, CONSOLE_PATH)
    assert (await client.get(CONSOLE_PATH)).status == 404


def _workload(name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "other"},
            "spec": {"poolName": "tensor-fusion-shared",
                     "resources": {"requests": {"tflops": "100", "vram": "20Gi"},
                                   "limits": {"tflops": "100", "vram": "20Gi"}}},
            "status": {"phase": "Running"}}  # fmt: skip


async def test_workloads_join_objects_allocations_and_usage(
    client: Client, backend: FakeBackend
) -> None:
    _, virtual = spec_inputs()
    backend.live_allocator = virtual.allocator
    backend.workloads = [_workload("holder"), _workload("idle")]
    backend.usage = {("other", "holder"): RecentUsage(tflops_milli=12_500, vram_bytes=1 << 30,
                                                      samples=30)}  # fmt: skip
    body = await (await client.get(WORKLOADS_PATH)).json()
    holder, idle = body["workloads"]
    assert holder["name"] == "holder" and [w["name"] for w in holder["workers"]] == ["holder"]
    assert holder["current"]["requests"] == {"tflops": "100", "vram": "20Gi"}
    assert holder["usage"] == {"tflops": "12500m", "vram": "1Gi", "samples": 30}
    assert (idle["workers"], idle["current"], idle["usage"]) == ([], None, None)
    assert body["usageError"] is None


async def test_workloads_say_why_usage_is_missing(client: Client, backend: FakeBackend) -> None:
    backend.workloads = [_workload("holder")]
    backend.usage, backend.usage_error = None, "the metrics store cannot answer: down"
    body = await (await client.get(WORKLOADS_PATH, params={"namespace": "nope"})).json()
    assert body == {"usageWindowSeconds": 300, "workloads": [],
                    "usageError": "the metrics store cannot answer: down"}  # fmt: skip
