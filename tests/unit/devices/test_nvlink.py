"""NVLink peers from active links, and bandwidth by generation."""

from __future__ import annotations

from tensorfusion.domain.devices.inventory import NVLinkPeer
from tensorfusion.domain.devices.nvlink import ActiveLink, nvlink_bandwidth_mb_per_s, nvlink_peers


def test_bandwidth_is_links_times_the_generation_s_link_bandwidth() -> None:
    assert nvlink_bandwidth_mb_per_s(3, 12) == 600_000  # A100
    assert nvlink_bandwidth_mb_per_s(4, 18) == 900_000  # H100
    assert nvlink_bandwidth_mb_per_s(5, 18) == 1_800_000  # B200
    assert nvlink_bandwidth_mb_per_s(9, 18) == 0


def test_direct_links_are_counted_per_peer_and_sorted() -> None:
    peers = nvlink_peers(
        {
            "B": [ActiveLink("a", 4), ActiveLink("C", 4), ActiveLink("A", 3)],
            "A": [ActiveLink("B", 4)],
            "C": [],
        }
    )
    assert peers["B"] == (NVLinkPeer("A", 2, 4, 100_000), NVLinkPeer("C", 1, 4, 50_000))
    assert peers["A"] == (NVLinkPeer("B", 1, 4, 50_000),)
    assert peers["C"] == ()


def test_switch_links_join_every_gpu_on_the_fabric() -> None:
    switch = ActiveLink("SW", 4, to_switch=True)
    peers = nvlink_peers({"A": [switch] * 18, "B": [switch] * 18, "C": [ActiveLink("X", 4)]})
    assert peers["A"] == (NVLinkPeer("B", 18, 4, 900_000),)
    assert peers["B"] == (NVLinkPeer("A", 18, 4, 900_000),)
    assert peers["C"] == (NVLinkPeer("X", 1, 4, 50_000),)
