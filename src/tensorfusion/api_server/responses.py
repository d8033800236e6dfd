"""JSON responses and the one error body of the HTTP API (scheduling.md §16):
`{"error": {"code": "<Reason>", "message": "..."}}`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from tensorfusion.runtime import web

__all__ = ["ApiError", "error_response", "json_response"]

JSON = "application/json"


def _default(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def json_response(
    body: Mapping[str, Any], status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """`body` as JSON (orjson; nested mappings other than dict are accepted)."""
    data = orjson.dumps(body if isinstance(body, dict) else dict(body), default=_default)
    return web.Response(body=data, status=status, content_type=JSON, headers=headers)


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    """The API's error body."""
    return json_response({"error": {"code": code, "message": message}}, status, headers)


class ApiError(Exception):
    """Raised by a handler; the error middleware answers with the error body."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})

    def response(self) -> web.Response:
        """The error body of this error."""
        return error_response(self.status, self.code, self.message, self.headers)
