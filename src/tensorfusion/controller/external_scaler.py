"""Calls to workloads' external scalers (docs/autoscaling.md, "External scaler"): the API key
read from its Secret in the release namespace (cached for `SECRET_TTL_S`, used only for the URLs
the Secret allows), one POST per workload and interval, each bounded by `TIMEOUT_S`, and a
workload whose scaler fails waits with exponential backoff before the next call."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.adapters.http_client import HTTP_ERRORS, post_json
from tensorfusion.adapters.kube.client import KUBE_CALL_ERRORS, api_status_message
from tensorfusion.adapters.kube.secret_reads import SecretContent
from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.autoscaling.external_scaler import (
    ANSWER_MAX_BYTES,
    API_KEY_KEY,
    CA_KEY,
    ExternalAnswerError,
    ExternalScalerSettings,
    key_use_problem,
    parse_answer,
)
from tensorfusion.domain.autoscaling.recommendation import Recommendation
from tensorfusion.domain.backoff import Backoff

__all__ = ["ExternalScalerCalls", "ExternalScalerError", "Post", "SecretRead"]

TIMEOUT_S: Final = 10.0
SECRET_TTL_S: Final = 30.0
RETRY: Final = Backoff(initial=30.0, maximum=600.0)
_CALL_ERRORS: Final[tuple[type[Exception], ...]] = (*HTTP_ERRORS, ValueError, OSError)

SecretRead = Callable[[str], Awaitable[SecretContent | None]]
"""A Secret of the release namespace by name (None: absent)."""
Post = Callable[..., Awaitable[tuple[int, bytes]]]


class ExternalScalerError(RuntimeError):
    """The scaler could not be asked or answered badly; the message says why and when the
    next call is."""


@dataclass(slots=True)
class ExternalScalerCalls:
    """The autoscaler's calls to external scalers, with their backoff per workload."""

    secrets: SecretRead
    namespace: str
    """The release namespace, where every key's Secret is."""
    post: Post = post_json
    timeout_s: float = TIMEOUT_S
    failures: dict[tuple[str, str], int] = field(default_factory=dict)
    retry_at: dict[tuple[str, str], float] = field(default_factory=dict)
    _cache: dict[str, tuple[float, SecretContent | None]] = field(default_factory=dict)

    def waiting(self, key: tuple[str, str], now: float) -> bool:
        """Whether the workload's scaler failed and its backoff has not run out."""
        return now < self.retry_at.get(key, 0.0)

    async def _secret(self, name: str, now: float) -> SecretContent | None:
        cached = self._cache.get(name)
        if cached is not None and now - cached[0] < SECRET_TTL_S:
            return cached[1]
        try:
            content = await self.secrets(name)
        except KUBE_CALL_ERRORS as error:
            detail = api_status_message(error) or str(error)
            raise ExternalScalerError(f"Secret {self.namespace}/{name} cannot be read: {detail}"
                                      ) from None  # fmt: skip
        self._cache[name] = (now, content)
        return content

    async def _headers(self, settings: ExternalScalerSettings, now: float
                       ) -> tuple[dict[str, str], bytes | None]:  # fmt: skip
        if not settings.secret_name:
            return {}, None
        secret = await self._secret(settings.secret_name, now)
        where = f"Secret {self.namespace}/{settings.secret_name}"
        if secret is None:
            raise ExternalScalerError(f"{where} does not exist")
        problem = key_use_problem(settings.secret_name, secret.annotations, settings.url)
        if problem:
            raise ExternalScalerError(problem)
        key = secret.data.get(API_KEY_KEY, b"").strip()
        if not key or not key.isascii() or b"\n" in key:
            raise ExternalScalerError(f"{where} has no usable {API_KEY_KEY}")
        return {"Authorization": f"Bearer {key.decode()}"}, secret.data.get(CA_KEY) or None

    async def _ask(
        self,
        settings: ExternalScalerSettings,
        body: dict[str, Any],
        current: tuple[ResourceAmount, ResourceAmount],
        now: float,
    ) -> tuple[Recommendation | None, str]:
        headers, ca = await self._headers(settings, now)
        try:
            status, answer = await self.post(
                settings.url, json.dumps(body).encode(), headers=headers, ca_pem=ca,
                timeout_s=self.timeout_s, max_bytes=ANSWER_MAX_BYTES)  # fmt: skip
        except _CALL_ERRORS as error:
            raise ExternalScalerError(
                f"{settings.url[:200]} cannot be reached: {type(error).__name__}: {error}"[:400]
            ) from None
        if status != 200:
            raise ExternalScalerError(f"{settings.url[:200]} answered HTTP {status}")
        try:
            return parse_answer(answer, current)
        except ExternalAnswerError as error:
            raise ExternalScalerError(f"{settings.url[:200]} answered badly: {error}") from None

    async def recommend(
        self,
        key: tuple[str, str],
        settings: ExternalScalerSettings,
        *,
        body: dict[str, Any],
        current: tuple[ResourceAmount, ResourceAmount],
        now: float,
    ) -> tuple[Recommendation | None, str]:
        """The scaler's recommendation for the workload `key` (None: no change) and its reason;
        ExternalScalerError when it fails (the workload then waits its backoff)."""
        try:
            found = await self._ask(settings, body, current, now)
        except ExternalScalerError as error:
            failures = self.failures.get(key, 0) + 1
            self.failures[key] = failures
            delay = RETRY.delay(failures)
            self.retry_at[key] = now + delay
            raise ExternalScalerError(f"{error}; next call in {delay:.0f} s") from None
        self.failures.pop(key, None)
        self.retry_at.pop(key, None)
        return found
