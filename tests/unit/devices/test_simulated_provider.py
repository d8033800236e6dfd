"""The simulated provider: samples over time, limiter counters, disappearance, and the file
adapter that re-reads its file on every discovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorfusion.adapters.devices.simulated_file import SimulatedFileProvider
from tensorfusion.domain.devices.inventory import (
    DeviceProvider,
    HostFacts,
    LimiterCounters,
    ProviderError,
)
from tensorfusion.domain.devices.simulated_provider import SimulatedProvider
from tensorfusion.domain.devices.simulation import parse_simulation

START = 1_700_000_000.0

TIMELINE = """
node: {hostRAM: 64Gi}
gpus:
  - model: NVIDIA L4
    vram: 24Gi
    usage:
      - {at: 10, compute: 40, memoryUsed: 4Gi, temperature: 50, power: 60, pcieRx: 100,
         pcieTx: 200, nvlinkRx: 1, nvlinkTx: 2, graphicsClock: 1500, smClock: 1600,
         memoryClock: 6000, videoClock: 1400}
      - {at: 30s, temperature: 95}
      - {at: 1m, errors: [Xid 79]}
    workers:
      w1:
        - {at: 0, compute: 25, memoryUsed: 2Gi}
        - {at: 20, computeThrottledPerSecond: 3, vramFreezedPerSecond: 0.5}
        - {at: 40, computeThrottledPerSecond: 0, vramResumedPerSecond: 0.25}
      w2: {compute: 5}
  - model: NVIDIA L4
    vram: 24Gi
"""


def _provider() -> SimulatedProvider:
    return SimulatedProvider(parse_simulation(TIMELINE, "sim.yaml", "node-a"), START)


def test_before_the_first_step_a_gpu_is_idle() -> None:
    first, second = _provider().sample(START + 5)
    assert (first.compute_percentage, first.memory_used_bytes, first.temperature_c) == (0, 0, 0)
    assert second.compute_percentage == 0 and second.worker_compute_percentage == ()


def test_a_step_sets_every_metric_from_its_time_on() -> None:
    sample = _provider().sample(START + 10)[0]
    assert sample.compute_percentage == 40
    assert sample.memory_used_bytes == 4 << 30
    assert (sample.temperature_c, sample.power_w) == (50, 60)
    assert (sample.pcie_rx_kb_per_s, sample.pcie_tx_kb_per_s) == (100, 200)
    assert (sample.nvlink_rx_kb_per_s, sample.nvlink_tx_kb_per_s) == (1, 2)
    clocks = (sample.graphics_clock_mhz, sample.sm_clock_mhz, sample.memory_clock_mhz)
    assert clocks == (1500, 1600, 6000)
    assert sample.video_clock_mhz == 1400
    assert sample.errors == ()


def test_a_gpu_turns_hot_at_30_s_and_keeps_its_other_figures() -> None:
    provider = _provider()
    before, after = provider.sample(START + 29.9)[0], provider.sample(START + 30)[0]
    assert (before.temperature_c, after.temperature_c) == (50, 95)
    assert after.compute_percentage == 40 and after.memory_used_bytes == 4 << 30


def test_device_errors_appear_from_their_step_on() -> None:
    provider = _provider()
    assert provider.sample(START + 59)[0].errors == ()
    assert provider.sample(START + 61)[0].errors == ("Xid 79",)


def test_workers_report_their_share_and_vram() -> None:
    sample = _provider().sample(START + 1)[0]
    assert sample.worker_compute_percentage == (("w1", 25.0), ("w2", 5.0))
    assert sample.worker_memory_bytes == (("w1", 2 << 30), ("w2", 0))


@pytest.mark.parametrize(
    ("elapsed", "counters"),
    [
        (10, LimiterCounters(0, 0, 0)),
        (21, LimiterCounters(3, 0, 0)),  # 3/s for 1 s
        (21.9, LimiterCounters(5, 0, 0)),  # 5.7 and 0.95 events so far: rounded down
        (40, LimiterCounters(60, 10, 0)),  # 3/s and 0.5/s for 20 s
        (100, LimiterCounters(60, 40, 15)),  # then 0, 0.5/s and 0.25/s for 60 s more
    ],
)
def test_limiter_counters_integrate_the_rates(elapsed: float, counters: LimiterCounters) -> None:
    sample = _provider().sample(START + elapsed)[0]
    assert sample.limiter == (("w1", counters), ("w2", LimiterCounters()))


def test_time_before_the_start_counts_as_the_start() -> None:
    assert _provider().sample(START - 100) == _provider().sample(START)


def test_discovery_lists_the_gpus_and_node_facts() -> None:
    provider: DeviceProvider = _provider()
    inventory = provider.discover()
    assert [d.index for d in inventory.devices] == [0, 1]
    assert inventory.node == HostFacts(host_ram_bytes=64 << 30)
    assert provider.name == "simulated:sim.yaml"


def test_replacing_the_spec_makes_a_gpu_disappear_and_counters_keep_counting() -> None:
    provider = _provider()
    uuids = [d.uuid for d in provider.discover().devices]
    only_first = TIMELINE[: TIMELINE.rindex("  - model: NVIDIA L4")]
    provider.replace(parse_simulation(only_first, "sim.yaml", "node-a"))
    assert [d.uuid for d in provider.discover().devices] == uuids[:1]
    samples = provider.sample(START + 40)
    assert [s.uuid for s in samples] == uuids[:1]
    assert samples[0].limiter[0] == ("w1", LimiterCounters(60, 10, 0))


ONE_GPU = "gpus: [{model: NVIDIA L4, vram: 24Gi, usage: {compute: 7}}]\n"
TWO_GPUS = "gpus: [{model: NVIDIA L4, vram: 24Gi, count: 2, usage: {compute: 9}}]\n"


def test_the_file_provider_rereads_its_file_on_every_discovery(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(ONE_GPU, encoding="utf-8")
    provider = SimulatedFileProvider(path, node_name="node-a", start_s=START)
    assert provider.name == f"simulated:{path}"
    assert len(provider.discover().devices) == 1
    path.write_text(TWO_GPUS, encoding="utf-8")
    assert [s.compute_percentage for s in provider.sample(START)] == [7]  # until rediscovery
    assert len(provider.discover().devices) == 2
    assert [s.compute_percentage for s in provider.sample(START)] == [9, 9]
    path.write_text(ONE_GPU, encoding="utf-8")
    assert len(provider.discover().devices) == 1


def test_the_file_provider_counts_time_from_its_clock(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text("gpus: [{model: L4, vram: 1Gi, usage: [{at: 10, compute: 3}]}]", "utf-8")
    provider = SimulatedFileProvider(path, clock=lambda: START)
    assert provider.sample(START + 9)[0].compute_percentage == 0
    assert provider.sample(START + 10)[0].compute_percentage == 3


def test_a_bad_file_fails_at_start_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text("gpus: [{model: L4, vram: 80XB}]", encoding="utf-8")
    with pytest.raises(ProviderError) as caught:
        SimulatedFileProvider(path)
    assert str(caught.value) == (
        f'{path}: gpus[0].vram: invalid value "80XB": not a quantity (example: 80Gi)'
    )


def test_a_missing_file_is_a_provider_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ProviderError) as caught:
        SimulatedFileProvider(path)
    assert str(caught.value) == (
        f"{path}: cannot read the simulated GPU file: No such file or directory"
    )


def test_a_broken_edit_fails_discovery_and_keeps_the_previous_gpus(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(TWO_GPUS, encoding="utf-8")
    provider = SimulatedFileProvider(path, start_s=START)
    path.write_text("gpus: [{model: L4}]", encoding="utf-8")
    with pytest.raises(ProviderError, match=r"gpus\[0\]\.vram: required field is missing"):
        provider.discover()
    assert len(provider.spec.gpus) == 2
    assert len(provider.sample(START)) == 2
