"""Host facts of the node the agent runs on: physical RAM and the size of its data disk."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tensorfusion.domain.devices.inventory import HostFacts

__all__ = ["read_node_facts"]


def read_node_facts(data_path: Path = Path("/")) -> HostFacts:
    """RAM from the page count, disk from the filesystem holding `data_path`; 0 if unknown."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        ram = 0
    try:
        disk = shutil.disk_usage(data_path).total
    except OSError:
        disk = 0
    return HostFacts(host_ram_bytes=max(ram, 0), data_disk_bytes=disk)
