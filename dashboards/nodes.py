"""GPU nodes: allocation per node now and over time, and the utilisation of their GPUs."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboards.layout import (
    PanelIds,
    filter_variable,
    new_dashboard,
    row,
    table_panel,
    timeseries_panel,
)

__all__ = ["UID", "build"]

UID = "tf-nodes"


def build() -> Dashboard:
    """The nodes dashboard."""
    ids = PanelIds()
    return (
        new_dashboard(
            UID,
            "Nodes",
            "GPU nodes: allocation and utilisation.",
            [filter_variable("pool", "Pool"), filter_variable("node", "Node")],
        )
        .with_row(row(ids, "Now (newest recording cycle in the range)"))
        .with_panel(
            table_panel(
                ids, "Nodes", "nodes.table", description="Allocation of each GPU node (requests)."
            )
        )
        .with_row(row(ids, "Over time"))
        .with_panel(
            timeseries_panel(ids, "TFLOPS allocated", ["nodes.tflops_allocated"], unit="percent")
        )
        .with_panel(
            timeseries_panel(ids, "VRAM allocated", ["nodes.vram_allocated"], unit="percent")
        )
        .with_panel(
            timeseries_panel(
                ids,
                "GPU utilisation (average over the node's GPUs)",
                ["nodes.utilisation"],
                unit="percent",
            )
        )
        .with_panel(
            timeseries_panel(
                ids, "GPU power (sum over the node's GPUs)", ["nodes.power"], unit="watt"
            )
        )
    )
