"""The `tensor-fusion` command: one entry point, one sub-command per job."""

from __future__ import annotations

import typer

from tensorfusion.cli.alerts import app as alerts_app
from tensorfusion.cli.controller import CONTEXT, controller
from tensorfusion.cli.controller import HELP as CONTROLLER_HELP
from tensorfusion.cli.crds import gen_crds
from tensorfusion.cli.dev import app as dev_app
from tensorfusion.cli.doctor import doctor
from tensorfusion.cli.hypervisor import HELP as HYPERVISOR_HELP
from tensorfusion.cli.hypervisor import hypervisor
from tensorfusion.cli.simulate import simulate, simulate_schedule_command
from tensorfusion.cli.uninstall import uninstall

app = typer.Typer(
    name="tensor-fusion",
    help="TensorFusion for Python: GPU pooling and fractional GPUs for Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("simulate")(simulate)
app.command("simulate-schedule")(simulate_schedule_command)
app.command("gen-crds")(gen_crds)
app.command("controller", context_settings=CONTEXT, help=CONTROLLER_HELP)(controller)
app.command("hypervisor", context_settings=CONTEXT, help=HYPERVISOR_HELP)(hypervisor)
app.command("uninstall")(uninstall)
app.command("doctor")(doctor)
app.add_typer(alerts_app, name="alerts")
app.add_typer(dev_app, name="dev")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
