"""A ConfigMap's keys in a directory laid out as the kubelet lays out a ConfigMap volume: `..data`
a symlink to a timestamped directory, each key a symlink through it, so a swap is atomic and a
process watching the files sees the same events as in a pod."""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["ConfigDirectory"]


class ConfigDirectory:
    """A directory holding a ConfigMap's keys the way the kubelet mounts a ConfigMap volume."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._generation = 0
        self._data: dict[str, str] | None = None

    def write(self, data: Mapping[str, str]) -> bool:
        """Swap in `data` atomically (a new timestamped directory, then `..data` renamed);
        False, and nothing touched, when it holds `data` already."""
        if self._data == dict(data):
            return False
        self._data = dict(data)
        self.path.mkdir(parents=True, exist_ok=True)
        self._generation += 1
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y_%m_%d_%H_%M_%S")
        version = f"..{stamp}.{self._generation}"
        (self.path / version).mkdir()
        for key, text in data.items():
            (self.path / version / key).write_text(text)
        old = os.readlink(self.path / "..data") if (self.path / "..data").is_symlink() else None
        temporary = self.path / "..data_tmp"
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        temporary.symlink_to(version)
        temporary.rename(self.path / "..data")
        for key in data:
            link = self.path / key
            if not link.is_symlink():
                link.symlink_to(Path("..data") / key)
        if old is not None:
            for stale in (self.path / old).iterdir():
                stale.unlink()
            (self.path / old).rmdir()
        return True
