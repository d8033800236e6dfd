"""The peer port's gate: every request is authenticated and authorized before anything runs.

Authentication: the bearer token, by TokenReview (401 without a valid one). Authorization: a
SubjectAccessReview of the path under `PEER_AUTHORIZATION_PREFIX` as a non-resource URL, with
the HTTP method as the verb (`get`, `post`), so the chart's ClusterRoles say who may call what
(`nonResourceURLs`: the controller `/tensor-fusion-peer/api/*` and
`/tensor-fusion-peer/v1/influxdb/*`, the node agents `/tensor-fusion-peer/v1/influxdb/*` for
`post`); 403 otherwise. The prefix keeps the paths apart from the API server's own: the
built-in `system:discovery` role lets every authenticated user `get` `/api/*`.

A request forwarded by a follower (`X-Tensor-Fusion-Forwarded`) must come from the
controller's own account; its original caller's `Authorization` travels in
`X-Tensor-Fusion-Caller-Authorization` and is put back in place, so the handlers check the
caller, not the follower (a forwarded request without one reaches them without a token).
"""

from __future__ import annotations

import logging
from typing import Final

from multidict import CIMultiDict

from tensorfusion.api_server.auth import authenticate
from tensorfusion.api_server.backend import ApiBackend
from tensorfusion.api_server.forwarding import CALLER_AUTHORIZATION_HEADER, FORWARDED_HEADER
from tensorfusion.api_server.responses import ApiError
from tensorfusion.runtime import web
from tensorfusion.runtime.web import Handler, Middleware

__all__ = ["PEER_AUTHORIZATION_PREFIX", "peer_auth_middleware"]

PEER_AUTHORIZATION_PREFIX: Final = "/tensor-fusion-peer"
"""Put before the request's path in the SubjectAccessReview."""

_log = logging.getLogger(__name__)


def peer_auth_middleware(backend: ApiBackend) -> Middleware:
    """The middleware that authenticates and authorizes every request of the peer port."""

    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        user = await authenticate(request, backend)
        verb = request.method.lower()
        try:
            allowed = await backend.authorize(user, PEER_AUTHORIZATION_PREFIX + request.path, verb)
        except Exception as exc:
            _log.warning("SubjectAccessReview for %s failed: %s", request.path, exc)
            raise ApiError(503, "AuthorizationFailed", "the caller's rights cannot be checked "
                           f"now (SubjectAccessReview): {exc}") from None  # fmt: skip
        if not allowed:
            raise ApiError(403, "Forbidden", f"{user.username} may not {verb} {request.path} "
                           "on the peer port (RBAC nonResourceURLs)")  # fmt: skip
        if FORWARDED_HEADER not in request.headers:
            return await handler(request)
        own = backend.service_account()
        if user.username != own:
            raise ApiError(403, "Forbidden", f"{user.username} may not forward requests: only "
                           f"the controller's replicas ({own}) may")  # fmt: skip
        headers = CIMultiDict(request.headers)
        caller = headers.pop(CALLER_AUTHORIZATION_HEADER, None)
        headers.pop("Authorization", None)
        if caller:
            headers["Authorization"] = caller
        return await handler(request.clone(headers=headers))

    return gate
