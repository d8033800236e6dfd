"""A bounded outbox of alert notices for one Alertmanager target (alerting.md §6.4-§6.6)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from tensorfusion.domain.alerting.alerts import AlertNotice

__all__ = ["Outbox", "OutboxEntry"]

RESOLVED_KEEP_MS: Final = 3_600_000


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """A queued notice and when it was queued."""

    notice: AlertNotice
    queued_ms: int
    sequence: int


class Outbox:
    """Keyed by fingerprint: a newer notice for a fingerprint replaces the queued one."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, OutboxEntry] = OrderedDict()
        self._sequence = 0
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, notice: AlertNotice, now_ms: int) -> int:
        """Queue a notice; returns how many entries were evicted to make room."""
        self._sequence += 1
        self._entries.pop(notice.fingerprint, None)
        self._entries[notice.fingerprint] = OutboxEntry(notice, now_ms, self._sequence)
        evicted = 0
        while len(self._entries) > self.capacity:
            self._evict_one()
            evicted += 1
        self.dropped += evicted
        return evicted

    def _evict_one(self) -> None:
        # Oldest firing entries go first (later evaluations re-send them); resolved ones last.
        for key, entry in self._entries.items():
            if not entry.notice.resolved:
                del self._entries[key]
                return
        self._entries.popitem(last=False)

    def expire(self, now_ms: int) -> int:
        """Drop firing entries past their endsAt and resolved ones older than one hour."""
        stale = [
            key
            for key, entry in self._entries.items()
            if (not entry.notice.resolved and entry.notice.ends_at_ms <= now_ms)
            or (entry.notice.resolved and now_ms - entry.queued_ms > RESOLVED_KEEP_MS)
        ]
        for key in stale:
            del self._entries[key]
        self.dropped += len(stale)
        return len(stale)

    def peek_batch(self, limit: int) -> list[OutboxEntry]:
        """The oldest `limit` entries, left queued until `acknowledge`."""
        batch: list[OutboxEntry] = []
        for entry in self._entries.values():
            batch.append(entry)
            if len(batch) >= limit:
                break
        return batch

    def acknowledge(self, batch: list[OutboxEntry]) -> None:
        """Remove delivered (or dropped) entries unless a newer notice replaced them meanwhile."""
        for entry in batch:
            current = self._entries.get(entry.notice.fingerprint)
            if current is not None and current.sequence == entry.sequence:
                del self._entries[entry.notice.fingerprint]
