"""lightkube resources of the twelve `tensor-fusion.ai/v1` kinds, from the model registry, and
the check that their CRDs are installed before a process starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import (
    GenericGlobalResource,
    GenericNamespacedResource,
    create_global_resource,
    create_namespaced_resource,
)
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.types import PatchType

from tensorfusion.domain.model import API_GROUP, KINDS, KindInfo

__all__ = [
    "RESOURCES",
    "CustomResource",
    "MissingCRDError",
    "merge_patch_status",
    "missing_crd_message",
    "missing_crds",
    "resource_of",
]

_VERSION: Final = "v1"
CustomResource = type[GenericNamespacedResource] | type[GenericGlobalResource]


def _resource(info: KindInfo) -> CustomResource:
    if info.namespaced:
        return create_namespaced_resource(API_GROUP, _VERSION, info.kind, info.plural)
    return create_global_resource(API_GROUP, _VERSION, info.kind, info.plural)


RESOURCES: Final[Mapping[str, CustomResource]] = {info.kind: _resource(info) for info in KINDS}
"""The lightkube resource of each kind, by kind."""


def resource_of(kind: str) -> CustomResource:
    """The lightkube resource of one of our kinds (KeyError names the kinds for a typo)."""
    try:
        return RESOURCES[kind]
    except KeyError:
        raise KeyError(
            f"{kind!r} is not a tensor-fusion.ai kind ({', '.join(RESOURCES)})"
        ) from None


async def merge_patch_status(
    client: AsyncClient, resource: CustomResource, name: str, body: Mapping[str, Any]
) -> None:
    """A JSON merge patch of the status of the cluster-scoped object `name`."""
    await client.patch(resource.Status, name, dict(body), patch_type=PatchType.MERGE)


class MissingCRDError(RuntimeError):
    """CRDs the process needs are not installed; the message names them and the fix."""


async def missing_crds(client: AsyncClient, kinds: tuple[str, ...] | None = None) -> list[str]:
    """Names of the CRDs (`<plural>.tensor-fusion.ai`) of `kinds` (default all) not installed."""
    wanted = [info for info in KINDS if kinds is None or info.kind in kinds]
    missing = []
    for info in wanted:
        try:
            await client.get(CustomResourceDefinition, info.crd_name)
        except ApiError as error:
            if error.status.code != 404:
                raise
            missing.append(info.crd_name)
    return missing


def missing_crd_message(missing: list[str]) -> str:
    """The start-up error for missing CRDs."""
    return (
        f"CRD{'s' if len(missing) > 1 else ''} not installed: {', '.join(missing)}; install "
        "them with `helm upgrade --install` of the tensor-fusion chart or "
        "`kubectl apply -f charts/tensor-fusion/crds/`"
    )
