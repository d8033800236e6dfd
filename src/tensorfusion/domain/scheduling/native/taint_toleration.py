"""TaintToleration: tolerations and the first NoSchedule/NoExecute taint a pod does not tolerate."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from tensorfusion.domain.scheduling.native.node import Taint
from tensorfusion.domain.scheduling.native.resources import NativeInputError

__all__ = [
    "TAINT_TOLERATION",
    "Toleration",
    "first_untolerated_taint",
    "parse_tolerations",
    "tolerated",
    "untolerated_taint_reason",
]

TAINT_TOLERATION: Final = "TaintToleration"

_EQUAL: Final = "Equal"
_EXISTS: Final = "Exists"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration; empty key, operator or effect mean what they mean in Kubernetes."""

    key: str = ""
    operator: str = _EQUAL
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration covers the taint (key, effect and value or Exists)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", _EQUAL):
            return self.value == taint.value
        return self.operator == _EXISTS

    @classmethod
    def parse(cls, raw: Mapping[str, object], where: str) -> Toleration:
        """Read one `spec.tolerations` entry."""
        fields = {}
        for name in ("key", "operator", "value", "effect"):
            value = raw.get(name)
            if value is not None and not isinstance(value, str):
                raise NativeInputError(f"{where}.{name}: expected a string, got {value!r}")
            fields[name] = value or ""
        return cls(**fields)


def parse_tolerations(raw: object) -> tuple[Toleration, ...]:
    """Read `spec.tolerations`."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise NativeInputError(f"spec.tolerations: expected a list, got {raw!r}")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise NativeInputError(f"spec.tolerations[{i}]: expected an object, got {item!r}")
        out.append(Toleration.parse(item, f"spec.tolerations[{i}]"))
    return tuple(out)


def tolerated(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Whether any toleration covers the taint."""
    return any(t.tolerates(taint) for t in tolerations)


def first_untolerated_taint(
    tolerations: Sequence[Toleration], taints: Sequence[Taint]
) -> Taint | None:
    """The first of the taints (in node order) that no toleration covers."""
    for taint in taints:
        if not tolerated(tolerations, taint):
            return taint
    return None


def untolerated_taint_reason(taint: Taint) -> str:
    """kube-scheduler's reason text for an untolerated taint."""
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
