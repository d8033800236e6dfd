"""`GET /api/assign-index?podName=` (admission.md §11): only the controller's own
ServiceAccount gets an index (TokenReview); 401 without a valid token, 403 for anyone else."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tensorfusion.api_server import ASSIGN_INDEX_PATH, TokenReviewResult

from .fakes import OTHER_ACCOUNT, OWN_ACCOUNT, FakeBackend

Client = TestClient[web.Request, web.Application]
POD = {"podName": "worker-0"}


@pytest.fixture
def tokens(backend: FakeBackend) -> FakeBackend:
    backend.tokens = {
        "own-token": TokenReviewResult(True, OWN_ACCOUNT),
        "agent-token": TokenReviewResult(True, OTHER_ACCOUNT),
        "expired-token": TokenReviewResult(False, error="token has expired"),
    }
    return backend


async def error_of(response: Any, status: int, code: str) -> str:
    assert response.status == status, await response.text()
    body = await response.json()
    assert body["error"]["code"] == code
    message: str = body["error"]["message"]
    return message


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_the_controllers_own_token_gets_the_next_index(
    client: Client, tokens: FakeBackend
) -> None:
    first = await client.get(ASSIGN_INDEX_PATH, params=POD, headers=bearer("own-token"))
    assert first.status == 200
    assert first.content_type == "text/plain"
    assert await first.text() == "1"
    second = await client.get(ASSIGN_INDEX_PATH, params=POD, headers=bearer("own-token"))
    assert await second.text() == "2"
    assert tokens.counter.peek() == 3
    assert tokens.reviewed == ["own-token", "own-token"]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, "needs Authorization: Bearer"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "must be: Bearer"),
        ({"Authorization": "Bearer "}, "must be: Bearer"),
        (bearer("expired-token"), "not valid: token has expired"),
        (bearer("unknown-token"), "not valid: token not found"),
    ],
    ids=["missing", "basic", "empty", "expired", "unknown"],
)
async def test_no_valid_token_is_401(
    client: Client, tokens: FakeBackend, headers: dict[str, str], expected: str
) -> None:
    response = await client.get(ASSIGN_INDEX_PATH, params=POD, headers=headers)
    assert expected in await error_of(response, 401, "Unauthorized")
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert tokens.counter.peek() == 1


async def test_another_service_accounts_token_is_403(client: Client, tokens: FakeBackend) -> None:
    response = await client.get(ASSIGN_INDEX_PATH, params=POD, headers=bearer("agent-token"))
    message = await error_of(response, 403, "Forbidden")
    assert OTHER_ACCOUNT in message and OWN_ACCOUNT in message
    assert tokens.counter.peek() == 1


async def test_a_failed_token_review_is_503(client: Client, tokens: FakeBackend) -> None:
    tokens.review_error = ConnectionError("API server unreachable")
    response = await client.get(ASSIGN_INDEX_PATH, params=POD, headers=bearer("own-token"))
    assert "API server unreachable" in await error_of(response, 503, "TokenReviewFailed")
    assert tokens.counter.peek() == 1


async def test_pod_name_is_required(client: Client, tokens: FakeBackend) -> None:
    response = await client.get(ASSIGN_INDEX_PATH, headers=bearer("own-token"))
    assert "podName" in await error_of(response, 400, "InvalidQuery")
    assert tokens.counter.peek() == 1


async def test_the_token_is_checked_before_the_query(client: Client, tokens: FakeBackend) -> None:
    response = await client.get(ASSIGN_INDEX_PATH)
    await error_of(response, 401, "Unauthorized")


async def test_a_preview_does_not_advance_the_counter(client: Client, tokens: FakeBackend) -> None:
    params = {**POD, "preview": "true"}
    for _ in range(2):
        reply = await client.get(ASSIGN_INDEX_PATH, params=params, headers=bearer("own-token"))
        assert await reply.text() == "1"
    assert tokens.counter.peek() == 1
