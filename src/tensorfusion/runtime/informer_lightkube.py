"""The informer's source over lightkube's ``AsyncClient``: core kinds and our CRDs alike.

Lists page by page (``page_size``) and watches with ``timeoutSeconds`` (``watch_timeout``), so
the server ends each watch after that long; lightkube then resumes it from the last
resourceVersion it saw, on its own. An ERROR event or HTTP answer with code 410 becomes
:class:`~.informer_source.ResourceExpiredError`; other errors propagate.

Bookmarks: lightkube 0.22's ``watch`` has no ``allowWatchBookmarks`` parameter, so none are
asked for; a BOOKMARK the server sends anyway only moves the resourceVersion on. Without them a
watch resumed after a quiet period may get 410 and the informer lists again: it costs a list,
never correctness.

Objects become plain dicts with ``to_dict()``. With the client's default ``lazy=True`` that is
the JSON as received, nested fields unparsed (only a top-level field that lightkube's model
lacks is dropped); a ``lazy=False`` client would drop unknown fields at every depth.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any, Final

import httpx
from lightkube import ALL_NS, ApiError, AsyncClient, NotReadyError
from lightkube.core import resource as lightkube_resource
from lightkube.core.client import FieldSelector, FieldValue, LabelSelector, LabelValue
from lightkube.core.generic_client import ListAsyncIterable
from lightkube.operators import not_equal
from lightkube.resources.core_v1 import Namespace, Node, Pod

from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.runtime.informer_source import (
    ApiAnswerError,
    Listing,
    ResourceExpiredError,
    WatchEvent,
    WatchType,
)

__all__ = ["LightkubeSource", "ResourceType", "not_equal", "resource_named"]

ResourceType = type[lightkube_resource.NamespacedResource] | type[lightkube_resource.GlobalResource]
_CORE_KINDS: Final[Mapping[str, ResourceType]] = {"Namespace": Namespace, "Node": Node, "Pod": Pod}


def resource_named(kind: str) -> ResourceType:
    """The resource of a core kind the informers watch (Namespace, Node, Pod) or of one of our
    `tensor-fusion.ai` kinds (KeyError names them for a typo)."""
    return _CORE_KINDS.get(kind) or resource_of(kind)


_GONE = 410


class LightkubeSource:
    """Lists and watches ``resource`` through ``client`` (an ``ObjectSource``).

    ``namespace`` None means every namespace (for a namespaced resource); ``labels`` and
    ``fields`` are lightkube selectors, applied by the server to the list and the watch alike.
    """

    def __init__(
        self,
        client: AsyncClient,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        labels: Mapping[str, LabelValue] | None = None,
        fields: Mapping[str, FieldValue] | None = None,
        page_size: int | None = 500,
        watch_timeout: int = 300,
    ) -> None:
        namespaced = issubclass(resource, lightkube_resource.NamespacedResource)
        kind = lightkube_resource.api_info(resource).resource.kind
        if not namespaced and namespace is not None:
            raise ValueError(f"{kind} is cluster-scoped: namespace must be None, got {namespace!r}")
        if (
            namespaced
            and namespace is None
            and not issubclass(resource, lightkube_resource.NamespacedResourceG)
        ):
            raise ValueError(f"{kind} cannot be listed across namespaces: give a namespace")
        if watch_timeout < 1:
            raise ValueError(f"watch_timeout must be >= 1 s, got {watch_timeout}")
        self._client = client
        self._resource = resource
        self._namespace = namespace
        self._labels: LabelSelector | None = dict(labels) if labels else None
        self._fields: FieldSelector | None = dict(fields) if fields else None
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._description = _describe(kind, namespaced, namespace, self._labels, self._fields)

    @property
    def description(self) -> str:
        return self._description

    async def list(self) -> Listing:
        resource = self._resource
        listing: ListAsyncIterable[Any]
        if issubclass(resource, lightkube_resource.NamespacedResource):
            listing = self._client.list(
                resource,
                namespace=self._namespace if self._namespace is not None else ALL_NS,
                chunk_size=self._page_size,
                labels=self._labels,
                fields=self._fields,
            )
        else:
            listing = self._client.list(
                resource, chunk_size=self._page_size, labels=self._labels, fields=self._fields
            )
        try:
            objects = [_to_dict(obj) async for obj in listing]
        except httpx.HTTPStatusError as error:
            raise _answer(f"list of {self._description}", error) from error
        try:
            version = listing.resourceVersion
        except NotReadyError as error:
            raise RuntimeError(f"list of {self._description} had no resourceVersion") from error
        return Listing(objects, version)

    async def watch(self, resource_version: str) -> AsyncIterator[WatchEvent]:
        resource = self._resource
        stream: AsyncIterable[tuple[str, object]]
        if issubclass(resource, lightkube_resource.NamespacedResource):
            stream = self._client.watch(
                resource,
                namespace=self._namespace if self._namespace is not None else ALL_NS,
                labels=self._labels,
                fields=self._fields,
                server_timeout=self._watch_timeout,
                resource_version=resource_version,
            )
        else:
            stream = self._client.watch(
                resource,
                labels=self._labels,
                fields=self._fields,
                server_timeout=self._watch_timeout,
                resource_version=resource_version,
            )
        try:
            async for event_type, obj in stream:
                yield WatchEvent(WatchType(event_type), _to_dict(obj))
        except httpx.HTTPStatusError as error:
            if _status_code(error) == _GONE:
                raise ResourceExpiredError(
                    f"watch of {self._description} from resourceVersion {resource_version}: {error}"
                ) from error
            raise _answer(f"watch of {self._description}", error) from error


def _answer(what: str, error: httpx.HTTPStatusError) -> ApiAnswerError:
    code = _status_code(error)
    message = error.status.message if isinstance(error, ApiError) else str(error)
    return ApiAnswerError(code, f"{what}: the API server answered {code}: {message}")


def _status_code(error: httpx.HTTPStatusError) -> int | None:
    if isinstance(error, ApiError):
        return error.status.code
    return error.response.status_code


def _to_dict(obj: object) -> dict[str, Any]:
    to_dict = getattr(obj, "to_dict", None)
    data = to_dict() if callable(to_dict) else None
    if not isinstance(data, dict):
        raise TypeError(f"lightkube returned {type(obj).__name__}, not a resource object")
    return data


def _describe(
    kind: str,
    namespaced: bool,
    namespace: str | None,
    labels: LabelSelector | None,
    fields: FieldSelector | None,
) -> str:
    if not namespaced:
        where = ""
    elif namespace is None:
        where = " in all namespaces"
    else:
        where = f" in namespace {namespace}"
    selectors = "".join(
        f" {title} {','.join(f'{key}={value}' for key, value in selector.items())}"
        for title, selector in (("labels", labels), ("fields", fields))
        if selector
    )
    return f"{kind}{where}{selectors}"
