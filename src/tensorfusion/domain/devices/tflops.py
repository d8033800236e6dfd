"""FP16 TFLOPS of a discovered GPU model (deployment.md §9.1, api.md §2.8).

Order: the ProviderConfig's `hardwareMetadata[]` (the agent reads it from
`TF_PROVIDER_HARDWARE_METADATA`), then the GPU-info catalogue (`tensorfusion/data/gpu_info.yaml`),
else 0 with a message for the Warning Event `UnknownGPUModel`. An entry matches when its
`model` or `fullModelName` equals the product name case-insensitively (runs of spaces count as
one), also after stripping a leading vendor word (`NVIDIA H100 80GB HBM3` matches
`H100 80GB HBM3`). Within each table a match on the whole names wins over one after stripping,
then the first entry in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from pydantic import ValidationError

from tensorfusion.domain.devices.document_fields import DocumentFields, join, load_yaml
from tensorfusion.domain.devices.inventory import ProviderError
from tensorfusion.domain.model.errors import issues_from
from tensorfusion.domain.model.provider import HardwareModelInfo
from tensorfusion.domain.quantities import Quantity

__all__ = [
    "FROM_CATALOGUE",
    "FROM_PROVIDER_CONFIG",
    "UNKNOWN_GPU_MODEL",
    "GPUInfo",
    "TflopsLookup",
    "lookup_tflops",
    "parse_gpu_catalogue",
    "parse_hardware_metadata",
]

UNKNOWN_GPU_MODEL: Final = "UnknownGPUModel"
"""Reason of the Warning Event for a model found in neither table."""
FROM_PROVIDER_CONFIG: Final = "ProviderConfig"
FROM_CATALOGUE: Final = "catalogue"
_VENDOR_WORDS: Final = frozenset({"nvidia", "amd", "intel"})
_CATALOGUE_KEYS: Final = ("costPerHour", "fp16TFlops", "fullModelName", "model", "vendor", "vram")


@dataclass(frozen=True, slots=True)
class GPUInfo:
    """One row of the GPU-info catalogue."""

    model: str
    full_model_name: str
    vendor: str
    fp16_tflops: Quantity
    """Dense FP16 Tensor Core peak, TFLOPS."""
    vram_bytes: int = 0
    """Nominal memory; the agent reports what the device says."""


@dataclass(frozen=True, slots=True)
class TflopsLookup:
    """The TFLOPS found for a product name, where (`source`, the entry's `model`), or why not."""

    tflops: Quantity
    source: str = ""
    """`ProviderConfig`, `catalogue`, or empty when unknown."""
    model: str = ""
    message: str = ""
    """Set when unknown: the text of the `UnknownGPUModel` Event."""

    @property
    def tflops_milli(self) -> int:
        """TFLOPS in thousandths, as the allocator counts them."""
        return self.tflops.milli()

    @property
    def known(self) -> bool:
        """Whether a table had the model."""
        return bool(self.source)


def _normal(name: str) -> str:
    return " ".join(name.lower().split())


def _stripped(name: str, vendors: frozenset[str]) -> str:
    first, _, rest = name.partition(" ")
    return rest if first in vendors and rest else name


def _names(entry_names: Iterable[str | None]) -> set[str]:
    return {_normal(name) for name in entry_names if name}


def _find(
    product: str, rows: Sequence[Sequence[str | None]], vendors: frozenset[str]
) -> int | None:
    """Index of the first row whose names match `product` whole, else after stripping."""
    whole = _normal(product)
    for i, names in enumerate(rows):
        if whole in _names(names):
            return i
    wanted = {whole, _stripped(whole, vendors)}
    for i, names in enumerate(rows):
        normal = _names(names)
        if wanted & (normal | {_stripped(name, vendors) for name in normal}):
            return i
    return None


def lookup_tflops(
    product_name: str,
    hardware_metadata: Sequence[HardwareModelInfo],
    catalogue: Sequence[GPUInfo],
    *,
    vendor: str = "NVIDIA",
) -> TflopsLookup:
    """FP16 TFLOPS of `product_name` (the device's name as discovered)."""
    vendors = _VENDOR_WORDS | {_normal(vendor)}
    configured = [(h.model, h.full_model_name) for h in hardware_metadata]
    found = _find(product_name, configured, vendors)
    if found is not None:
        entry = hardware_metadata[found]
        return TflopsLookup(entry.fp16_tflops, FROM_PROVIDER_CONFIG, entry.model)
    known = [(g.model, g.full_model_name) for g in catalogue]
    found = _find(product_name, known, vendors)
    if found is not None:
        row = catalogue[found]
        return TflopsLookup(row.fp16_tflops, FROM_CATALOGUE, row.model)
    return TflopsLookup(
        Quantity(Decimal(0)),
        message=(
            f"GPU model {product_name!r} is neither in the ProviderConfig's hardwareMetadata nor "
            "in the GPU-info catalogue, so its TFLOPS capacity is 0 and no TFLOPS request fits "
            "on it; add the model with its fp16TFlops to the ProviderConfig's "
            "spec.hardwareMetadata"
        ),
    )


def parse_gpu_catalogue(text: str, source: str) -> tuple[GPUInfo, ...]:
    """The catalogue file: a list of `{model, fullModelName, vendor, fp16TFlops, vram}`
    (`costPerHour` accepted, not used here); one ProviderError on the first bad field."""
    doc = DocumentFields(source)
    data = load_yaml(text, source)
    rows: list[GPUInfo] = []
    for i, raw in enumerate(doc.sequence("", data if data is not None else [])):
        path = join("", i)
        entry = doc.mapping(path, raw, _CATALOGUE_KEYS, required=("model", "fp16TFlops"))
        model = doc.text(join(path, "model"), entry["model"])
        rows.append(
            GPUInfo(
                model=model,
                full_model_name=doc.text(
                    join(path, "fullModelName"), entry.get("fullModelName", model)
                ),
                vendor=doc.text(join(path, "vendor"), entry.get("vendor", "NVIDIA")),
                fp16_tflops=doc.quantity(join(path, "fp16TFlops"), entry["fp16TFlops"], "989.5"),
                vram_bytes=doc.byte_count(join(path, "vram"), entry.get("vram", 0)),
            )
        )
    return tuple(rows)


def parse_hardware_metadata(text: str, source: str) -> tuple[HardwareModelInfo, ...]:
    """`hardwareMetadata` from JSON or YAML text (the env `TF_PROVIDER_HARDWARE_METADATA`): a list
    of entries, or a mapping holding `hardwareMetadata` (a ProviderConfig spec or whole object);
    empty text is an empty table. ProviderError names `source`, the field and the value."""
    data = load_yaml(text, source) if text.strip() else []
    prefix: list[str | int] = []
    if isinstance(data, Mapping):
        spec = data.get("spec")
        holder: Mapping[str, Any] = spec if isinstance(spec, Mapping) else data
        prefix = ["spec", "hardwareMetadata"] if holder is spec else ["hardwareMetadata"]
        data = holder.get("hardwareMetadata", [])
    if not isinstance(data, list):
        path = ".".join(str(p) for p in prefix)
        DocumentFields(source).fail(path, "must be a list of {model, fp16TFlops, ...}", data)
    entries: list[HardwareModelInfo] = []
    problems: list[str] = []
    for i, raw in enumerate(data):
        try:
            entries.append(HardwareModelInfo.model_validate(raw))
        except ValidationError as exc:
            problems += [f"{source}: {issue}" for issue in issues_from(exc, [*prefix, i])]
    if problems:
        raise ProviderError("\n".join(problems))
    return tuple(entries)
