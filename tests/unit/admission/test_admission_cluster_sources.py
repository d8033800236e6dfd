"""`ClusterAdmissionSources`: facts from caches, owner paths, and the pod index from the leader
(locally, over `GET /api/assign-index` on its peer port with the token, or a random one with a
warning)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig

from tensorfusion.adapters.tls.peer_client import PeerClient
from tensorfusion.admission.cluster_sources import (
    OWNER_CACHE_S,
    ClusterAdmissionSources,
    owner_path,
)
from tests.peer_tls import peer_client, release_bundle, serving

BUNDLE = release_bundle()
NO_PEER = PeerClient(ca=lambda: None, server_hostname="tensor-fusion.tf-sys.svc")


class Cache:
    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = objects

    def list(self, namespace: str | None = None) -> Sequence[Mapping[str, Any]]:
        return [o for o in self.objects
                if namespace is None or o["metadata"].get("namespace") == namespace]  # fmt: skip

    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None:
        return next((o for o in self.objects if o["metadata"]["name"] == name
                     and o["metadata"].get("namespace", "") == namespace), None)  # fmt: skip


def quota(name: str, created: str) -> dict[str, Any]:
    return {"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUResourceQuota",
            "metadata": {"name": name, "namespace": "team", "creationTimestamp": created},
            "spec": {}}  # fmt: skip


def sources(
    *, leader: bool = False, address: str | None = None, taken: list[bool] | None = None,
    peer: PeerClient = NO_PEER,
) -> ClusterAdmissionSources:  # fmt: skip
    async def leader_address() -> str | None:
        return address

    def take(preview: bool) -> int:
        (taken if taken is not None else []).append(preview)
        return 5

    return ClusterAdmissionSources(
        client=cast(AsyncClient, None), pools=Cache(), profiles=Cache(),
        quotas=Cache(quota("newer", "2026-02-01T00:00:00Z"),
                     quota("older", "2026-01-01T00:00:00Z")),
        gpus=Cache(), namespaces=Cache({"metadata": {"name": "team", "labels": {"a": "b"}}}),
        is_leader=lambda: leader, take_index=take, leader_address=leader_address,
        peer=peer, rng=random.Random(3),
    )  # fmt: skip


def test_the_effective_quota_and_namespace_labels_come_from_the_caches() -> None:
    found = sources()
    chosen = found.quota("team")
    assert chosen is not None and chosen["metadata"]["name"] == "older"
    assert found.quota("elsewhere") is None
    assert found.namespace_labels("team") == {"a": "b"}
    assert found.namespace_labels("missing") is None


def test_owner_paths() -> None:
    assert owner_path("ns", {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}) == (
        "/apis/apps/v1/namespaces/ns/replicasets/rs")  # fmt: skip
    controller = {"apiVersion": "v1", "kind": "ReplicationController", "name": "rc"}
    assert owner_path("ns", controller) == "/api/v1/namespaces/ns/replicationcontrollers/rc"
    assert owner_path("ns", {"apiVersion": "example.com/v1", "kind": "Thing", "name": "t"}) is None


async def test_the_leader_takes_its_own_index_and_previews_on_a_dry_run() -> None:
    taken: list[bool] = []
    found = sources(leader=True, taken=taken)
    assert (await found.pod_index(preview=False)).value == 5
    assert (await found.pod_index(preview=True)).value == 5
    assert taken == [False, True]


@pytest.fixture
async def leader() -> AsyncIterator[tuple[str, list[Mapping[str, str]]]]:
    seen: list[Mapping[str, str]] = []

    async def assign(request: web.Request) -> web.Response:
        seen.append({**request.query, "auth": request.headers.get("Authorization", "")})
        return web.Response(text="17")

    app = web.Application()
    app.router.add_get("/api/assign-index", assign)
    server = TestServer(app)
    await server.start_server(ssl=serving(BUNDLE))
    try:
        yield f"127.0.0.1:{server.port}", seen
    finally:
        await server.close()


async def test_a_follower_asks_the_leader_with_its_token_over_verified_https(
    leader: tuple[str, list[Mapping[str, str]]], tmp_path: Path
) -> None:
    address, seen = leader
    index = await sources(address=address, peer=peer_client(BUNDLE, tmp_path)).pod_index(
        preview=True
    )
    assert (index.value, index.warning) == (17, None)
    assert seen == [{"podName": "admission", "preview": "true", "auth": "Bearer own-token"}]


async def test_no_token_is_sent_to_a_peer_whose_certificate_is_not_the_releases(
    leader: tuple[str, list[Mapping[str, str]]], tmp_path: Path
) -> None:
    address, seen = leader
    stranger = peer_client(release_bundle(), tmp_path)  # another CA
    index = await sources(address=address, peer=stranger).pod_index(preview=False)
    assert index.warning is not None and "CERTIFICATE_VERIFY_FAILED" in index.warning
    no_ca = await sources(address=address).pod_index(preview=False)
    assert no_ca.warning is not None and "release CA is not loaded" in no_ca.warning
    assert seen == [], "the leader stand-in never received a request"


async def test_a_silent_leader_means_a_random_index_with_a_warning() -> None:
    index = await sources(address="127.0.0.1:1").pod_index(preview=False)
    assert 1 <= index.value <= 128
    assert index.warning is not None and f"random index {index.value} used" in index.warning
    none = await sources(address=None).pod_index(preview=False)
    assert none.warning is not None and "no leader known" in none.warning


async def test_an_identity_read_of_an_owner_is_reused_briefly_and_a_count_read_never() -> None:
    reads: list[str] = []

    async def replica_set(request: web.Request) -> web.Response:
        reads.append(request.path)
        return web.json_response({"metadata": {"name": "web-rs", "uid": "rs"}})

    app = web.Application()
    app.router.add_get("/apis/apps/v1/namespaces/team/replicasets/web-rs", replica_set)
    server = TestServer(app)
    await server.start_server()
    config = KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    })  # fmt: skip
    now = [0.0]
    found = ClusterAdmissionSources(
        client=AsyncClient(config=config), pools=Cache(), profiles=Cache(), quotas=Cache(),
        gpus=Cache(), namespaces=Cache(), is_leader=lambda: True, take_index=lambda _: 1,
        leader_address=lambda: asyncio.sleep(0, None), peer=NO_PEER, clock=lambda: now[0],
    )  # fmt: skip
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs", "uid": "rs"}
    try:
        for _ in range(3):
            assert (await found.owner("team", ref, fresh=False) or {})["metadata"]["uid"] == "rs"
        assert len(reads) == 1
        await found.owner("team", ref)
        assert len(reads) == 2, "a count is always read fresh"
        now[0] += OWNER_CACHE_S
        await found.owner("team", ref, fresh=False)
        assert len(reads) == 3, "an old read is not reused"
        await found.owner("team", {**ref, "uid": "another"}, fresh=False)
        assert len(reads) == 4, "a recreated owner is another owner"
    finally:
        await server.close()
