"""Tokens of Go `text/template` source: text between actions, and the items inside `{{ }}`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto

__all__ = ["TemplateSyntaxError", "Token", "TokenKind", "tokenize"]

_KEYWORDS = frozenset(
    {"if", "else", "end", "range", "with", "define", "template", "block", "break", "continue"}
)
_TRIM_CHARS = " \t\r\n"


class TemplateSyntaxError(ValueError):
    """The template text does not parse; the message names line and column."""


class TokenKind(Enum):
    """Kinds of lexical item."""

    TEXT = auto()
    LEFT = auto()
    RIGHT = auto()
    KEYWORD = auto()
    IDENT = auto()
    FIELD = auto()
    VARIABLE = auto()
    DOT = auto()
    STRING = auto()
    CHAR = auto()
    NUMBER = auto()
    BOOL = auto()
    NIL = auto()
    PIPE = auto()
    LPAREN = auto()
    RPAREN = auto()
    DECLARE = auto()
    ASSIGN = auto()
    COMMA = auto()
    EOF = auto()


@dataclass(frozen=True, slots=True)
class Token:
    """One lexical item; `value` is decoded (string contents, field names, number text)."""

    kind: TokenKind
    value: str
    position: int
    fields: tuple[str, ...] = ()
    attached: bool = False


def _line_column(text: str, position: int) -> str:
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    return f"{line}:{column}"


def _error(text: str, position: int, message: str) -> TemplateSyntaxError:
    return TemplateSyntaxError(f"{_line_column(text, position)}: {message}")


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_ESCAPES.update({"\\": "\\", "'": "'", '"': '"'})


def _unquote(text: str, start: int, body: str, quote: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(body):
        char = body[index]
        if char != "\\":
            out.append(char)
            index += 1
            continue
        index += 1
        if index >= len(body):
            raise _error(text, start, "unterminated escape in quoted text")
        code = body[index]
        if code in _ESCAPES:
            if code in "'\"" and code != quote:
                raise _error(text, start, f"invalid escape \\{code} in quoted text")
            out.append(_ESCAPES[code])
            index += 1
        elif code in "xuU":
            size = {"x": 2, "u": 4, "U": 8}[code]
            digits = body[index + 1 : index + 1 + size]
            if len(digits) != size or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise _error(text, start, f"invalid escape \\{code}{digits} in quoted text")
            out.append(chr(int(digits, 16)))
            index += 1 + size
        elif code in "01234567":
            digits = body[index : index + 3]
            if len(digits) != 3 or any(c not in "01234567" for c in digits):
                raise _error(text, start, f"invalid octal escape in quoted text: \\{digits}")
            out.append(chr(int(digits, 8)))
            index += 3
        else:
            raise _error(text, start, f"invalid escape \\{code} in quoted text")
    return "".join(out)


def _is_identifier_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _lex_action(text: str, start: int, end: int, tokens: list[Token]) -> None:
    """Lex the inside of one action: text[start:end]."""
    index = start
    depth = 0
    while index < end:
        char = text[index]
        if char in " \t\r\n":
            index += 1
            continue
        if char == "|":
            tokens.append(Token(TokenKind.PIPE, "|", index))
            index += 1
        elif char == "(":
            depth += 1
            tokens.append(Token(TokenKind.LPAREN, "(", index))
            index += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise _error(text, index, "unexpected right paren")
            tokens.append(Token(TokenKind.RPAREN, ")", index))
            index += 1
            if index < end and text[index] == "." and index + 1 < end:
                index = _lex_field(text, index, end, tokens, attached=True)
        elif char == ",":
            tokens.append(Token(TokenKind.COMMA, ",", index))
            index += 1
        elif char == ":":
            if text.startswith(":=", index):
                tokens.append(Token(TokenKind.DECLARE, ":=", index))
                index += 2
            else:
                raise _error(text, index, "expected :=")
        elif char == "=":
            tokens.append(Token(TokenKind.ASSIGN, "=", index))
            index += 1
        elif char == '"':
            close = index + 1
            while close < end and text[close] != '"':
                if text[close] == "\n":
                    raise _error(text, index, "unterminated quoted string")
                close += 2 if text[close] == "\\" else 1
            if close >= end:
                raise _error(text, index, "unterminated quoted string")
            value = _unquote(text, index, text[index + 1 : close], '"')
            tokens.append(Token(TokenKind.STRING, value, index))
            index = close + 1
        elif char == "`":
            close = text.find("`", index + 1, end)
            if close < 0:
                raise _error(text, index, "unterminated raw quoted string")
            tokens.append(Token(TokenKind.STRING, text[index + 1 : close], index))
            index = close + 1
        elif char == "'":
            close = index + 1
            while close < end and text[close] != "'":
                close += 2 if text[close] == "\\" else 1
            if close >= end:
                raise _error(text, index, "unterminated character constant")
            value = _unquote(text, index, text[index + 1 : close], "'")
            if len(value) != 1:
                raise _error(
                    text, index, f"malformed character constant: {text[index : close + 1]}"
                )
            tokens.append(Token(TokenKind.CHAR, value, index))
            index = close + 1
        elif char == "$":
            stop = index + 1
            while stop < end and _is_identifier_char(text[stop]):
                stop += 1
            name = text[index:stop]
            fields: list[str] = []
            while stop < end and text[stop] == "." and stop + 1 < end:
                field_end = stop + 1
                while field_end < end and _is_identifier_char(text[field_end]):
                    field_end += 1
                if field_end == stop + 1:
                    break
                fields.append(text[stop + 1 : field_end])
                stop = field_end
            tokens.append(Token(TokenKind.VARIABLE, name, index, tuple(fields)))
            index = stop
        elif char == ".":
            if index + 1 < end and text[index + 1].isdigit():
                index = _lex_number(text, index, end, tokens)
            elif index + 1 < end and _is_identifier_char(text[index + 1]):
                index = _lex_field(text, index, end, tokens, attached=False)
            else:
                tokens.append(Token(TokenKind.DOT, ".", index))
                index += 1
        elif char.isdigit() or (char in "+-" and index + 1 < end and text[index + 1].isdigit()):
            index = _lex_number(text, index, end, tokens)
        elif char.isalpha() or char == "_":
            stop = index
            while stop < end and _is_identifier_char(text[stop]):
                stop += 1
            word = text[index:stop]
            if word in ("true", "false"):
                tokens.append(Token(TokenKind.BOOL, word, index))
            elif word == "nil":
                tokens.append(Token(TokenKind.NIL, word, index))
            elif word in _KEYWORDS:
                tokens.append(Token(TokenKind.KEYWORD, word, index))
            else:
                tokens.append(Token(TokenKind.IDENT, word, index))
            index = stop
        else:
            raise _error(text, index, f"unexpected {char!r} in action")
    if depth > 0:
        raise _error(text, start, "unclosed left paren")


def _lex_field(text: str, index: int, end: int, tokens: list[Token], *, attached: bool) -> int:
    names: list[str] = []
    position = index
    while position < end and text[position] == ".":
        stop = position + 1
        while stop < end and _is_identifier_char(text[stop]):
            stop += 1
        if stop == position + 1:
            break
        names.append(text[position + 1 : stop])
        position = stop
    if not names:
        raise _error(text, index, "bad character in field name")
    tokens.append(Token(TokenKind.FIELD, ".".join(names), index, tuple(names), attached))
    return position


def _lex_number(text: str, index: int, end: int, tokens: list[Token]) -> int:
    stop = index
    if text[stop] in "+-":
        stop += 1
    while stop < end and (text[stop].isalnum() or text[stop] in "._"):
        if text[stop] in "eEpP" and stop + 1 < end and text[stop + 1] in "+-":
            stop += 1
        stop += 1
    tokens.append(Token(TokenKind.NUMBER, text[index:stop], index))
    return stop


def tokenize(text: str) -> list[Token]:
    """Split template source into tokens; trim markers and comments are applied here."""
    tokens: list[Token] = []
    position = 0
    trim_next_text = False
    length = len(text)
    while position <= length:
        open_at = text.find("{{", position)
        chunk = text[position:] if open_at < 0 else text[position:open_at]
        trim_left = False
        if open_at >= 0:
            after = text[open_at + 2 : open_at + 4]
            trim_left = len(after) == 2 and after[0] == "-" and after[1] in _TRIM_CHARS
        if trim_next_text:
            chunk = chunk.lstrip(_TRIM_CHARS)
        if trim_left:
            chunk = chunk.rstrip(_TRIM_CHARS)
        if chunk:
            tokens.append(Token(TokenKind.TEXT, chunk, position))
        if open_at < 0:
            break
        inner_start = open_at + (4 if trim_left else 2)
        # Comments: {{/* ... */}}, with optional trim markers.
        probe = inner_start
        if text.startswith("/*", probe):
            close_comment = text.find("*/", probe + 2)
            if close_comment < 0:
                raise _error(text, open_at, "unclosed comment")
            after_comment = close_comment + 2
            trim_right = text.startswith(" -}}", after_comment) or text.startswith(
                "\t-}}", after_comment
            )
            if trim_right:
                after_comment += 1
            if text.startswith("-}}", after_comment) and trim_right:
                position = after_comment + 3
            elif text.startswith("}}", after_comment):
                position = after_comment + 2
            else:
                raise _error(text, open_at, "comment ends before closing delimiter")
            trim_next_text = trim_right
            continue
        close_at = _find_close(text, inner_start)
        if close_at < 0:
            raise _error(text, open_at, "unclosed action")
        trim_right = (
            close_at - 2 >= inner_start
            and text[close_at - 1] == "-"
            and text[close_at - 2] in _TRIM_CHARS
        )
        inner_end = close_at - 1 if trim_right else close_at
        tokens.append(Token(TokenKind.LEFT, "{{", open_at))
        _lex_action(text, inner_start, inner_end, tokens)
        tokens.append(Token(TokenKind.RIGHT, "}}", close_at))
        position = close_at + 2
        trim_next_text = trim_right
    tokens.append(Token(TokenKind.EOF, "", length))
    return tokens


def _find_close(text: str, start: int) -> int:
    """Index of the `}}` closing an action, skipping quoted text."""
    index = start
    while index < len(text):
        char = text[index]
        if char in {'"', "'"}:
            index += 1
            while index < len(text) and text[index] != char and text[index] != "\n":
                index += 2 if text[index] == "\\" else 1
            index += 1
        elif char == "`":
            close = text.find("`", index + 1)
            if close < 0:
                return -1
            index = close + 1
        elif text.startswith("}}", index):
            return index
        else:
            index += 1
    return -1
