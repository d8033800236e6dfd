"""`tensor-fusion simulate` and `tensor-fusion simulate-schedule`."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from tensorfusion.cli.report_view import print_report
from tensorfusion.domain.admission.dry_run import PreparationError
from tensorfusion.domain.allocator.mapping import oversubscription_of
from tensorfusion.domain.bounded_documents import annotations_size_problem
from tensorfusion.domain.model import Oversubscription as OversubscriptionModel
from tensorfusion.domain.vocabulary import PlacementMode
from tensorfusion.sim.cluster_file import load_cluster
from tensorfusion.sim.html_report import render_html
from tensorfusion.sim.inflation import inflation_table
from tensorfusion.sim.input_errors import InputError, parse_yaml, read_bounded, read_yaml
from tensorfusion.sim.input_limits import POD_MANIFEST_LIMITS
from tensorfusion.sim.inputs import simulation_inputs
from tensorfusion.sim.progress import ProgressLines
from tensorfusion.sim.right_sizing_view import (
    OUTCOME_ROWS,
    freed_rows,
    plan_name,
    plan_notes,
    sized_text,
)
from tensorfusion.sim.runner import SimulationOptions, simulate_schedule
from tensorfusion.sim.virtual_cluster import PolicyOverrides
from tensorfusion.sim.workload_file import parse_seconds, pod_shape_problem

__all__ = ["simulate", "simulate_schedule_command"]

EXIT_INVALID_INPUT = 2
PROGRESS_THRESHOLD = 2000
_FLAGS = {
    "tflopsOversellRatio": "--tflops-oversell-ratio",
    "vramExpandToHostMem": "--vram-expand-to-host-mem",
    "vramExpandToHostDisk": "--vram-expand-to-host-disk",
}
MIN_SAMPLE_INTERVAL = 1.0
_MODES = ", ".join(m.value for m in PlacementMode)


def _fail(message: str) -> typer.Exit:
    error = Text("error: ", style="bold red") + Text(message)
    Console(stderr=True).print(error, highlight=False, soft_wrap=True)
    return typer.Exit(EXIT_INVALID_INPUT)


def _writable(path: Path | None, flag: str) -> None:
    """Fail before a long run rather than after it when an output cannot be written."""
    if path is None:
        return
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir() or not parent.is_dir() or not os.access(parent, os.W_OK):
        raise InputError(f"{flag} {path}: cannot write there (the folder must exist)")


def _horizon(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = parse_seconds(value)
    except ValueError as exc:
        raise InputError(f"--until: invalid value {value!r}: {exc}") from None
    if seconds <= 0:
        raise InputError(f"--until: invalid value {value!r}: must be a duration above zero")
    return seconds


def _print_inflation(curve: dict[str, Any], console: Console) -> None:
    table = Table(title=f"GPU allocation against arrived workload (seed {curve['seed']}, "
                  f"{curve['clusterGpus']:,} GPUs)")  # fmt: skip
    table.add_column("arrived GPU request", justify="right")
    table.add_column("GPU allocation ratio (allocated / cluster GPUs)", justify="right")
    for arrived, allocated in inflation_table(curve):
        table.add_row(f"{arrived:g} %", f"{allocated:.1f} %")
    console.print(table)


def print_right_sizing(section: dict[str, Any], console: Console) -> None:
    """The right-sizing what-if: requests before and after, outcomes, capacity given back."""
    plans = Table(title="Right-sizing what-if: per-GPU request (limit) of each workload with a "
                  "usage profile", title_justify="left")  # fmt: skip
    for column in ("workload", "pods", "settings", "TFLOPs", "VRAM", "note"):
        plans.add_column(column)
    for plan in section["workloads"]:
        plans.add_row(
            escape(plan_name(plan)), str(plan["pods"]),
            escape(plan["settings"]), escape(sized_text(plan, "tflops")),
            escape(sized_text(plan, "vram")), escape(plan_notes(plan)),
        )  # fmt: skip
    console.print(plans)
    before, after = section["baseline"], section["rightSized"]
    outcome = Table(title="Right-sizing what-if: as given and right-sized",
                    title_justify="left")  # fmt: skip
    for column in ("", "as given", "right-sized"):
        outcome.add_column(column)
    for label, key, unit in OUTCOME_ROWS:
        outcome.add_row(label, f"{before[key]}{unit}", f"{after[key]}{unit}")
    console.print(outcome)
    freed = Table(title="Right-sizing what-if: capacity given back by the pods the trace placed",
                  title_justify="left")  # fmt: skip
    for column in ("", "TFLOPs", "VRAM"):
        freed.add_column(column)
    for row in freed_rows(section):
        freed.add_row(*row)
    console.print(freed)
    more = section["morePodsPlaced"]
    console.print(
        f"Right-sized, {after['placed']} pods are placed instead of {before['placed']} "
        f"({more:+d}); {after['pending']} instead of {before['pending']} pending at the end."
    )


def _placement_mode(value: str | None) -> PlacementMode | None:
    if value is None:
        return None
    try:
        return PlacementMode(value)
    except ValueError:
        raise InputError(
            f"--placement-mode: invalid value {value!r}: allowed values are {_MODES}"
        ) from None


def _overrides(
    placement_mode: str | None,
    oversell_ratio: int | None,
    vram_host_mem: int | None,
    vram_host_disk: int | None,
    no_oversubscription: bool,
    pool: str | None,
) -> PolicyOverrides:
    given = {
        "tflopsOversellRatio": oversell_ratio,
        "vramExpandToHostMem": vram_host_mem,
        "vramExpandToHostDisk": vram_host_disk,
    }
    over = None
    if any(v is not None for v in given.values()):
        if no_oversubscription:
            raise InputError("--no-oversubscription cannot be combined with oversubscription flags")
        # The GPUPool model holds the defaults and the allowed ranges.
        try:
            checked = OversubscriptionModel.model_validate(
                {k: v for k, v in given.items() if v is not None}
            )
        except ValidationError as exc:
            error = exc.errors()[0]
            flag = _FLAGS[str(error["loc"][0])]
            raise InputError(
                f"{flag}: invalid value {error['input']}: {error['msg'].lower()}"
            ) from None
        over = oversubscription_of(checked)
    return PolicyOverrides(
        placement_mode=_placement_mode(placement_mode),
        oversubscription=over,
        disable_oversubscription=no_oversubscription,
        pool=pool,
    )


def simulate(
    cluster: Annotated[
        Path | None, typer.Argument(help="Cluster file: nodes, GPUs, pools, hardware.")
    ] = None,
    workload: Annotated[
        Path | None, typer.Argument(help="Workload trace: pods with arrival/duration.")
    ] = None,
    openb: Annotated[
        tuple[Path, Path] | None,
        typer.Option(
            metavar="NODES.csv PODS.csv",
            help="Simulate the openb trace (node list, task list) instead of cluster and "
            "workload files; see docs/simulator.md.",
        ),
    ] = None,
    inflate: Annotated[
        float | None,
        typer.Option(
            help="With --openb: draw tasks with replacement until the arrived GPU request is "
            "this many times the cluster's GPUs, none leaving (workload inflation)."
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="With --inflate: the draw's seed (42).")] = None,
    output: Annotated[Path | None, typer.Option(help="Write the report as JSON.")] = None,
    html: Annotated[Path | None, typer.Option(help="Write an HTML report with plots.")] = None,
    placement_mode: Annotated[
        str | None, typer.Option(help=f"What-if placement mode: {_MODES}.")
    ] = None,
    tflops_oversell_ratio: Annotated[
        int | None, typer.Option(help="What-if oversubscription: percent, 500 = 5x.")
    ] = None,
    vram_expand_to_host_mem: Annotated[
        int | None, typer.Option(help="What-if: percent of host RAM added to virtual VRAM.")
    ] = None,
    vram_expand_to_host_disk: Annotated[
        int | None, typer.Option(help="What-if: percent of host disk added to virtual VRAM.")
    ] = None,
    no_oversubscription: Annotated[
        bool, typer.Option(help="What-if: pools without oversubscription.")
    ] = False,
    pool: Annotated[
        str | None, typer.Option(help="Apply the what-if flags to this pool only.")
    ] = None,
    sample_interval: Annotated[
        float, typer.Option(help="Seconds of simulated time between samples.")
    ] = 60.0,
    no_alerts: Annotated[
        bool, typer.Option(help="Skip metrics recording and alert-rule evaluation.")
    ] = False,
    metrics_db: Annotated[
        Path | None, typer.Option(help="Keep the simulated tf_* metrics in this DuckDB file.")
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            help="End the run at this simulated time (90, 30s, 5m, 1h30m); later arrivals "
            "are left out and pods still running or waiting are reported so."
        ),
    ] = None,
    auto_scale: Annotated[
        bool,
        typer.Option(
            help="What-if: run the trace again with each workload's pods at the request the "
            "autoscaler would give them from their usage profile (the workload file's `usage`), "
            "and report the capacity freed and how many more pods fit."
        ),
    ] = False,
    verify_fast_path: Annotated[
        bool,
        typer.Option(
            help="Shadow every decision with a full evaluation of every node; exit 1 if the "
            "indexed search ever chose differently."
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option(help="Print no terminal report.")] = False,
    debug: Annotated[bool, typer.Option(help="Show tracebacks.")] = False,
) -> None:
    """Run a workload trace through the scheduler on a virtual GPU cluster and report.

    Exit 0 on success, 1 when `--verify-fast-path` found a disagreement, 2 on invalid input.
    """
    console = Console()
    try:
        if not math.isfinite(sample_interval) or sample_interval < MIN_SAMPLE_INTERVAL:
            raise InputError(
                f"--sample-interval: invalid value {sample_interval}: must be a number of "
                f"seconds >= {MIN_SAMPLE_INTERVAL:g}"
            )
        _writable(output, "--output")
        _writable(html, "--html")
        overrides = _overrides(
            placement_mode, tflops_oversell_ratio, vram_expand_to_host_mem,
            vram_expand_to_host_disk, no_oversubscription, pool,
        )  # fmt: skip
        inputs = simulation_inputs(cluster, workload, openb, inflate, seed, auto_scale)
        cluster_file, trace = inputs.cluster, inputs.workload
        if pool is not None and pool not in {p.name for p in cluster_file.pools}:
            raise InputError(f"--pool: invalid value {pool!r}: no such pool in {inputs.source}")
        options = SimulationOptions(
            overrides, sample_interval, not no_alerts, metrics_db, verify_fast_path,
            _horizon(until),
        )  # fmt: skip
        total = sum(e.replicas for e in trace.workloads) * (2 if auto_scale else 1)
        if quiet:
            report = inputs.run(options, None, auto_scale)
        elif not console.is_terminal:
            report = inputs.run(options, ProgressLines(sys.stderr.write), auto_scale)
        elif total >= PROGRESS_THRESHOLD:
            with Progress(
                TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=console, transient=True,
            ) as bar:  # fmt: skip
                task = bar.add_task("pods", total=total)
                report = inputs.run(options, lambda done, _: bar.update(task, completed=done),
                                    auto_scale)  # fmt: skip
        else:
            report = inputs.run(options, None, auto_scale)
    except InputError as exc:
        if debug:
            raise
        raise _fail(str(exc)) from None
    if not quiet:
        print_report(report, console)
        if "inflation" in report:
            _print_inflation(report["inflation"], console)
        if "rightSizing" in report:
            print_right_sizing(report["rightSizing"], console)
    if output is not None:
        output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        console.print(f"report written to {escape(str(output))}")
    if html is not None:
        html.write_text(render_html(report), encoding="utf-8")
        console.print(f"HTML report written to {escape(str(html))}")
    check = report.get("fastPathVerification")
    if check is not None:
        _report_fast_path(check, console)


def _report_fast_path(check: dict[str, Any], console: Console) -> None:
    if not check["mismatches"]:
        console.print(
            f"fast path verified: {check['decisions']} decisions equal the full evaluation"
        )
        return
    lines = [
        f"fast path verification FAILED: {check['mismatches']} of {check['decisions']} "
        "decisions differ from the full evaluation"
    ]
    for example in check["examples"]:
        fast, full = example["fast"], example["full"]
        lines.append(
            f"  {example['pod']}: fast chose {fast['node']} {fast['gpus']} "
            f"(combined {fast['combined']}), full chose {full['node']} {full['gpus']} "
            f"(combined {full['combined']})"
        )
    sys.stderr.write("\n".join(lines) + "\n")
    raise typer.Exit(1)


def _read_pod(path: Path) -> dict[str, Any]:
    """The pod manifest of a file or of stdin (`-`), bounded as the API server bounds one."""
    what, limits = "pod manifest", POD_MANIFEST_LIMITS
    if str(path) == "-":
        label = "standard input"
        data = parse_yaml(read_bounded(sys.stdin.buffer, label, what, limits.max_bytes),
                          label, what, limits)  # fmt: skip
    else:
        label = str(path)
        data = read_yaml(path, what, limits)
    if not isinstance(data, dict):
        raise InputError(f"{label}: expected one Pod manifest")
    problem = pod_shape_problem(data) or annotations_size_problem(data)
    if problem is not None:
        raise InputError(f"{label}: pod: {problem}")
    return data


def simulate_schedule_command(
    pod: Annotated[Path, typer.Argument(help="Pod manifest (YAML or JSON; - for stdin).")],
    cluster: Annotated[Path, typer.Option(help="Cluster file to place the pod on.")],
    nodes: Annotated[
        str | None, typer.Option(help="Comma-separated candidate nodes (default: all).")
    ] = None,
    mutate: Annotated[
        bool, typer.Option(help="Run the admission dry run first (off: read the pod as is).")
    ] = True,
    debug: Annotated[bool, typer.Option(help="Show tracebacks.")] = False,
) -> None:
    """Explain where one pod would be placed: the same JSON as `/api/simulate-schedule`.

    Exit 0 when schedulable, 1 when it fits nowhere, 2 on invalid input.
    """
    try:
        manifest = _read_pod(pod)
        cluster_file = load_cluster(cluster)
        names = [n.strip() for n in nodes.split(",") if n.strip()] if nodes else None
        body = simulate_schedule(cluster_file, cluster, manifest, names, mutate)
    except (InputError, PreparationError) as exc:
        if debug:
            raise
        raise _fail(str(exc)) from None
    sys.stdout.write(json.dumps(body, indent=2) + "\n")
    raise typer.Exit(0 if body["result"]["schedulable"] else 1)
