"""The API calls the reconcilers make, on objects as plain JSON dicts, by kind name.

`ObjectClient` is what a reconciler is given; `LightkubeObjects` is the implementation over a
lightkube `AsyncClient` (our twelve kinds through `custom_resources.resource_of`, plus `Node`
and `Pod`), and the unit tests give an in-memory fake. Every API error becomes `KubeError` with
its HTTP code, so callers test `code == 409` (conflict, or already exists) and `404`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from tensorfusion.adapters.kube.custom_resources import resource_of

__all__ = ["KubeError", "LightkubeObjects", "ObjectClient"]


class KubeError(Exception):
    """An API call answered with an error status."""

    def __init__(self, code: int, message: str, reason: str = "") -> None:
        super().__init__(f"{code} {reason}: {message}" if reason else f"{code}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


class ObjectClient(Protocol):
    """Get, create, replace, merge-patch and delete objects given as JSON dicts."""

    async def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        ...

    async def create(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create the object (409 when it exists)."""
        ...

    async def replace(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Update the whole object; its `metadata.resourceVersion` is a precondition (409)."""
        ...

    async def patch(
        self,
        kind: str,
        name: str,
        body: Mapping[str, Any],
        *,
        namespace: str = "",
        status: bool = False,
    ) -> dict[str, Any]:
        """JSON merge patch of the object, or of its status subresource (`status`); a
        `metadata.resourceVersion` in the body is a precondition (409)."""
        ...

    async def delete(self, kind: str, name: str, namespace: str = "") -> bool:
        """Delete the object; False when it did not exist."""
        ...


_CORE: dict[str, Any] = {"Node": Node, "Pod": Pod}


def _resource(kind: str) -> Any:
    return _CORE.get(kind) or resource_of(kind)


def _error(error: ApiError) -> KubeError:
    status = error.status
    return KubeError(int(status.code or 0), str(status.message or ""), str(status.reason or ""))


def _as_dict(obj: Any) -> dict[str, Any]:
    result: dict[str, Any] = obj.to_dict()
    return result


class LightkubeObjects:
    """`ObjectClient` over a lightkube `AsyncClient`."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        try:
            found = await self._client.get(_resource(kind), name, namespace=namespace or None)
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise _error(error) from None
        return _as_dict(found)

    async def create(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        resource = _resource(kind)
        try:
            created = await self._client.create(resource.from_dict(dict(body)))
        except ApiError as error:
            raise _error(error) from None
        return _as_dict(created)

    async def replace(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        resource = _resource(kind)
        try:
            replaced = await self._client.replace(resource.from_dict(dict(body)))
        except ApiError as error:
            raise _error(error) from None
        return _as_dict(replaced)

    async def patch(
        self,
        kind: str,
        name: str,
        body: Mapping[str, Any],
        *,
        namespace: str = "",
        status: bool = False,
    ) -> dict[str, Any]:
        resource = _resource(kind)
        target = resource.Status if status else resource
        try:
            patched = await self._client.patch(
                target, name, dict(body), namespace=namespace or None, patch_type=PatchType.MERGE
            )
        except ApiError as error:
            raise _error(error) from None
        return _as_dict(patched)

    async def delete(self, kind: str, name: str, namespace: str = "") -> bool:
        try:
            await self._client.delete(_resource(kind), name, namespace=namespace or None)
        except ApiError as error:
            if error.status.code == 404:
                return False
            raise _error(error) from None
        return True
