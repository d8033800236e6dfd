"""Usage rows on a node whose MPS daemon serves: the limits MPS holds each worker to, the
daemon's state on every GPU row, and throttle ticks counted at a hard worker's SM share."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.devices.inventory import DeviceSample, LimiterCounters
from tensorfusion.domain.isolation.mps_client import ClientLimits
from tensorfusion.domain.isolation.mps_daemon import MpsState, MpsStatus
from tensorfusion.domain.isolation.share_ticks import ShareTicks
from tensorfusion.domain.vocabulary import IsolationMode
from tensorfusion.hypervisor.usage_samples import NodeGPUCapacity, usage_samples, workers_of

GIB = 1 << 30
GPU = "gpu-aa"


def _pod(name: str, isolation: str, **limits: str) -> dict[str, Any]:
    annotations = {KEYS.gpu_ids: GPU, KEYS.isolation: isolation}
    keys = {"tflops": KEYS.tflops_limit, "vram": KEYS.vram_limit}
    annotations.update({keys[k]: v for k, v in limits.items()})
    return {"metadata": {"name": name, "namespace": "ml", "annotations": annotations},
            "status": {"phase": "Running"}}  # fmt: skip


def _node(state: MpsState | None) -> NodeGPUCapacity:
    mps = MpsStatus(state, restarts=2) if state is not None else None
    return NodeGPUCapacity("n", "p", {GPU: 100_000}, {GPU: 80 * GIB}, mps=mps)


def _sample(used: float, limiter: bool = False) -> DeviceSample:
    counters = (("hard", LimiterCounters(compute_throttled=7)),) if limiter else ()
    return DeviceSample(uuid=GPU, compute_percentage=used, memory_used_bytes=0,
                        worker_compute_percentage=(("hard", used),), limiter=counters)  # fmt: skip


PODS = [_pod("hard", "hard", tflops="25", vram="10Gi"), _pod("soft", "soft", vram="10Gi"),
        _pod("shared", "shared", vram="10Gi")]  # fmt: skip


def _rows(node: NodeGPUCapacity, used: float, ticks: ShareTicks, limiter: bool = False) -> Any:
    return usage_samples(node, [_sample(used, limiter)], workers_of(PODS, "p"), ticks)


def test_enforced_limits_per_isolation_mode_and_the_daemon_on_gpu_rows() -> None:
    gpus, workers = _rows(_node(MpsState.RUNNING), 0.0, ShareTicks())
    assert (gpus[0].mps_daemon_up, gpus[0].mps_daemon_restarts) == (True, 2)
    enforced = {w.worker: (w.enforced_vram_limit_bytes, w.enforced_compute_percent)
                for w in workers}  # fmt: skip
    assert enforced == {"hard": (10 * GIB, 25.0), "soft": (10 * GIB, 0.0), "shared": (0, 0.0)}


def test_nothing_is_enforced_while_the_daemon_does_not_serve_or_does_not_run() -> None:
    for state in (MpsState.RESTARTING, None):
        gpus, workers = _rows(_node(state), 0.0, ShareTicks())
        assert not gpus[0].mps_daemon_up
        assert {w.enforced_vram_limit_bytes for w in workers} == {0}


def test_samples_at_the_share_are_throttle_ticks_that_accumulate() -> None:
    ticks, node = ShareTicks(), _node(MpsState.RUNNING)
    counts = []
    for used in (10.0, 24.0, 25.0, 5.0, 30.0):  # 24 >= 0.95 x 25
        _, workers = _rows(node, used, ticks)
        counts.append(next(w.compute_throttled_cnt for w in workers if w.worker == "hard"))
    assert counts == [0, 1, 2, 2, 3]


def test_a_provider_with_limiter_counters_keeps_them() -> None:
    _, workers = _rows(_node(MpsState.RUNNING), 25.0, ShareTicks(), limiter=True)
    assert next(w.compute_throttled_cnt for w in workers if w.worker == "hard") == 7


def test_ticks_of_workers_that_are_gone_are_forgotten() -> None:
    ticks = ShareTicks()
    _rows(_node(MpsState.RUNNING), 25.0, ticks)
    usage_samples(_node(MpsState.RUNNING), [_sample(25.0)], [], ticks)
    assert ticks.counts == {}


def test_what_allocate_enforced_wins_over_the_annotations() -> None:
    committed = ClientLimits(IsolationMode.HARD, 1, vram_bytes=GIB, sm_percent=10)
    node = replace(_node(MpsState.RUNNING), enforced={("ml", "hard"): committed})
    _, workers = _rows(node, 0.0, ShareTicks())
    hard = next(w for w in workers if w.worker == "hard")
    assert (hard.enforced_vram_limit_bytes, hard.enforced_compute_percent) == (GIB, 10.0)
