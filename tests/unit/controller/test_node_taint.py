"""Progressive migration's `used-by` taint follows the allocator's committed state."""

from __future__ import annotations

from typing import Any

from tensorfusion.controller.node_taint import ProgressiveTaintReconciler
from tensorfusion.runtime.informer_store import EventKind

from .reconciler_fakes import (
    FakeApi,
    Fence,
    Snapshot,
    allocator_state,
    drain,
    event,
    feed,
    gpu,
    node,
    pool,
    worker,
)

OURS = {"key": "tensor-fusion.ai/used-by", "value": "tensor-fusion", "effect": "PreferNoSchedule"}
THEIRS = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


def world(enabled: bool = True) -> tuple[FakeApi, Any, ProgressiveTaintReconciler]:
    api = FakeApi()
    api.put(pool("shared"))
    api.put({**node("n1"), "spec": {"taints": [THEIRS]}})
    api.put(gpu("g1", "n1"))
    state = allocator_state(api)
    reconciler = ProgressiveTaintReconciler(
        nodes=api.cache("Node"), state=state, client=api, fence=Fence(), enabled=enabled
    )
    return api, state, reconciler


def taints(api: FakeApi) -> list[dict[str, Any]]:
    return list(api.obj("Node", "n1")["spec"].get("taints") or [])


async def test_the_taint_comes_with_an_allocation_and_goes_when_idle() -> None:
    api, state, reconciler = world()
    reconciler.take_changes()
    await drain(reconciler.loop)
    assert taints(api) == [THEIRS] and api.writes() == []
    pod = api.put(worker("w1", "g1", "n1"))
    feed(state, pod, EventKind.ADDED)
    assert reconciler.take_changes() == {"n1"}
    await drain(reconciler.loop)
    assert taints(api) == [THEIRS, OURS]
    feed(state, pod, EventKind.DELETED)
    reconciler.take_changes()
    await drain(reconciler.loop)
    assert taints(api) == [THEIRS]


async def test_a_taint_removed_by_hand_comes_back_once_the_cache_shows_it() -> None:
    api, state, reconciler = world()
    feed(state, api.put(worker("w1", "g1", "n1")), EventKind.ADDED)
    reconciler.take_changes()
    await drain(reconciler.loop)
    lagging = Snapshot.of(api, "Node")  # still shows our taint
    before = api.obj("Node", "n1")
    other = {"key": "x", "effect": "NoExecute"}
    after = api.put({**before, "spec": {"taints": [THEIRS, other]}})
    reconciler._nodes = lagging
    reconciler.on_node(event(after, EventKind.MODIFIED, before))
    await drain(reconciler.loop)
    assert taints(api) == [THEIRS, other]  # by the lagging copy there is nothing to do
    reconciler._nodes = api.cache("Node")  # the informer delivers the change
    reconciler.on_node(event(after, EventKind.MODIFIED, before))
    await drain(reconciler.loop)
    assert taints(api) == [THEIRS, other, OURS]


async def test_a_write_from_an_outdated_copy_is_redone_on_a_fresh_read() -> None:
    api, state, reconciler = world()
    outdated = Snapshot.of(api, "Node")  # without our taint, and an old version
    before = api.obj("Node", "n1")
    other = {"key": "x", "effect": "NoExecute"}
    api.put({**before, "spec": {"taints": [THEIRS, other]}})
    reconciler._nodes = outdated
    feed(state, api.put(worker("w1", "g1", "n1")), EventKind.ADDED)
    reconciler.take_changes()
    await drain(reconciler.loop)
    assert taints(api) == [THEIRS, other, OURS]  # the other writer's taint is kept
    assert [c.op for c in api.calls] == ["patch", "get", "patch"]


async def test_nothing_happens_without_progressive_migration() -> None:
    api, state, reconciler = world(enabled=False)
    feed(state, api.put(worker("w1", "g1", "n1")), EventKind.ADDED)
    assert reconciler.take_changes() == set()
    reconciler.on_node(event(api.obj("Node", "n1")))
    assert reconciler.loop.queue.depth == 0
    assert await reconciler.reconcile("n1") is None
    assert api.writes() == []
