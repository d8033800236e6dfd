"""Our custom resources for lightkube, and the CRD presence check."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import GenericGlobalResource, GenericNamespacedResource

from tensorfusion.adapters.kube.custom_resources import (
    RESOURCES,
    missing_crd_message,
    missing_crds,
    resource_of,
)


class FakeClient:
    """Answers `get` of a CRD with 404 for the names in `absent`."""

    def __init__(self, absent: set[str]) -> None:
        self.absent = absent

    async def get(self, resource: Any, name: str) -> object:
        if name in self.absent:
            response = httpx.Response(
                404, json={"kind": "Status", "code": 404, "message": "not found"},
                request=httpx.Request("GET", "http://x"),
            )  # fmt: skip
            raise ApiError(response=response)
        return object()


def test_every_kind_has_a_resource_of_the_right_scope() -> None:
    assert len(RESOURCES) == 12
    gpu, quota = resource_of("GPU"), resource_of("GPUResourceQuota")
    assert gpu._api_info.plural == "gpus" and issubclass(gpu, GenericGlobalResource)
    assert issubclass(quota, GenericNamespacedResource)
    with pytest.raises(KeyError, match=r"'Gpu' is not a tensor-fusion\.ai kind"):
        resource_of("Gpu")


async def test_missing_crds_are_named_with_the_fix() -> None:
    client = FakeClient({"gpus.tensor-fusion.ai"})
    missing = await missing_crds(client, ("GPU", "GPUPool"))  # type: ignore[arg-type]
    assert missing == ["gpus.tensor-fusion.ai"]
    assert await missing_crds(FakeClient(set())) == []  # type: ignore[arg-type]
    message = missing_crd_message(missing)
    assert message.startswith("CRD not installed: gpus.tensor-fusion.ai; install them with")
    assert "kubectl apply -f charts/tensor-fusion/crds/" in message
