"""The body of `POST /api/simulate-schedule`: one Pod as JSON or YAML (scheduling.md §16.1).

The body is read under `domain.bounded_documents` limits (1 MiB, nesting depth, expanded nodes)
and the Pod's annotations under Kubernetes' 256 KiB: a body over a limit is 400 `InvalidBody`
naming it. `parse_pod` is CPU work: the handler runs it off the event loop (`offload.py`).
"""

from __future__ import annotations

from typing import Any, Final

from tensorfusion.api_server.responses import ApiError
from tensorfusion.domain.bounded_documents import (
    DocumentError,
    DocumentLimitError,
    DocumentLimits,
    annotations_size_problem,
    load_json_document,
    load_yaml_document,
)
from tensorfusion.domain.scheduling.native.pod_shape import pod_shape_problem
from tensorfusion.runtime import web

__all__ = ["MAX_POD_BODY", "POD_BODY_LIMITS", "parse_pod", "read_pod_body"]

MAX_POD_BODY: Final = 1024 * 1024
"""Bytes: a larger body is `InvalidBody` (kept at 1 MiB, below an object's 1.5 MiB)."""
POD_BODY_LIMITS: Final = DocumentLimits(max_bytes=MAX_POD_BODY)
"""Size, nesting depth and expanded nodes of one pod body."""

_JSON_TYPES = frozenset({"application/json"})
_YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})


def _invalid(message: str) -> ApiError:
    return ApiError(400, "InvalidBody", message)


def _not_yaml(exc: DocumentError) -> ApiError:
    if isinstance(exc, DocumentLimitError):
        return _invalid(f"body: {exc}")
    return _invalid(f"body is neither valid JSON nor valid YAML: {exc}")


def _load(data: bytes, content_type: str) -> Any:
    kind = content_type.lower()
    if kind in _JSON_TYPES or kind.endswith("+json"):
        try:
            return load_json_document(data, POD_BODY_LIMITS)
        except DocumentError as exc:
            raise _invalid(f"body ({content_type}): {exc}") from None
    if kind not in _YAML_TYPES:
        try:
            return load_json_document(data, POD_BODY_LIMITS)
        except DocumentLimitError as exc:
            raise _invalid(f"body: {exc}") from None
        except DocumentError:
            pass  # not JSON: YAML then
    try:
        return load_yaml_document(data, POD_BODY_LIMITS)
    except DocumentError as exc:
        raise _not_yaml(exc) from None


def parse_pod(data: bytes, content_type: str) -> dict[str, Any]:
    """The pod manifest in `data`: JSON or YAML by content type, else JSON then YAML;
    ApiError `InvalidBody` for anything that is not one Pod the scheduler can read."""
    if not data.strip():
        raise _invalid("empty body: send one Pod manifest as JSON or YAML")
    manifest = _load(data, content_type)
    if not isinstance(manifest, dict):
        raise _invalid(f"expected one Pod manifest (a mapping), got {type(manifest).__name__}")
    problem = pod_shape_problem(manifest) or annotations_size_problem(manifest)
    if problem is not None:
        raise _invalid(f"pod: {problem}")
    return manifest


async def read_pod_body(request: web.Request, limit: int = MAX_POD_BODY) -> bytes:
    """The request body, at most `limit` bytes (`InvalidBody` beyond)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise _invalid(f"body is larger than {limit} bytes (the limit of one Pod manifest)")
        chunks.append(chunk)
    return b"".join(chunks)
