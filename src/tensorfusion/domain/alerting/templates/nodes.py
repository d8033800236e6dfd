"""Parse-tree nodes of a Go `text/template`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ActionNode",
    "BranchNode",
    "BreakNode",
    "CommandNode",
    "ConstantNode",
    "ContinueNode",
    "DotNode",
    "FieldNode",
    "FunctionNode",
    "ListNode",
    "Node",
    "PipeNode",
    "TextNode",
    "VariableNode",
]


class Node:
    """Base of every node; `position` is the offset in the source."""

    position: int = 0


@dataclass(slots=True)
class TextNode(Node):
    """Literal text copied to the output."""

    text: str
    position: int = 0


@dataclass(slots=True)
class ConstantNode(Node):
    """A literal: string, number (int or float), bool, or nil (value None)."""

    value: Any
    is_nil: bool = False
    position: int = 0


@dataclass(slots=True)
class DotNode(Node):
    """The cursor `.`."""

    position: int = 0


@dataclass(slots=True)
class FieldNode(Node):
    """`.a.b` on dot, or fields applied to an operand (`(pipe).a`, `$x.a`)."""

    names: tuple[str, ...]
    receiver: Node | None = None
    position: int = 0


@dataclass(slots=True)
class VariableNode(Node):
    """`$name.field...`."""

    name: str
    names: tuple[str, ...] = ()
    position: int = 0


@dataclass(slots=True)
class FunctionNode(Node):
    """A function identifier (`printf`, `eq`, ...)."""

    name: str
    position: int = 0


@dataclass(slots=True)
class CommandNode(Node):
    """Operands of one command of a pipeline."""

    args: list[Node]
    position: int = 0


@dataclass(slots=True)
class PipeNode(Node):
    """`$x := cmd | cmd`; `declare` is False for `=` assignments."""

    commands: list[CommandNode]
    variables: list[str] = field(default_factory=list)
    declare: bool = True
    position: int = 0


@dataclass(slots=True)
class ListNode(Node):
    """A sequence of nodes."""

    nodes: list[Node] = field(default_factory=list)
    position: int = 0


@dataclass(slots=True)
class ActionNode(Node):
    """`{{ pipeline }}`: prints the value unless the pipeline declares variables."""

    pipe: PipeNode
    position: int = 0


@dataclass(slots=True)
class BranchNode(Node):
    """`if`, `with` or `range` with its body and optional else part."""

    kind: str
    pipe: PipeNode
    body: ListNode
    else_body: ListNode | None = None
    position: int = 0


@dataclass(slots=True)
class BreakNode(Node):
    """`{{break}}` inside range."""

    position: int = 0


@dataclass(slots=True)
class ContinueNode(Node):
    """`{{continue}}` inside range."""

    position: int = 0
