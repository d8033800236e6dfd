"""`tensor-fusion alerts`: the standalone evaluator (`run`) and rule tests (`test`)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.markup import escape

from tensorfusion.adapters.alertmanager.targets import (
    AlertmanagerAddressError,
    parse_alertmanager_addresses,
)
from tensorfusion.adapters.tsdb.greptime_store import GreptimeSettings
from tensorfusion.alerting.rule_test import FixtureError, run_rule_test
from tensorfusion.alerting.standalone import StandaloneEvaluator, StandaloneOptions
from tensorfusion.domain.timestamps import format_rfc3339_ms

__all__ = ["app"]

app = typer.Typer(
    name="alerts",
    help="Evaluate alert rules: standalone against a store, or against fixture rows.",
    no_args_is_help=True,
)
_console = Console(soft_wrap=True)
_errors = Console(stderr=True, soft_wrap=True)


def _listen(value: str) -> tuple[str, int | None]:
    if value in ("", "0", "off"):
        return "", None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise typer.BadParameter(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8080) or 'off'")
    return host or "0.0.0.0", int(port)


@app.command("run")
def run(
    config_dir: Annotated[
        Path, typer.Option("--config-dir", help="Directory holding config.yaml (hot-reloaded).")
    ],
    alert_manager_addr: Annotated[
        str,
        typer.Option(
            "--alert-manager-addr",
            help="Alertmanager URL(s), comma-separated, each with http:// or https://.",
        ),
    ],
    duckdb: Annotated[
        str | None, typer.Option("--duckdb", help="Embedded store file (default: in memory).")
    ] = None,
    greptime_host: Annotated[
        str | None,
        typer.Option("--greptime-host", envvar="TSDB_MYSQL_HOST", help="GreptimeDB host."),
    ] = None,
    greptime_port: Annotated[
        int, typer.Option("--greptime-port", envvar="TSDB_MYSQL_PORT", help="MySQL port.")
    ] = 4002,
    greptime_http_port: Annotated[
        int, typer.Option("--greptime-http-port", envvar="TSDB_HTTP_PORT", help="HTTP port.")
    ] = 4000,
    greptime_db: Annotated[
        str, typer.Option("--greptime-db", envvar="TSDB_MYSQL_DATABASE", help="Database.")
    ] = "public",
    greptime_cloud: Annotated[
        bool, typer.Option("--greptime-cloud", envvar="TSDB_IS_CLOUD", help="HTTPS + auth.")
    ] = False,
    greptime_user: Annotated[
        str, typer.Option("--greptime-user", envvar="TSDB_MYSQL_USER", help="Cloud user.")
    ] = "",
    state_file: Annotated[
        Path | None,
        typer.Option("--state-file", help="Where the firing set survives restarts."),
    ] = None,
    listen: Annotated[
        str, typer.Option("--listen", help="Status server HOST:PORT (/api/alerts, /metrics).")
    ] = "127.0.0.1:8080",
    poll_interval: Annotated[
        float, typer.Option("--poll-interval", help="Seconds between config.yaml checks.")
    ] = 5.0,
    log_level: Annotated[str, typer.Option("--log-level")] = "info",
) -> None:
    """Run the alert evaluator on its own until SIGTERM or Ctrl-C."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        urls = parse_alertmanager_addresses(alert_manager_addr)
    except AlertmanagerAddressError as error:
        _errors.print(f"error: {escape(str(error))}", highlight=False)
        raise typer.Exit(2) from None
    host, port = _listen(listen)
    greptime = None
    if greptime_host:
        greptime = GreptimeSettings(
            host=greptime_host,
            port=greptime_port,
            http_port=greptime_http_port,
            db=greptime_db,
            is_cloud=greptime_cloud,
            user=greptime_user,
            password=os.environ.get("TSDB_MYSQL_PASSWORD", ""),
        )
    options = StandaloneOptions(
        config_dir=config_dir,
        alertmanager_urls=urls,
        duckdb_path=duckdb,
        greptime=greptime,
        state_file=state_file,
        listen_host=host,
        listen_port=port,
        poll_interval_s=poll_interval,
    )
    asyncio.run(_run(options))


async def _run(options: StandaloneOptions) -> None:
    evaluator = StandaloneEvaluator(options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await evaluator.start()
    try:
        await stop.wait()
    finally:
        await evaluator.stop()


def _offset(ms: int, start_ms: int) -> str:
    seconds = (ms - start_ms) // 1000
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"+{hours}h{minutes:02d}m{secs:02d}s" if hours else f"+{minutes}m{secs:02d}s"


@app.command("test")
def test(
    rules: Annotated[
        Path, typer.Argument(help="Rules: a list, a config.yaml, a values.yaml, or 'defaults'.")
    ],
    fixture: Annotated[Path, typer.Option("--fixture", help="Fixture rows (YAML).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Evaluate rules over fixture rows on a simulated clock; print what fires and resolves."""
    try:
        result = run_rule_test(rules, fixture)
    except FixtureError as error:
        _errors.print(f"error: {escape(str(error))}", highlight=False)
        raise typer.Exit(2) from None
    report = result.report
    if as_json:
        body = report.as_dict()
        body["invalidRules"] = [str(problem) for problem in result.rules.problems]
        typer.echo(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode())
    else:
        for problem in result.rules.problems:
            _console.print(f"[red]invalid[/red] {escape(str(problem))}", highlight=False)
        for warning in [*result.rules.warnings, *report.warnings]:
            _console.print(f"[yellow]warning[/yellow] {escape(warning)}", highlight=False)
        _console.print(
            f"{len(result.rules.rules)} rules, {report.evaluations} evaluations from "
            f"{format_rfc3339_ms(result.start_ms)}",
            highlight=False,
        )
        for event in report.events:
            colour = "red" if event.kind == "firing" else "green"
            _console.print(
                f"{_offset(event.time_ms, result.start_ms)} [{colour}]{event.kind.upper()}"
                f"[/{colour}] {escape(event.rule)} instance={escape(event.instance)}: "
                f"{escape(event.summary)}",
                highlight=False,
            )
            if event.description:
                _console.print(f"    {escape(event.description)}", highlight=False)
        if report.still_firing:
            _console.print("still firing at the end:", highlight=False)
            for event in report.still_firing:
                _console.print(
                    f"  {escape(event.rule)} instance={escape(event.instance)}", highlight=False
                )
        for message in report.errors:
            _console.print(f"[red]error[/red] {escape(message)}", highlight=False)
    if result.rules.problems or report.errors:
        raise typer.Exit(1)
