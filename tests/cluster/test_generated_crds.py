"""The generated CRDs of the chart are accepted and served by a real kube-apiserver."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

from tensorfusion.domain.model import KINDS

from .controlplane import ControlPlane, eventually

pytestmark = pytest.mark.cluster

CRDS = Path(__file__).resolve().parents[2] / "charts" / "tensor-fusion" / "crds"
GROUP = "tensor-fusion.ai"


async def test_every_generated_crd_is_established_and_defaults_apply(
    kube: AsyncClient, namespace: str, control_plane: ControlPlane
) -> None:
    files = sorted(CRDS.glob("*.yaml"))
    assert len(files) == len(KINDS) == 12
    for path in files:
        await control_plane.kubectl("apply", "--server-side", "-f", str(path))
    names = [f"{info.plural}.{GROUP}" for info in KINDS]

    async def all_established() -> bool:
        for name in names:
            crd = await kube.get(CustomResourceDefinition, name)
            conditions = (crd.status.conditions if crd.status else None) or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
            if any(c.type == "NonStructuralSchema" and c.status == "True" for c in conditions):
                raise AssertionError(f"{name}: schema is not structural")
        return True

    await eventually(all_established, what="the 12 tensor-fusion.ai CRDs to be Established")

    pool_kind = create_global_resource(GROUP, "v1", "GPUPool", "gpupools")
    pool_name = f"{namespace}-pool"
    await kube.create(
        pool_kind(
            metadata=ObjectMeta(name=pool_name),
            spec={"capacityConfig": {"oversubscription": {}}, "nodeManagerConfig": {}},
        )
    )
    try:
        stored = await kube.get(pool_kind, pool_name)
        over = stored["spec"]["capacityConfig"]["oversubscription"]
        assert over == {
            "tflopsOversellRatio": 500,
            "vramExpandToHostMem": 50,
            "vramExpandToHostDisk": 70,
        }
        with pytest.raises(ApiError) as rejected:
            await kube.create(
                pool_kind(
                    metadata=ObjectMeta(name=f"{pool_name}-bad"),
                    spec={"capacityConfig": {"oversubscription": {"tflopsOversellRatio": 50}}},
                )
            )
        assert rejected.value.status.code == 422
        assert "tflopsOversellRatio" in (rejected.value.status.message or "")
        listed = json.loads(await control_plane.kubectl("get", "gpupools", "-o", "json"))
        assert pool_name in [item["metadata"]["name"] for item in listed["items"]]
        table = await control_plane.kubectl("get", "gpupool", pool_name)
        header = table.splitlines()[0].split()
        assert header[:2] == ["NAME", "PHASE"], table
        assert "AGE" in header, table
    finally:
        await kube.delete(pool_kind, pool_name)

    quota_kind = create_namespaced_resource(GROUP, "v1", "GPUResourceQuota", "gpuresourcequotas")
    await kube.create(
        quota_kind(
            metadata=ObjectMeta(name="q", namespace=namespace),
            spec={"total": {"requests": {"tflops": "2000", "vram": "400Gi"}}},
        )
    )
    quota = await kube.get(quota_kind, "q", namespace=namespace)
    assert quota["spec"]["total"]["requests"] == {"tflops": "2000", "vram": "400Gi"}
