"""The images a real-node cluster runs: those `make images BASE=debian` built (found in podman's
store), and the pod sandbox's pause image built here from the testenv's pause binary; each
exported once per image ID to a docker-archive for `ctr images import`."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from tensorfusion.devenv.binaries import Binaries
from tensorfusion.devenv.real_nodes.netns import NetnsError, run

PREFIX = "localhost/tensorfusion"


def image_id(name: str) -> str | None:
    """The ID of image `name` in podman's store, None when absent."""
    result = run(["podman", "image", "inspect", "--format", "{{.Id}}", name], check=False)
    return result.stdout.strip() or None if result.returncode == 0 else None


def require(name: str) -> str:
    """The ID of image `name`, or an error that says how to build it."""
    found = image_id(name)
    if found is None:
        raise NetnsError(
            f"image {name} is not in podman's store: run `make images BASE=debian` (docs/images.md)"
        )
    return found


def tag_of(repository: str) -> str:
    """The one tag of `repository` in podman's store (the Alertmanager's is Debian's version)."""
    result = run(["podman", "images", "--noheading", "--format", "{{.Tag}}", repository])
    tags = sorted(set(result.stdout.split()))
    if len(tags) != 1:
        raise NetnsError(
            f"expected one tag of {repository} in podman's store, found {tags}: "
            "run `make images BASE=debian`"
        )
    return tags[0]


def pause_image(binaries: Binaries) -> str:
    """The sandbox image: the testenv's static pause binary alone, built once per version."""
    name = f"{PREFIX}/pause:{binaries.kubernetes_version}"
    if image_id(name) is not None:
        return name
    with tempfile.TemporaryDirectory() as context:
        shutil.copy2(binaries.path("pause"), Path(context) / "pause")
        (Path(context) / "Containerfile").write_text(
            'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
        )
        run(
            [
                "podman",
                "--runtime",
                "runc",
                "build",
                "--network",
                "none",
                "--timestamp",
                "0",
                "-t",
                name,
                context,
            ]
        )
    return name


def archive(name: str, cache: Path) -> Path:
    """A docker-archive of image `name`, cached by its image ID."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{require(name).removeprefix('sha256:')[:20]}.tar"
    if not path.is_file():
        partial = path.with_suffix(".part")
        partial.unlink(missing_ok=True)
        run(
            [
                "skopeo",
                "copy",
                "--quiet",
                f"containers-storage:{name}",
                f"docker-archive:{partial}:{name}",
            ]
        )
        partial.rename(path)
    return path


def prune(cache: Path, keep: list[Path]) -> None:
    """Removes the archives of `cache` other than `keep` (those of earlier builds)."""
    for path in cache.glob("*.tar"):
        if path not in keep:
            path.unlink(missing_ok=True)
