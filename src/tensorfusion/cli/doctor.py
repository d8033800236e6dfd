"""`tensor-fusion doctor`: the production guide as checks (doctor.md).

`--values`/`--set` run the static checks on the values merged as Helm merges them over the
chart's own; `--kubeconfig` (or the in-cluster configuration) adds the live checks. Text
grouped by guide step, or JSON; exit 0 (nothing failed; with `--strict` nothing warned
either), 1 (something failed), 2 (bad usage or unreadable input, named on one line).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from rich.console import Console

from tensorfusion.adapters.http_client import HTTP_ERRORS
from tensorfusion.adapters.kube.client import KubeClientError, make_client, server_version
from tensorfusion.doctor.live_checks import run_live_checks
from tensorfusion.doctor.live_context import DEFAULT_NAMESPACE, DEFAULT_RELEASE
from tensorfusion.doctor.report import format_json, format_text
from tensorfusion.domain.doctor.results import CheckResult, exit_code
from tensorfusion.domain.doctor.set_values import SetError
from tensorfusion.domain.doctor.static_checks import static_checks
from tensorfusion.domain.doctor.values_merge import (
    MergedValues,
    ValuesError,
    load_values,
    merge_layers,
)

__all__ = ["doctor"]

EXIT_USAGE: Final = 2
SERVICE_ACCOUNT_TOKEN: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
SOURCE_CHART: Final = Path(__file__).resolve().parents[3] / "charts" / "tensor-fusion"
"""The chart next to the sources (a checkout or an editable install)."""


class OutputFormat(StrEnum):
    """`--output`."""

    text = "text"
    json = "json"


class UsageError(Exception):
    """Bad usage or unreadable input: one line, exit 2."""


def in_cluster() -> bool:
    """Whether this process runs in a pod with a ServiceAccount token."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and SERVICE_ACCOUNT_TOKEN.is_file()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise UsageError(f"{path}: cannot read: {reason}") from None


def _chart(directory: Path | None) -> tuple[dict[str, Any], str]:
    """The chart's values.yaml and appVersion."""
    chart = directory or SOURCE_CHART
    if not (chart / "values.yaml").is_file():
        raise UsageError(
            f"{chart}: no values.yaml; pass --chart with the tensor-fusion chart "
            "directory (helm pull tensor-fusion --repo "
            "https://download.tensor-fusion.ai --untar)"
        )
    defaults = load_values(_read(chart / "values.yaml"), str(chart / "values.yaml"))
    meta = load_values(_read(chart / "Chart.yaml"), str(chart / "Chart.yaml"))
    return defaults, str(meta.get("appVersion") or "")


def merged_values(
    files: Sequence[Path], sets: Sequence[str], chart: Path | None
) -> tuple[MergedValues, dict[str, Any], str]:
    """The values merged as Helm merges them, the chart's defaults and its appVersion;
    `UsageError` names the file (line, problem) or the `--set` that cannot be used."""
    try:
        defaults, app_version = _chart(chart)
        loaded = [(str(path), load_values(_read(path), str(path))) for path in files]
        return merge_layers(defaults, loaded, list(sets)), defaults, app_version
    except (ValuesError, SetError) as error:
        raise UsageError(str(error)) from None


def static_results(
    files: Sequence[Path], sets: Sequence[str], chart: Path | None, release: str
) -> tuple[list[CheckResult], dict[str, Any]]:
    """The static checks of doctor.md on the merged values, and those values."""
    merged, defaults, app_version = merged_values(files, sets, chart)
    results = static_checks(
        merged.values,
        value_sources=merged.sources,
        default_values=defaults,
        app_version=app_version,
        release=release,
    )
    return results, merged.values


async def live_results(
    kubeconfig: str | None,
    namespace: str,
    release: str,
    values: dict[str, Any] | None,
    send_test_alert: bool,
    api_url: str = "",
) -> list[CheckResult]:
    """The live checks against the cluster of `kubeconfig` (None: in-cluster)."""
    try:
        client = make_client(kubeconfig)
    except KubeClientError as error:
        raise UsageError(str(error)) from None
    try:
        try:
            await server_version(client)
        except HTTP_ERRORS as error:
            where = f"--kubeconfig {kubeconfig}" if kubeconfig else "in-cluster configuration"
            raise UsageError(f"{where}: the API server cannot be reached: {error}") from None
        return await run_live_checks(
            client,
            namespace=namespace,
            release=release,
            values=values,
            send_test_alert=send_test_alert,
            api_url=api_url,
        )
    finally:
        await client.close()


def doctor(
    ctx: typer.Context,
    values: Annotated[
        list[Path] | None,
        typer.Option(
            "--values",
            "-f",
            help="Values file (repeatable, in order over the chart's defaults, "
            "as Helm applies them).",
        ),
    ] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="KEY=VALUE as helm --set (repeatable, applied after the files)."
        ),
    ] = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            help="Kubeconfig file: adds the live checks (in a pod: the in-cluster configuration).",
        ),
    ] = None,
    namespace: Annotated[str, typer.Option(help="The release namespace.")] = DEFAULT_NAMESPACE,
    release: Annotated[str, typer.Option(help="The Helm release name.")] = DEFAULT_RELEASE,
    send_test_alert: Annotated[
        bool,
        typer.Option(
            "--send-test-alert",
            help="Post a short-lived TensorFusionDoctorTest alert to every "
            "Alertmanager the controller uses (the only write).",
        ),
    ] = False,
    api_url: Annotated[
        str,
        typer.Option(
            "--api-url",
            help="The controller's API as a port-forward exposes it (kubectl port-forward "
            "deployment/<release>-controller 8080:8080): http://localhost:8080. Without it the "
            "API is called through the API server's proxy, which cannot reach the chart's "
            "default loopback address.",
        ),
    ] = "",
    output: Annotated[
        OutputFormat, typer.Option("--output", "-o", help="text (grouped by guide step) or json.")
    ] = OutputFormat.text,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 on warnings too.")] = False,
    chart: Annotated[
        Path | None,
        typer.Option(
            help="The tensor-fusion chart directory whose values.yaml the values merge over "
            "(default: the chart next to the sources)."
        ),
    ] = None,
) -> None:
    """Check values files and a running release against the production guide."""
    files, expressions = list(values or ()), list(sets or ())
    live = kubeconfig is not None or in_cluster()
    if not files and not expressions and not live:
        typer.echo(f"{ctx.get_usage()}\nTry '{ctx.command_path} --help' for help.\n", err=True)
        typer.echo(
            "error: give --values/--set (static checks) or --kubeconfig (live checks)", err=True
        )
        raise typer.Exit(EXIT_USAGE)
    if api_url and (not api_url.startswith(("http://", "https://")) or len(api_url) > 2048):
        typer.echo(f"error: --api-url {api_url[:100]!r}: give an http:// or https:// URL",
                   err=True)  # fmt: skip
        raise typer.Exit(EXIT_USAGE)
    if send_test_alert and not live:
        typer.echo(
            "error: --send-test-alert needs --kubeconfig (or the in-cluster configuration)",
            err=True,
        )
        raise typer.Exit(EXIT_USAGE)
    try:
        results: list[CheckResult] = []
        merged: dict[str, Any] | None = None
        if files or expressions:
            results, merged = static_results(files, expressions, chart, release)
        if live:
            results += asyncio.run(
                live_results(kubeconfig, namespace, release, merged, send_test_alert, api_url)
            )
    except UsageError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    if output is OutputFormat.json:
        typer.echo(format_json(results))
    else:
        Console(soft_wrap=True, highlight=False).print(format_text(results))
    raise typer.Exit(exit_code(results, strict=strict))
