"""Guide step 4, pinned versions: every image with an exact tag, controller and node agent alike.

An image is a `{repository, tag}` map or a `repository:tag` string, as the chart's `tf.image`
helper reads it; an empty tag is the chart's appVersion.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.doctor.results import CheckResult, Status
from tensorfusion.domain.doctor.static_checks_context import (
    ChartValues,
    describe,
    nested,
    result,
    to_yaml,
)
from tensorfusion.domain.doctor.values_merge import merge_values

__all__ = ["IMAGE_KEYS", "ImageRef", "image_keys", "image_ref", "pinned"]

CONTROLLER_IMAGE: Final = "controller.image"
HYPERVISOR_IMAGE: Final = "cluster.hypervisorImage"
IMAGE_KEYS: Final = (
    CONTROLLER_IMAGE,
    HYPERVISOR_IMAGE,
    "greptime.image",
    "alert.image",
    "agent.image",
)
PROVIDER_IMAGES: Final = "providerConfigs.nvidia.images"
_FLOATING_WORDS: Final = frozenset(
    {"latest", "stable", "main", "master", "edge", "nightly", "dev", "develop", "lts", "canary"}
)
_FLOATING_VERSION: Final = re.compile(r"v?[0-9]+(\.[0-9]+)?")
"""A major (`v1`, `1`) or major.minor (`1.2`) tag: it moves with every release below it."""


@dataclass(frozen=True, slots=True)
class ImageRef:
    """An image key's resolved reference; `problem` says why its tag is not pinned."""

    key: str
    reference: str
    tag: str
    problem: str = ""


def image_keys(chart: ChartValues) -> list[str]:
    """The chart's image keys: the fixed ones and each `providerConfigs.nvidia.images.*`."""
    provider = chart.get(PROVIDER_IMAGES)
    extra = (
        [f"{PROVIDER_IMAGES}.{name}" for name in provider] if isinstance(provider, Mapping) else []
    )
    return [*IMAGE_KEYS, *extra]


def _tag_text(tag: Any) -> str:
    if tag is None:
        return ""
    if isinstance(tag, bool):
        return "true" if tag else "false"
    return str(tag)


def image_ref(key: str, value: Any, app_version: str) -> ImageRef:
    """Resolve one image value as the chart renders it and judge its tag."""
    if isinstance(value, str):
        name, _, digest = value.partition("@")
        repository = _repository(name)
        tag = name[len(repository) + 1 :]
        if digest:
            return ImageRef(key, value, tag or digest)
        if not tag:
            return ImageRef(key, value, "", "no tag: the runtime pulls latest")
        return _judged(key, value, tag)
    if isinstance(value, Mapping):
        source = value.get("repository")
        tag = _tag_text(value.get("tag")) or app_version
        reference = f"{source}:{tag}"
        if not source:
            return ImageRef(key, reference, tag, "no repository")
        return _judged(key, reference, tag)
    return ImageRef(key, describe(value), "", "not an image ({repository, tag} or repository:tag)")


def _judged(key: str, reference: str, tag: str) -> ImageRef:
    if tag.lower() == "latest":
        return ImageRef(key, reference, tag, "the latest tag")
    if tag.lower() in _FLOATING_WORDS or _FLOATING_VERSION.fullmatch(tag):
        return ImageRef(key, reference, tag, f"floating tag {tag}")
    return ImageRef(key, reference, tag)


def pinned(chart: ChartValues) -> CheckResult:
    """`versions.pinned`: exact tags everywhere; controller and hypervisor on the same one."""
    refs = [image_ref(key, chart.get(key), chart.app_version) for key in image_keys(chart)]
    by_key = {ref.key: ref for ref in refs}
    problems = [f"{ref.key} {ref.reference}: {ref.problem}" for ref in refs if ref.problem]
    fix_tags: dict[str, str] = {
        ref.key: (
            chart.app_version if ref.key in (CONTROLLER_IMAGE, HYPERVISOR_IMAGE) else "<version>"
        )
        for ref in refs
        if ref.problem
    }
    controller, hypervisor = by_key[CONTROLLER_IMAGE], by_key[HYPERVISOR_IMAGE]
    if controller.tag and hypervisor.tag and controller.tag != hypervisor.tag:
        problems.append(
            f"the controller ({controller.tag}) and the node agent ({hypervisor.tag}) differ: "
            "they are released together under one version"
        )
        version = (
            controller.tag
            if not controller.problem
            else hypervisor.tag
            if not hypervisor.problem
            else chart.app_version
        )
        fix_tags[CONTROLLER_IMAGE] = fix_tags[HYPERVISOR_IMAGE] = version
    if problems:
        snippet: dict[str, Any] = {}
        for key, tag in fix_tags.items():
            snippet = merge_values(snippet, nested(key, _tagged(chart, key, tag)))
        fix = "# explicit tags (available tags are listed on Docker Hub)\n" + to_yaml(snippet)
        return result("versions.pinned", Status.WARN, "; ".join(problems), fix)
    found = f"{len(refs)} images pinned; controller and node agent at {controller.tag}" + (
        " (the chart's appVersion)" if controller.tag == chart.app_version else ""
    )
    return result("versions.pinned", Status.PASS, found)


def _tagged(chart: ChartValues, key: str, tag: str) -> Any:
    """The image value of a fix: the tag alone in a map, the whole reference in a string."""
    value = chart.get(key)
    if isinstance(value, Mapping):
        return {"tag": tag}
    if isinstance(value, str):
        return f"{_repository(value)}:{tag}"
    default = chart.default(key)
    repository = default.get("repository") if isinstance(default, Mapping) else None
    return {"repository": repository or "<repository>", "tag": tag}


def _repository(value: Any) -> str:
    text = str(value).partition("@")[0]
    repository, colon, tag = text.rpartition(":")
    return repository if colon and "/" not in tag else text
