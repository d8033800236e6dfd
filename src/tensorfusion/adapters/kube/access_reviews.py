"""TokenReview and SubjectAccessReview: who a bearer token is, and whether a user may use a
non-resource URL (the peer port's gate)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lightkube import AsyncClient
from lightkube.models.authentication_v1 import TokenReviewSpec, TokenReviewStatus
from lightkube.models.authorization_v1 import NonResourceAttributes, SubjectAccessReviewSpec
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview

__all__ = ["non_resource_allowed", "token_review"]


async def token_review(client: AsyncClient, token: str) -> TokenReviewStatus | None:
    """The status of a TokenReview of `token` (None when the API server gave none)."""
    review = await client.create(TokenReview(spec=TokenReviewSpec(token=token)))
    return review.status


async def non_resource_allowed(
    client: AsyncClient,
    *,
    username: str | None,
    uid: str | None,
    groups: Sequence[str],
    extra: Mapping[str, Sequence[str]],
    path: str,
    verb: str,
) -> bool:
    """Whether a SubjectAccessReview allows the user `verb` on the non-resource URL `path`."""
    spec = SubjectAccessReviewSpec(
        user=username, uid=uid, groups=list(groups),
        extra={k: list(v) for k, v in extra.items()} or None,
        nonResourceAttributes=NonResourceAttributes(path=path, verb=verb),
    )  # fmt: skip
    answer = await client.create(SubjectAccessReview(spec=spec))
    return bool(answer.status and answer.status.allowed)
