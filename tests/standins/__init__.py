"""Stand-ins for host binaries the tests cannot have (NVIDIA's), speaking their protocols."""

from __future__ import annotations

import sys
from pathlib import Path

MPS_CONTROL = Path(__file__).with_name("mps_control.py")


def install_mps_control(directory: Path) -> Path:
    """An executable `nvidia-cuda-mps-control` in `directory` running the stand-in."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "nvidia-cuda-mps-control"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{MPS_CONTROL}" "$@"\n', encoding="utf-8")
    path.chmod(0o755)
    return path
