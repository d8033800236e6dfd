"""The `tensor-fusion` command: one entry point, one sub-command per job."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="tensor-fusion",
    help="TensorFusion for Python: GPU pooling and fractional GPUs for Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
