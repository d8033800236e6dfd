"""Owner references to our objects and JSON merge patches.

Reads of objects live in `tensorfusion.domain.object_views`; RFC 3339 times are read by
`tensorfusion.domain.timestamps.parse_rfc3339`.

`merge_patch(current, desired)` is how every status write is built: only the fields a writer
owns are named in `desired`, so fields written by others (the node agent's heartbeat, another
condition) are left alone; `Exactly` marks a map the writer owns whole (its keys that are no
longer wanted are deleted with null).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.model.meta import API_VERSION
from tensorfusion.domain.object_views import Obj, name_of, uid_of

__all__ = ["Exactly", "merge_patch", "owner_reference"]

_EMPTY: Final[Mapping[str, Any]] = {}


def owner_reference(owner: Obj, kind: str) -> dict[str, Any]:
    """A controller owner reference to one of our objects (`tensor-fusion.ai/v1`)."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": name_of(owner),
        "uid": uid_of(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


@dataclass(frozen=True, slots=True)
class Exactly:
    """A map owned whole: in a merge patch its keys that are not wanted are deleted."""

    value: Mapping[str, Any]


def merge_patch(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that gives `current` the fields of `desired`.

    Fields of `current` not named in `desired` are left alone; a `None` in `desired` deletes
    the field; nested maps are patched field by field, `Exactly` maps as a whole; lists and
    scalars are replaced when they differ. An empty result means nothing to write.
    """
    have_all = current or _EMPTY
    patch: dict[str, Any] = {}
    for key, want in desired.items():
        have = have_all.get(key)
        if want is None:
            if have is not None:
                patch[key] = None
            continue
        if isinstance(want, Exactly):
            exact = _exact_patch(have if isinstance(have, Mapping) else None, want.value)
            if exact is not None:
                patch[key] = exact
            continue
        if isinstance(want, Mapping):
            if isinstance(have, Mapping):
                nested = merge_patch(have, want)
                if nested:
                    patch[key] = nested
            else:
                patch[key] = _plain(want)
            continue
        if want != have:
            patch[key] = _plain(want)
    return patch


def _exact_patch(have: Mapping[str, Any] | None, want: Mapping[str, Any]) -> Any:
    """The patch replacing `have` by `want` exactly; None when they are equal (absent = {})."""
    if have is None:
        return _plain(want) if want else None
    patch: dict[str, Any] = {key: None for key in have if key not in want}
    for key, value in want.items():
        old = have.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            nested = _exact_patch(old, value)
            if nested is not None:
                patch[key] = nested
        elif _plain(value) != old:
            patch[key] = _plain(value)
    return patch or None


def _plain(value: Any) -> Any:
    """`value` with `Exactly` wrappers removed and mappings turned into dicts."""
    if isinstance(value, Exactly):
        return _plain(value.value)
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
