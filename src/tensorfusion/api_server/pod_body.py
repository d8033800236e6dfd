"""The body of `POST /api/simulate-schedule`: one Pod as JSON or YAML (scheduling.md §16.1)."""

from __future__ import annotations

from typing import Any

import orjson
import yaml
from aiohttp import web

from tensorfusion.api_server.responses import ApiError
from tensorfusion.domain.scheduling.native.pod_shape import pod_shape_problem

__all__ = ["MAX_POD_BODY", "parse_pod", "read_pod_body"]

MAX_POD_BODY = 1024 * 1024
"""Bytes: a larger body is `InvalidBody`."""

_JSON_TYPES = frozenset({"application/json"})
_YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})


def _invalid(message: str) -> ApiError:
    return ApiError(400, "InvalidBody", message)


def _from_json(data: bytes) -> Any:
    return orjson.loads(data)


def _from_yaml(data: bytes) -> Any:
    return yaml.safe_load(data.decode("utf-8"))


def parse_pod(data: bytes, content_type: str) -> dict[str, Any]:
    """The pod manifest in `data`: JSON or YAML by content type, else JSON then YAML;
    ApiError `InvalidBody` for anything that is not one Pod the scheduler can read."""
    if not data.strip():
        raise _invalid("empty body: send one Pod manifest as JSON or YAML")
    kind = content_type.lower()
    is_json = kind in _JSON_TYPES or kind.endswith("+json")
    try:
        if is_json:
            manifest = _from_json(data)
        elif kind in _YAML_TYPES:
            manifest = _from_yaml(data)
        else:
            try:
                manifest = _from_json(data)
            except orjson.JSONDecodeError:
                manifest = _from_yaml(data)
    except orjson.JSONDecodeError as exc:
        raise _invalid(f"body is not valid JSON ({content_type}): {exc}") from None
    except UnicodeDecodeError:
        raise _invalid("body is not UTF-8 text") from None
    except yaml.YAMLError as exc:
        raise _invalid(f"body is neither valid JSON nor valid YAML: {exc}") from None
    if not isinstance(manifest, dict):
        raise _invalid(f"expected one Pod manifest (a mapping), got {type(manifest).__name__}")
    problem = pod_shape_problem(manifest)
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
            raise _invalid(f"body is larger than {limit} bytes (one Pod manifest fits in 1 MiB)")
        chunks.append(chunk)
    return b"".join(chunks)
