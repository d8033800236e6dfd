"""The pod calls of the extender's `bind`: read a pod, JSON-patch it, post its Binding (with
the annotations the API server copies onto the pod).

`LightkubePodBinding` implements them over a lightkube `AsyncClient`; every API error becomes
`PodCallError` with its HTTP code (404: the pod is gone; 409: the pod is already bound). The two
writes take `timeout_s`, the seconds the leadership fence has left: each phase of the request is
bounded by the smaller of it and the client's own timeout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import orjson
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from tensorfusion.adapters.kube.client import raw_http

__all__ = ["LightkubePodBinding", "PodCallError", "capped_timeout"]


class PodCallError(Exception):
    """A pod call answered with an error status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _error(error: ApiError) -> PodCallError:
    return PodCallError(int(error.status.code or 0), str(error.status.message or error))


class LightkubePodBinding:
    """Pod reads, JSON patches and Bindings over lightkube."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as a JSON dict, None when it does not exist."""
        try:
            pod = await self._client.get(Pod, name, namespace=namespace)
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise _error(error) from None
        found: dict[str, Any] = pod.to_dict()  # type: ignore[no-untyped-call]
        return found

    async def patch_pod(
        self,
        namespace: str,
        name: str,
        operations: Sequence[Mapping[str, Any]],
        *,
        timeout_s: float | None = None,
    ) -> None:
        """Apply a JSON patch (RFC 6902) to the pod (the answer is not read back)."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        await self._send(
            "PATCH", path, [dict(op) for op in operations], timeout_s,
            {"Content-Type": "application/json-patch+json"},
        )  # fmt: skip

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        *,
        annotations: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """POST the pod's Binding to `node` (the pod's UID is a precondition); the API server
        sets `annotations` on the pod in the same write."""
        # The answer is a Status, which lightkube would read as a Binding and fail on.
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            metadata["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1", "kind": "Binding", "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }  # fmt: skip
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/binding"
        await self._send("POST", path, body, timeout_s)

    async def _send(
        self,
        method: str,
        path: str,
        body: Any,
        timeout_s: float | None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """One call whose answer only matters by its status (the pod calls of `bind`: a patched
        Pod is not read back, and a Binding is answered by a Status)."""
        http = raw_http(self._client)
        try:
            response = await http.request(
                method, path, content=orjson.dumps(body),
                headers={"Content-Type": "application/json", **(headers or {})},
                timeout=capped_timeout(http.timeout, timeout_s),
            )  # fmt: skip
        except httpx.HTTPError as error:
            raise PodCallError(0, f"{method} {path}: {error}") from None
        if response.status_code >= 300:
            try:
                message = str(response.json().get("message") or response.text)
            except ValueError:
                message = response.text
            raise PodCallError(response.status_code, message)


def capped_timeout(timeout: httpx.Timeout, seconds: float | None) -> httpx.Timeout:
    """`timeout` with each phase at most `seconds` (None or inf: unchanged)."""
    if seconds is None or not math.isfinite(seconds):
        return timeout

    def cap(phase: float | None) -> float:
        return seconds if phase is None else min(phase, seconds)

    return httpx.Timeout(
        connect=cap(timeout.connect),
        read=cap(timeout.read),
        write=cap(timeout.write),
        pool=cap(timeout.pool),
    )
