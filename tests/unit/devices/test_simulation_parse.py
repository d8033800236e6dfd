"""The simulated GPU file: a good file parses into the spec; each bad one is one exact error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorfusion.domain.devices.inventory import HostFacts, NVLinkPeer, ProviderError
from tensorfusion.domain.devices.simulation import parse_simulation, simulated_uuid
from tensorfusion.domain.devices.simulation_steps import GpuLoad, Step, WorkerLoad

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "simulated-gpus.yaml"

GOOD = """
node: {name: node-a, hostRAM: 512Gi, dataDisk: 2T}
gpus:
  - model: NVIDIA A100-SXM4-80GB
    vram: 81920.5Mi
    count: 2
    numaNode: 1
    usage: {compute: 20, memoryUsed: 1Gi}
    workers:
      w1: [{at: 0, compute: 10}, {at: 1m, computeThrottledPerSecond: 2}]
  - model: Tesla T4
    vendor: NVIDIA
    vram: 16Gi
    uuid: GPU-Custom-1
    pciBusId: 0000:3B:00.0
nvlink:
  - {gpus: [0, 1], links: 12, version: 3}
"""


def test_a_good_file_parses_into_devices_node_facts_and_links() -> None:
    spec = parse_simulation(GOOD, "sim.yaml", node_name="ignored")
    assert spec.source == "sim.yaml"
    assert spec.node == HostFacts(host_ram_bytes=512 << 30, data_disk_bytes=2 * 10**12)
    first, second, third = (gpu.device for gpu in spec.gpus)
    assert (first.uuid, second.uuid) == (simulated_uuid("node-a", 0), simulated_uuid("node-a", 1))
    assert (first.index, second.index, third.index) == (0, 1, 2)
    assert first.vram_bytes == 80 << 30  # rounded down to a whole MiB
    assert (first.model, first.vendor, first.numa_node) == ("NVIDIA A100-SXM4-80GB", "NVIDIA", 1)
    assert (first.pci_bus_id, second.pci_bus_id) == ("00000000:01:00.0", "00000000:02:00.0")
    assert first.nvlinks == (NVLinkPeer("00000000:02:00.0", 12, 3, 600_000),)
    assert second.nvlinks == (NVLinkPeer("00000000:01:00.0", 12, 3, 600_000),)
    assert (third.uuid, third.pci_bus_id, third.numa_node) == ("GPU-Custom-1", "0000:3B:00.0", -1)
    assert third.nvlinks == ()
    assert spec.gpus[0].usage == (
        Step(0.0, GpuLoad(compute_percentage=20.0, memory_used_bytes=1 << 30)),
    )
    worker = spec.gpus[1].workers[0]
    assert worker.name == "w1"
    assert worker.steps == (
        Step(0.0, WorkerLoad(compute_percentage=10.0)),
        Step(60.0, WorkerLoad(compute_percentage=10.0, compute_throttled_per_s=2.0)),
    )


def test_generated_uuids_are_stable_and_differ_by_node_and_index() -> None:
    text = "gpus: [{model: L4, vram: 24Gi, count: 2}]"
    on_a = [g.device.uuid for g in parse_simulation(text, "s", node_name="a").gpus]
    again = [g.device.uuid for g in parse_simulation(text, "s", node_name="a").gpus]
    on_b = [g.device.uuid for g in parse_simulation(text, "s", node_name="b").gpus]
    assert on_a == again
    assert len({*on_a, *on_b}) == 4
    assert on_a[0] == simulated_uuid("a", 0)
    assert on_a[0].startswith("GPU-") and len(on_a[0]) == 40


def test_without_a_node_name_uuids_are_seeded_by_sim() -> None:
    spec = parse_simulation("gpus: [{model: L4, vram: 24Gi}]", "s")
    assert spec.gpus[0].device.uuid == simulated_uuid("sim", 0)
    assert spec.node == HostFacts()


def test_the_example_file_parses() -> None:
    spec = parse_simulation(EXAMPLE.read_text(encoding="utf-8"), str(EXAMPLE), "node-1")
    assert len(spec.gpus) == 4
    assert all(len(gpu.device.nvlinks) == 3 for gpu in spec.gpus)
    assert spec.gpus[3].usage[1] == Step(30.0, GpuLoad(90.0, 70 << 30, 94.0, 600.0))


def test_the_documented_complete_file_parses() -> None:
    doc = (ROOT / "docs" / "hypervisor.md").read_text(encoding="utf-8")
    section = doc[doc.index("### Simulated GPU provider") :]
    text = section[section.index("```yaml") + len("```yaml") : section.index("```\n\nRules")]
    spec = parse_simulation(text, "hypervisor.md", "ignored")
    assert [g.device.uuid for g in spec.gpus][2] == "GPU-5a1c7e2e-0d5b-4c1e-9f3a-2b7d8e6f4a10"
    assert spec.gpus[0].device.uuid == simulated_uuid("gpu-node-1", 0)
    assert [len(g.device.nvlinks) for g in spec.gpus] == [2, 2, 2]
    assert [w.name for w in spec.gpus[1].workers] == ["infer-7d9f-0", "train-llm-0"]
    assert spec.gpus[0].usage[-1].load.errors == ()
    assert spec.gpus[0].usage[-1].load.temperature_c == 94


def test_steps_carry_over_the_fields_they_do_not_set() -> None:
    text = """
gpus:
  - model: L4
    vram: 24Gi
    usage:
      - {at: 5, compute: 50, temperature: 40, errors: [xid 13]}
      - {at: 1m30s, temperature: 90}
      - {at: 100.5, errors: []}
"""
    usage = parse_simulation(text, "s").gpus[0].usage
    assert usage == (
        Step(5.0, GpuLoad(compute_percentage=50.0, temperature_c=40.0, errors=("xid 13",))),
        Step(90.0, GpuLoad(compute_percentage=50.0, temperature_c=90.0, errors=("xid 13",))),
        Step(100.5, GpuLoad(compute_percentage=50.0, temperature_c=90.0)),
    )


def _gpu(extra: str) -> str:
    return f"gpus:\n  - model: L4\n    vram: 80Gi\n{extra}"


BAD = [
    (
        "- 1",
        "sim.yaml: invalid value [1]: the file must be a mapping with `gpus` (and optional "
        "`node`, `nvlink`)",
    ),
    (
        "",
        "sim.yaml: invalid value null: the file must be a mapping with `gpus` (and optional "
        "`node`, `nvlink`)",
    ),
    ("gpu: []", "sim.yaml: gpu: unknown field (allowed: gpus, node, nvlink)"),
    ("node: {}", "sim.yaml: gpus: required field is missing"),
    ("gpus: []", "sim.yaml: gpus: invalid value []: must not be empty"),
    (
        "gpus: [{model: L4, vram: 80Gi}, {model: L4, vram: 80XB}]",
        'sim.yaml: gpus[1].vram: invalid value "80XB": not a quantity (example: 80Gi)',
    ),
    (
        "gpus: [{model: L4, vram: -1Gi}]",
        'sim.yaml: gpus[0].vram: invalid value "-1Gi": must not be negative',
    ),
    (
        "gpus: [{model: L4, vram: 1Ki}]",
        'sim.yaml: gpus[0].vram: invalid value "1Ki": must be at least 1Mi',
    ),
    ("gpus: [{vram: 80Gi}]", "sim.yaml: gpus[0].model: required field is missing"),
    (
        "gpus: [{model: '', vram: 80Gi}]",
        'sim.yaml: gpus[0].model: invalid value "": must be a non-empty string',
    ),
    (
        _gpu("    count: 0\n"),
        "sim.yaml: gpus[0].count: invalid value 0: must be an integer from 1 to 128",
    ),
    (
        _gpu("    count: true\n"),
        "sim.yaml: gpus[0].count: invalid value true: must be an integer from 1 to 128",
    ),
    (
        "gpus: [{model: L4, vram: 1Gi, count: 100}, {model: L4, vram: 1Gi, count: 29}]",
        "sim.yaml: gpus[1].count: invalid value 29: more than 128 GPUs in all",
    ),
    (
        _gpu("    count: 2\n    uuid: GPU-1\n"),
        "sim.yaml: gpus[0].uuid: only allowed with count 1 (count is 2)",
    ),
    (
        "gpus: [{model: L4, vram: 1Gi, uuid: gpu-a}, {model: L4, vram: 1Gi, uuid: GPU-A}]",
        'sim.yaml: gpus[1].uuid: invalid value "GPU-A": already used by gpus[0]',
    ),
    (
        "gpus: [{model: L4, vram: 1Gi, pciBusId: '0000:AB:00.0'}, "
        "{model: L4, vram: 1Gi, pciBusId: '00000000:ab:00.0'}]",
        'sim.yaml: gpus[1].pciBusId: invalid value "00000000:ab:00.0": already used by gpus[0]',
    ),
    (
        "gpus: [{model: L4, vram: 1Gi, pciBusId: 00000000:02:00.0}]",
        "sim.yaml: gpus[0].pciBusId: invalid value 120.0: must be a PCI bus id such as "
        "00000000:19:00.0 (quote it: YAML reads an unquoted 00000000:19:00.0 as a number)",
    ),
    (
        "gpus: [{model: L4, vram: 1Gi, pciBusId: '0000:02:00.0'}, {model: L4, vram: 1Gi}]",
        "sim.yaml: gpus[1].pciBusId: the generated PCI bus id 00000000:02:00.0 of GPU 1 is "
        "already used by gpus[0]; give that GPU another pciBusId",
    ),
    (
        _gpu("    uuid: GPU_1\n"),
        'sim.yaml: gpus[0].uuid: invalid value "GPU_1": must be usable as an object name once '
        "lower-cased: letters, digits, '-' and '.', starting and ending with a letter or digit",
    ),
    (
        _gpu("    pciBusId: '19:00.0'\n"),
        'sim.yaml: gpus[0].pciBusId: invalid value "19:00.0": must be a PCI bus id such as '
        "00000000:19:00.0",
    ),
    (
        _gpu("    numaNode: -2\n"),
        "sim.yaml: gpus[0].numaNode: invalid value -2: must be an integer from -1 to 1023",
    ),
    (
        _gpu("    vendr: NVIDIA\n"),
        "sim.yaml: gpus[0].vendr: unknown field (allowed: count, model, numaNode, pciBusId, usage, "
        "uuid, vendor, vram, workers)",
    ),
    (
        _gpu("    usage: {compute: 120}\n"),
        "sim.yaml: gpus[0].usage.compute: invalid value 120: must be a number from 0 to 100",
    ),
    (
        _gpu("    usage: {temp: 90}\n"),
        "sim.yaml: gpus[0].usage.temp: unknown field (allowed: compute, errors, graphicsClock, "
        "memoryClock, memoryUsed, nvlinkRx, nvlinkTx, pcieRx, pcieTx, power, smClock, temperature, "
        "videoClock)",
    ),
    (
        _gpu("    usage: {memoryUsed: 90Gi}\n"),
        'sim.yaml: gpus[0].usage.memoryUsed: invalid value "90Gi": must be at most the GPU\'s '
        "vram (80Gi)",
    ),
    (
        _gpu("    usage: hot\n"),
        'sim.yaml: gpus[0].usage: invalid value "hot": must be a mapping (constant) or a list of '
        "steps with `at`",
    ),
    (
        _gpu("    usage: [{compute: 1}]\n"),
        "sim.yaml: gpus[0].usage[0].at: required field is missing",
    ),
    (
        _gpu("    usage: [{at: 30, compute: 1}, {at: 10s, compute: 2}]\n"),
        'sim.yaml: gpus[0].usage[1].at: invalid value "10s": must be later than the previous '
        "step's at (30 s)",
    ),
    (
        _gpu("    usage: [{at: soon}]\n"),
        'sim.yaml: gpus[0].usage[0].at: invalid value "soon": must be seconds (a number of at '
        "least 0) or a duration (30s, 2m)",
    ),
    (
        _gpu("    usage: {errors: [1]}\n"),
        "sim.yaml: gpus[0].usage.errors[0]: invalid value 1: must be a non-empty string",
    ),
    (
        _gpu("    workers: {w1: {computeThrottledPerSecond: -1}}\n"),
        "sim.yaml: gpus[0].workers.w1.computeThrottledPerSecond: invalid value -1: must be a "
        "number of at least 0",
    ),
    (
        _gpu("    workers: [w1]\n"),
        'sim.yaml: gpus[0].workers: invalid value ["w1"]: must be a mapping of worker pod name to '
        "its usage",
    ),
    (
        "gpus: [{model: L4, vram: 1Gi, count: 2}]\nnvlink: [{gpus: [0, 2]}]",
        "sim.yaml: nvlink[0].gpus[1]: invalid value 2: must be an integer from 0 to 1",
    ),
    (
        "gpus: [{model: L4, vram: 1Gi, count: 2}]\nnvlink: [{gpus: [0, 0]}]",
        "sim.yaml: nvlink[0].gpus: invalid value [0,0]: must list at least two different GPU "
        "indices",
    ),
    (
        "gpus: [{model: L4, vram: 1Gi, count: 2}]\nnvlink: [{gpus: [0, 1]}, {gpus: [1, 0]}]",
        "sim.yaml: nvlink[1].gpus: invalid value [1,0]: GPUs 0 and 1 are already linked by "
        "nvlink[0]",
    ),
    (
        "gpus: [{model: L4, vram: 1Gi, count: 2}]\nnvlink: [{gpus: [0, 1], version: 9}]",
        "sim.yaml: nvlink[0].version: invalid value 9: must be an integer from 1 to 5",
    ),
    (
        "node: {hostRAM: lots}\ngpus: [{model: L4, vram: 1Gi}]",
        'sim.yaml: node.hostRAM: invalid value "lots": not a quantity (example: 80Gi)',
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_a_bad_file_is_one_error_naming_file_field_and_value(text: str, message: str) -> None:
    with pytest.raises(ProviderError) as caught:
        parse_simulation(text, "sim.yaml")
    assert str(caught.value) == message


def test_text_that_is_not_yaml_names_the_file_line_and_column() -> None:
    with pytest.raises(ProviderError) as caught:
        parse_simulation("gpus:\n  - {model: L4\n", "sim.yaml")
    assert str(caught.value) == (
        "sim.yaml: not valid YAML (line 3, column 1): expected ',' or '}', but got '<stream end>'"
    )
