"""Who may call: state-changing endpoints need the bearer token of an allowed ServiceAccount,
checked by TokenReview (scheduling.md §16): 401 `Unauthorized` without a valid token, 403
`Forbidden` for a valid token of anyone else. `authenticate` is the TokenReview step alone,
shared with the peer port's middleware (`peer_auth`)."""

from __future__ import annotations

import logging
from collections.abc import Collection

from tensorfusion.api_server.backend import ApiBackend, TokenReviewResult
from tensorfusion.api_server.responses import ApiError
from tensorfusion.runtime import web

__all__ = [
    "authenticate",
    "bearer_token",
    "require_controller_service_account",
    "require_service_account",
]

_log = logging.getLogger(__name__)

_UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Bearer realm="tensor-fusion"'}


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "Unauthorized", message, _UNAUTHORIZED_HEADERS)


def bearer_token(request: web.Request) -> str:
    """The token of `Authorization: Bearer <token>`; ApiError 401 without one."""
    header = request.headers.get("Authorization")
    if header is None:
        raise _unauthorized("this endpoint needs Authorization: Bearer <ServiceAccount token>")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _unauthorized("the Authorization header must be: Bearer <ServiceAccount token>")
    return token


async def require_controller_service_account(request: web.Request, backend: ApiBackend) -> str:
    """The username of a valid token of the controller's ServiceAccount; else ApiError 401
    (no or invalid token), 403 (someone else's token) or 503 (TokenReview failed)."""
    own = backend.service_account()
    return await require_service_account(
        request, backend, (own,), f"the controller's ServiceAccount ({own})"
    )


async def require_service_account(
    request: web.Request, backend: ApiBackend, allowed: Collection[str], described: str
) -> str:
    """The username of a valid token of one of the `allowed` usernames (`described` for the
    403 message); else ApiError 401 (no or invalid token), 403 (someone else's token) or 503
    (TokenReview failed)."""
    review = await authenticate(request, backend)
    if review.username is None or review.username not in allowed:
        raise ApiError(
            403,
            "Forbidden",
            f"{review.username or 'this user'} may not call {request.path}: only {described} may",
        )
    return review.username


async def authenticate(request: web.Request, backend: ApiBackend) -> TokenReviewResult:
    """The TokenReview of the request's bearer token when it is valid; else ApiError 401 (no
    or invalid token) or 503 (TokenReview failed)."""
    token = bearer_token(request)
    try:
        review = await backend.review_token(token)
    except Exception as exc:
        _log.warning("TokenReview for %s failed: %s", request.path, exc)
        raise ApiError(
            503, "TokenReviewFailed", f"the token cannot be checked now (TokenReview): {exc}"
        ) from None
    if not review.authenticated:
        detail = f": {review.error}" if review.error else ""
        raise _unauthorized(f"the bearer token is not valid{detail}")
    return review
