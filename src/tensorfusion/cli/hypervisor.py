"""`tensor-fusion hypervisor`: the node agent, configured by its pod's environment."""

from __future__ import annotations

import asyncio
import os

import typer

from tensorfusion.app.hypervisor import run_hypervisor
from tensorfusion.cli.controller import command_help
from tensorfusion.domain.settings.hypervisor_settings import hypervisor_usage

__all__ = ["HELP", "hypervisor"]


def hypervisor(ctx: typer.Context) -> None:
    """Run the node agent of `GPU_NODE_NAME`.

    Configured by the environment the controller renders into its pod (`GPU_NODE_NAME`,
    `TENSOR_FUSION_POOL_NAME`, `HYPERVISOR_PORT`, `TF_ISOLATION_MODE`, ...; docs/hypervisor.md).
    Flags: `--kubeconfig FILE` out of a pod, `--discovery-interval 10m`, `--log-format json`.
    Exit 2 on a bad flag, variable or simulated-provider file.
    """
    raise typer.Exit(asyncio.run(run_hypervisor(list(ctx.args), os.environ)))


HELP = command_help(hypervisor.__doc__, hypervisor_usage())
"""`--help`: the docstring, then every flag and variable with its default (from the tables)."""
