"""Reports such as `AlertRuleInvalid` and `DynamicConfigInvalid` (alerting.md §7.5)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["LogEventSink", "RecordingEventSink", "ReportedEvent", "WarningSink"]

_log = logging.getLogger("tensorfusion.events")


class WarningSink(Protocol):
    """Where warnings about configuration go (log now, Kubernetes Events in the controller)."""

    def warning(self, reason: str, message: str) -> None:
        """Report one Warning event."""


class LogEventSink:
    """A structured warning line per event."""

    def warning(self, reason: str, message: str) -> None:
        """Log `reason` and `message` at warning level."""
        _log.warning("event reason=%s message=%s", reason, message)


@dataclass(frozen=True, slots=True)
class ReportedEvent:
    """One reported event."""

    reason: str
    message: str


@dataclass(slots=True)
class RecordingEventSink:
    """Keeps events in memory (tests) and also logs them."""

    events: list[ReportedEvent] = field(default_factory=list)

    def warning(self, reason: str, message: str) -> None:
        """Record and log."""
        self.events.append(ReportedEvent(reason, message))
        LogEventSink().warning(reason, message)
