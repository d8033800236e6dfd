"""The kube-scheduler extender messages (scheduling.md §15): `k8s.io/kube-scheduler/extender/v1`.

The Go types carry no json tags, so the wire keys are the Go field names. Requests are read the
way Go's encoding/json reads them into those types: a key matches a field name
case-insensitively (`nodenames`, `NODENAMES`), unknown keys are ignored. When several keys
match one field, the last one in the document wins. The Pod and Node
objects inside are Kubernetes JSON and are read with their exact keys. Responses are written
with the exact field names, ready for orjson.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.domain.model.errors import describe_value

__all__ = [
    "MAX_EXTENDER_PRIORITY",
    "MIN_EXTENDER_PRIORITY",
    "ExtenderArgs",
    "ExtenderBindingArgs",
    "ExtenderBindingResult",
    "ExtenderFilterResult",
    "ExtenderProtocolError",
    "HostPriority",
    "HostPriorityList",
    "host_priorities",
]

MIN_EXTENDER_PRIORITY: Final = 0
"""Lowest score an extender may give a node (`extenderv1.MinExtenderPriority`)."""
MAX_EXTENDER_PRIORITY: Final = 10
"""Highest score an extender may give a node (`extenderv1.MaxExtenderPriority`)."""

_MISSING: Final = object()
# Go folds a key to upper-case ASCII; these two non-ASCII runes fold onto ASCII letters.
_NON_ASCII_FOLDS: Final = {"\u017f": "S", "\u212a": "K"}


class ExtenderProtocolError(ValueError):
    """A message that is not what the extender protocol allows; names the field and value."""

    def __init__(self, where: str, allowed: str, value: object = _MISSING, note: str = "") -> None:
        self.where = where
        got = "is missing" if value is _MISSING else f"got {describe_value(value)}"
        text = f"{where} must be {allowed}, {got}"
        super().__init__(f"{text}: {note}" if note else text)


def _fold(name: str) -> str:
    """A key as Go's encoding/json compares it with an ASCII field name."""
    return "".join(c.upper() if c.isascii() else _NON_ASCII_FOLDS.get(c, c) for c in name)


def _field(body: Mapping[str, Any], name: str) -> Any:
    """The value of Go field `name` in a decoded object (`_MISSING` when no key matches).

    As Go's decoder: every key equal to the name case-insensitively sets the field, in
    document order, so the last one wins.
    """
    folded = _fold(name)
    value = _MISSING
    for key, candidate in body.items():
        if isinstance(key, str) and _fold(key) == folded:
            value = candidate
    return value


def _object(value: Any, where: str, allowed: str = "a JSON object") -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ExtenderProtocolError(where, allowed, value)
    return value


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ExtenderProtocolError(where, "a non-empty string", value)
    return value


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ExtenderProtocolError(where, "a list of node names (strings)", value)
    return tuple(_name(item, f"{where}[{i}]") for i, item in enumerate(value))


def _reasons(value: Any, where: str) -> dict[str, str]:
    """A FailedNodesMap; null reads as empty, as in Go."""
    if value is _MISSING or value is None:
        return {}
    reasons = _object(value, where, "an object of node name to reason")
    for node, reason in reasons.items():
        if not isinstance(reason, str):
            raise ExtenderProtocolError(f"{where}[{node!r}]", "a string", reason)
    return dict(reasons)


def _text(value: Any, where: str) -> str:
    """A Go string field of a response; null or absent reads as "", as in Go."""
    if value is _MISSING or value is None:
        return ""
    if not isinstance(value, str):
        raise ExtenderProtocolError(where, "a string", value)
    return value


_SCORES: Final = f"an integer from {MIN_EXTENDER_PRIORITY} to {MAX_EXTENDER_PRIORITY}"


def _is_score(value: object) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and MIN_EXTENDER_PRIORITY <= value <= MAX_EXTENDER_PRIORITY
    )


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """The body of `filter` and `prioritize`: the pod and its candidate nodes.

    `node_names` come from `NodeNames` (nodeCacheCapable) or else from the names of the
    `Nodes` NodeList items, which are kept in `nodes`.
    """

    pod: dict[str, Any]
    node_names: tuple[str, ...]
    node_cache_capable: bool = True
    """Whether the names came as `NodeNames` (answers carry `NodeNames` only)."""
    nodes: tuple[dict[str, Any], ...] | None = None
    """The `Nodes` items when kube-scheduler sent a NodeList (nodeCacheCapable: false)."""

    def __post_init__(self) -> None:
        if not self.node_cache_capable and self.nodes is None:
            raise ValueError(
                "ExtenderArgs: without NodeNames (node_cache_capable) nodes are needed"
            )

    @classmethod
    def from_json(cls, body: object) -> ExtenderArgs:
        """Read a decoded request body; raises ExtenderProtocolError naming the bad field."""
        args = _object(body, "ExtenderArgs")
        pod = _object(_field(args, "Pod"), "ExtenderArgs.Pod", "a v1 Pod object")
        metadata = _object(pod.get("metadata", _MISSING), "ExtenderArgs.Pod.metadata")
        for key in ("name", "namespace", "uid"):
            value = metadata.get(key)
            if value is not None and not isinstance(value, str):
                raise ExtenderProtocolError(f"ExtenderArgs.Pod.metadata.{key}", "a string", value)
        nodes = _node_list(_field(args, "Nodes"))
        raw_names = _field(args, "NodeNames")
        if raw_names is not _MISSING and raw_names is not None:
            names = _names(raw_names, "ExtenderArgs.NodeNames")
            return cls(dict(pod), names, True, nodes)
        if nodes is None:
            raise ExtenderProtocolError(
                "ExtenderArgs.NodeNames",
                "a list of node names",
                raw_names,
                "Nodes is null too; nodeCacheCapable: true requires NodeNames",
            )
        names = tuple(item["metadata"]["name"] for item in nodes)
        return cls(dict(pod), names, False, nodes)

    def to_json(self) -> dict[str, Any]:
        """The body as kube-scheduler sends it."""
        return {
            "Pod": self.pod,
            "Nodes": None if self.nodes is None else {"items": list(self.nodes)},
            "NodeNames": list(self.node_names) if self.node_cache_capable else None,
        }

    def _metadata(self, key: str) -> str:
        metadata = self.pod.get("metadata")
        value = metadata.get(key) if isinstance(metadata, Mapping) else None
        return value if isinstance(value, str) else ""

    @property
    def pod_name(self) -> str:
        """`metadata.name` of the pod ("" when absent)."""
        return self._metadata("name")

    @property
    def pod_namespace(self) -> str:
        """`metadata.namespace` of the pod ("" when absent)."""
        return self._metadata("namespace")

    @property
    def pod_uid(self) -> str:
        """`metadata.uid` of the pod ("" when absent)."""
        return self._metadata("uid")


def _node_list(value: Any) -> tuple[dict[str, Any], ...] | None:
    """The items of an `ExtenderArgs.Nodes` NodeList (None when null or absent)."""
    if value is _MISSING or value is None:
        return None
    where = "ExtenderArgs.Nodes"
    node_list = _object(value, where, "a v1 NodeList object or null")
    items = node_list.get("items")
    if items is None:
        return ()
    if not isinstance(items, list):
        raise ExtenderProtocolError(f"{where}.items", "a list of v1 Node objects", items)
    nodes = []
    for i, item in enumerate(items):
        node = _object(item, f"{where}.items[{i}]", "a v1 Node object")
        metadata = _object(node.get("metadata", _MISSING), f"{where}.items[{i}].metadata")
        _name(metadata.get("name", _MISSING), f"{where}.items[{i}].metadata.name")
        nodes.append(dict(node))
    return tuple(nodes)


@dataclass(frozen=True, slots=True)
class ExtenderFilterResult:
    """The answer to `filter`: passing node names and the reason of each rejected node."""

    node_names: tuple[str, ...] = ()
    failed_nodes: Mapping[str, str] = field(default_factory=dict)
    """Nodes preemption could help (reserved: no preempt verb is configured)."""
    failed_and_unresolvable_nodes: Mapping[str, str] = field(default_factory=dict)
    """Nodes preemption cannot help; kube-scheduler skips them when preempting."""
    error_message: str = ""
    """`Error`: a failure of the whole call ("" = none); kube-scheduler then retries the pod."""

    def __post_init__(self) -> None:
        both = sorted(
            set(self.node_names)
            & (set(self.failed_nodes) | set(self.failed_and_unresolvable_nodes))
        )
        if both:
            raise ValueError(f"ExtenderFilterResult: nodes {both} both pass and fail")

    @classmethod
    def only(cls, node: str) -> ExtenderFilterResult:
        """One node passes (the chosen one). The others are left out of both failure maps:
        kube-scheduler drops a node missing from `NodeNames` all the same, and shows per-node
        reasons only for a pod no node takes; a reason for each of 1,000 nodes made the answer
        45 KB that both sides encoded and decoded for every pod placed."""
        return cls((node,))

    @classmethod
    def all_pass(cls, names: Iterable[str]) -> ExtenderFilterResult:
        """Every node passes."""
        return cls(tuple(names))

    @classmethod
    def none_pass(cls, failed_and_unresolvable: Mapping[str, str]) -> ExtenderFilterResult:
        """No node passes; each fails with its reason."""
        return cls((), {}, dict(failed_and_unresolvable))

    @classmethod
    def error(cls, message: str) -> ExtenderFilterResult:
        """The call failed as a whole (`Error`); `message` must not be empty."""
        if not message:
            raise ValueError("ExtenderFilterResult.error: the message must not be empty")
        return cls(error_message=message)

    def to_json(self) -> dict[str, Any]:
        """The body kube-scheduler reads: `Nodes` omitted, maps as objects, `Error` "" if none."""
        return {
            "NodeNames": list(self.node_names),
            "FailedNodes": dict(self.failed_nodes),
            "FailedAndUnresolvableNodes": dict(self.failed_and_unresolvable_nodes),
            "Error": self.error_message,
        }

    @classmethod
    def from_json(cls, body: object) -> ExtenderFilterResult:
        """Read an answer as kube-scheduler does (null maps and names read as empty)."""
        result = _object(body, "ExtenderFilterResult")
        raw_names = _field(result, "NodeNames")
        names = (
            ()
            if raw_names is _MISSING or raw_names is None
            else _names(raw_names, "ExtenderFilterResult.NodeNames")
        )
        return cls(
            names,
            _reasons(_field(result, "FailedNodes"), "ExtenderFilterResult.FailedNodes"),
            _reasons(
                _field(result, "FailedAndUnresolvableNodes"),
                "ExtenderFilterResult.FailedAndUnresolvableNodes",
            ),
            _text(_field(result, "Error"), "ExtenderFilterResult.Error"),
        )


@dataclass(frozen=True, slots=True)
class HostPriority:
    """One node's extender score, an integer from 0 to 10."""

    host: str
    score: int

    def __post_init__(self) -> None:
        if not _is_score(self.score):
            raise ValueError(
                f"HostPriority for node {self.host!r}: score {self.score!r} is out of range; "
                f"must be {_SCORES}"
            )

    def to_json(self) -> dict[str, Any]:
        """`{"Host": ..., "Score": ...}`."""
        return {"Host": self.host, "Score": self.score}


@dataclass(frozen=True, slots=True)
class HostPriorityList:
    """The answer to `prioritize`."""

    priorities: tuple[HostPriority, ...] = ()

    def to_json(self) -> list[dict[str, Any]]:
        """The JSON array kube-scheduler reads."""
        return [priority.to_json() for priority in self.priorities]

    @classmethod
    def from_json(cls, body: object) -> HostPriorityList:
        """Read an answer to `prioritize`."""
        if not isinstance(body, list):
            raise ExtenderProtocolError("HostPriorityList", "a list of {Host, Score}", body)
        priorities = []
        for i, item in enumerate(body):
            where = f"HostPriorityList[{i}]"
            entry = _object(item, where, "an object with Host and Score")
            host = _name(_field(entry, "Host"), f"{where}.Host")
            score = _field(entry, "Score")
            if not _is_score(score):
                raise ExtenderProtocolError(f"{where}.Score", _SCORES, score)
            priorities.append(HostPriority(host, score))
        return cls(tuple(priorities))


def host_priorities(scores: Mapping[str, int]) -> HostPriorityList:
    """Scores by node name, in the mapping's order; a score outside 0..10 is a ValueError."""
    return HostPriorityList(tuple(HostPriority(host, score) for host, score in scores.items()))


@dataclass(frozen=True, slots=True)
class ExtenderBindingArgs:
    """The body of `bind`: which pod goes to which node."""

    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str

    @classmethod
    def from_json(cls, body: object) -> ExtenderBindingArgs:
        """Read a decoded request body; every field must be a non-empty string."""
        args = _object(body, "ExtenderBindingArgs")

        def read(key: str) -> str:
            return _name(_field(args, key), f"ExtenderBindingArgs.{key}")

        return cls(
            pod_name=read("PodName"),
            pod_namespace=read("PodNamespace"),
            pod_uid=read("PodUID"),
            node=read("Node"),
        )

    def to_json(self) -> dict[str, Any]:
        """The body as kube-scheduler sends it."""
        return {
            "PodName": self.pod_name,
            "PodNamespace": self.pod_namespace,
            "PodUID": self.pod_uid,
            "Node": self.node,
        }


@dataclass(frozen=True, slots=True)
class ExtenderBindingResult:
    """The answer to `bind`; an empty `error_message` (`Error`) means the pod is bound."""

    error_message: str = ""

    @classmethod
    def error(cls, message: str) -> ExtenderBindingResult:
        """The binding failed; `message` must not be empty."""
        if not message:
            raise ValueError("ExtenderBindingResult.error: the message must not be empty")
        return cls(message)

    @property
    def ok(self) -> bool:
        """Whether the binding succeeded."""
        return not self.error_message

    def to_json(self) -> dict[str, Any]:
        """`{"Error": ...}` ("" on success)."""
        return {"Error": self.error_message}

    @classmethod
    def from_json(cls, body: object) -> ExtenderBindingResult:
        """Read an answer to `bind` (null or absent `Error` = success)."""
        result = _object(body, "ExtenderBindingResult")
        return cls(_text(_field(result, "Error"), "ExtenderBindingResult.Error"))
