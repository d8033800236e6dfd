"""`tensor-fusion uninstall` strips our finalizer from every pod, and only ours."""

from __future__ import annotations

import pytest
from lightkube import AsyncClient
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from tensorfusion.app.uninstall import remove_finalizers
from tensorfusion.domain.annotations import KEYS

pytestmark = pytest.mark.cluster


async def test_every_pod_loses_our_finalizer_and_keeps_the_others(
    kube: AsyncClient, namespace: str
) -> None:
    for name, finalizers in (
        ("ours", [KEYS.finalizer, "example.com/keep"]),
        ("mine-only", [KEYS.finalizer]),
        ("other", ["example.com/keep"]),
    ):
        await kube.create(Pod(
            metadata=ObjectMeta(name=name, namespace=namespace, finalizers=finalizers),
            spec=PodSpec(containers=[Container(name="c", image="x")]),
        ))  # fmt: skip
    report = await remove_finalizers(kube)
    assert sorted(report.cleared) == [f"{namespace}/mine-only", f"{namespace}/ours"]
    assert report.failed == {}
    left = {
        pod.metadata.name: pod.metadata.finalizers
        async for pod in kube.list(Pod, namespace=namespace)
        if pod.metadata is not None
    }
    assert left == {"ours": ["example.com/keep"], "mine-only": None,
                          "other": ["example.com/keep"]}  # fmt: skip
    assert (await remove_finalizers(kube)).cleared == []
    for name in ("ours", "other"):
        await kube.patch(Pod, name, {"metadata": {"finalizers": None}}, namespace=namespace)
