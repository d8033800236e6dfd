"""``tensor-fusion gen-crds``: write (or check) the chart's CRD files from the resource model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final

import typer

from tensorfusion.domain.model.crds import render_crds
from tensorfusion.domain.model.meta import API_GROUP

__all__ = ["DEFAULT_OUTPUT", "differing_files", "gen_crds", "write_crds"]

DEFAULT_OUTPUT: Final = Path("charts/tensor-fusion/crds")
_GLOB: Final = f"{API_GROUP}_*.yaml"


def differing_files(output: Path) -> list[str]:
    """Names of CRD files in ``output`` that are missing, different, or no longer generated."""
    expected = render_crds()
    stale = [
        name
        for name, text in expected.items()
        if not (output / name).is_file() or (output / name).read_text(encoding="utf-8") != text
    ]
    if output.is_dir():
        stale.extend(path.name for path in output.glob(_GLOB) if path.name not in expected)
    return sorted(stale)


def write_crds(output: Path) -> list[str]:
    """Write every CRD file into ``output``, remove ones no longer generated; return changes."""
    output.mkdir(parents=True, exist_ok=True)
    changed = differing_files(output)
    expected = render_crds()
    for name in changed:
        path = output / name
        if name in expected:
            path.write_text(expected[name], encoding="utf-8")
        else:
            path.unlink()
    return changed


def gen_crds(
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Directory of the CRD files.")
    ] = DEFAULT_OUTPUT,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 if the files are out of date.")
    ] = False,
) -> None:
    """Generate the CustomResourceDefinitions of all tensor-fusion.ai/v1 kinds."""
    if check:
        stale = differing_files(output)
        if stale:
            for name in stale:
                typer.echo(f"out of date: {output / name}", err=True)
            typer.echo("run `make crds` to regenerate", err=True)
            raise typer.Exit(code=1)
        typer.echo(f"{len(render_crds())} CRD files in {output} are up to date")
        return
    changed = write_crds(output)
    for name in changed:
        typer.echo(f"wrote {output / name}")
    typer.echo(f"{len(render_crds())} CRD files in {output}, {len(changed)} changed")
