"""`helm template` of the repository's chart with the testenv's helm, as parsed objects."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .controlplane import Binaries

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "tensor-fusion"
PRODUCTION = CHART / "values-production.yaml"
SNIPPETS = ROOT / "examples" / "production"
RELEASE = "tensor-fusion-sys"
NAMESPACE = "tensor-fusion-sys"


class HelmError(Exception):
    """helm exited non-zero; the message is its stderr."""


@dataclass(frozen=True)
class Rendered:
    """The objects of one `helm template`, with lookups by kind and name."""

    objects: tuple[dict[str, Any], ...]
    text: str

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("kind") == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = [o for o in self.all(kind) if o["metadata"]["name"] == name]
        if len(found) != 1:
            names = sorted(o["metadata"]["name"] for o in self.all(kind))
            raise KeyError(f"{kind} {name}: {len(found)} rendered (have {names})")
        return found[0]

    def has(self, kind: str, name: str) -> bool:
        return any(o["metadata"]["name"] == name for o in self.all(kind))

    def kinds(self) -> set[str]:
        return {str(o.get("kind")) for o in self.objects}


def helm_path() -> Path:
    return Binaries.locate().path("helm")


def helm(*args: str, cwd: Path = ROOT) -> str:
    """Run the testenv's helm; HelmError with its stderr when it fails."""
    result = subprocess.run([str(helm_path()), *args], capture_output=True, text=True, cwd=cwd,
                            timeout=120, check=False)  # fmt: skip
    if result.returncode != 0:
        raise HelmError(result.stderr.strip() or result.stdout.strip())
    return result.stdout


def render(
    *values: Path | str,
    sets: Mapping[str, str] | None = None,
    set_strings: Mapping[str, str] | None = None,
    extra: Sequence[str] = (),
) -> Rendered:
    """`helm template tensor-fusion-sys charts/tensor-fusion -n tensor-fusion-sys` with the
    values files in order, then `--set`s."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for path in values:
        args += ["-f", str(path)]
    for key, value in (sets or {}).items():
        args += ["--set", f"{key}={value}"]
    for key, value in (set_strings or {}).items():
        args += ["--set-string", f"{key}={value}"]
    text = helm(*args, *extra)
    objects = tuple(o for o in yaml.safe_load_all(text) if isinstance(o, dict))
    return Rendered(objects, text)


def containers(pod_owner: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = pod_owner["spec"]["template"]["spec"]
    return [*spec.get("initContainers", ()), *spec["containers"]]


def images(rendered: Rendered) -> list[str]:
    """Every image a rendered pod template, pod or hook would pull."""
    found: list[str] = []
    for obj in rendered.objects:
        spec = obj.get("spec") or {}
        template = (spec.get("template") or {}).get("spec") or {}
        for container in _all_containers(template):
            found.append(str(container.get("image")))
    return found


def _all_containers(pod_spec: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    yield from pod_spec.get("initContainers") or ()
    yield from pod_spec.get("containers") or ()


def env_of(container: Mapping[str, Any]) -> dict[str, Any]:
    """name -> value, or the valueFrom mapping."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or ()}
