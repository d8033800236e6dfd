"""bench/gpu_isolation_probe.py on a machine without the NVIDIA driver (these machines): a clear
message and exit 2, never a traceback; its clients report the failure as JSON."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).parents[3] / "bench" / "gpu_isolation_probe.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


@pytest.fixture(autouse=True)
def _no_driver() -> None:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return
    pytest.skip("this machine has the NVIDIA driver: run the probe itself")


def test_without_the_driver_it_says_so_and_exits_2() -> None:
    done = _run()
    assert done.returncode == 2
    assert "libcuda.so.1 cannot be loaded" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("kind", ["alloc", "spin"])
def test_a_client_reports_its_failure_as_json(kind: str) -> None:
    done = _run("--client", kind)
    assert done.returncode == 0
    assert "libcuda.so.1" in json.loads(done.stdout)["error"]
