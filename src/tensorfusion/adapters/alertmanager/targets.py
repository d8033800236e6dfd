"""Alertmanager target URLs from `--alert-manager-addr` (alerting.md §6.1-§6.2)."""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["AlertmanagerAddressError", "alerts_url", "parse_alertmanager_addresses"]


class AlertmanagerAddressError(ValueError):
    """An address without http:// or https://, or otherwise not a URL."""


def alerts_url(address: str) -> str:
    """`http://am:9093/prefix` -> `http://am:9093/prefix/api/v2/alerts`."""
    base = address.strip()
    if not base.endswith("/"):
        base += "/"
    return base + "api/v2/alerts"


def parse_alertmanager_addresses(value: str, flag: str = "--alert-manager-addr") -> list[str]:
    """Split a comma-separated list into alert URLs; each must start with http:// or https://."""
    urls: list[str] = []
    for raw in value.split(","):
        address = raw.strip()
        if not address:
            continue
        parts = urlsplit(address)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise AlertmanagerAddressError(
                f"{flag}: {address!r} is not an Alertmanager URL; it must start with http:// or "
                "https:// and name a host, e.g. http://alertmanager.monitoring:9093"
            )
        urls.append(alerts_url(address))
    if not urls:
        raise AlertmanagerAddressError(
            f"{flag}: no address given; pass one URL or a comma-separated list, "
            "e.g. http://alertmanager.monitoring:9093"
        )
    return urls
