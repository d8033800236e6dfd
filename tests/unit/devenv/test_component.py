"""A component's liveness check: an exit is an error, a deliberate stop is not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tensorfusion.devenv.processes import Component, ControlPlaneError


def test_never_started_and_exited_raise_stopped_does_not(tmp_path: Path) -> None:
    quick = Component("quick", [sys.executable, "-c", "pass"], tmp_path / "quick.log")
    with pytest.raises(ControlPlaneError, match="never started"):
        quick.ensure_running()
    quick.start()
    assert quick._process is not None
    quick._process.wait(30)
    with pytest.raises(ControlPlaneError, match="exited with code 0"):
        quick.ensure_running()

    slow = Component("slow", [sys.executable, "-c", "import time; time.sleep(60)"],
                     tmp_path / "slow.log")  # fmt: skip
    slow.start()
    slow.ensure_running()
    slow.stop()
    slow.ensure_running()  # stopped on purpose: a poll that still lists it goes on
