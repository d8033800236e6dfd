"""The chart's GPU-info catalogue is a byte-for-byte copy of the packaged one (deployment.md §5).

`charts/tensor-fusion/files/gpu-info.yaml` becomes ConfigMap `<fullname>-public-gpu-info`
(`-gpu-info-config`); `src/tensorfusion/data/gpu_info.yaml` is what the node agent loads. A
catalogue change must be copied: `cp src/tensorfusion/data/gpu_info.yaml
charts/tensor-fusion/files/gpu-info.yaml`.
"""

from __future__ import annotations

from pathlib import Path

from tensorfusion.domain.devices.tflops import parse_gpu_catalogue

ROOT = Path(__file__).resolve().parents[3]
PACKAGED = ROOT / "src" / "tensorfusion" / "data" / "gpu_info.yaml"
CHART_COPY = ROOT / "charts" / "tensor-fusion" / "files" / "gpu-info.yaml"


def test_chart_copy_is_identical_to_the_packaged_catalogue() -> None:
    packaged, copy = PACKAGED.read_bytes(), CHART_COPY.read_bytes()
    assert copy == packaged, (
        f"{CHART_COPY.relative_to(ROOT)} differs from {PACKAGED.relative_to(ROOT)}; "
        f"copy it: cp {PACKAGED.relative_to(ROOT)} {CHART_COPY.relative_to(ROOT)}"
    )


def test_chart_copy_is_a_catalogue_the_loader_reads() -> None:
    rows = parse_gpu_catalogue(CHART_COPY.read_text(encoding="utf-8"), str(CHART_COPY))
    assert rows, "the chart's GPU-info catalogue is empty"
