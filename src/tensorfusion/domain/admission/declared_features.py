"""Autoscaling and gang settings: recorded on the workload, not acted on (§4 steps 9, 12)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from tensorfusion.domain.admission.validation import ParsedAnnotations
from tensorfusion.domain.annotations import Keys
from tensorfusion.domain.model import to_wire
from tensorfusion.domain.model.autoscaling import AutoScalingConfig, AutoSetResources
from tensorfusion.domain.model.workload import GangScheduling

__all__ = ["autoscaling_config", "gang_scheduling"]


def _as_written(value: BaseModel | None) -> dict[str, Any] | None:
    """The profile's fields as written, plus those admission set (JSON for the workload)."""
    return None if value is None else to_wire(value, exclude_unset=True)


def autoscaling_config(
    parsed: ParsedAnnotations, profile_config: AutoScalingConfig | None, keys: Keys
) -> tuple[dict[str, Any] | None, list[str]]:
    """The workload's `autoScalingConfig`: the profile's, with `autoscale` applied."""
    config = profile_config
    if parsed.autoscale is None:
        return _as_written(config), []
    auto = None if config is None else config.auto_set_resources
    if not parsed.autoscale:
        if config is not None and auto is not None:
            auto = auto.model_copy(update={"enable": False})
            config = config.model_copy(update={"auto_set_resources": auto})
        return _as_written(config), []
    auto = auto or AutoSetResources()
    target = parsed.autoscale_target or auto.target_resource or "all"
    auto = auto.model_copy(update={"enable": True, "target_resource": target})
    config = (config or AutoScalingConfig()).model_copy(update={"auto_set_resources": auto})
    return _as_written(config), [
        f"{keys.autoscale}=true: autoscaling is recorded on the workload but not acted on "
        "by this version"
    ]


def gang_scheduling(
    parsed: ParsedAnnotations, profile_gang: GangScheduling | None, keys: Keys
) -> tuple[dict[str, Any] | None, list[str]]:
    """The workload's `gangScheduling`: the profile's, overridden by the `gang-*` annotations."""
    if parsed.gang_enabled is False:
        return None, []
    gang = profile_gang
    if parsed.gang_enabled:
        gang = gang or GangScheduling()
        update: dict[str, Any] = {"mode": gang.mode}
        if parsed.gang_min_members is not None:
            update["min_members"] = parsed.gang_min_members
        if parsed.gang_timeout is not None:
            update["timeout"] = parsed.gang_timeout
        gang = gang.model_copy(update=update)
    if gang is None:
        return None, []
    return _as_written(gang), [
        f"{keys.gang_enabled}: gang scheduling is not enforced by this version"
    ]
