"""Alert labels, fingerprints and the Alertmanager v2 payload (alerting.md §5)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from tensorfusion.domain.timestamps import format_rfc3339_ms

__all__ = [
    "DEFAULT_JOB",
    "AlertNotice",
    "build_labels",
    "fingerprint",
    "template_row",
]

DEFAULT_JOB: Final = "tensor-fusion"
_LABEL_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED: Final = frozenset({"alertname", "severity", "job", "instance"})


def build_labels(
    name: str, severity: str, job: str, instance: str, row: Mapping[str, Any]
) -> dict[str, str]:
    """The label set of one result row: the four fixed labels plus every non-empty text column."""
    labels: dict[str, str] = {"alertname": name, "severity": severity, "job": job}
    if instance:
        labels["instance"] = instance
    for column, value in row.items():
        if (
            isinstance(value, str)
            and value
            and column not in _RESERVED
            and _LABEL_NAME.fullmatch(column) is not None
        ):
            labels[column] = value
    return labels


def fingerprint(labels: Mapping[str, str]) -> str:
    """A stable hash of the sorted label set (16 hex digits)."""
    digest = hashlib.sha256()
    for key in sorted(labels):
        digest.update(key.encode("utf-8"))
        digest.update(b"\x00")
        digest.update(labels[key].encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()[:16]


def template_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Row values as templates see them: timestamps as RFC 3339 text, bytes as UTF-8 text."""
    out: dict[str, Any] = {}
    for column, value in row.items():
        if isinstance(value, datetime):
            aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
            out[column] = format_rfc3339_ms((aware - _EPOCH) // _MILLISECOND)
        elif isinstance(value, bytes | bytearray | memoryview):
            out[column] = bytes(value).decode("utf-8", errors="replace")
        else:
            out[column] = value
    return out


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND: Final = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class AlertNotice:
    """One message for Alertmanager: a firing alert (re)sent, or a resolution."""

    rule: str
    fingerprint: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at_ms: int
    ends_at_ms: int
    resolved: bool

    def payload(self) -> dict[str, Any]:
        """The element of the JSON array posted to `/api/v2/alerts`."""
        return {
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "startsAt": format_rfc3339_ms(self.starts_at_ms),
            "endsAt": format_rfc3339_ms(self.ends_at_ms),
        }
