"""`AdmissionSources` of a controller replica: informer caches, the API for owners, and the pod
index from the leader (admission.md §4, §11).

Pools, profiles, quotas, GPUs and namespaces are read from the replica's caches, so a typical
request makes no API call. Owners (ReplicaSet, StatefulSet, DaemonSet, Job, and the Deployment
or CronJob above them) are read through the API at admission time. The pod index is the leader's
cyclic counter: the leader takes it locally; a follower asks `GET /api/assign-index` on the
leader's peer port (HTTPS verified against the release CA, with its own ServiceAccount token:
`PeerClient`), and when the leader does not answer within 2 s a random index 1..128 is used
with a warning.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import orjson

from tensorfusion.adapters.kube.client import KubeClient, raw_http
from tensorfusion.adapters.tls.peer_client import PeerClient
from tensorfusion.adapters.tls.peer_http import PeerSession
from tensorfusion.admission.facts_gathering import PodIndex
from tensorfusion.domain.allocator.quota_status import choose_effective, read_quota
from tensorfusion.domain.annotations import INDEX_MAX, INDEX_MIN
from tensorfusion.domain.object_views import labels_of
from tensorfusion.runtime.informer import ObjectCache

__all__ = ["LEADER_INDEX_TIMEOUT_S", "ClusterAdmissionSources", "owner_path"]

LEADER_INDEX_TIMEOUT_S: Final = 2.0
OWNER_CACHE_S: Final = 30.0
"""How long an owner read for the workload's identity only answers later admissions."""
_OWNER_CACHE_SIZE: Final = 4096
_PLURALS: Final = {
    ("apps", "ReplicaSet"): "replicasets",
    ("apps", "StatefulSet"): "statefulsets",
    ("apps", "DaemonSet"): "daemonsets",
    ("apps", "Deployment"): "deployments",
    ("batch", "Job"): "jobs",
    ("batch", "CronJob"): "cronjobs",
    ("", "ReplicationController"): "replicationcontrollers",
}


def owner_path(namespace: str, ref: Mapping[str, Any]) -> str | None:
    """The API path of an owner reference; None for a kind admission does not read."""
    api_version = str(ref.get("apiVersion") or "")
    group, _, version = api_version.rpartition("/")
    plural = _PLURALS.get((group, str(ref.get("kind") or "")))
    if plural is None or not version or not ref.get("name"):
        return None
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    return f"{base}/namespaces/{namespace}/{plural}/{ref['name']}"


class ClusterAdmissionSources:
    """The facts of admission from this replica's caches and the API."""

    def __init__(
        self,
        *,
        client: KubeClient,
        pools: ObjectCache,
        profiles: ObjectCache,
        quotas: ObjectCache,
        gpus: ObjectCache,
        namespaces: ObjectCache,
        is_leader: Callable[[], bool],
        take_index: Callable[[bool], int],
        leader_address: Callable[[], Awaitable[str | None]],
        peer: PeerClient,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._clock = clock
        self._owner_reads: OrderedDict[tuple[str, ...], tuple[float, Mapping[str, Any]]] = (
            OrderedDict()
        )
        self._pools, self._profiles, self._quotas = pools, profiles, quotas
        self._gpus, self._namespaces = gpus, namespaces
        self._is_leader = is_leader
        self._take_index = take_index
        self._leader_address = leader_address
        self._peer = peer
        self._rng = rng or random.Random()

    def pools(self) -> Sequence[Mapping[str, Any]]:
        return self._pools.list()

    def profile(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._profiles.get(name, namespace)

    def quota(self, namespace: str) -> Mapping[str, Any] | None:
        """The namespace's effective GPUResourceQuota (the oldest, as the controller applies)."""
        readings = [read_quota(q) for q in self._quotas.list(namespace)]
        effective, _ = choose_effective(readings)
        chosen = effective.get(namespace)
        if chosen is None:
            return None
        return self._quotas.get(chosen.name, namespace)

    def gpus(self) -> Sequence[Mapping[str, Any]]:
        return self._gpus.list()

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        found = self._namespaces.get(namespace)
        if found is None:
            return None
        return labels_of(found)

    async def owner(
        self, namespace: str, ref: Mapping[str, Any], *, fresh: bool = True
    ) -> Mapping[str, Any] | None:
        """The owner object through the API; None when it does not exist (or is of a kind
        admission does not read). Unless `fresh`, a read of the same owner (same UID) in the
        last `OWNER_CACHE_S` answers: the sibling pods of a ReplicaSet cost one read."""
        path = owner_path(namespace, ref)
        if path is None:
            return None
        key = (path, str(ref.get("uid") or ""))
        now = self._clock()
        if not fresh:
            cached = self._owner_reads.get(key)
            if cached is not None and now - cached[0] < OWNER_CACHE_S:
                return cached[1]
        response = await raw_http(self._client).get(path)
        if response.status_code == 404:
            self._owner_reads.pop(key, None)
            return None
        response.raise_for_status()
        found: dict[str, Any] = orjson.loads(response.content)
        self._owner_reads[key] = (now, found)
        self._owner_reads.move_to_end(key)
        while len(self._owner_reads) > _OWNER_CACHE_SIZE:
            self._owner_reads.popitem(last=False)
        return found

    async def pod_index(self, *, preview: bool) -> PodIndex:
        """The leader's next index (previewed on a dry run); a random one if it is silent."""
        if self._is_leader():
            return PodIndex(self._take_index(preview))
        try:
            return PodIndex(await self._ask_leader(preview))
        except Exception as error:
            value = self._rng.randint(INDEX_MIN, INDEX_MAX)
            return PodIndex(value, f"random index {value} used: the leader did not answer "
                                   f"the pod index request ({error})")  # fmt: skip

    async def _ask_leader(self, preview: bool) -> int:
        address = await self._leader_address()
        if not address:
            raise RuntimeError("no leader known")
        params = {"podName": "admission", **({"preview": "true"} if preview else {})}
        context = self._peer.ssl_context()
        headers = {"Authorization": self._peer.authorization()}
        session = PeerSession(LEADER_INDEX_TIMEOUT_S)
        try:
            reply = await session.request(
                "GET", f"https://{address}/api/assign-index", params=params, headers=headers,
                context=context, server_hostname=self._peer.server_hostname,
                follow_redirects=True,
            )  # fmt: skip
        finally:
            await session.close()
        text = reply.body.decode("utf-8", "replace")
        if reply.status != 200:
            raise RuntimeError(f"HTTP {reply.status}: {text[:200]}")
        value = int(text.strip())
        if not INDEX_MIN <= value <= INDEX_MAX:
            raise RuntimeError(f"index {value} out of range")
        return value
