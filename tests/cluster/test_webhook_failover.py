"""The pod webhook and the GPU scheduler across a failover and in a migration (issue 10).

- Two controller replicas serve the webhook (admission.md §1: every replica, never gated on
  leadership); the API server calls the follower. The leader is killed with SIGKILL: the
  follower keeps admitting TF pods, each with a random index 1..128 and a warning naming it
  (admission.md §11, §13), until it takes the Lease; then it schedules them (scheduling.md §15).
- Progressive migration (scheduling.md §11): GPUs whose `status.usedBy` names the NVIDIA device
  plugin are never allocated (filter stage 2, `PhaseFilter`), even when they are the only ones
  left; handed back (`usedBy: tensor-fusion`), they take the waiting workers.

The taint of §11 (added on a node with committed allocations, removed when it is idle) is
covered by `test_controller_reconcilers.py`, and is not repeated here.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import pytest
from lightkube import AsyncClient
from lightkube.types import PatchType

from tensorfusion.adapters.kube.client import raw_http
from tensorfusion.domain.annotations import INDEX_MAX, INDEX_MIN, KEYS, decode_index
from tensorfusion.domain.scheduling.scheduler_config import scheduler_name

from ..unit.admission.admission_builders import make_pod, resources_ok
from .conftest import DeleteLater
from .controller_replicas import Start, holder
from .controlplane import ControlPlane, eventually, free_port
from .nodes import FakeGpuNodes
from .test_controller_reconcilers import GPU, POD, read
from .test_scheduling import (
    allocations,
    gpu_cluster,
    gpu_warnings,
    records_match,
    webhook_worker,
)
from .webhook_setup import register_webhook, wait_ready

pytestmark = pytest.mark.cluster

#: The replicas fixture gives replica i the loopback IP 127.0.0.{i + 2}; gpu_cluster starts the
#: leader first. The certificate must name both before either starts.
LEADER_IP, FOLLOWER_IP = "127.0.0.2", "127.0.0.3"
#: The follower's warning when the leader does not answer (cluster_sources.py, admission.md §11).
#: "random index <p> used: the leader did not answer ... (<error>)": the spec fixes
#: no wording, but the warning must say that p is a random index, and which.
RANDOM_INDEX = re.compile(r"\brandom index (\d+)\b")
#: After a SIGKILL the Lease runs out (15 s, observed by the follower's own clock) before the
#: follower takes it, recovers, and starts its kube-scheduler.
TAKEOVER_S = 60.0
DEVICE_PLUGIN = "nvidia-device-plugin"


# --------------------------------------------------------------------------- helpers


def tf_pod(name: str, namespace: str, pool: str) -> dict[str, Any]:
    """An application pod asking for TensorFusion: vector 1's resources in `pool`."""
    container = {"name": "app", "image": "x",
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}  # fmt: skip
    return make_pod(resources_ok(gpupool=pool), name=name, namespace=namespace,
                    containers=[container])  # fmt: skip


async def create_through_api(
    kube: AsyncClient, namespace: str, pod: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """Creates the pod with a raw POST: the stored pod and the admission warnings (the API
    server's `Warning` headers, `299 - "<text>"`, unquoted)."""
    response = await raw_http(kube).post(f"/api/v1/namespaces/{namespace}/pods", json=dict(pod))
    assert response.status_code == 201, f"{pod['metadata']['name']}: {response.text}"
    return response.json(), [unquote_warning(w) for w in warning_headers(response)]


def warning_headers(response: httpx.Response) -> list[str]:
    return response.headers.get_list("warning")


def unquote_warning(header: str) -> str:
    """The text of a `Warning` header value `299 - "text"` (RFC 7234 §5.5)."""
    found = re.fullmatch(r'\s*299 \S+ "(?P<text>(?:[^"\\]|\\.)*)"(?: "[^"]*")?\s*', header)
    assert found is not None, f"not a 299 warning: {header!r}"
    return re.sub(r"\\(.)", r"\1", found.group("text"))


def pod_index(pod: Mapping[str, Any]) -> int:
    """The pod index p of the index resource the webhook added (api.md §6)."""
    found = {
        decode_index(name, value)
        for container in pod["spec"]["containers"]
        for name, value in ((container.get("resources") or {}).get("limits") or {}).items()
        if name.startswith(KEYS.index_resource_prefix)
    }
    assert len(found) == 1, f"{pod['metadata']['name']}: index resources {found}"
    return found.pop()


def check_mutated(pod: Mapping[str, Any]) -> None:
    """The pod as the webhook leaves it (admission.md §11)."""
    name = pod["metadata"]["name"]
    assert pod["spec"]["schedulerName"] == scheduler_name(), name
    assert pod["metadata"]["labels"].get(KEYS.component) == "worker", name
    assert KEYS.finalizer in (pod["metadata"].get("finalizers") or []), name


async def bound_pods(kube: AsyncClient, namespace: str,
                     names: Sequence[str]) -> list[dict[str, Any]] | None:  # fmt: skip
    """The named pods once every one has a node, else None."""
    pods = [await read(kube, POD, name, namespace) for name in names]
    if all(p is not None and p["spec"].get("nodeName") for p in pods):
        return [p for p in pods if p is not None]
    return None


def check_placed(pod: Mapping[str, Any], gpus: Mapping[str, Sequence[str]]) -> None:
    """Bound to a node of the pool with `gpu-ids` naming GPUs of that node."""
    name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
    assert node in gpus, f"{name} bound to {node}, not a node of the pool"
    ids = (pod["metadata"].get("annotations") or {}).get(KEYS.gpu_ids, "")
    assert ids and all(g in gpus[node] for g in ids.split(",")), (name, node, ids)


# --------------------------------------------------------------------------- tests


async def test_the_follower_admits_with_a_random_index_while_the_killed_leader_is_silent(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
) -> None:
    release = f"tf-{secrets.token_hex(3)}"
    port = free_port()
    env = {"TF_RELEASE_FULLNAME": release, "WEBHOOK_PORT": str(port),
           "WEBHOOK_CERT_EXTRA_HOSTS": f"{LEADER_IP},{FOLLOWER_IP}"}  # fmt: skip
    async with gpu_cluster(control_plane, kube, namespace, replicas, fake_gpu_nodes,
                           cluster_objects, followers=1, env=env) as cluster:  # fmt: skip
        leader = cluster.leader
        [follower] = cluster.followers
        assert (leader.ip, follower.ip) == (LEADER_IP, FOLLOWER_IP)
        both = [leader.component, follower.component]
        await register_webhook(kube, namespace, cluster_objects, release=release,
                               host=follower.ip, port=port, components=both)  # fmt: skip
        for replica in (leader, follower):
            await wait_ready(replica, both)

        # The leader alive: the follower admits, the leader's kube-scheduler binds.
        # (Out of a pod the follower has no ServiceAccount token: the leader answers 401, and
        # this pod gets a random index too; so its warnings are not checked.)
        first, _ = await create_through_api(
            kube, namespace, tf_pod("before", namespace, cluster.pool)
        )
        check_mutated(first)
        [before] = await eventually(lambda: bound_pods(kube, namespace, ["before"]),
                                    what="the first pod bound by the leader", timeout=60,
                                    components=both)  # fmt: skip
        check_placed(before, cluster.gpus)

        # kill -9 of the leader: the follower still admits (its warnings are checked last, so
        # that the failover is checked too when they are wrong).
        assert await holder(kube, namespace) == leader.component.name
        leader.component.kill()
        names = [f"after-{i}" for i in range(3)]
        admitted: list[tuple[dict[str, Any], list[str]]] = []
        for name in names:
            pod, warnings = await create_through_api(
                kube, namespace, tf_pod(name, namespace, cluster.pool)
            )
            check_mutated(pod)
            admitted.append((pod, warnings))
        assert await holder(kube, namespace) == leader.component.name, (
            "the follower took the Lease before the pods were admitted: their admission did "
            "not happen while the leader was silent"
        )

        # The follower takes the Lease, starts its kube-scheduler and binds them.
        async def follower_leads() -> bool:
            return await holder(kube, namespace) == follower.component.name

        await eventually(follower_leads, what="the follower leading", timeout=TAKEOVER_S,
                         components=[follower.component])  # fmt: skip
        after = await eventually(lambda: bound_pods(kube, namespace, names),
                                 what="the pods admitted during the failover bound",
                                 timeout=180, components=[follower.component])  # fmt: skip
        for pod in after:
            check_placed(pod, cluster.gpus)
        pods = [before, *after]

        async def matches() -> bool:
            return await records_match(follower, namespace, pods)

        await eventually(matches, what="the new leader's /api/allocation equal to the pods",
                         components=[follower.component])  # fmt: skip

        # Each pod admitted while the leader was silent got a random index 1..128 and one
        # warning naming it (admission.md §2, §11, §13).
        problems = [p for pod, warnings in admitted for p in fallback_problems(pod, warnings)]
        assert not problems, "\n".join(problems)


def fallback_problems(pod: Mapping[str, Any], warnings: Sequence[str]) -> list[str]:
    """What is wrong with the random-index fallback of a pod admitted without a leader: one
    warning saying `random index <p>`, p the pod's index."""
    name, index = pod["metadata"]["name"], pod_index(pod)
    if not INDEX_MIN <= index <= INDEX_MAX:
        return [f"{name}: index {index} outside {INDEX_MIN}..{INDEX_MAX}"]
    named = [int(m.group(1)) for w in warnings for m in [RANDOM_INDEX.search(w)] if m]
    if named != [index]:
        return [f"{name} (index {index}): expected one warning naming 'random index {index}', "
                f"got {warnings}"]  # fmt: skip
    return []


async def test_progressive_migration_never_allocates_gpus_the_device_plugin_holds(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
) -> None:
    env = {"NVIDIA_OPERATOR_PROGRESSIVE_MIGRATION": "true"}
    async with gpu_cluster(control_plane, kube, namespace, replicas, fake_gpu_nodes,
                           cluster_objects, env=env) as cluster:  # fmt: skip
        leader = cluster.leader
        held, free = cluster.nodes
        # The node agent reports the GPUs of `held` as the device plugin's (stage 2 of the
        # migration): the allocator must see them so, Running and with full capacity.
        for gpu in cluster.gpus[held]:
            await kube.patch(GPU.Status, gpu, {"status": {"usedBy": DEVICE_PLUGIN}},
                             patch_type=PatchType.MERGE)  # fmt: skip

        async def seen_held() -> bool:
            code, text = await leader.get(f"/api/allocation?node={held}")
            assert code == 200, text
            gpus = json.loads(text)["gpus"]
            return sorted(g["name"] for g in gpus) == sorted(cluster.gpus[held]) and all(
                g["usedBy"] == DEVICE_PLUGIN and g["phase"] == "Running"
                and g["available"] == g["capacity"] for g in gpus)  # fmt: skip

        await eventually(seen_held, what=f"the allocator seeing {held}'s GPUs as {DEVICE_PLUGIN}",
                         components=[leader.component])  # fmt: skip

        # Four workers of 200 TFLOPs: one per GPU. Two fit on `free`, the other two would fit
        # only on the device plugin's GPUs.
        names = [f"w{i}" for i in range(4)]
        for i, name in enumerate(names):
            await kube.create(webhook_worker(name, namespace, cluster.pool, "200", "10Gi", i + 1))

        async def two_bound_two_warned() -> tuple[list[dict[str, Any]], list[str]] | None:
            pods = [await read(kube, POD, name, namespace) for name in names]
            bound = [p for p in pods if p is not None and p["spec"].get("nodeName")]
            waiting = [p["metadata"]["name"] for p in pods
                       if p is not None and not p["spec"].get("nodeName")]  # fmt: skip
            if len(bound) + len(waiting) != 4 or len(bound) < 2:
                return None
            for name in waiting:
                if not await gpu_warnings(control_plane, namespace, name):
                    return None
            return bound, waiting

        bound, waiting = await eventually(
            two_bound_two_warned, what="the workers bound or warned", timeout=120,
            components=[leader.component])  # fmt: skip
        on_held = [p["metadata"]["name"] for p in bound if p["spec"]["nodeName"] == held]
        assert not on_held, f"{on_held} bound to {held}, whose GPUs the device plugin holds"
        assert len(bound) == 2 and len(waiting) == 2, (bound, waiting)
        for pod in bound:
            check_placed(pod, {free: cluster.gpus[free]})
        taken = {g for r in await allocations(leader, namespace) for g in r["gpus"]}
        assert not taken & set(cluster.gpus[held]), f"allocations on {held}: {taken}"
        for name in waiting:
            [event, *_] = await gpu_warnings(control_plane, namespace, name)
            assert "1 PhaseFilter" in event["message"], event["message"]

        # Handed back to TensorFusion, the GPUs take the waiting workers.
        for gpu in cluster.gpus[held]:
            await kube.patch(GPU.Status, gpu, {"status": {"usedBy": "tensor-fusion"}},
                             patch_type=PatchType.MERGE)  # fmt: skip
        late = await eventually(lambda: bound_pods(kube, namespace, waiting),
                                what="the waiting workers bound once the GPUs are handed back",
                                timeout=90, components=[leader.component])  # fmt: skip
        for pod in late:
            check_placed(pod, {held: cluster.gpus[held]})
