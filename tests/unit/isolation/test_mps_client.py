"""What MPS enforces for a worker, per isolation mode (domain/isolation/mps_client.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tensorfusion.domain.allocation_request import ResourceAmount, sm_percent
from tensorfusion.domain.isolation.mps_client import (
    ClientLimits,
    client_env,
    client_limits,
    client_mounts,
)
from tensorfusion.domain.vocabulary import IsolationMode

GIB = 1 << 30
H100 = 989_000  # TFLOPS in milli
LIMIT = ResourceAmount(tflops_milli=247_250, vram_bytes=20 * GIB)


def test_shared_connects_through_mps_with_no_limit() -> None:
    limits = client_limits(IsolationMode.SHARED, LIMIT, [H100])
    assert limits == ClientLimits(IsolationMode.SHARED, 1)
    assert client_env(limits) == {
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps",
        "CUDA_MPS_LOG_DIRECTORY": "/var/log/nvidia-mps",
    }


def test_soft_limits_memory_only() -> None:
    env = client_env(client_limits(IsolationMode.SOFT, LIMIT, [H100, H100]))
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480MB,1=20480MB"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env


def test_hard_limits_memory_and_the_sm_share_from_tflops() -> None:
    env = client_env(client_limits(IsolationMode.HARD, LIMIT, [H100]))
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480MB"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"


def test_hard_compute_percent_wins_over_tflops() -> None:
    limit = ResourceAmount(percent_milli=12_500, vram_bytes=GIB)
    assert client_limits(IsolationMode.HARD, limit, [H100]).sm_percent == 13


def test_hard_share_is_the_strictest_over_unlike_gpus() -> None:
    limits = client_limits(
        IsolationMode.HARD, ResourceAmount(tflops_milli=50_000), [100_000, 200_000]
    )
    assert limits.sm_percent == 25


def test_a_share_of_the_whole_card_or_an_unknown_capacity_sets_no_share() -> None:
    assert (
        client_limits(IsolationMode.HARD, ResourceAmount(tflops_milli=H100), [H100]).sm_percent == 0
    )
    assert client_limits(IsolationMode.HARD, ResourceAmount(tflops_milli=1), [0]).sm_percent == 0


def test_partitioned_gets_no_mps_limit() -> None:
    assert client_limits(IsolationMode.PARTITIONED, LIMIT, [H100]).vram_bytes == 0


def test_memory_below_a_mib_is_one_mib() -> None:
    env = client_env(client_limits(IsolationMode.SOFT, ResourceAmount(vram_bytes=1000), [H100]))
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=1MB"


def test_mounts_share_pipe_log_and_shared_memory() -> None:
    mounts = client_mounts("/h/pipe", "/h/log", "/h/shm")
    assert [(m.container_path, m.host_path, m.read_only) for m in mounts] == [
        ("/tmp/nvidia-mps", "/h/pipe", False),
        ("/var/log/nvidia-mps", "/h/log", True),
        ("/dev/shm", "/h/shm", False),
    ]


@given(st.integers(1, 10**9), st.integers(1, 10**9))
def test_sm_percent_never_lets_the_limit_down_and_stays_in_range(limit: int, capacity: int) -> None:
    percent = sm_percent(limit, capacity)
    assert 1 <= percent <= 100
    assert percent * capacity >= min(limit, capacity) * 100  # the limit is reachable
    assert percent == 1 or (percent - 1) * capacity < limit * 100  # the smallest such share


@given(st.integers(0, 1 << 44))
def test_memory_limit_is_never_above_the_vram_limit(vram: int) -> None:
    env = client_env(client_limits(IsolationMode.SOFT, ResourceAmount(vram_bytes=vram), [H100]))
    if vram == 0:
        assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env
        return
    mib = int(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].removeprefix("0=").removesuffix("MB"))
    assert mib * (1 << 20) <= max(vram, 1 << 20)
