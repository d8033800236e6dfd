"""`metricsExtraPodLabels` (metrics.md §1): pod label key -> tag name, resolved per pod for the
tables marked "+extra", by the controller's recorder and the node agent alike."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from tensorfusion.domain.metrics.schema import TABLES

__all__ = ["BUILT_IN_TAGS", "extra_tags", "parse_extra_labels"]

BUILT_IN_TAGS: Final = frozenset(tag for schema in TABLES for tag in schema.tags)
"""Every tag a table defines itself; an extra tag of one of these names is ignored."""


def extra_tags(labels: Mapping[str, str], mapping: Mapping[str, str]) -> dict[str, str]:
    """The extra tags of one pod: labels it lacks (or has empty) are left out, and a tag name
    of a built-in tag is ignored."""
    return {
        tag: str(labels[key])
        for key, tag in mapping.items()
        if key in labels and labels[key] and tag not in BUILT_IN_TAGS
    }


def parse_extra_labels(text: str, source: str) -> tuple[dict[str, str], list[str]]:
    """The mapping from its JSON text (`TF_HYPERVISOR_METRICS_EXTRA_LABELS`), with warnings:
    text that is not a JSON object of strings gives no mapping, a built-in tag name is
    dropped; each warning names `source`, the value and what is allowed."""
    if not text.strip():
        return {}, []
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if not isinstance(document, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and v for k, v in document.items()
    ):
        return {}, [
            f"{source}: invalid value {text[:200]!r}: must be a JSON object mapping pod label "
            "keys to tag names; no extra tags"
        ]
    mapping: dict[str, str] = {}
    warnings = []
    for key, tag in document.items():
        if tag in BUILT_IN_TAGS:
            warnings.append(f"{source}: {key} -> {tag} ignored: {tag} is a built-in tag")
        else:
            mapping[key] = tag
    return mapping, warnings
