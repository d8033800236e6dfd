"""The informer against a real kube-apiserver: cache and events follow the cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.generic_resource import create_global_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap
from lightkube.types import PatchType

from tensorfusion.runtime.informer import Informer, InformerEvent
from tensorfusion.runtime.informer_lightkube import LightkubeSource
from tensorfusion.runtime.supervision import Supervisor

from .controlplane import ControlPlane, eventually

pytestmark = pytest.mark.cluster

CRDS = Path(__file__).resolve().parents[2] / "charts" / "tensor-fusion" / "crds"


class Recorder:
    """Keeps the events of the objects a test made (other objects in the namespace are ignored)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.events: list[InformerEvent] = []

    def __call__(self, event: InformerEvent) -> None:
        if event.key.name in self.names:
            self.events.append(event)

    def summary(self) -> list[tuple[str, str]]:
        return [(event.kind.value, event.key.name) for event in self.events]

    def follows(
        self, expected: list[tuple[str, str]]
    ) -> Callable[[], Awaitable[list[tuple[str, str]] | None]]:
        async def check() -> list[tuple[str, str]] | None:
            return expected if self.summary() == expected else None

        return check


@asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[None]:
    """The informer runs under a supervisor, as in the controller, until the block ends."""
    async with Supervisor() as supervisor:
        supervisor.start(f"informer {informer.name}", informer.run)

        async def synced() -> bool:
            return informer.has_synced

        await eventually(synced, what=f"informer {informer.name} synced")
        yield


def configmap(name: str, namespace: str, labels: dict[str, str], **data: str) -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace=namespace, labels=labels), data=data)


async def test_configmap_changes_reach_the_cache_and_the_handlers_in_order(
    kube: AsyncClient, namespace: str
) -> None:
    await kube.create(configmap("before", namespace, {}, v="1"))
    informer = Informer(LightkubeSource(kube, ConfigMap, namespace=namespace))
    recorder = Recorder({"before", "created"})
    informer.add_handler(recorder)
    async with running(informer):
        assert recorder.summary() == [("ADDED", "before")]
        cached = informer.get("before", namespace)
        assert cached is not None
        assert cached["data"] == {"v": "1"}
        assert cached["kind"] == "ConfigMap"

        await kube.create(configmap("created", namespace, {}, v="new"))
        await kube.patch(
            ConfigMap,
            "before",
            {"data": {"v": "2"}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
        await kube.delete(ConfigMap, "created", namespace=namespace)
        expected = [
            ("ADDED", "before"),
            ("ADDED", "created"),
            ("MODIFIED", "before"),
            ("DELETED", "created"),
        ]
        await eventually(recorder.follows(expected), what="the four events in order")
        modified = recorder.events[2]
        assert modified.old is not None
        assert modified.old["data"] == {"v": "1"}
        assert modified.obj["data"] == {"v": "2"}
        assert recorder.events[3].obj["data"] == {"v": "new"}
        assert informer.get("created", namespace) is None
        now = informer.get("before", namespace)
        assert now is not None
        assert now["data"] == {"v": "2"}
        names = {cached["metadata"]["name"] for cached in informer.list(namespace)}
        assert "before" in names
        assert "created" not in names
        assert informer.stats.errors == 0


async def test_a_label_selector_keeps_objects_in_and_out_as_their_labels_change(
    kube: AsyncClient, namespace: str
) -> None:
    selected = {"tier": "gpu"}
    await kube.create(configmap("in-first", namespace, selected))
    await kube.create(configmap("out-first", namespace, {"tier": "cpu"}))
    informer = Informer(LightkubeSource(kube, ConfigMap, namespace=namespace, labels=selected))
    recorder = Recorder({"in-first", "out-first"})
    informer.add_handler(recorder)
    async with running(informer):
        assert [key.name for key in list(informer.keys())] == ["in-first"]
        relabel = {"metadata": {"labels": {"tier": "cpu"}}}
        await kube.patch(
            ConfigMap, "in-first", relabel, namespace=namespace, patch_type=PatchType.MERGE
        )
        await kube.patch(
            ConfigMap,
            "out-first",
            {"metadata": {"labels": selected}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
        expected = [("ADDED", "in-first"), ("DELETED", "in-first"), ("ADDED", "out-first")]
        await eventually(recorder.follows(expected), what="objects moving across the selector")
        assert [key.name for key in list(informer.keys())] == ["out-first"]


class CountingTransport(httpx.AsyncBaseTransport):
    """Passes requests on and remembers the watch requests (lightkube deep-copies its transport:
    this one is shared, not copied)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.watches: list[httpx.URL] = []

    def __deepcopy__(self, memo: dict[int, object]) -> CountingTransport:
        return self

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.params.get("watch") == "true":
            self.watches.append(request.url)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_the_watch_goes_on_after_the_server_closes_it(
    control_plane: ControlPlane, namespace: str
) -> None:
    transport = CountingTransport(httpx.AsyncHTTPTransport(verify=control_plane.admin_context()))
    kube = AsyncClient(KubeConfig.from_file(control_plane.kubeconfig), transport=transport)
    try:
        source = LightkubeSource(kube, ConfigMap, namespace=namespace, watch_timeout=1)
        informer = Informer(source)
        recorder = Recorder({"early", "late"})
        informer.add_handler(recorder)
        async with running(informer):
            await kube.create(configmap("early", namespace, {}))
            await eventually(recorder.follows([("ADDED", "early")]), what="early added")

            async def closed_twice() -> bool:
                return len(transport.watches) >= 3

            await eventually(closed_twice, what="the server closed the watch twice (timeout 1 s)")
            await kube.create(configmap("late", namespace, {}))
            await kube.delete(ConfigMap, "early", namespace=namespace)
            expected = [("ADDED", "early"), ("ADDED", "late"), ("DELETED", "early")]
            await eventually(recorder.follows(expected), what="events after the restarts")
            cached = [key.name for key in list(informer.keys()) if key.name in recorder.names]
            assert cached == ["late"]
        assert all(url.params.get("resourceVersion") for url in transport.watches)
        assert all(url.params.get("timeoutSeconds") == "1" for url in transport.watches)
        assert informer.stats.watches == 1 + informer.stats.expired + informer.stats.errors
    finally:
        await kube.close()


async def test_a_cluster_scoped_custom_resource_is_cached_by_name(
    kube: AsyncClient, namespace: str, control_plane: ControlPlane
) -> None:
    await control_plane.kubectl(
        "apply", "--server-side", "-f", str(CRDS / "tensor-fusion.ai_gpus.yaml")
    )

    async def established() -> bool:
        crd = await kube.get(CustomResourceDefinition, "gpus.tensor-fusion.ai")
        conditions = (crd.status.conditions if crd.status else None) or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    await eventually(established, what="the GPU CRD to be Established")
    gpu_kind = create_global_resource("tensor-fusion.ai", "v1", "GPU", "gpus")
    labels = {"informer-test": namespace}  # unique to this test: GPUs are cluster-scoped
    name = f"{namespace}-gpu"
    informer = Informer(LightkubeSource(kube, gpu_kind, labels=labels))
    recorder = Recorder({name})
    informer.add_handler(recorder)
    try:
        async with running(informer):
            assert len(informer) == 0
            await kube.create(gpu_kind(metadata=ObjectMeta(name=name, labels=labels)))
            await kube.patch(
                gpu_kind,
                name,
                {"metadata": {"annotations": {"note": "seen"}}},
                patch_type=PatchType.MERGE,
            )
            expected = [("ADDED", name), ("MODIFIED", name)]
            await eventually(recorder.follows(expected), what="the GPU added and modified")
            cached = informer.get(name)
            assert cached is not None
            assert cached["metadata"]["annotations"] == {"note": "seen"}
            assert cached["apiVersion"] == "tensor-fusion.ai/v1"
            assert informer.get(name, namespace) is None
            await kube.delete(gpu_kind, name)
            expected.append(("DELETED", name))
            await eventually(recorder.follows(expected), what="the GPU deleted")
            assert len(informer) == 0
    finally:
        if informer.get(name) is not None:
            await kube.delete(gpu_kind, name)
