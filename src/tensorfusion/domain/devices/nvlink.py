"""NVLink peers of each GPU from its active links, and bandwidth by NVLink generation.

Bandwidth is counted both directions together, as the GPU objects carry it (an A100 with 12
third-generation links: 600,000 MB/s). A link that ends at an NVSwitch connects the GPU to every
other GPU of the node that also has switch links (HGX boards): each such GPU is a peer over the
GPU's own switch links.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from tensorfusion.domain.devices.inventory import NVLinkPeer

__all__ = ["LINK_BANDWIDTH_MB_PER_S", "ActiveLink", "nvlink_bandwidth_mb_per_s", "nvlink_peers"]

LINK_BANDWIDTH_MB_PER_S: Final[dict[int, int]] = {
    1: 40_000,  # P100: 4 links, 160 GB/s
    2: 50_000,  # V100: 6 links, 300 GB/s
    3: 50_000,  # A100: 12 links, 600 GB/s
    4: 50_000,  # H100/H200: 18 links, 900 GB/s
    5: 100_000,  # B200: 18 links, 1.8 TB/s
}
"""Bandwidth of one link of each NVLink generation, both directions, MB/s."""


@dataclass(frozen=True, slots=True)
class ActiveLink:
    """One active NVLink of a GPU: where it ends and its generation."""

    remote_pci_bus_id: str
    version: int
    to_switch: bool = False


def nvlink_bandwidth_mb_per_s(version: int, links: int) -> int:
    """Bandwidth of `links` links of generation `version`; 0 for an unknown generation."""
    return LINK_BANDWIDTH_MB_PER_S.get(version, 0) * max(links, 0)


def _peer(bus: str, links: Sequence[ActiveLink]) -> NVLinkPeer:
    version = max(link.version for link in links)
    return NVLinkPeer(bus, len(links), version, nvlink_bandwidth_mb_per_s(version, len(links)))


def nvlink_peers(
    links_by_bus: Mapping[str, Sequence[ActiveLink]],
) -> dict[str, tuple[NVLinkPeer, ...]]:
    """Per GPU (by its PCI bus id): its peers, direct links counted per peer, sorted by bus id.

    A remote bus id that names a GPU of the node (case-insensitively) is written as that GPU's
    own bus id, so peers join with the devices they name.
    """
    local = {bus.upper(): bus for bus in links_by_bus}
    fabric = [bus for bus, links in links_by_bus.items() if any(x.to_switch for x in links)]
    peers: dict[str, tuple[NVLinkPeer, ...]] = {}
    for bus, links in links_by_bus.items():
        direct: dict[str, list[ActiveLink]] = {}
        for link in links:
            if not link.to_switch and link.remote_pci_bus_id:
                remote = local.get(link.remote_pci_bus_id.upper(), link.remote_pci_bus_id)
                direct.setdefault(remote, []).append(link)
        found = {remote: _peer(remote, group) for remote, group in direct.items()}
        switched = [link for link in links if link.to_switch]
        if switched:
            for other in fabric:
                if other != bus and other not in found:
                    found[other] = _peer(other, switched)
        peers[bus] = tuple(found[key] for key in sorted(found))
    return peers
