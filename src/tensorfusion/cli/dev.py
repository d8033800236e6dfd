"""`tensor-fusion dev`: the real control plane, the chart, two controllers and simulated GPU
nodes on this machine, without Docker or GPUs (docs/dev.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tensorfusion.app.logging_setup import configure_logging
from tensorfusion.devenv.binaries import binary_directory, read_versions
from tensorfusion.devenv.lifecycle import (
    AlreadyRunningError,
    DevStartError,
    build_binaries,
    component_log,
    locate_binaries,
    spawn_supervisor,
    stop,
    wait_until_settled,
)
from tensorfusion.devenv.source_tree import SOURCE_DIR, SourceTreeError, check_source_tree
from tensorfusion.devenv.state_dir import DEFAULT_DIR, DevDirectory, DevPhase, DevState
from tensorfusion.devenv.supervisor import DevSettings, serve
from tensorfusion.sim.cluster_file import ClusterFile, load_cluster
from tensorfusion.sim.input_errors import InputError

__all__ = ["app"]

app = typer.Typer(
    help="A local TensorFusion cluster: the real control plane, chart and controllers, "
    "simulated GPU nodes; no Docker, no GPU.",
    no_args_is_help=True,
)

DEFAULT_CLUSTER = SOURCE_DIR / "examples" / "cluster.yaml"
UP_TIMEOUT_S = 600.0

DirOption = Annotated[
    Path, typer.Option("--dir", help="The environment's directory (PID files, ports, logs).")
]


def _load_cluster(path: Path, console: Console) -> ClusterFile:
    try:
        return load_cluster(path)
    except InputError as error:
        console.print(f"[red]error:[/red] {escape(str(error))}")
        raise typer.Exit(2) from None


def _check_values(paths: list[Path], console: Console) -> None:
    for path in paths:
        if not path.is_file():
            console.print(f"[red]error:[/red] --values {escape(str(path))}: no such file")
            raise typer.Exit(2)


@app.command("up")
def up(
    cluster: Annotated[
        Path, typer.Option("--cluster", help="Nodes and GPUs, in the simulator's format.")
    ] = DEFAULT_CLUSTER,
    directory: DirOption = DEFAULT_DIR,
    values: Annotated[
        list[Path] | None,
        typer.Option("--values", "-f", help="Helm values files, applied in order."),
    ] = None,
) -> None:
    """Start a local cluster and wait until every GPU is Running.

    Exit codes: 0 Ready; 1 it could not start, or one already runs in the directory; 2 a
    bad cluster or values file.
    """
    console = Console(stderr=True, soft_wrap=True)
    out = Console(soft_wrap=True)
    values_files = [p.resolve() for p in values or []]
    parsed = _load_cluster(cluster, console)
    _check_values(values_files, console)
    try:
        check_source_tree()
    except SourceTreeError as error:
        console.print(f"[red]error:[/red] {escape(str(error))}")
        raise typer.Exit(1) from None
    dev = DevDirectory(directory)
    started = time.monotonic()
    try:
        if locate_binaries() is None:
            with console.status("building the control plane from Go modules (first use)") as s:
                build_binaries(
                    dev.logs / "build.log", lambda line: s.update(f"building: {escape(line[-90:])}")
                )
        pid = spawn_supervisor(dev, cluster.resolve(), values_files)
        with console.status("starting") as status:

            def show(state: DevState) -> None:
                running = f" ({state.gpus_running}/{state.gpus} GPUs Running)" if state.gpus else ""
                status.update(f"{escape(state.step or str(state.phase))}{running}")

            state = wait_until_settled(dev, pid, show, UP_TIMEOUT_S)
    except AlreadyRunningError as error:
        console.print(f"[red]error:[/red] {escape(str(error))}")
        console.print(f"stop it first: tensor-fusion dev down --dir {escape(str(dev.path))}")
        raise typer.Exit(1) from None
    except (DevStartError, OSError) as error:
        console.print(f"[red]error:[/red] dev up failed: {escape(str(error))}")
        console.print(f"logs: {escape(str(dev.logs))} (tensor-fusion dev logs --dir ...)")
        stop(dev)
        raise typer.Exit(1) from None
    _summary(out, dev, state, parsed, time.monotonic() - started)


def _summary(
    out: Console, dev: DevDirectory, state: DevState, cluster: ClusterFile, seconds: float
) -> None:
    out.print(f"[green]Ready[/green] in {seconds:.1f}s: {state.nodes} GPU nodes, {state.gpus} "
              f"GPUs Running ({escape(state.cluster_file)})")  # fmt: skip
    table = Table(show_header=True, header_style="bold")
    table.add_column("what")
    table.add_column("where")
    table.add_row("kube-apiserver", state.api_server)
    table.add_row("controller API (the guide's port-forward)", state.controller_api)
    table.add_row("webhook", state.webhook)
    for address in state.alertmanagers:
        table.add_row("Alertmanager", address)
    table.add_row("processes", f"{len(state.components)} (tensor-fusion dev status)")
    table.add_row("directory", str(dev.path))
    out.print(table)
    for note in state.notes:
        out.print(f"note: {escape(note)}")
    if len(cluster.pools) > 1:
        out.print("note: the chart runs one pool (tensor-fusion-shared); every node joins it")
    api = state.controller_api
    tools = binary_directory(read_versions()["KUBERNETES_VERSION"])
    out.print("\nTry (this control plane's own kubectl and helm, docs/dev.md):")
    out.print(f"  export PATH={escape(str(tools))}:$PATH")
    out.print(f"  export KUBECONFIG={escape(state.kubeconfig)}")
    out.print("  kubectl get gpunode,gpu")
    out.print("  kubectl get tensorfusioncluster,gpupool")
    examples = SOURCE_DIR / "examples" / "dev"
    out.print(f"  curl -X POST {api}/api/simulate-schedule -H 'Content-Type: application/yaml' "
              f"--data-binary @{escape(str(examples / 'pod.yaml'))}")  # fmt: skip
    out.print(f"  curl {api}/api/allocation")
    out.print(f"  kubectl apply -f {escape(str(examples / 'deployment.yaml'))}"
              "   # the guide's step 5: 3 of 10 replicas on TensorFusion")  # fmt: skip
    out.print("  tensor-fusion dev logs | tensor-fusion dev down")
    out.print("Other values: tensor-fusion dev down, then tensor-fusion dev up --values FILE "
              "(helm upgrade fails here: the webhook points at a URL)")  # fmt: skip


@app.command("status")
def status(directory: DirOption = DEFAULT_DIR) -> None:
    """What runs, where; exit 0 when every process of a Ready environment runs, else 1."""
    out = Console()
    dev = DevDirectory(directory)
    state = dev.read_state()
    running = dev.running_processes()
    if state is None or "supervisor" not in running:
        out.print(f"no dev environment runs in {escape(str(dev.path))}")
        if running:
            out.print(f"left over: {', '.join(sorted(running))} (tensor-fusion dev down)")
        raise typer.Exit(1)
    out.print(
        f"{state.phase}"
        f"{': ' + escape(state.step) if state.step else ''}"
        f" ({state.gpus_running}/{state.gpus} GPUs Running); KUBECONFIG={state.kubeconfig}"
    )
    table = Table("component", "pid", "state", "address", "log")
    down = 0
    for name, info in sorted(state.components.items()):
        alive = name in running
        down += not alive
        table.add_row(name, str(info.pid or ""), "running" if alive else "[red]exited[/red]",
                      info.address, info.log)  # fmt: skip
    out.print(table)
    if state.error:
        out.print(f"[red]error:[/red] {escape(state.error)}")
    if state.phase != DevPhase.READY or down:
        raise typer.Exit(1)


@app.command("down")
def down(directory: DirOption = DEFAULT_DIR) -> None:
    """Stop every process the environment started (by its PID files) and check its ports."""
    out = Console()
    dev = DevDirectory(directory)
    report = stop(dev)
    if not (report.stopped or report.killed):
        out.print(f"nothing ran in {escape(str(dev.path))}")
    else:
        out.print(f"stopped {len(report.stopped) + len(report.killed)} processes"
                  + (f" ({len(report.killed)} killed: {', '.join(report.killed)})"
                     if report.killed else ""))  # fmt: skip
    if report.left or report.ports_in_use:
        for name in report.left:
            out.print(f"[red]still running:[/red] {name}")
        for endpoint in report.ports_in_use:
            out.print(f"[red]still listening:[/red] {endpoint}")
        raise typer.Exit(1)


@app.command("logs")
def logs(
    component: Annotated[
        str | None, typer.Argument(help="A process (see `dev status`); none lists them.")
    ] = None,
    directory: DirOption = DEFAULT_DIR,
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines from the end.")] = 100,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing.")] = False,
) -> None:
    """Print the end of a component's log (the supervisor's by default)."""
    out = Console(highlight=False, soft_wrap=True)
    dev = DevDirectory(directory)
    try:
        path = component_log(dev, component or "supervisor")
    except KeyError as error:
        out.print(f"[red]error:[/red] {escape(str(error.args[0]))}")
        raise typer.Exit(2) from None
    if component is None:
        state = dev.read_state()
        names = sorted(state.components) if state else []
        out.print(f"components: supervisor, {', '.join(names)}\n--- {escape(str(path))}")
    try:
        text = path.read_text(errors="replace")
    except OSError as error:
        out.print(f"[red]error:[/red] {escape(str(path))}: {error.strerror}")
        raise typer.Exit(1) from None
    for line in text.splitlines()[-lines:]:
        out.print(escape(line))
    if follow:
        with path.open(errors="replace") as handle:
            handle.seek(0, 2)
            while True:
                line = handle.readline()
                if line:
                    out.print(escape(line.rstrip("\n")))
                else:
                    time.sleep(0.5)


@app.command("serve", hidden=True)
def serve_command(
    cluster: Annotated[Path, typer.Option("--cluster")],
    directory: DirOption,
    values: Annotated[list[Path] | None, typer.Option("--values")] = None,
) -> None:
    """The supervisor `dev up` starts (not for direct use)."""
    configure_logging("text", "info")
    settings = DevSettings(directory, cluster, load_cluster(cluster), tuple(values or ()))
    code = serve(settings)
    DevDirectory(directory).supervisor_pid_file.unlink(missing_ok=True)
    raise typer.Exit(code)
