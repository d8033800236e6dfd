"""The `rightSizing` section of a report as text, for the terminal and the HTML page."""

from __future__ import annotations

from typing import Any, Final

from tensorfusion.domain.allocation_request import ResourceAmount

__all__ = ["OUTCOME_ROWS", "freed_rows", "plan_name", "plan_notes", "sized_text"]

OUTCOME_ROWS: Final = (
    ("placed", "placed", ""), ("  placed after waiting", "placedAfterWaiting", ""),
    ("pending at end", "pending", ""), ("rejected (invalid input)", "rejected", ""),
    ("mean wait of placed pods", "meanWaitSeconds", " s"),
    ("p95 wait of placed pods", "p95WaitSeconds", " s"),
    ("VRAM allocated, mean", "meanVramAllocatedPercent", " %"),
    ("VRAM allocated, peak", "peakVramAllocatedPercent", " %"),
    ("TFLOPs allocated, mean", "meanTflopsAllocatedPercent", " %"),
    ("GPUs in use, mean", "meanGpusInUsePercent", " %"),
)  # fmt: skip
"""(label, key, unit) of the two runs' outcomes as the views show them."""


def _shown(resources: dict[str, str], key: str) -> str:
    amount = ResourceAmount.from_json(resources)
    if key == "vram":
        value, scale, unit = amount.vram_bytes, 2**30, "Gi"
    elif amount.percent_milli and not amount.tflops_milli:
        return f"{amount.percent_milli / 1000:g}%"
    else:
        value, scale, unit = amount.tflops_milli, 1000, ""
    return f"{value / scale:.1f}".removesuffix(".0") + unit if value else "-"


def _limit(limits: dict[str, str], requests: dict[str, str], key: str) -> str:
    """The limit as virtual capacity counts it: an unset one is the request."""
    given = key in limits or (key == "tflops" and "compute" in limits)
    return _shown(limits if given else requests, key)


def sized_text(plan: dict[str, Any], key: str) -> str:
    """A workload's per-GPU `key` (`tflops` or `vram`) in its `rightSizing.workloads` entry:
    `request -> new (limit old -> new)`, or the request alone when it stays."""
    before, after = plan["requests"], plan["rightSized"]["requests"]
    if before.get(key) == after.get(key):
        return _shown(before, key)
    limits = _limit(plan["limits"], before, key), _limit(plan["rightSized"]["limits"], after, key)
    return f"{_shown(before, key)} -> {_shown(after, key)} (limit {limits[0]} -> {limits[1]})"


def plan_name(plan: dict[str, Any]) -> str:
    """A workload of `rightSizing.workloads` by its entry's name (and namespace, unless default)."""
    namespace = plan["namespace"]
    return plan["entry"] if namespace == "default" else f"{namespace}/{plan['entry']}"


def plan_notes(plan: dict[str, Any]) -> str:
    """Why a workload of `rightSizing.workloads` stays as it is, and its warnings."""
    notes = plan["warnings"] if plan["changed"] else [plan["reason"], *plan["warnings"]]
    return "; ".join(notes)


def freed_rows(section: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, TFLOPS, VRAM) rows of the capacity given back, as the views show them."""
    rows = []
    for label, block, of in (
        ("requests", section["freed"]["requests"], "physical"),
        ("limits", section["freed"]["limits"], "virtual"),
    ):
        peak, mean = block["peak"], block["mean"]
        share = block[f"peakPercentOf{of.capitalize()}"]
        rows.append((f"{label}, at the most",
                     f"{peak['tflops']:,.1f} ({share['tflops']} % of {of})",
                     f"{peak['vramGiB']:,.1f} GiB ({share['vram']} % of {of})"))  # fmt: skip
        rows.append((f"{label}, mean while pods ran", f"{mean['tflops']:,.1f}",
                     f"{mean['vramGiB']:,.1f} GiB"))  # fmt: skip
    return rows
