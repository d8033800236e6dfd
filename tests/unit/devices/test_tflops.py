"""FP16 TFLOPS of a discovered model: ProviderConfig first, then the catalogue, else 0."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from tensorfusion.adapters.devices.gpu_catalogue import load_gpu_catalogue
from tensorfusion.domain.devices.inventory import ProviderError
from tensorfusion.domain.devices.tflops import (
    FROM_CATALOGUE,
    FROM_PROVIDER_CONFIG,
    GPUInfo,
    lookup_tflops,
    parse_gpu_catalogue,
    parse_hardware_metadata,
)
from tensorfusion.domain.model.provider import HardwareModelInfo
from tensorfusion.domain.quantities import Quantity


def _meta(model: str, tflops: str, full: str | None = None) -> HardwareModelInfo:
    data = {"model": model, "fp16TFlops": tflops}
    if full is not None:
        data["fullModelName"] = full
    return HardwareModelInfo.model_validate(data)


CATALOGUE = (
    GPUInfo("H100_SXM", "NVIDIA H100 80GB HBM3", "NVIDIA", Quantity("989.5"), 80 << 30),
    GPUInfo("T4", "Tesla T4", "NVIDIA", Quantity("65"), 16 << 30),
)


@pytest.mark.parametrize(
    ("product", "metadata", "tflops", "source", "model"),
    [
        # ProviderConfig, on fullModelName, case-insensitively, spaces collapsed
        (
            "nvidia  h100 80gb HBM3",
            [_meta("H100", "1000", "NVIDIA H100 80GB HBM3")],
            "1000",
            FROM_PROVIDER_CONFIG,
            "H100",
        ),
        # ProviderConfig, on model after stripping the vendor word of the product name
        (
            "NVIDIA H100 80GB HBM3",
            [_meta("H100 80GB HBM3", "900")],
            "900",
            FROM_PROVIDER_CONFIG,
            "H100 80GB HBM3",
        ),
        # ... and of the entry's name
        (
            "H100 PCIe",
            [_meta("NVIDIA H100 PCIe", "756")],
            "756",
            FROM_PROVIDER_CONFIG,
            "NVIDIA H100 PCIe",
        ),
        # ProviderConfig wins over the catalogue
        ("Tesla T4", [_meta("t4x", "70", "TESLA T4")], "70", FROM_PROVIDER_CONFIG, "t4x"),
        # no ProviderConfig entry: the catalogue, on its full name
        ("NVIDIA H100 80GB HBM3", [_meta("A100", "312")], "989.5", FROM_CATALOGUE, "H100_SXM"),
        # the catalogue on its model
        ("t4", [], "65", FROM_CATALOGUE, "T4"),
        # a name that only shares a prefix does not match
        ("NVIDIA H100", [_meta("H100 80GB HBM3", "900")], "0", "", ""),
        # "Tesla" is not a vendor word
        ("T4 Tesla", [], "0", "", ""),
    ],
)
def test_lookup_order_and_matching(
    product: str, metadata: list[HardwareModelInfo], tflops: str, source: str, model: str
) -> None:
    found = lookup_tflops(product, metadata, CATALOGUE)
    assert (found.tflops, found.source, found.model) == (Quantity(tflops), source, model)
    assert found.known == bool(source)
    assert found.tflops_milli == int(Decimal(tflops) * 1000)


def test_a_whole_name_match_wins_over_a_stripped_one() -> None:
    metadata = [_meta("H100 PCIe", "1"), _meta("NVIDIA H100 PCIe", "2")]
    assert lookup_tflops("NVIDIA H100 PCIe", metadata, ()).tflops == Quantity("2")


def test_the_vendor_of_the_lookup_counts_as_a_vendor_word() -> None:
    found = lookup_tflops("Acme X1", [_meta("X1", "5")], (), vendor="Acme")
    assert (found.tflops, found.source) == (Quantity("5"), FROM_PROVIDER_CONFIG)


def test_an_unknown_model_has_zero_tflops_and_a_message_for_the_event() -> None:
    found = lookup_tflops("NVIDIA Mystery 9000", [], CATALOGUE)
    assert (found.tflops_milli, found.known) == (0, False)
    assert found.message == (
        "GPU model 'NVIDIA Mystery 9000' is neither in the ProviderConfig's hardwareMetadata nor "
        "in the GPU-info catalogue, so its TFLOPS capacity is 0 and no TFLOPS request fits on "
        "it; add the model with its fp16TFlops to the ProviderConfig's spec.hardwareMetadata"
    )


@pytest.mark.parametrize(
    ("product", "model", "tflops"),
    [
        ("NVIDIA H200", "H200", "989.5"),
        ("NVIDIA H100 80GB HBM3", "H100_SXM", "989.5"),
        ("NVIDIA H100 PCIe", "H100_PCIe", "756"),
        ("NVIDIA A100-SXM4-40GB", "A100_SXM4_40GB", "312"),
        ("NVIDIA A100 80GB PCIe", "A100_PCIe_80GB", "312"),
        ("NVIDIA L40S", "L40S", "362"),
        ("NVIDIA L4", "L4", "121"),
        ("Tesla T4", "T4", "65"),
        ("Tesla V100-SXM2-32GB", "V100_SXM2_32GB", "125"),
        ("NVIDIA GeForce RTX 4090", "RTX_4090", "330.3"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX_6000_Ada", "364.2"),
    ],
)
def test_the_packaged_catalogue_knows_common_nvml_names(
    product: str, model: str, tflops: str
) -> None:
    found = lookup_tflops(product, [], load_gpu_catalogue())
    assert (found.source, found.model, found.tflops) == (FROM_CATALOGUE, model, Quantity(tflops))


def test_the_packaged_catalogue_has_unique_names_and_positive_figures() -> None:
    rows = load_gpu_catalogue()
    names = [name.lower() for row in rows for name in {row.model, row.full_model_name}]
    assert len(names) == len(set(names))
    assert all(row.fp16_tflops > Quantity("0") and row.vram_bytes > 0 for row in rows)


def test_a_catalogue_file_can_replace_the_packaged_one(tmp_path: Path) -> None:
    path = tmp_path / "gpu-info.yaml"
    path.write_text("- {model: T4, fullModelName: Tesla T4, costPerHour: 0.53, fp16TFlops: 65}\n")
    assert load_gpu_catalogue(path) == (GPUInfo("T4", "Tesla T4", "NVIDIA", Quantity("65")),)
    with pytest.raises(ProviderError, match="cannot read the GPU-info catalogue"):
        load_gpu_catalogue(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{model: T4}", 'gpu-info.yaml: invalid value {"model":"T4"}: must be a list'),
        ("- {fp16TFlops: 65}", "gpu-info.yaml: [0].model: required field is missing"),
        (
            "- {model: T4, fp16TFlops: fast}",
            'gpu-info.yaml: [0].fp16TFlops: invalid value "fast": not a quantity (example: 989.5)',
        ),
        (
            "- {model: T4, fp16TFlops: 65, price: 1}",
            "gpu-info.yaml: [0].price: unknown field (allowed: costPerHour, fp16TFlops, "
            "fullModelName, model, vendor, vram)",
        ),
    ],
)
def test_a_bad_catalogue_names_file_field_and_value(text: str, message: str) -> None:
    with pytest.raises(ProviderError) as caught:
        parse_gpu_catalogue(text, "gpu-info.yaml")
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "text",
    [
        '[{"model": "H100", "fp16TFlops": "989.5"}]',
        "hardwareMetadata: [{model: H100, fp16TFlops: 989.5}]",
        "spec: {vendor: NVIDIA, hardwareMetadata: [{model: H100, fp16TFlops: 989500m}]}",
    ],
)
def test_hardware_metadata_reads_a_list_a_spec_or_a_provider_config(text: str) -> None:
    (entry,) = parse_hardware_metadata(text, "TF_PROVIDER_HARDWARE_METADATA")
    assert (entry.model, entry.fp16_tflops) == ("H100", Quantity("989.5"))


def test_empty_hardware_metadata_is_an_empty_table() -> None:
    assert parse_hardware_metadata("  ", "env") == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "spec: {hardwareMetadata: [{model: H100, fp16TFlops: x}]}",
            'env: spec.hardwareMetadata[0].fp16TFlops: invalid value "x": must be a Kubernetes '
            'quantity such as "16Gi", "100" or "500m"',
        ),
        (
            "[{fp16TFlops: 1}, {model: A}]",
            "env: [0].model: required field is missing\nenv: [1].fp16TFlops: required field is "
            "missing",
        ),
        (
            "hardwareMetadata: H100",
            'env: hardwareMetadata: invalid value "H100": must be a list of {model, fp16TFlops, '
            "...}",
        ),
        (
            "[{model: H100",
            "env: not valid YAML (line 1, column 14): expected ',' or '}', but got '<stream end>'",
        ),
    ],
)
def test_bad_hardware_metadata_names_the_source_field_and_value(text: str, message: str) -> None:
    with pytest.raises(ProviderError) as caught:
        parse_hardware_metadata(text, "env")
    assert str(caught.value) == message
