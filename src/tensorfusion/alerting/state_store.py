"""Persisted firing alerts (alerting.md §7.2): an interface, and the file implementation."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

import orjson

__all__ = [
    "MAX_STATE_BYTES",
    "MAX_STATE_ENTRIES",
    "FileStateStore",
    "MemoryStateStore",
    "StateStore",
    "StateStoreError",
    "cap_records",
]

_log = logging.getLogger(__name__)
MAX_STATE_ENTRIES: Final = 2000
MAX_STATE_BYTES: Final = 900 * 1024


class StateStoreError(Exception):
    """The state could not be read or written."""


class StateStore(Protocol):
    """Holds the firing set across restarts and leader changes."""

    def load(self) -> list[dict[str, Any]]:
        """The persisted records (empty when none); raises StateStoreError when unreadable."""

    def save(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Replace the persisted records; raises StateStoreError on failure."""


def _encode(records: Sequence[Mapping[str, Any]]) -> bytes:
    return orjson.dumps({"version": 1, "firing": list(records)})


def cap_records(records: Sequence[Mapping[str, Any]]) -> tuple[bytes, int]:
    """Encode within 2,000 entries and 900 KiB, keeping the most recently started.

    Returns the JSON and how many entries were left out.
    """
    ordered = sorted(records, key=lambda record: int(record.get("startsAt", 0)), reverse=True)
    kept = ordered[:MAX_STATE_ENTRIES]
    encoded = _encode(kept)
    while len(encoded) > MAX_STATE_BYTES and kept:
        # Drop a proportional share of the oldest entries, then re-encode.
        excess = len(encoded) - MAX_STATE_BYTES
        drop = max(1, len(kept) * excess // len(encoded) + 1)
        kept = kept[: len(kept) - drop]
        encoded = _encode(kept)
    return encoded, len(records) - len(kept)


def _decode(data: bytes, source: str) -> list[dict[str, Any]]:
    try:
        document = orjson.loads(data) if data.strip() else {}
    except orjson.JSONDecodeError as error:
        raise StateStoreError(f"{source}: not valid JSON: {error}") from None
    firing = document.get("firing", []) if isinstance(document, dict) else None
    if not isinstance(firing, list):
        raise StateStoreError(f"{source}: expected an object with a 'firing' list")
    required = ("rule", "fingerprint", "labels", "annotations", "startsAt")
    valid: list[dict[str, Any]] = []
    for index, record in enumerate(firing):
        if not isinstance(record, dict) or any(key not in record for key in required):
            _log.warning("%s: entry %d is malformed and ignored", source, index)
            continue
        valid.append(record)
    return valid


class FileStateStore:
    """JSON written to a temporary file in the same directory, then renamed (atomic)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> list[dict[str, Any]]:
        """Read the file; a missing file is an empty state."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as error:
            raise StateStoreError(f"{self.path}: cannot read: {error}") from None
        return _decode(data, str(self.path))

    def save(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Write atomically within the caps."""
        encoded, left_out = cap_records(records)
        if left_out:
            _log.warning(
                "%s: state capped at %d entries / %d bytes; %d oldest entries left out",
                self.path,
                MAX_STATE_ENTRIES,
                MAX_STATE_BYTES,
                left_out,
            )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            descriptor, temporary = tempfile.mkstemp(
                prefix=f".{self.path.name}.", dir=self.path.parent
            )
            try:
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(encoded)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(temporary, self.path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        except OSError as error:
            raise StateStoreError(f"{self.path}: cannot write: {error}") from None


class MemoryStateStore:
    """In-memory state (tests, simulator)."""

    def __init__(self) -> None:
        self.data = b""

    def load(self) -> list[dict[str, Any]]:
        """The last saved records."""
        return _decode(self.data, "memory")

    def save(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Keep the encoded records."""
        self.data, _ = cap_records(records)
