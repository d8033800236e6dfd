"""requirements/*.lock pin every dependency of pyproject.toml, with hashes, within its range
(issue 23, scope 8: images and CI install only what was tested)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s\\]+)")


def pins(lock: Path) -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) of each requirement of a lock file."""
    found: dict[str, tuple[str, int]] = {}
    current = ""
    for line in lock.read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = canonicalize_name(match.group(1))
            found[current] = (match.group(2), 0)
        elif line.strip().startswith("--hash=sha256:") and current:
            version, hashes = found[current]
            found[current] = (version, hashes + 1)
    return found


def declared(extra: str | None) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = list(project["dependencies"])
    if extra:
        names += project["optional-dependencies"][extra]
    return [Requirement(text) for text in names]


@pytest.mark.parametrize(("lock", "extra"), [("runtime.lock", None), ("dev.lock", "dev")])
def test_every_dependency_is_pinned_with_hashes_within_its_range(
    lock: str, extra: str | None
) -> None:
    path = ROOT / "requirements" / lock
    pinned = pins(path)
    for requirement in declared(extra):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement} is not in {lock}"
        version, _ = pinned[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{lock} pins {name}=={version}, outside {requirement}"
        )
    unhashed = [name for name, (_, hashes) in pinned.items() if hashes == 0]
    assert not unhashed, f"pins without a hash in {lock}: {unhashed}"
    text = path.read_text()
    assert "--find-links" not in text and "/tmp/" not in text, "machine-specific lines"


def test_the_runtime_pins_are_the_dev_pins() -> None:
    runtime = pins(ROOT / "requirements" / "runtime.lock")
    dev = pins(ROOT / "requirements" / "dev.lock")
    differing = {n: (v, dev.get(n)) for n, v in runtime.items() if dev.get(n, (None,))[0] != v[0]}
    assert not differing, f"runtime.lock and dev.lock disagree: {differing}"
