"""`tensor-fusion controller`: a controller replica, with the flags `controller.command` gives."""

from __future__ import annotations

import asyncio
import inspect
import os

import typer
from rich.markup import escape

from tensorfusion.app.controller import run_controller
from tensorfusion.domain.settings.controller_settings import controller_usage

__all__ = ["CONTEXT", "HELP", "command_help", "controller"]

CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def controller(ctx: typer.Context) -> None:
    """Run a controller replica.

    Flags as the chart's `controller.command` writes them (Go style: `-leader-elect`,
    `-metrics-bind-address :9000`, ...; deployment.md §3.1), plus `--kubeconfig FILE` and
    `--log-format json` out of a pod. Exit 1 when the replica lost the Lease, 2 on a bad flag,
    variable or missing CRD, 3 on a fatal error.
    """
    raise typer.Exit(asyncio.run(run_controller(list(ctx.args), os.environ)))


def command_help(doc: str | None, usage: str) -> str:
    """A command's `--help` text: its docstring (paragraphs rewrapped), then `usage` verbatim."""
    paragraphs = inspect.cleandoc(doc or "").split("\n\n")
    return "\n\n".join([*(p.replace("\n", " ") for p in paragraphs), escape(usage)])


HELP = command_help(controller.__doc__, controller_usage())
"""`--help`: the docstring, then every flag and variable with its default (from the tables)."""
