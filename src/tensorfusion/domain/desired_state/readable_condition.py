"""Condition `Readable` on an object the controller could not read (controller.md, "Bad
objects"): `False` with the problem's reason and message while a field is beyond its bounds,
`True` once the object reads well again. Only objects whose status has conditions (GPUPool,
GPUNode) carry it; an object that never had a problem gets none."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tensorfusion.domain.alerting.templates.limits import cut_text
from tensorfusion.domain.desired_state.pools import replace_conditions
from tensorfusion.domain.model.meta import Condition
from tensorfusion.domain.object_views import Obj, status_of

__all__ = ["MESSAGE_LIMIT", "READABLE", "READS_WELL", "readable_patch"]

READABLE: Final = "Readable"
READS_WELL: Final = "ReadsWell"
_COMPARED: Final = ("status", "reason", "message")
MESSAGE_LIMIT: Final = 1024
"""Characters of the problem kept in the condition's message (the Event carries it too)."""


def _current(obj: Obj) -> Mapping[str, Any] | None:
    for condition in status_of(obj).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == READABLE:
            return condition
    return None


def readable_patch(obj: Obj, problem: tuple[str, str] | None, now: str) -> dict[str, Any] | None:
    """The status patch that sets `Readable` for `problem` ((reason, message), None once the
    object reads well); None when the object already says so."""
    current = _current(obj)
    if problem is None:
        if current is None or current.get("status") == "True":
            return None
        wanted = Condition(type=READABLE, status="True", reason=READS_WELL,
                           message="every field reads within its bounds")  # fmt: skip
    else:
        reason, message = problem[0], cut_text(problem[1], MESSAGE_LIMIT)
        wanted = Condition(type=READABLE, status="False", reason=reason, message=message)
        seen = None if current is None else tuple(current.get(k) for k in _COMPARED)
        if seen == ("False", reason, message):
            return None
    return {"status": {"conditions": replace_conditions(obj, [wanted], now)}}
