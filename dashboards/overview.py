"""Cluster overview: pools' GPUs, physical, virtual and allocated TFLOPS and VRAM, and the
oversubscription in use (limits beyond physical capacity)."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboards.layout import (
    PanelIds,
    filter_variable,
    new_dashboard,
    row,
    stat_panel,
    table_panel,
    timeseries_panel,
)

__all__ = ["UID", "build"]

UID = "tf-overview"


def build() -> Dashboard:
    """The overview dashboard."""
    ids = PanelIds()
    return (
        new_dashboard(
            UID,
            "Cluster overview",
            "GPU pools at a glance: capacity, allocation and oversubscription.",
            [filter_variable("pool", "Pool")],
        )
        .with_row(row(ids, "Now (newest recording cycle in the range)"))
        .with_panel(stat_panel(ids, "GPUs", "overview.gpus"))
        .with_panel(stat_panel(ids, "GPU nodes", "overview.nodes"))
        .with_panel(stat_panel(ids, "Workers", "overview.workers"))
        .with_panel(
            stat_panel(
                ids,
                "TFLOPS allocated",
                "overview.tflops_allocated",
                unit="percent",
                span=6,
                description="Requested TFLOPS of the physical TFLOPS.",
            )
        )
        .with_panel(
            stat_panel(
                ids,
                "VRAM allocated",
                "overview.vram_allocated",
                unit="percent",
                span=6,
                description="Requested VRAM of the physical VRAM.",
            )
        )
        .with_panel(
            table_panel(
                ids,
                "Pools",
                "overview.pools",
                description=(
                    "Physical capacity (the pool's GPUs), virtual capacity (with "
                    "oversubscription; empty while no limit is committed), allocated "
                    "(requests) and limits. Limits of physical above 100 % is "
                    "oversubscription in use."
                ),
                height=6,
            )
        )
        .with_row(row(ids, "Over time"))
        .with_panel(
            timeseries_panel(ids, "TFLOPS allocated and limited", ["overview.tflops"], unit="none")
        )
        .with_panel(
            timeseries_panel(ids, "VRAM allocated and limited", ["overview.vram"], unit="bytes")
        )
        .with_panel(
            timeseries_panel(
                ids,
                "Allocated of physical and of virtual capacity",
                ["overview.allocation_percent"],
                unit="percent",
            )
        )
        .with_panel(
            timeseries_panel(
                ids, "Allocations and failures (cumulative)", ["overview.scheduling"], unit="none"
            )
        )
    )
