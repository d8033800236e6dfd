"""Autoscaling and gang settings: recorded on the workload, not acted on (§4 steps 9, 12)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tensorfusion.domain.admission.validation import ParsedAnnotations
from tensorfusion.domain.annotations import Keys

__all__ = ["autoscaling_config", "gang_scheduling"]


def autoscaling_config(
    parsed: ParsedAnnotations, profile_config: Mapping[str, Any] | None, keys: Keys
) -> tuple[dict[str, Any] | None, list[str]]:
    """The workload's `autoScalingConfig`: the profile's, with `autoscale` applied."""
    config = copy.deepcopy(dict(profile_config)) if profile_config else None
    if parsed.autoscale is None:
        return config, []
    if not parsed.autoscale:
        if config and isinstance(config.get("autoSetResources"), dict):
            config["autoSetResources"]["enable"] = False
        return config, []
    config = config or {}
    auto = config.get("autoSetResources")
    auto = dict(auto) if isinstance(auto, Mapping) else {}
    auto["enable"] = True
    auto["targetResource"] = parsed.autoscale_target or auto.get("targetResource") or "all"
    config["autoSetResources"] = auto
    return config, [
        f"{keys.autoscale}=true: autoscaling is recorded on the workload but not acted on "
        "by this version"
    ]


def gang_scheduling(
    parsed: ParsedAnnotations, profile_gang: Mapping[str, Any] | None, keys: Keys
) -> tuple[dict[str, Any] | None, list[str]]:
    """The workload's `gangScheduling`: the profile's, overridden by the `gang-*` annotations."""
    if parsed.gang_enabled is False:
        return None, []
    gang = copy.deepcopy(dict(profile_gang)) if profile_gang else None
    if parsed.gang_enabled:
        gang = gang or {}
        if parsed.gang_min_members is not None:
            gang["minMembers"] = parsed.gang_min_members
        if parsed.gang_timeout is not None:
            gang["timeout"] = parsed.gang_timeout
        gang.setdefault("mode", "Strict")
    if gang is None:
        return None, []
    return gang, [f"{keys.gang_enabled}: gang scheduling is not enforced by this version"]
