"""Execution of a parsed Go template against a data mapping, with Go's built-in functions."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from tensorfusion.domain.alerting.templates.goformat import (
    GoInt,
    go_sprint,
    go_sprintf,
    go_sprintln,
    go_type_name,
)
from tensorfusion.domain.alerting.templates.limits import (
    MAX_RENDER_CHARS,
    MAX_RENDER_STEPS,
    TemplateLimitError,
    cut_text,
)
from tensorfusion.domain.alerting.templates.nodes import (
    ActionNode,
    BranchNode,
    BreakNode,
    CommandNode,
    ConstantNode,
    ContinueNode,
    DotNode,
    FieldNode,
    FunctionNode,
    ListNode,
    Node,
    PipeNode,
    TextNode,
    VariableNode,
)

__all__ = ["FUNCTION_NAMES", "TemplateExecutionError", "execute"]


class TemplateExecutionError(ValueError):
    """A template failed while executing (bad comparison, wrong argument, ...)."""


class _Missing:
    """Go's invalid reflect.Value: a map key that is absent (prints `<no value>`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no value>"


MISSING: Any = _Missing()


class _BreakSignal(Exception):  # noqa: N818 - control flow, not an error
    pass


class _ContinueSignal(Exception):  # noqa: N818 - control flow, not an error
    pass


class _OutputFull(Exception):  # noqa: N818 - control flow, not an error
    pass


def _truth(value: Any) -> bool:
    if value is None or value is MISSING:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str | list | tuple | dict):
        return len(value) > 0
    return True


def _plain(value: Any) -> Any:
    """Arguments passed to functions: an absent value becomes nil."""
    return None if value is MISSING else value


_BOOL, _INT, _FLOAT, _STRING = "bool", "int", "float", "string"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int):
        return _INT
    if isinstance(value, float):
        return _FLOAT
    if isinstance(value, str | Decimal):
        return _STRING
    if value is None or value is MISSING:
        return "invalid"
    return "other"


def _comparable_text(value: Any) -> Any:
    return str(value) if isinstance(value, Decimal) else value


def _eq(first: Any, *others: Any) -> bool:
    if not others:
        raise TemplateExecutionError("missing argument for comparison")
    first = _plain(first)
    kind = _kind(first)
    for raw_other in others:
        other = _plain(raw_other)
        other_kind = _kind(other)
        if kind != other_kind:
            if first is not None and other is not None:
                raise TemplateExecutionError("incompatible types for comparison")
            continue
        if kind == "invalid":
            return True
        if kind == "other":
            try:
                if first == other:
                    return True
            except TypeError as error:
                raise TemplateExecutionError("non-comparable types") from error
            continue
        if _comparable_text(first) == _comparable_text(other):
            return True
    return False


def _ne(first: Any, second: Any) -> bool:
    return not _eq(first, second)


def _ordered(first: Any, second: Any) -> tuple[Any, Any]:
    first, second = _plain(first), _plain(second)
    first_kind, second_kind = _kind(first), _kind(second)
    for kind in (first_kind, second_kind):
        if kind not in (_INT, _FLOAT, _STRING):
            raise TemplateExecutionError("invalid type for comparison")
    if first_kind != second_kind:
        raise TemplateExecutionError("incompatible types for comparison")
    return _comparable_text(first), _comparable_text(second)


def _lt(first: Any, second: Any) -> bool:
    a, b = _ordered(first, second)
    return bool(a < b)


def _le(first: Any, second: Any) -> bool:
    a, b = _ordered(first, second)
    return bool(a <= b)


def _gt(first: Any, second: Any) -> bool:
    a, b = _ordered(first, second)
    return bool(a > b)


def _ge(first: Any, second: Any) -> bool:
    a, b = _ordered(first, second)
    return bool(a >= b)


def _not(value: Any) -> bool:
    return not _truth(value)


def _len(value: Any) -> int:
    value = _plain(value)
    if isinstance(value, str):
        return GoInt(len(value.encode("utf-8")))
    if isinstance(value, list | tuple | dict):
        return GoInt(len(value))
    if value is None:
        raise TemplateExecutionError("len of nil pointer")
    raise TemplateExecutionError(f"len of type {go_type_name(value)}")


def _index(item: Any, *keys: Any) -> Any:
    current = _plain(item)
    for raw_key in keys:
        key = _plain(raw_key)
        if isinstance(current, dict):
            if not isinstance(key, str):
                raise TemplateExecutionError(
                    f"value has type {go_type_name(key)}; should be string"
                )
            current = current.get(key, MISSING)
        elif isinstance(current, list | tuple | str):
            if not isinstance(key, int) or isinstance(key, bool):
                raise TemplateExecutionError(
                    f"cannot index slice/array with type {go_type_name(key)}"
                )
            if key < 0 or key >= len(current):
                raise TemplateExecutionError(f"index out of range: {key}")
            current = current.encode("utf-8")[key] if isinstance(current, str) else current[key]
        elif current is None or current is MISSING:
            raise TemplateExecutionError("index of untyped nil")
        else:
            raise TemplateExecutionError(f"can't index item of type {go_type_name(current)}")
    return current


def _slice(item: Any, *indexes: Any) -> Any:
    value = _plain(item)
    if not isinstance(value, str | list | tuple):
        raise TemplateExecutionError(f"can't slice item of type {go_type_name(value)}")
    if len(indexes) > 2:
        raise TemplateExecutionError("too many slice indexes")
    bounds = [int(i) for i in indexes]
    start = bounds[0] if bounds else 0
    stop = bounds[1] if len(bounds) > 1 else len(value)
    if not 0 <= start <= stop <= len(value):
        raise TemplateExecutionError(f"index out of range: {start}:{stop}")
    return value[start:stop]


def _printf(format_text: Any, *args: Any) -> str:
    if not isinstance(format_text, str):
        raise TemplateExecutionError(
            f"wrong type for value; expected string; got {go_type_name(format_text)}"
        )
    return go_sprintf(format_text, *(_plain(a) for a in args))


def _check_text_args(args: tuple[Any, ...]) -> None:
    if sum(len(a) for a in args if isinstance(a, str)) > MAX_RENDER_CHARS:
        raise TemplateLimitError(f"output exceeds {MAX_RENDER_CHARS} characters (the limit)")


def _print(*args: Any) -> str:
    _check_text_args(args)
    return go_sprint(*(_plain(a) for a in args))


def _println(*args: Any) -> str:
    _check_text_args(args)
    return go_sprintln(*(_plain(a) for a in args))


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "eq": _eq,
    "ne": _ne,
    "lt": _lt,
    "le": _le,
    "gt": _gt,
    "ge": _ge,
    "not": _not,
    "len": _len,
    "index": _index,
    "slice": _slice,
    "printf": _printf,
    "print": _print,
    "println": _println,
}
_ARITY: dict[str, tuple[int, int | None]] = {
    "eq": (1, None),
    "ne": (2, 2),
    "lt": (2, 2),
    "le": (2, 2),
    "gt": (2, 2),
    "ge": (2, 2),
    "not": (1, 1),
    "len": (1, 1),
    "index": (1, None),
    "slice": (1, None),
    "printf": (1, None),
    "print": (0, None),
    "println": (0, None),
    "and": (1, None),
    "or": (1, None),
}

FUNCTION_NAMES: frozenset[str] = frozenset(_ARITY)


def text_of(value: Any) -> str:
    """How an action prints its final value."""
    if value is MISSING or value is None:
        return "<no value>"
    return go_sprint(value)


class _State:
    __slots__ = ("max_chars", "out", "size", "steps", "variables")

    def __init__(self, data: Any, max_chars: int) -> None:
        self.out: list[str] = []
        self.size = 0
        self.max_chars = max_chars
        self.steps = 0
        self.variables: list[tuple[str, Any]] = [("$", data)]

    def tick(self) -> None:
        """Count one unit of work: an action, a call or a range iteration."""
        self.steps += 1
        if self.steps > MAX_RENDER_STEPS:
            raise TemplateLimitError(
                f"template execution exceeds {MAX_RENDER_STEPS} steps (the limit)"
            )

    def emit(self, text: str) -> None:
        """Write output; stops execution once past `max_chars`."""
        self.out.append(text)
        self.size += len(text)
        if self.size > self.max_chars:
            raise _OutputFull

    def lookup(self, name: str) -> Any:
        for variable, value in reversed(self.variables):
            if variable == name:
                return value
        raise TemplateExecutionError(f"undefined variable: {name}")

    def assign(self, name: str, value: Any) -> None:
        for index in range(len(self.variables) - 1, -1, -1):
            if self.variables[index][0] == name:
                self.variables[index] = (name, value)
                return
        raise TemplateExecutionError(f"undefined variable: {name}")

    def walk(self, dot: Any, node: Node) -> None:
        if not isinstance(node, ListNode):
            self.tick()
        if isinstance(node, TextNode):
            self.emit(node.text)
        elif isinstance(node, ActionNode):
            value = self.pipe(dot, node.pipe)
            if not node.pipe.variables:
                self.emit(text_of(value))
        elif isinstance(node, ListNode):
            for child in node.nodes:
                self.walk(dot, child)
        elif isinstance(node, BranchNode):
            self.branch(dot, node)
        elif isinstance(node, BreakNode):
            raise _BreakSignal
        elif isinstance(node, ContinueNode):
            raise _ContinueSignal
        else:  # pragma: no cover - parser emits no other node at list level
            raise TemplateExecutionError(f"unknown node {type(node).__name__}")

    def branch(self, dot: Any, node: BranchNode) -> None:
        mark = len(self.variables)
        try:
            if node.kind == "range":
                self.range(dot, node)
                return
            value = self.pipe(dot, node.pipe)
            if _truth(value):
                self.walk(value if node.kind == "with" else dot, node.body)
            elif node.else_body is not None:
                self.walk(dot, node.else_body)
        finally:
            del self.variables[mark:]

    def range(self, dot: Any, node: BranchNode) -> None:
        pipe = node.pipe
        value = _plain(self.pipe_value(dot, pipe))
        items: Iterable[tuple[Any, Any]]
        if isinstance(value, list | tuple):
            items = ((GoInt(i), item) for i, item in enumerate(value))
            empty = not value
        elif isinstance(value, dict):
            items = sorted(value.items(), key=lambda item: str(item[0]))
            empty = not value
        elif isinstance(value, int) and not isinstance(value, bool):
            items = ((GoInt(i), GoInt(i)) for i in range(value))  # lazy: a huge count is cheap
            empty = value <= 0
        elif value is None:
            items, empty = (), True
        else:
            raise TemplateExecutionError(f"range can't iterate over {text_of(value)}")
        if empty:
            if node.else_body is not None:
                self.walk(dot, node.else_body)
            return
        mark = len(self.variables)
        for key, element in items:
            self.tick()
            if len(pipe.variables) == 1:
                self.variables.append((pipe.variables[0], element))
            elif len(pipe.variables) == 2:
                self.variables.append((pipe.variables[0], key))
                self.variables.append((pipe.variables[1], element))
            try:
                self.walk(element, node.body)
            except _ContinueSignal:
                pass
            except _BreakSignal:
                break
            finally:
                del self.variables[mark:]

    def pipe_value(self, dot: Any, pipe: PipeNode) -> Any:
        """Evaluate the commands of a pipe, without variable binding."""
        value: Any = _NO_FINAL
        for command in pipe.commands:
            value = self.command(dot, command, value)
        return value

    def pipe(self, dot: Any, pipe: PipeNode) -> Any:
        value = self.pipe_value(dot, pipe)
        for name in pipe.variables:
            if pipe.declare:
                self.variables.append((name, value))
            else:
                self.assign(name, value)
        return value

    def command(self, dot: Any, command: CommandNode, final: Any) -> Any:
        first = command.args[0]
        if isinstance(first, FunctionNode):
            return self.call(dot, first.name, command.args[1:], final)
        if (len(command.args) > 1 or final is not _NO_FINAL) and isinstance(
            first, FieldNode | VariableNode | DotNode | ConstantNode
        ):
            raise TemplateExecutionError(f"can't give argument to non-function {first!r}")
        if isinstance(first, ConstantNode) and first.is_nil:
            raise TemplateExecutionError("nil is not a command")
        return self.operand(dot, first)

    def call(self, dot: Any, name: str, arg_nodes: list[Node], final: Any) -> Any:
        self.tick()
        count = len(arg_nodes) + (0 if final is _NO_FINAL else 1)
        low, high = _ARITY[name]
        if count < low or (high is not None and count > high):
            wanted = str(low) if high == low else f"at least {low}"
            raise TemplateExecutionError(
                f"wrong number of args for {name}: want {wanted} got {count}"
            )
        if name in ("and", "or"):
            # Short-circuit: arguments are evaluated only as far as needed.
            value: Any = None
            sources: list[Node | None] = [*arg_nodes]
            if final is not _NO_FINAL:
                sources.append(None)
            for source in sources:
                value = final if source is None else self.operand(dot, source)
                if _truth(value) == (name == "or"):
                    return value
            return value
        args = [self.operand(dot, node) for node in arg_nodes]
        if final is not _NO_FINAL:
            args.append(final)
        try:
            return _FUNCTIONS[name](*args)
        except (ValueError, TypeError, OverflowError) as error:  # includes the limit errors
            raise TemplateExecutionError(f"error calling {name}: {error}") from None

    def operand(self, dot: Any, node: Node) -> Any:
        if isinstance(node, FieldNode):
            receiver = dot if node.receiver is None else self.operand(dot, node.receiver)
            return _fields(receiver, node.names)
        if isinstance(node, ConstantNode):
            return node.value
        if isinstance(node, DotNode):
            return dot
        if isinstance(node, VariableNode):
            return _fields(self.lookup(node.name), node.names)
        if isinstance(node, PipeNode):
            return self.pipe(dot, node)
        if isinstance(node, FunctionNode):
            return self.call(dot, node.name, [], _NO_FINAL)
        raise TemplateExecutionError(f"can't evaluate {type(node).__name__}")


_NO_FINAL: Any = object()


def _fields(receiver: Any, names: tuple[str, ...]) -> Any:
    value = receiver
    for name in names:
        if isinstance(value, Mapping):
            value = value.get(name, MISSING)
        elif value is MISSING or value is None:
            return MISSING
        else:
            raise TemplateExecutionError(
                f"can't evaluate field {name} in type {go_type_name(value)}"
            )
    return value


def execute(tree: ListNode, data: Mapping[str, Any], *, max_chars: int | None = None) -> str:
    """Run a parsed template over `data` and return the output text.

    With `max_chars`, longer output is cut to it with the marker; without, output past
    MAX_RENDER_CHARS is an error. Work past MAX_RENDER_STEPS is an error.
    """
    state = _State(data, MAX_RENDER_CHARS if max_chars is None else max_chars)
    try:
        state.walk(data, tree)
    except (_BreakSignal, _ContinueSignal):  # pragma: no cover - parser rejects these outside range
        pass
    except _OutputFull:
        if max_chars is None:
            raise TemplateExecutionError(
                f"rendered text exceeds {MAX_RENDER_CHARS} characters (the limit)"
            ) from None
        return cut_text("".join(state.out), max_chars)
    except TemplateLimitError as error:
        raise TemplateExecutionError(str(error)) from None
    except RecursionError as error:
        raise TemplateExecutionError("template nested too deeply") from error
    return "".join(state.out)
