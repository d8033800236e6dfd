"""`tensor-fusion uninstall`: what the chart's pre-delete hook runs."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from tensorfusion.adapters.kube.client import KubeClientError, make_client
from tensorfusion.app.logging_setup import configure_logging
from tensorfusion.app.uninstall import remove_finalizers

__all__ = ["uninstall"]


def uninstall(
    kubeconfig: Annotated[
        str | None, typer.Option(help="Kubeconfig file (default: in-cluster, then ~/.kube).")
    ] = None,
) -> None:
    """Remove tensor-fusion.ai/finalizer from every pod (exit 1 if some pod kept it)."""
    configure_logging("text", "info")

    async def run() -> int:
        try:
            client = make_client(kubeconfig)
        except KubeClientError as error:
            typer.echo(f"error: {error}", err=True)
            return 2
        try:
            report = await remove_finalizers(client)
        finally:
            await client.close()
        typer.echo(f"finalizer removed from {len(report.cleared)} pod(s)")
        for pod, problem in report.failed.items():
            typer.echo(f"error: pod {pod}: {problem}", err=True)
        return 1 if report.failed else 0

    raise typer.Exit(asyncio.run(run()))
