"""The API calls the reconcilers and the node agent make, on objects as plain JSON dicts, by
kind name.

`ObjectClient` is what they are given; `LightkubeObjects` is the implementation over a
lightkube `AsyncClient` (our twelve kinds through `custom_resources.resource_of`, plus `Node`
and `Pod`), and the unit tests give an in-memory fake. Every API error becomes `KubeError` with
its HTTP code, so callers test `code == 409` (conflict, or already exists) and `404`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Final, Protocol

import httpx
import orjson
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import DaemonSet, ReplicaSet, StatefulSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Node, Pod

from tensorfusion.adapters.kube.client import FIELD_MANAGER, KEPT_ALIVE_CONNECTIONS, raw_http
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


_CORE: dict[str, Any] = {
    "Node": Node, "Pod": Pod,
    # Owners whose enabled-replicas counter the pod controller lowers.
    "ReplicaSet": ReplicaSet, "StatefulSet": StatefulSet, "DaemonSet": DaemonSet, "Job": Job,
}  # fmt: skip


def _resource(kind: str) -> Any:
    return _CORE.get(kind) or resource_of(kind)


def _error(error: ApiError) -> KubeError:
    status = error.status
    return KubeError(int(status.code or 0), str(status.message or ""), str(status.reason or ""))


def _object_path(kind: str, name: str, namespace: str, subresource: str = "") -> str:
    """The API path of one object (and subresource) of a kind."""
    info = _resource(kind)._api_info
    group, version = info.resource.group, info.resource.version
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    path = f"{base}{scope}/{info.plural}/{name}"
    return f"{path}/{subresource}" if subresource else path


def _json(content: bytes) -> dict[str, Any]:
    try:
        decoded = orjson.loads(content)
    except orjson.JSONDecodeError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def _as_dict(obj: Any) -> dict[str, Any]:
    result: dict[str, Any] = obj.to_dict()
    return result


MAX_CALLS_IN_FLIGHT: Final = KEPT_ALIVE_CONNECTIONS - 4
"""Within the client's kept-alive connections, with room for its other callers (the Lease, the
Event recorder, informer lists)."""


class LightkubeObjects:
    """`ObjectClient` over a lightkube `AsyncClient`, at most `max_in_flight` calls at once (the
    others wait their turn)."""

    def __init__(self, client: AsyncClient, max_in_flight: int = MAX_CALLS_IN_FLIGHT) -> None:
        self._client = client
        self._in_flight = asyncio.Semaphore(max_in_flight)

    async def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        try:
            async with self._in_flight:
                found = await self._client.get(_resource(kind), name, namespace=namespace or None)
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise _error(error) from None
        return _as_dict(found)

    async def create(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        resource = _resource(kind)
        try:
            async with self._in_flight:
                created = await self._client.create(resource.from_dict(dict(body)))
        except ApiError as error:
            raise _error(error) from None
        return _as_dict(created)

    async def replace(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        resource = _resource(kind)
        try:
            async with self._in_flight:
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
        # Plain HTTP with orjson: status write-back patches thousands of objects after a
        # leader change, and lightkube would build a model of each answer to turn it back
        # into a dict.
        path = _object_path(kind, name, namespace, "status" if status else "")
        try:
            async with self._in_flight:
                response = await raw_http(self._client).patch(
                    path, params={"fieldManager": FIELD_MANAGER},
                    content=orjson.dumps(dict(body)),
                    headers={"Content-Type": "application/merge-patch+json"},
                )  # fmt: skip
        except httpx.HTTPError as error:
            raise KubeError(0, f"PATCH {path}: {error}") from None
        answer = _json(response.content)
        if response.status_code >= 300:
            raise KubeError(response.status_code, str(answer.get("message") or response.text),
                            str(answer.get("reason") or ""))  # fmt: skip
        return answer

    async def delete(self, kind: str, name: str, namespace: str = "") -> bool:
        try:
            async with self._in_flight:
                await self._client.delete(_resource(kind), name, namespace=namespace or None)
        except ApiError as error:
            if error.status.code == 404:
                return False
            raise _error(error) from None
        return True
