"""What a worker container gets on a node whose GPUs run under NVIDIA MPS (hypervisor.md,
*GPU isolation*): the environment that connects it to the node's MPS daemon and holds it to its
limits, and the host directories that make the connection possible.

Mapping of the `isolation` annotation: `shared` connects through MPS with no limit (the GPUs
are in EXCLUSIVE_PROCESS compute mode, so a process outside MPS could not share them);
`soft` adds the per-client device-memory limit (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, from
`vram-limit`); `hard` adds the per-client share of the streaming multiprocessors
(`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, from `compute-percent-limit`, else `tflops-limit` as a
percent of the card's TFLOPS); `partitioned` is refused before a pod gets here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tensorfusion.domain.allocation_request import ResourceAmount, sm_percent
from tensorfusion.domain.devices.kubelet_messages import Mount
from tensorfusion.domain.vocabulary import IsolationMode

__all__ = [
    "CLIENT_LOG_DIR",
    "CLIENT_PIPE_DIR",
    "CLIENT_SHM_DIR",
    "ClientLimits",
    "client_env",
    "client_limits",
    "client_mounts",
]

PIPE_ENV: Final = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV: Final = "CUDA_MPS_LOG_DIRECTORY"
MEMORY_ENV: Final = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
THREADS_ENV: Final = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
CLIENT_PIPE_DIR: Final = "/tmp/nvidia-mps"
CLIENT_LOG_DIR: Final = "/var/log/nvidia-mps"
CLIENT_SHM_DIR: Final = "/dev/shm"
_MIB: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class ClientLimits:
    """What MPS enforces for one worker: per-GPU device memory (bytes, 0 none) and the SM share
    (percent, 0 none), for `gpus` GPUs."""

    isolation: IsolationMode
    gpus: int
    vram_bytes: int = 0
    sm_percent: int = 0


def _share(limit: ResourceAmount, capacities_tflops_milli: Sequence[int]) -> int:
    if limit.percent_milli > 0:
        return min(max(-(-limit.percent_milli // 1000), 1), 100)
    shares = [sm_percent(limit.tflops_milli, c) for c in capacities_tflops_milli]
    known = [s for s in shares if s > 0]
    # One share holds for every GPU of the client: the strictest keeps each under its limit.
    return min(known) if known else 0


def client_limits(
    isolation: IsolationMode, limit: ResourceAmount, capacities_tflops_milli: Sequence[int]
) -> ClientLimits:
    """What MPS enforces for a worker of `isolation` with the per-GPU `limit` on GPUs of these
    capacities."""
    gpus = len(capacities_tflops_milli)
    if isolation not in (IsolationMode.SOFT, IsolationMode.HARD):
        return ClientLimits(isolation, gpus)
    vram = max(limit.vram_bytes, 0)
    share = _share(limit, capacities_tflops_milli) if isolation is IsolationMode.HARD else 0
    return ClientLimits(isolation, gpus, vram_bytes=vram, sm_percent=0 if share >= 100 else share)


def _memory_text(vram_bytes: int, gpus: int) -> str:
    mib = max(vram_bytes // _MIB, 1)  # rounded down: never above the limit
    return ",".join(f"{ordinal}={mib}MB" for ordinal in range(gpus))


def client_env(limits: ClientLimits) -> dict[str, str]:
    """The worker container's MPS variables (the device ordinals are the container's own:
    0..n-1 over the GPUs it sees)."""
    env = {PIPE_ENV: CLIENT_PIPE_DIR, LOG_ENV: CLIENT_LOG_DIR}
    if limits.vram_bytes > 0 and limits.gpus > 0:
        env[MEMORY_ENV] = _memory_text(limits.vram_bytes, limits.gpus)
    if limits.sm_percent > 0:
        env[THREADS_ENV] = str(limits.sm_percent)
    return env


def client_mounts(pipe_dir: str, log_dir: str, shm_dir: str) -> tuple[Mount, ...]:
    """The daemon's pipe directory, its log directory (read-only) and the shared memory, from
    their host paths."""
    return (
        Mount(container_path=CLIENT_PIPE_DIR, host_path=pipe_dir),
        Mount(container_path=CLIENT_LOG_DIR, host_path=log_dir, read_only=True),
        Mount(container_path=CLIENT_SHM_DIR, host_path=shm_dir),
    )
