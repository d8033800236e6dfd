"""The loopback address ranges of one dev environment: the chart's fixed ports (the
controller's 8080, Alertmanager's 9093 and 9094) need addresses of their own, so each
environment takes the first three `127.0.N.` ranges whose fixed ports are free."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Final

__all__ = ["AddressRanges", "free_address_ranges"]

FIRST_SLOT: Final = 5
"""The first `127.0.N.` of the three address ranges of one environment (below it: the tests')."""
CONTROLLER_API_PORT: Final = 8080
ALERTMANAGER_PORTS: Final = (9093, 9094)


@dataclass(frozen=True, slots=True)
class AddressRanges:
    """The loopback ranges of one environment: fixed ports (the chart's 8080, Alertmanager's
    9093) need an address of their own."""

    controllers: str
    """`127.0.N.`: the Services at .1, the controllers at .2, .3, ..."""
    alertmanagers: str
    nodes: str


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_address_ranges(replicas: int) -> AddressRanges:
    """The first ranges from 127.0.5.x on whose fixed ports are free (another environment
    in another directory takes the next ones)."""
    for slot in range(FIRST_SLOT, 250, 3):
        ranges = AddressRanges(f"127.0.{slot}.", f"127.0.{slot + 1}.", f"127.0.{slot + 2}.")
        wanted = [(f"{ranges.controllers}{i + 2}", CONTROLLER_API_PORT) for i in range(replicas)]
        wanted += [(f"{ranges.alertmanagers}1", port) for port in ALERTMANAGER_PORTS]
        if all(_bindable(host, port) for host, port in wanted):
            return ranges
    raise RuntimeError("no free loopback range for the controllers' port 8080 (127.0.5-250.x)")
