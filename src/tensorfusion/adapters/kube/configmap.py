"""One key of one ConfigMap: read, and replaced with optimistic concurrency.

A write carries the `resourceVersion` of the last read, so a concurrent change (someone's
`kubectl edit`, another writer) is never overwritten blindly: the 409 Conflict makes the key
read again and the write retried, keeping the other keys of the ConfigMap as they are now.
A missing ConfigMap is created. An optional fence runs before every attempt (leader-only
writes) and bounds the attempt by the seconds it says are left.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

__all__ = ["ConfigMapError", "ConfigMapKey", "ConfigMapNotLeaderError"]

_log = logging.getLogger(__name__)
DEFAULT_TIMEOUT_S: Final = 30.0
MAX_CONFLICTS: Final = 5


class ConfigMapError(Exception):
    """The ConfigMap could not be read or written (API error, timeout, too many conflicts)."""


class ConfigMapNotLeaderError(ConfigMapError):
    """The fence refused the write: this process may not write as the leader."""


@dataclass(slots=True)
class _Seen:
    resource_version: str | None = None
    exists: bool = False
    data: dict[str, str] = field(default_factory=dict)


class ConfigMapKey:
    """`key` of ConfigMap `namespace/name`."""

    def __init__(
        self,
        client: AsyncClient,
        namespace: str,
        name: str,
        key: str,
        *,
        labels: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_conflicts: int = MAX_CONFLICTS,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.name = name
        self.key = key
        self._labels = dict(labels or {})
        self._timeout_s = timeout_s
        self._max_conflicts = max_conflicts
        self._seen = _Seen()
        self.conflicts = 0
        self.writes = 0

    @property
    def where(self) -> str:
        """`ConfigMap namespace/name key`, for messages."""
        return f"ConfigMap {self.namespace}/{self.name} key {self.key}"

    async def read(self) -> str | None:
        """The key's value, or None when the ConfigMap or the key is missing."""
        try:
            async with asyncio.timeout(self._timeout_s):
                found = await self._client.get(ConfigMap, self.name, namespace=self.namespace)
        except ApiError as error:
            if error.status.code == 404:
                self._seen = _Seen()
                return None
            raise ConfigMapError(f"{self.where}: read failed: {_reason(error)}") from None
        except (httpx.HTTPError, TimeoutError, OSError) as error:
            raise ConfigMapError(f"{self.where}: read failed: {_text(error)}") from None
        metadata = found.metadata
        data = dict(found.data or {})
        self._seen = _Seen(metadata.resourceVersion if metadata else None, True, data)
        return data.get(self.key)

    async def write(self, value: str, *, fence: Callable[[], float] | None = None) -> None:
        """Set the key (creating the ConfigMap if needed); other keys are kept.

        `fence` runs before every attempt; whatever it raises ends the write as
        ConfigMapNotLeaderError. A 409 reads the ConfigMap again and retries, at most
        `max_conflicts` times.
        """
        conflicts = 0
        while True:
            timeout_s = self._timeout_s
            if fence is not None:
                try:
                    left = fence()
                except Exception as error:  # NotLeaderError, or any refusal of the fence
                    raise ConfigMapNotLeaderError(
                        f"{self.where}: not written, this process may not write as the leader: "
                        f"{error}"
                    ) from None
                timeout_s = min(timeout_s, max(left, 0.0))
            try:
                async with asyncio.timeout(timeout_s):
                    await self._attempt(value)
            except ApiError as error:
                if error.status.code not in (404, 409):
                    raise ConfigMapError(f"{self.where}: write failed: {_reason(error)}") from None
                conflicts += 1
                self.conflicts += 1
                if conflicts > self._max_conflicts:
                    raise ConfigMapError(
                        f"{self.where}: write failed after {conflicts} conflicts: {_reason(error)}"
                    ) from None
                _log.info("%s: %s; reading it again", self.where, _reason(error))
                await self.read()
                continue
            except (httpx.HTTPError, TimeoutError, OSError) as error:
                raise ConfigMapError(f"{self.where}: write failed: {_text(error)}") from None
            self.writes += 1
            return

    async def _attempt(self, value: str) -> None:
        seen = self._seen
        data = {**seen.data, self.key: value}
        body = ConfigMap(
            metadata=ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                labels=self._labels or None,
                resourceVersion=seen.resource_version if seen.exists else None,
            ),
            data=data,
        )
        if seen.exists:
            written: Any = await self._client.replace(body)
        else:
            written = await self._client.create(body)
        metadata = written.metadata
        self._seen = _Seen(metadata.resourceVersion if metadata else None, True, data)


def _reason(error: ApiError) -> str:
    status = error.status
    return f"{status.code} {status.reason or ''}: {status.message or ''}".strip()


def _text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
