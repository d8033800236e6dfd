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

from tensorfusion.adapters.kube.client import KUBE_CALL_ERRORS, KubeClient, api_status_message
from tensorfusion.adapters.kube.secret_reads import read_or_create_secret
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
_RETRIED: Final[tuple[type[Exception], ...]] = (*KUBE_CALL_ERRORS, SealKeyError, OSError)


def seal_secret_name(release_fullname: str) -> str:
    """The Secret holding the seal's key."""
    return f"{release_fullname}{SEAL_SECRET_SUFFIX}"


async def _read_or_create(client: KubeClient, namespace: str, name: str) -> bytes:
    data, created = await read_or_create_secret(
        client, namespace=namespace, name=name,
        labels={"app.kubernetes.io/component": "controller"},
        data=lambda: seal_key_data(secrets.token_bytes(MIN_KEY_BYTES)),
    )  # fmt: skip
    if created:
        _log.info("allocation seal key created in Secret %s/%s", namespace, name)
    return read_seal_key(data)


async def load_seal_key(
    client: KubeClient,
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
        except _RETRIED as error:
            failures += 1
            delay = _RETRY.delay(failures)
            detail = api_status_message(error) or str(error)
            _log.warning("allocation seal key from Secret %s/%s: %s; retrying in %.0f s",
                         namespace, name, detail, delay)  # fmt: skip
        await sleep(delay)
