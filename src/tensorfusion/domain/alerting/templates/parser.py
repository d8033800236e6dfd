"""Parser of Go `text/template` source into the node tree of `nodes`."""

from __future__ import annotations

import re
from collections.abc import Collection

from tensorfusion.domain.alerting.templates.goformat import GoInt
from tensorfusion.domain.alerting.templates.lexer import (
    TemplateSyntaxError,
    Token,
    TokenKind,
    tokenize,
)
from tensorfusion.domain.alerting.templates.limits import MAX_NESTING_DEPTH
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

__all__ = ["parse"]

_LEGACY_OCTAL = re.compile(r"[+-]?0[0-7_]+")


def _number(text: str) -> int | float:
    """A Go number constant: int unless it is written as a float (., e, p)."""
    body = text.lstrip("+-")
    is_hex = body[:2].lower() == "0x"
    try:
        if is_hex and "p" not in body.lower():
            return int(text, 16) if "_" not in text else int(text, 0)
        if is_hex:
            value = float.fromhex(text.replace("_", ""))
            return value
        if _LEGACY_OCTAL.fullmatch(text):
            return int(text.replace("_", ""), 8)
        if not any(c in body for c in ".eE"):
            return int(text, 0)
        return float(text)
    except ValueError as error:
        raise TemplateSyntaxError(f"bad number syntax: {text!r}") from error


class _TemplateParser:
    def __init__(self, text: str, functions: Collection[str]) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0
        self.functions = functions
        self.variables: list[str] = ["$"]
        self.range_depth = 0
        self.depth = 0

    def enter(self, token: Token) -> None:
        """One level deeper (a block or parentheses); refuses more than MAX_NESTING_DEPTH."""
        self.depth += 1
        if self.depth > MAX_NESTING_DEPTH:
            raise self.error(
                token,
                f"nesting deeper than {MAX_NESTING_DEPTH} levels (the limit for if, with, range,"
                " else if and parentheses together)",
            )

    def _where(self, token: Token) -> str:
        line = self.text.count("\n", 0, token.position) + 1
        column = token.position - (self.text.rfind("\n", 0, token.position) + 1) + 1
        return f"{line}:{column}"

    def error(self, token: Token, message: str) -> TemplateSyntaxError:
        return TemplateSyntaxError(f"{self._where(token)}: {message}")

    def peek(self) -> Token:
        return self.tokens[self.index]

    def next(self) -> Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def expect(self, kind: TokenKind, context: str) -> Token:
        token = self.next()
        if token.kind is not kind:
            shown = token.value or token.kind.name.lower()
            raise self.error(token, f"unexpected {shown!r} in {context}")
        return token

    def parse(self) -> ListNode:
        body, stop = self.item_list(())
        if stop is not None:
            raise self.error(stop, f"unexpected {{{{{stop.value}}}}}")
        return body

    def item_list(self, stops: tuple[str, ...]) -> tuple[ListNode, Token | None]:
        """Parse until EOF or a `{{keyword}}` in stops; returns the stopping keyword token."""
        nodes: list[Node] = []
        while True:
            token = self.peek()
            if token.kind is TokenKind.EOF:
                if stops:
                    raise self.error(token, "unexpected EOF")
                return ListNode(nodes), None
            if token.kind is TokenKind.TEXT:
                self.next()
                nodes.append(TextNode(token.value, token.position))
                continue
            self.expect(TokenKind.LEFT, "template")
            keyword = self.peek()
            if keyword.kind is TokenKind.KEYWORD and keyword.value in ("end", "else"):
                if keyword.value not in stops:
                    raise self.error(keyword, f"unexpected {{{{{keyword.value}}}}}")
                self.next()
                return ListNode(nodes), keyword
            nodes.append(self.action())

    def action(self) -> Node:
        token = self.peek()
        if token.kind is TokenKind.KEYWORD:
            self.next()
            if token.value in ("if", "with", "range"):
                return self.branch(token.value, token)
            if token.value in ("break", "continue"):
                if self.range_depth == 0:
                    raise self.error(token, f"{{{{{token.value}}}}} outside {{{{range}}}}")
                self.expect(TokenKind.RIGHT, token.value)
                return BreakNode(token.position) if token.value == "break" else ContinueNode()
            raise self.error(token, f"{{{{{token.value}}}}} is not supported in rule templates")
        pipe = self.pipeline("command", TokenKind.RIGHT)
        return ActionNode(pipe, token.position)

    def branch(self, kind: str, start: Token) -> BranchNode:
        self.enter(start)
        saved_variables = len(self.variables)
        pipe = self.pipeline(kind, TokenKind.RIGHT)
        if kind == "range":
            self.range_depth += 1
        body, stop = self.item_list(("end", "else"))
        if kind == "range":
            self.range_depth -= 1
        else_body: ListNode | None = None
        assert stop is not None
        if stop.value == "else":
            follow = self.peek()
            if (
                follow.kind is TokenKind.KEYWORD
                and follow.value in ("if", "with")
                and kind != "range"
            ):
                # `{{else if ...}}` / `{{else with ...}}`: a nested branch sharing this {{end}}.
                self.next()
                nested = self.branch(follow.value, follow)
                else_body = ListNode([nested], follow.position)
            else:
                self.expect(TokenKind.RIGHT, "else")
                else_body, stop = self.item_list(("end",))
                assert stop is not None
                self.expect(TokenKind.RIGHT, "end")
        else:
            self.expect(TokenKind.RIGHT, "end")
        del self.variables[saved_variables:]
        self.depth -= 1
        return BranchNode(kind, pipe, body, else_body, start.position)

    def pipeline(self, context: str, end: TokenKind) -> PipeNode:
        start = self.peek()
        variables: list[str] = []
        declare = True
        # Declarations: $x := , $x = , $i, $e :=
        if start.kind is TokenKind.VARIABLE and not start.fields:
            lookahead = self.tokens[self.index + 1]
            if lookahead.kind in (TokenKind.DECLARE, TokenKind.ASSIGN):
                self.next()
                self.next()
                variables.append(start.value)
                declare = lookahead.kind is TokenKind.DECLARE
            elif lookahead.kind is TokenKind.COMMA and context == "range":
                second = self.tokens[self.index + 2]
                operator = self.tokens[self.index + 3]
                if second.kind is TokenKind.VARIABLE and operator.kind in (
                    TokenKind.DECLARE,
                    TokenKind.ASSIGN,
                ):
                    self.index += 4
                    variables.extend([start.value, second.value])
                    declare = operator.kind is TokenKind.DECLARE
                else:
                    raise self.error(lookahead, "too many declarations in range")
        if not declare:
            for name in variables:
                if name not in self.variables:
                    raise self.error(start, f"undefined variable {name!r}")
        commands: list[CommandNode] = []
        while True:
            token = self.peek()
            if token.kind is end:
                self.next()
                break
            commands.append(self.command(end))
            token = self.peek()
            if token.kind is TokenKind.PIPE:
                self.next()
                continue
        if not commands:
            raise self.error(start, f"missing value for {context}")
        for command in commands[1:]:
            first = command.args[0]
            if isinstance(first, ConstantNode | DotNode):
                raise self.error(start, "non executable command in pipeline stage 2")
        if declare:
            self.variables.extend(variables)
        return PipeNode(commands, variables, declare, start.position)

    def command(self, end: TokenKind) -> CommandNode:
        start = self.peek()
        args: list[Node] = []
        while True:
            token = self.peek()
            if token.kind in (end, TokenKind.PIPE):
                break
            if token.kind in (TokenKind.RIGHT, TokenKind.RPAREN, TokenKind.EOF):
                raise self.error(token, f"unexpected {token.value!r} in operand")
            args.append(self.operand())
        if not args:
            raise self.error(start, "empty command")
        return CommandNode(args, start.position)

    def operand(self) -> Node:
        node = self.term()
        follow = self.peek()
        if follow.kind is TokenKind.FIELD and follow.attached:
            self.next()
            node = FieldNode(follow.fields, node, follow.position)
        return node

    def term(self) -> Node:
        token = self.next()
        kind = token.kind
        if kind is TokenKind.IDENT:
            if token.value not in self.functions:
                raise self.error(token, f'function "{token.value}" not defined')
            return FunctionNode(token.value, token.position)
        if kind is TokenKind.DOT:
            return DotNode(token.position)
        if kind is TokenKind.NIL:
            return ConstantNode(None, True, token.position)
        if kind is TokenKind.VARIABLE:
            if token.value not in self.variables:
                raise self.error(token, f'undefined variable "{token.value}"')
            return VariableNode(token.value, token.fields, token.position)
        if kind is TokenKind.FIELD:
            return FieldNode(token.fields, None, token.position)
        if kind is TokenKind.BOOL:
            return ConstantNode(token.value == "true", False, token.position)
        if kind is TokenKind.STRING:
            return ConstantNode(token.value, False, token.position)
        if kind is TokenKind.CHAR:
            return ConstantNode(GoInt(ord(token.value)), False, token.position)
        if kind is TokenKind.NUMBER:
            try:
                number = _number(token.value)
                value = GoInt(number) if isinstance(number, int) else number
                return ConstantNode(value, False, token.position)
            except TemplateSyntaxError as error:
                raise self.error(token, str(error)) from None
        if kind is TokenKind.LPAREN:
            self.enter(token)
            pipe = self.pipeline("parenthesized pipeline", TokenKind.RPAREN)
            self.depth -= 1
            return pipe
        shown = token.value or token.kind.name.lower()
        raise self.error(token, f"unexpected {shown!r} in operand")


def parse(text: str, functions: Collection[str]) -> ListNode:
    """Parse template text; `functions` are the names a template may call."""
    return _TemplateParser(text, functions).parse()
