"""`GET /api/allocation`, `/api/pools`, `/api/nodes` (scheduling.md §16.2-16.3) and
`/api/alerts`, `/api/config` (alerting.md §9)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tensorfusion.api_server import (
    ALERTS_PATH,
    ALLOCATION_PATH,
    CONFIG_PATH,
    NODES_PATH,
    POOLS_PATH,
)
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.snapshot import allocation_view, nodes_view, pools_view

from .fakes import GENERATED_AT, FakeBackend, spec_inputs

Client = TestClient[web.Request, web.Application]
POOL = "tensor-fusion-shared"


@pytest.fixture
def allocator(backend: FakeBackend) -> Allocator:
    _, virtual = spec_inputs()
    backend.live_allocator = virtual.allocator
    return virtual.allocator


async def json_of(response: Any, status: int = 200) -> Any:
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    return await response.json()


async def test_allocation_before_recovery_is_200_not_ready_with_empty_lists(
    client: Client, backend: FakeBackend
) -> None:
    backend.max_workers = 64
    body = await json_of(await client.get(ALLOCATION_PATH, params={"node": "node-a"}))
    assert body == {
        "ready": False,
        "generatedAt": "2026-01-01T00:00:00Z",
        "isolationPolicy": "Dynamic",
        "maxWorkerPerNode": 64,
        "gpus": [],
        "nodes": [],
        "allocations": [],
        "quotas": [],
    }


async def test_allocation_after_recovery_is_the_allocators_view(
    client: Client, backend: FakeBackend, allocator: Allocator
) -> None:
    body = await json_of(await client.get(ALLOCATION_PATH))
    assert body["ready"] is True
    assert body == allocation_view(
        allocator, ready=True, generated_at=GENERATED_AT, max_worker_per_node=256
    )
    assert [a["name"] for a in body["allocations"]] == ["holder"]
    assert len(body["gpus"]) == 6


async def test_allocation_shows_what_the_autoscaler_recommends(
    client: Client, backend: FakeBackend, allocator: Allocator
) -> None:
    workload = {
        "metadata": {"name": "holder", "namespace": "other"},
        "status": {
            "recommendation": {"requests": {"tflops": "23"}, "limits": {"tflops": "23"}},
            "conditions": [
                {
                    "type": "AutoScaled",
                    "status": "True",
                    "reason": "Resized",
                    "message": "tflops: target 23000",
                    "lastTransitionTime": "t",
                }
            ],
        },
    }
    backend.workloads = [workload, {"metadata": {"name": "quiet"}, "status": {}}]
    [entry] = (await json_of(await client.get(ALLOCATION_PATH)))["allocations"]
    assert entry["request"] != entry["autoScaling"]["recommended"]["requests"]
    assert entry["autoScaling"] == {
        "recommended": {"requests": {"tflops": "23"}, "limits": {"tflops": "23"}},
        "condition": {"status": "True", "reason": "Resized", "message": "tflops: target 23000",
                      "lastTransitionTime": "t"},
        "activeCronScalingRule": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("query", "gpus", "allocations"),
    [
        ({"node": "node-d"}, ["gpu-d1", "gpu-d2"], []),
        ({"node": "node-a"}, ["gpu-a1", "gpu-a2"], ["holder"]),
        ({"namespace": "other"}, ["gpu-a1"], ["holder"]),
        ({"namespace": "ml"}, [], []),
        ({"pool": "no-such-pool"}, [], []),
        ({"pool": POOL, "node": ""}, ["gpu-a1", "gpu-a2", "gpu-b1", "gpu-c1", "gpu-d1",
                                      "gpu-d2"], ["holder"]),
    ],
)  # fmt: skip
async def test_allocation_filters(
    client: Client,
    allocator: Allocator,
    query: dict[str, str],
    gpus: list[str],
    allocations: list[str],
) -> None:
    body = await json_of(await client.get(ALLOCATION_PATH, params=query))
    assert [g["name"] for g in body["gpus"]] == gpus
    assert [a["name"] for a in body["allocations"]] == allocations
    assert body == allocation_view(
        allocator,
        ready=True,
        generated_at=GENERATED_AT,
        max_worker_per_node=256,
        node=query.get("node") or None,
        pool=query.get("pool") or None,
        namespace=query.get("namespace") or None,
    )


async def test_pools_and_nodes_come_from_the_allocator(
    client: Client, allocator: Allocator
) -> None:
    pools = await json_of(await client.get(POOLS_PATH))
    assert pools == pools_view(allocator)
    assert [p["name"] for p in pools["pools"]] == [POOL]
    nodes = await json_of(await client.get(NODES_PATH))
    assert nodes == nodes_view(allocator)
    assert [n["name"] for n in nodes["nodes"]] == ["node-a", "node-b", "node-c", "node-d"]
    in_pool = await json_of(await client.get(NODES_PATH, params={"pool": POOL}))
    assert in_pool == nodes
    other = await json_of(await client.get(NODES_PATH, params={"pool": "other-pool"}))
    assert other == {"nodes": []}


@pytest.mark.parametrize("path", [POOLS_PATH, NODES_PATH])
async def test_pools_and_nodes_before_recovery_are_503(client: Client, path: str) -> None:
    body = await json_of(await client.get(path), 503)
    assert body["error"]["code"] == "AllocatorNotReady"


async def test_alerts_and_config_are_the_backends_bodies(
    client: Client, backend: FakeBackend
) -> None:
    backend.alerts = MappingProxyType({
        "replica": MappingProxyType({"pod": "controller-0", "leader": True}),
        "store": {"kind": "duckdb", "up": True, "lastError": None},
        "rules": [{"name": "GPUVRAMFull", "pending": [], "firing": []}],
    })  # fmt: skip
    backend.config = {"file": "/etc/tensor-fusion/config/config.yaml", "sha256": "ab",
                      "loadedAt": "2026-01-01T00:00:00Z", "config": {}, "error": None}  # fmt: skip
    alerts = await json_of(await client.get(ALERTS_PATH))
    assert alerts == {
        "replica": {"pod": "controller-0", "leader": True},
        "store": {"kind": "duckdb", "up": True, "lastError": None},
        "rules": [{"name": "GPUVRAMFull", "pending": [], "firing": []}],
    }
    assert await json_of(await client.get(CONFIG_PATH)) == backend.config
