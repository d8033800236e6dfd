"""The NVML provider over a fake `pynvml`: discovery, samples, and the missing or failing NVML
paths (one clear ProviderError, never a traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorfusion.adapters.devices.nvml import NvmlProvider, load_pynvml
from tensorfusion.domain.devices.inventory import (
    HostFacts,
    NVLinkPeer,
    ProcessMemory,
    ProviderError,
)

from .fake_nvml import (
    DRIVER_NOT_LOADED,
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    LIBRARY_NOT_FOUND,
    NO_PERMISSION,
    NOT_SUPPORTED,
    UNINITIALIZED,
    UNKNOWN,
    FakeGpu,
    FakeLink,
    FakeNvml,
)

FACTS = HostFacts(host_ram_bytes=1 << 40, data_disk_bytes=2 << 40)
BUS_A, BUS_B, BUS_C = "00000000:19:00.0", "00000000:3B:00.0", "00000000:4C:00.0"
HINT = (
    "the NVIDIA driver must be installed and libnvidia-ml.so.1 loadable by the agent "
    "(or run the agent with the simulated GPU provider)"
)


def _pair() -> list[FakeGpu]:
    """Two GPUs joined by 4 NVLink 4.0 links (NVML version 6)."""
    return [
        FakeGpu(
            "GPU-aaa",
            name=b"NVIDIA H100 80GB HBM3",
            bus=BUS_A.encode(),
            numa=0,
            links={i: FakeLink(BUS_B.lower()) for i in range(4)},
        ),
        FakeGpu(
            "GPU-bbb",
            name="NVIDIA H100 80GB HBM3",
            bus=BUS_B,
            numa=1,
            total=80 << 30,
            links={i: FakeLink(BUS_A) for i in range(4)},
        ),
    ]


def _provider(nvml: FakeNvml, sysfs: Path = Path("/nonexistent")) -> NvmlProvider:
    return NvmlProvider(nvml, sysfs_root=sysfs, node_facts=lambda: FACTS)


def test_discovery_reports_identity_memory_topology_and_node_facts() -> None:
    inventory = _provider(FakeNvml(_pair())).discover()
    first, second = inventory.devices
    assert (first.uuid, first.index, first.model, first.vendor) == (
        "GPU-aaa",
        0,
        "NVIDIA H100 80GB HBM3",
        "NVIDIA",
    )
    assert first.vram_bytes == 81559 << 20  # rounded down to a whole MiB
    assert second.vram_bytes == 80 << 30
    assert (first.pci_bus_id, first.numa_node) == (BUS_A, 0)
    assert (second.pci_bus_id, second.numa_node) == (BUS_B, 1)
    assert first.nvlinks == (NVLinkPeer(BUS_B, 4, 4, 200_000),)  # remote bus matched to GPU 1
    assert second.nvlinks == (NVLinkPeer(BUS_A, 4, 4, 200_000),)
    assert inventory.node == FACTS


def test_nvswitch_links_make_every_switched_gpu_a_peer() -> None:
    gpus = [
        FakeGpu(
            f"GPU-{i}",
            bus=bus,
            links={0: FakeLink("SWITCH", to_switch=True), 1: FakeLink("SWITCH", to_switch=True)},
        )
        for i, bus in enumerate((BUS_A, BUS_B, BUS_C))
    ]
    devices = _provider(FakeNvml(gpus)).discover().devices
    assert devices[0].nvlinks == (
        NVLinkPeer(BUS_B, 2, 4, 100_000),
        NVLinkPeer(BUS_C, 2, 4, 100_000),
    )
    assert [p.peer_pci_bus_id for p in devices[2].nvlinks] == [BUS_A, BUS_B]


def test_numa_falls_back_to_sysfs_then_to_unknown(tmp_path: Path) -> None:
    device_dir = tmp_path / "bus" / "pci" / "devices" / "0000:19:00.0"
    device_dir.mkdir(parents=True)
    (device_dir / "numa_node").write_text("1\n", encoding="ascii")
    gpus = _pair()
    for gpu in gpus:
        gpu.failing["nvmlDeviceGetNumaNodeId"] = NOT_SUPPORTED
    first, second = _provider(FakeNvml(gpus), tmp_path).discover().devices
    assert (first.numa_node, second.numa_node) == (1, -1)


def test_optional_queries_that_are_missing_or_unsupported_give_defaults() -> None:
    gpus = _pair()
    gpus[0].failing["nvmlDeviceGetPciInfo"] = NOT_SUPPORTED
    gpus[0].numa = -1
    nvml = FakeNvml(gpus, missing=("nvmlDeviceGetNvLinkState",))
    first, second = _provider(nvml).discover().devices
    assert (first.pci_bus_id, first.numa_node, first.nvlinks) == ("", -1, ())
    assert second.nvlinks == ()


def test_a_sample_reports_every_metric_and_the_processes() -> None:
    gpus = _pair()
    gpus[0].util, gpus[0].used, gpus[0].temperature, gpus[0].power_mw = 73, 5 << 30, 64, 412_500
    gpus[0].clocks = {0: 1980, 1: 1980, 2: 2619, 3: 1545}
    gpus[0].pcie = {0: 300, 1: 1200}
    gpus[0].compute = [(4242, 3 << 30), (17, None)]
    gpus[0].graphics = [(4242, 3 << 30), (99, 1 << 20)]
    first, second = _provider(FakeNvml(gpus)).sample(1000.0)
    assert first.uuid == "GPU-aaa"
    assert (first.compute_percentage, first.memory_used_bytes) == (73, 5 << 30)
    assert (first.temperature_c, first.power_w) == (64, 412.5)
    clocks = (first.graphics_clock_mhz, first.sm_clock_mhz, first.memory_clock_mhz)
    assert clocks == (1980, 1980, 2619)
    assert first.video_clock_mhz == 1545
    assert (first.pcie_rx_kb_per_s, first.pcie_tx_kb_per_s) == (1200, 300)
    assert first.processes == (
        ProcessMemory(17, 0),
        ProcessMemory(99, 1 << 20),
        ProcessMemory(4242, 3 << 30),
    )
    assert (first.nvlink_rx_kb_per_s, first.limiter, first.errors) == (0, (), ())
    assert second.uuid == "GPU-bbb"


def test_nvlink_throughput_is_the_change_of_the_counters() -> None:
    gpus = _pair()
    provider = _provider(FakeNvml(gpus))
    provider.discover()
    assert provider.sample(100.0)[0].nvlink_rx_kb_per_s == 0  # no earlier counters yet
    for link in gpus[0].links.values():
        link.rx_kib += 1000
        link.tx_kib += 250
    first = provider.sample(110.0)[0]
    assert first.nvlink_rx_kb_per_s == pytest.approx(4 * 1000 * 1.024 / 10)
    assert first.nvlink_tx_kb_per_s == pytest.approx(4 * 250 * 1.024 / 10)


def test_device_errors_go_into_the_sample_and_unsupported_queries_do_not() -> None:
    gpus = _pair()
    gpus[0].failing = {
        "nvmlDeviceGetUtilizationRates": GPU_IS_LOST,
        "nvmlDeviceGetTemperature": NOT_SUPPORTED,
        "nvmlDeviceGetPowerUsage": FUNCTION_NOT_FOUND,
        "nvmlDeviceGetComputeRunningProcesses": NO_PERMISSION,
    }
    gpus[0].temperature = 50
    nvml = FakeNvml(gpus, missing=("nvmlDeviceGetGraphicsRunningProcesses",))
    first, second = _provider(nvml).sample(1.0)
    assert first.errors == ("nvmlDeviceGetUtilizationRates: GPU is lost",)
    assert (first.compute_percentage, first.temperature_c, first.power_w) == (0, 0, 0)
    assert first.processes == ()
    assert second.errors == ()


def test_a_gpu_that_cannot_be_reached_gives_a_sample_with_the_error() -> None:
    gpus = _pair()
    provider = _provider(FakeNvml(gpus))
    provider.discover()
    gpus[1].failing["nvmlDeviceGetHandleByUUID"] = GPU_IS_LOST
    first, second = provider.sample(1.0)
    assert first.errors == ()
    assert (second.uuid, second.errors) == ("GPU-bbb", ("GPU GPU-bbb: GPU is lost",))


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
        (DRIVER_NOT_LOADED, "Driver Not Loaded"),
    ],
)
def test_nvml_that_cannot_start_is_one_clear_error(code: int, reason: str) -> None:
    provider = _provider(FakeNvml(_pair(), init_error=code))
    expected = f"NVML is not available on this node: nvmlInit: {reason}; {HINT}"
    for call in (provider.discover, lambda: provider.sample(1.0)):
        with pytest.raises(ProviderError) as caught:
            call()
        assert str(caught.value) == expected


def test_a_missing_pynvml_package_is_one_clear_error() -> None:
    def absent(name: str) -> object:
        raise ModuleNotFoundError(f"No module named {name!r}")

    with pytest.raises(ProviderError) as caught:
        load_pynvml(absent)
    assert str(caught.value) == (
        "NVML is not available on this node: the Python package nvidia-ml-py (module pynvml) "
        "cannot be imported (No module named 'pynvml'); install it, or run the agent with the "
        "simulated GPU provider"
    )


@pytest.mark.parametrize(
    ("failing", "gpu_failing", "message"),
    [
        ({"nvmlDeviceGetCount": UNKNOWN}, {}, "NVML failed: nvmlDeviceGetCount: Unknown Error"),
        (
            {},
            {"nvmlDeviceGetMemoryInfo": GPU_IS_LOST},
            "NVML failed: nvmlDeviceGetMemoryInfo (GPU 1): GPU is lost",
        ),
        (
            {},
            {"nvmlDeviceGetUUID": UNKNOWN},
            "NVML failed: nvmlDeviceGetUUID (GPU 1): Unknown Error",
        ),
        (
            {},
            {"nvmlDeviceGetName": NOT_SUPPORTED},
            "NVML failed: nvmlDeviceGetName (GPU 1): Not Supported",
        ),
    ],
)
def test_a_query_every_gpu_needs_fails_discovery_with_its_name(
    failing: dict[str, int], gpu_failing: dict[str, int], message: str
) -> None:
    gpus = _pair()
    gpus[1].failing = gpu_failing
    with pytest.raises(ProviderError) as caught:
        _provider(FakeNvml(gpus, failing=failing)).discover()
    assert str(caught.value) == message


def test_nvml_is_initialised_once_again_after_close_or_uninitialized() -> None:
    nvml = FakeNvml(_pair())
    provider = _provider(nvml)
    provider.discover()
    provider.sample(1.0)
    assert nvml.inits == 1
    provider.close()
    assert nvml.shutdowns == 1
    provider.discover()
    assert nvml.inits == 2
    nvml.failing = {"nvmlDeviceGetCount": UNINITIALIZED}
    with pytest.raises(ProviderError, match="Uninitialized"):
        provider.discover()
    nvml.failing = {}
    provider.discover()
    assert nvml.inits == 3


def test_the_provider_is_named_nvml() -> None:
    assert _provider(FakeNvml([])).name == "nvml"
    assert _provider(FakeNvml([])).discover().devices == ()
