"""The allocation seal's key (scheduling.md §12, "Sealed allocations"), kept in the Secret
`<release>-allocation-seal` of the controller's namespace.

A new leader reads it before recovery; absent, it creates it with 32 random bytes (a replica
that loses the creation race reads the winner's). While the API server fails or the Secret holds
no usable key, it tries again with backoff (1 s doubling to 30 s) and logs each failure: the
allocator stays not ready, so nothing is scheduled with an unverifiable allocation. The key is
never logged.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Final

import httpx
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

from tensorfusion.domain.allocator.allocation_seal import (
    MIN_KEY_BYTES,
    SealKeyError,
    read_seal_key,
    seal_key_data,
)
from tensorfusion.domain.backoff import Backoff

__all__ = ["SEAL_SECRET_SUFFIX", "load_seal_key", "seal_secret_name"]

_log = logging.getLogger(__name__)
SEAL_SECRET_SUFFIX: Final = "-allocation-seal"
_RETRY: Final = Backoff(initial=1.0, maximum=30.0)


def seal_secret_name(release_fullname: str) -> str:
    """The Secret holding the seal's key."""
    return f"{release_fullname}{SEAL_SECRET_SUFFIX}"


async def _read_or_create(client: AsyncClient, namespace: str, name: str) -> bytes:
    try:
        secret = await client.get(Secret, name, namespace=namespace)
    except ApiError as error:
        if error.status.code != 404:
            raise
    else:
        return read_seal_key(secret.data)
    made = Secret(
        metadata=ObjectMeta(name=name, namespace=namespace,
                            labels={"app.kubernetes.io/component": "controller"}),
        type="Opaque", data=seal_key_data(secrets.token_bytes(MIN_KEY_BYTES)),
    )  # fmt: skip
    try:
        created = await client.create(made)
    except ApiError as error:
        if error.status.code != 409:
            raise
        return read_seal_key((await client.get(Secret, name, namespace=namespace)).data)
    _log.info("allocation seal key created in Secret %s/%s", namespace, name)
    return read_seal_key(created.data)


async def load_seal_key(
    client: AsyncClient,
    *,
    namespace: str,
    name: str,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> bytes:
    """The key from the Secret (created when absent), retried until it reads."""
    failures = 0
    while True:
        try:
            return await _read_or_create(client, namespace, name)
        except (ApiError, SealKeyError, OSError, httpx.HTTPError) as error:
            failures += 1
            delay = _RETRY.delay(failures)
            detail = error.status.message if isinstance(error, ApiError) else str(error)
            _log.warning("allocation seal key from Secret %s/%s: %s; retrying in %.0f s",
                         namespace, name, detail, delay)  # fmt: skip
        await sleep(delay)
