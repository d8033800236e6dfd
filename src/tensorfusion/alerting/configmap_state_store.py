"""The controller's alert state store (alerting.md §7.2): ConfigMap
`<TF_RELEASE_FULLNAME>-alert-state`, key `state.json`, in the controller's namespace.

The evaluator calls `load` and `save` of its StateStore in a worker thread
(`asyncio.to_thread`); this store's I/O is the process's async Kubernetes client, so each call
hands its coroutine to the event loop the store was made on and waits for it in that thread.
`load_async` and `save_async` are the same operations for callers already on the loop.

Saves are leader-only writes: `fence` runs before every attempt, so a replica that lost the
Lease never overwrites the new leader's state. Conflicts are read again and retried. The
content is capped like the file store's (2,000 entries and 900 KiB of JSON, keeping the most
recently started); what the caps leave out is logged and counted. Every failure is a
StateStoreError, which the evaluator logs, counts and retries; nothing here raises anything
else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Final, TypeVar

import orjson
from prometheus_client import CollectorRegistry, Counter

from tensorfusion.adapters.kube.client import KubeClient
from tensorfusion.adapters.kube.configmap import ConfigMapError, ConfigMapKey
from tensorfusion.alerting.state_store import (
    MAX_STATE_BYTES,
    MAX_STATE_ENTRIES,
    StateStoreError,
    cap_records,
)

__all__ = [
    "ALERT_STATE_KEY",
    "ConfigMapStateStore",
    "alert_state_configmap_name",
    "decode_state",
    "state_dropped_counter",
]

_log = logging.getLogger(__name__)
ALERT_STATE_KEY: Final = "state.json"
_REQUIRED: Final = ("rule", "fingerprint", "labels", "annotations", "startsAt")
_LABELS: Final = {
    "app.kubernetes.io/managed-by": "tensor-fusion",
    "app.kubernetes.io/component": "alert-state",
}
_T = TypeVar("_T")


def alert_state_configmap_name(release_fullname: str) -> str:
    """`<TF_RELEASE_FULLNAME>-alert-state`."""
    return f"{release_fullname}-alert-state"


def decode_state(text: str, source: str) -> list[dict[str, Any]]:
    """The firing records of a `state.json` text; malformed entries are skipped and logged.

    Raises StateStoreError when the text is not JSON or has no `firing` list.
    """
    try:
        document = orjson.loads(text) if text.strip() else {}
    except orjson.JSONDecodeError as error:
        raise StateStoreError(f"{source}: not valid JSON: {error}") from None
    firing = document.get("firing", []) if isinstance(document, dict) else None
    if not isinstance(firing, list):
        raise StateStoreError(f"{source}: expected an object with a 'firing' list")
    valid: list[dict[str, Any]] = []
    for index, record in enumerate(firing):
        if not isinstance(record, dict) or any(key not in record for key in _REQUIRED):
            _log.warning("%s: entry %d is malformed and ignored", source, index)
            continue
        valid.append(record)
    return valid


def state_dropped_counter(registry: CollectorRegistry | None = None) -> Counter:
    """`tf_alert_state_entries_dropped_total`: entries the caps left out of a save."""
    return Counter(
        "tf_alert_state_entries_dropped",
        f"Firing entries left out of the saved alert state by the caps "
        f"({MAX_STATE_ENTRIES} entries, {MAX_STATE_BYTES} bytes)",
        registry=registry if registry is not None else CollectorRegistry(),
    )


class ConfigMapStateStore:
    """The firing set in one ConfigMap key; `load`/`save` from a worker thread."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        release_fullname: str,
        *,
        fence: Callable[[], float] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        timeout_s: float = 30.0,
        dropped: Counter | None = None,
        key: ConfigMapKey | None = None,
    ) -> None:
        """Made on the event loop that runs `client` (or pass that loop as `loop`); `dropped`
        counts the entries the caps leave out (one Counter per process, see
        `state_dropped_counter`)."""
        self._loop = loop or asyncio.get_running_loop()
        self._timeout_s = timeout_s
        self._fence = fence
        self.key = key or ConfigMapKey(
            client,
            namespace,
            alert_state_configmap_name(release_fullname),
            ALERT_STATE_KEY,
            labels=_LABELS,
            timeout_s=timeout_s,
        )
        self.entries_dropped = 0
        self.saves = 0
        self._dropped = dropped if dropped is not None else state_dropped_counter()

    @property
    def where(self) -> str:
        """`ConfigMap namespace/name key state.json`."""
        return self.key.where

    # ------------------------------------------------------------------ on the loop

    async def load_async(self) -> list[dict[str, Any]]:
        """The persisted records; a missing ConfigMap or key is an empty state."""
        try:
            text = await self.key.read()
        except ConfigMapError as error:
            raise StateStoreError(str(error)) from None
        return [] if text is None else decode_state(text, self.where)

    async def save_async(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Replace the persisted records within the caps (a fenced, conflict-retried write)."""
        try:
            encoded, left_out = cap_records(records)
            text = encoded.decode("utf-8")
        except (TypeError, ValueError) as error:  # a text JSON cannot carry
            raise StateStoreError(f"{self.where}: state not encodable: {error}") from None
        if left_out:
            self.entries_dropped += left_out
            self._dropped.inc(left_out)
            _log.warning(
                "%s: state capped at %d entries / %d bytes; %d oldest entries left out",
                self.where,
                MAX_STATE_ENTRIES,
                MAX_STATE_BYTES,
                left_out,
            )
        try:
            await self.key.write(text, fence=self._fence)
        except ConfigMapError as error:
            raise StateStoreError(str(error)) from None
        self.saves += 1

    # ------------------------------------------------------------------ StateStore

    def load(self) -> list[dict[str, Any]]:
        """`load_async` run on the store's loop; call from a worker thread."""
        return self._on_loop(self.load_async())

    def save(self, records: Sequence[Mapping[str, Any]]) -> None:
        """`save_async` run on the store's loop; call from a worker thread."""
        self._on_loop(self.save_async(records))

    def _on_loop(self, work: Coroutine[Any, Any, _T]) -> _T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            work.close()
            raise StateStoreError(
                f"{self.where}: load/save block; call them from a worker thread "
                "(asyncio.to_thread) or use load_async/save_async on the loop"
            )
        try:
            future = asyncio.run_coroutine_threadsafe(work, self._loop)
        except RuntimeError as error:  # the loop is closed: the process is ending
            work.close()
            raise StateStoreError(f"{self.where}: event loop unavailable: {error}") from None
        try:
            # The ConfigMapKey bounds each request by the timeout; allow a few attempts.
            return future.result(timeout=self._timeout_s * 4)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise StateStoreError(f"{self.where}: timed out") from None
        except concurrent.futures.CancelledError:
            raise StateStoreError(f"{self.where}: cancelled") from None
