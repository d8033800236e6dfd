"""Small builders for allocator tests."""

from __future__ import annotations

from tensorfusion.domain.allocation_request import AllocationRequest, ResourceAmount
from tensorfusion.domain.allocator.allocator import Allocator, PoolSettings
from tensorfusion.domain.allocator.gpu_state import GPUState
from tensorfusion.domain.quantities import parse_quantity
from tensorfusion.domain.vocabulary import GPUPhase, IsolationMode

POOL = "tensor-fusion-shared"


def tflops(text: str) -> int:
    """Milli-TFLOPs of a quantity text."""
    return parse_quantity(text).milli()


def vram(text: str) -> int:
    """Bytes of a quantity text."""
    return parse_quantity(text).ceil()


def gpu(
    name: str,
    node: str,
    *,
    capacity: tuple[str, str] = ("312", "80Gi"),
    phase: GPUPhase = GPUPhase.RUNNING,
    pool: str = POOL,
    index: int | None = None,
    model: str = "A100",
    numa: int = -1,
) -> GPUState:
    """A GPU with the given capacity."""
    return GPUState(
        name=name,
        node=node,
        pool=pool,
        capacity_tflops=tflops(capacity[0]),
        capacity_vram=vram(capacity[1]),
        phase=phase,
        index=index,
        model=model,
        numa_node=numa,
        uuid=name,
    )


def request(
    uid: str,
    req: tuple[str, str] = ("0", "0"),
    *,
    limit: tuple[str, str] = ("0", "0"),
    count: int = 1,
    namespace: str = "default",
    isolation: IsolationMode = IsolationMode.SOFT,
    percent: str | None = None,
    pool: str = POOL,
    **extra: object,
) -> AllocationRequest:
    """An allocation request in quantity texts."""
    return AllocationRequest(
        pool=pool,
        namespace=namespace,
        pod_name=uid,
        pod_uid=uid,
        workload=uid,
        count=count,
        isolation=isolation,
        request=ResourceAmount(
            tflops_milli=0 if percent else tflops(req[0]),
            percent_milli=tflops(percent) if percent else 0,
            vram_bytes=vram(req[1]),
        ),
        limit=ResourceAmount(tflops_milli=tflops(limit[0]), vram_bytes=vram(limit[1])),
        **extra,  # type: ignore[arg-type]
    )


def allocator_with(*gpus: GPUState, pools: tuple[PoolSettings, ...] = ()) -> Allocator:
    """An allocator holding the GPUs."""
    allocator = Allocator()
    for settings in pools:
        allocator.set_pool(settings)
    for g in gpus:
        allocator.upsert_gpu(g)
    return allocator


class AllNodesPass:
    """A native view under which every node passes with fit 0."""

    def rejection(self, node: str) -> tuple[str, str] | None:
        return None

    def admits(self, node: str) -> bool:
        return True

    def fits_somewhere(self) -> bool:
        return True

    def fit(self, node: str) -> int:
        return 0

    def admitted_fit(self, node: str) -> int:
        return 0

    def fit_bound(self) -> int:
        return 0

    def cpu_request(self) -> int:
        return 0

    def cpu_free(self, node: str) -> int | None:
        return None
