"""TensorFusionCluster: its GPUPools created, updated and deleted, its status summed (api.md
§2.1; the rules are in `domain.desired_state.pools` and `.clusters`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from tensorfusion.adapters.kube.object_client import KubeError, ObjectClient
from tensorfusion.controller.fenced_writes import EventSink, Fence, FencedWriter, involved
from tensorfusion.controller.reconcile_loop import ReconcileLoop
from tensorfusion.domain.desired_state.clusters import cluster_status
from tensorfusion.domain.desired_state.objects import merge_patch
from tensorfusion.domain.desired_state.pools import (
    desired_pools,
    pool_owner_cluster,
    pool_update,
    pools_to_delete,
)
from tensorfusion.domain.object_views import Obj, is_deleting, name_of, status_of
from tensorfusion.domain.timestamps import format_rfc3339
from tensorfusion.runtime.informer import ObjectCache
from tensorfusion.runtime.informer_store import InformerEvent

__all__ = ["ClusterReconciler"]

_log = logging.getLogger(__name__)
POOL_CONFLICT: Final = "GPUPoolConflict"
POOL_NOT_READY: Final = "GPUPoolNotReady"
POOL_CREATED: Final = "GPUPoolCreated"
POOL_DELETED: Final = "GPUPoolDeleted"


class ClusterReconciler:
    """One GPUPool `<cluster>-<name>` per `spec.gpuPools` entry, and the cluster's status.

    Wire `on_cluster` to the TensorFusionCluster informer and `on_pool` to the GPUPool one;
    run `run()` under the Supervisor on the leader.
    """

    def __init__(
        self,
        *,
        clusters: ObjectCache,
        pools: ObjectCache,
        client: ObjectClient,
        fence: Fence,
        recorder: EventSink | None,
        clock: Callable[[], float],
        workers: int = 1,
        min_interval: float = 1.0,
    ) -> None:
        self._clusters = clusters
        self._pools = pools
        self._clock = clock
        self.writer = FencedWriter(client, fence, events=recorder)
        self.loop: ReconcileLoop[str] = ReconcileLoop(
            "tensorfusioncluster", self.reconcile, workers=workers, min_interval=min_interval
        )

    # ---- handlers ---------------------------------------------------------------------------

    def on_cluster(self, event: InformerEvent) -> None:
        """A TensorFusionCluster changed."""
        self.loop.add(event.key.name)

    def on_pool(self, event: InformerEvent) -> None:
        """A GPUPool changed: its cluster sums again (and recreates it when it was deleted)."""
        cluster = pool_owner_cluster(event.obj)
        if not cluster and event.old is not None:
            cluster = pool_owner_cluster(event.old)
        if cluster:
            self.loop.add(cluster)

    async def run(self) -> None:
        """Reconcile until cancelled."""
        await self.loop.run()

    # ---- reconcile --------------------------------------------------------------------------

    async def reconcile(self, name: str) -> float | None:
        """Bring the cluster's pools and status to what its spec wants."""
        cluster = self._clusters.get(name)
        if cluster is None:
            return None  # its pools go with it (owner references)
        if not is_deleting(cluster):
            await self._sync_pools(cluster)
        wanted = [name_of(body) for body in desired_pools(cluster)]
        pools = {pool: self._pools.get(pool) for pool in wanted}
        now = format_rfc3339(self._clock())
        ready_before = set(status_of(cluster).get("readyGPUPools") or ())

        def build(current: Obj) -> dict[str, object] | None:
            patch = merge_patch(status_of(current), cluster_status(current, pools, now))
            return {"status": patch} if patch else None

        written = await self.writer.patch_fresh(
            "TensorFusionCluster", name, build, status=True, cached=cluster
        )
        stopped = [p for p in status_of(written).get("notReadyGPUPools") or () if p in ready_before]
        if stopped and written is not None:
            await self.writer.note(
                involved("TensorFusionCluster", written),
                "Warning",
                POOL_NOT_READY,
                f"GPU pools no longer Running: {', '.join(stopped)}",
            )
        return None

    async def _sync_pools(self, cluster: Obj) -> None:
        subject = involved("TensorFusionCluster", cluster)
        for body in desired_pools(cluster):
            pool_name = name_of(body)
            current = self._pools.get(pool_name)
            if current is None:
                try:
                    await self.writer.create("GPUPool", body)
                except KubeError as error:
                    if error.code != 409:
                        raise
                    # Created meanwhile (our cache lags): the pool event brings us back.
                    current = await self.writer.read("GPUPool", pool_name)
                    if current is None:
                        raise
                else:
                    _log.info("created GPUPool %s for cluster %s", pool_name, name_of(cluster))
                    await self.writer.note(subject, "Normal", POOL_CREATED,
                                           f"created GPUPool {pool_name}")  # fmt: skip
                    continue
            update = pool_update(current, body)
            if update.conflict:
                await self.writer.note(subject, "Warning", POOL_CONFLICT, update.conflict)
                continue
            if update.body is not None:
                await self.writer.replace_fresh(
                    "GPUPool", pool_name, _updater(body), cached=current
                )
        for pool_name in pools_to_delete(cluster, self._pools.list()):
            if await self.writer.delete("GPUPool", pool_name):
                message = f"deleted GPUPool {pool_name}: removed from spec.gpuPools"
                _log.info("cluster %s: %s", name_of(cluster), message)
                await self.writer.note(subject, "Normal", POOL_DELETED, message)


def _updater(desired: Obj) -> Callable[[Obj], dict[str, Any] | None]:
    """Builds the update of a pool from its freshest read."""

    def build(current: Obj) -> dict[str, Any] | None:
        return pool_update(current, desired).body

    return build
