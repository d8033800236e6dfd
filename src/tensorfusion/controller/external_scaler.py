"""Calls to workloads' external scalers (docs/autoscaling.md, "External scaler"): the scaler's
Secret in the release namespace (cached for `SECRET_TTL_S`; it lists the URLs and namespaces it
may be called at and for, and may hold the API key), one POST per workload and interval, each
bounded by `TIMEOUT_S` in all and at most `CONCURRENT_CALLS` at once, and a workload whose
scaler fails waits with exponential backoff before the next call."""

from __future__ import annotations

import asyncio
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
    key_problem,
    key_use_problem,
    parse_answer,
)
from tensorfusion.domain.autoscaling.recommendation import Recommendation
from tensorfusion.domain.backoff import Backoff

__all__ = ["ExternalScalerCalls", "ExternalScalerError", "Post", "SecretRead"]

TIMEOUT_S: Final = 10.0
CONCURRENT_CALLS: Final = 16
SECRET_TTL_S: Final = 30.0
RETRY: Final = Backoff(initial=30.0, maximum=600.0)
_CALL_ERRORS: Final[tuple[type[Exception], ...]] = (*HTTP_ERRORS, ValueError, OSError)

SecretRead = Callable[[str], Awaitable[SecretContent | None]]
"""A Secret of the release namespace by name (None: absent)."""
Post = Callable[..., Awaitable[tuple[int, bytes]]]


class ExternalScalerError(RuntimeError):
    """The scaler could not be asked or answered badly; the message says why and when the
    next call is."""


@dataclass(frozen=True, slots=True)
class _Failing:
    """A workload's scaler that failed: at which URL, how many times in a row, when it may be
    called again (a changed URL is called at once)."""

    url: str
    failures: int
    retry_at: float


@dataclass(slots=True)
class ExternalScalerCalls:
    """The autoscaler's calls to external scalers, with their backoff per workload."""

    secrets: SecretRead
    namespace: str
    """The release namespace, where every key's Secret is."""
    post: Post = post_json
    timeout_s: float = TIMEOUT_S
    failed: dict[tuple[str, str], _Failing] = field(default_factory=dict)
    """Workloads whose scaler failed at its last call."""
    _cache: dict[str, tuple[float, SecretContent | None]] = field(default_factory=dict)
    _slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(CONCURRENT_CALLS))

    def waiting(self, key: tuple[str, str], url: str, now: float) -> bool:
        """Whether the workload's scaler at `url` failed and its backoff has not run out (a
        workload whose URL changed is not kept waiting)."""
        failing = self.failed.get(key)
        return failing is not None and failing.url == url and now < failing.retry_at

    def keep_only(self, keys: set[tuple[str, str]]) -> None:
        """Forget the backoff of workloads that no longer use an external scaler."""
        for key in [k for k in self.failed if k not in keys]:
            del self.failed[key]

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

    async def _headers(self, settings: ExternalScalerSettings, namespace: str, now: float
                       ) -> tuple[dict[str, str], bytes | None, bytes]:  # fmt: skip
        secret = await self._secret(settings.secret_name, now)
        where = f"Secret {self.namespace}/{settings.secret_name}"
        if secret is None:
            raise ExternalScalerError(f"{where} does not exist")
        problem = key_use_problem(settings.secret_name, secret.annotations, url=settings.url,
                                  namespace=namespace)  # fmt: skip
        if problem:
            raise ExternalScalerError(problem)
        key = secret.data.get(API_KEY_KEY, b"").strip()
        problem = key_problem(key, settings.url)
        if problem:
            raise ExternalScalerError(f"{where}: {problem}")
        headers = {"Authorization": f"Bearer {key.decode()}"} if key else {}
        return headers, secret.data.get(CA_KEY) or None, key

    async def _ask(
        self,
        settings: ExternalScalerSettings,
        body: dict[str, Any],
        current: tuple[ResourceAmount, ResourceAmount],
        namespace: str,
        now: float,
    ) -> tuple[Recommendation | None, str]:
        headers, ca, key = await self._headers(settings, namespace, now)
        try:
            async with self._slots, asyncio.timeout(self.timeout_s):
                status, answer = await self.post(
                    settings.url, json.dumps(body).encode(), headers=headers, ca_pem=ca,
                    timeout_s=self.timeout_s, max_bytes=ANSWER_MAX_BYTES)  # fmt: skip
        except TimeoutError:
            raise ExternalScalerError(
                f"{settings.url[:200]} did not answer within {self.timeout_s:g} s"
            ) from None
        except _CALL_ERRORS as error:
            detail = f"{type(error).__name__}: {error}"
            if key:  # an error text never carries the key, whatever the library put in it
                detail = detail.replace(key.decode(), "<api-key>")
            raise ExternalScalerError(
                f"{settings.url[:200]} cannot be reached: {detail}"[:400]
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
            found = await self._ask(settings, body, current, key[0], now)
        except ExternalScalerError as error:
            before = self.failed.get(key)
            failures = before.failures + 1 if before and before.url == settings.url else 1
            delay = RETRY.delay(failures)
            self.failed[key] = _Failing(settings.url, failures, now + delay)
            wait = max(delay, settings.interval_s)
            raise ExternalScalerError(f"{error}; next call in {wait:.0f} s") from None
        self.failed.pop(key, None)
        return found
