"""GPUs: allocation, utilisation, memory, temperature and power per GPU, and the pods on them."""

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

UID = "tf-gpus"


def build() -> Dashboard:
    """The GPUs dashboard."""
    ids = PanelIds()
    return (
        new_dashboard(
            UID,
            "GPUs",
            "Each GPU: allocation and the node agents' samples.",
            [filter_variable("pool", "Pool"), filter_variable("node", "Node")],
        )
        .with_row(row(ids, "Now (newest recording cycle in the range)"))
        .with_panel(
            table_panel(
                ids,
                "GPUs",
                "gpus.table",
                description="Capacity and allocation (requests) of each GPU.",
            )
        )
        .with_panel(table_panel(ids, "Pods holding GPUs", "gpus.pods", height=6))
        .with_row(row(ids, "Over time"))
        .with_panel(timeseries_panel(ids, "Allocated", ["gpus.allocated"], unit="percent"))
        .with_panel(timeseries_panel(ids, "Utilisation", ["gpus.compute"], unit="percent"))
        .with_panel(timeseries_panel(ids, "Memory used", ["gpus.memory"], unit="bytes"))
        .with_panel(timeseries_panel(ids, "Temperature", ["gpus.temperature"], unit="celsius"))
        .with_panel(timeseries_panel(ids, "Power", ["gpus.power"], unit="watt", span=24))
    )
