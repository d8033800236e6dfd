"""Checks that a rule query is exactly one SELECT (or WITH ... SELECT) statement.

The same query text runs on DuckDB and on GreptimeDB's MySQL dialect, which disagree on
backslashes in strings, `#` and `--` comments, nested block comments, dollar quotes and
backticks. The text is read once per plausible reading (only the readings that a character of
the text can change), and it passes only when every reading finds one read statement: a `;`
that any of them would execute as a separator is rejected.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields
from typing import Final

__all__ = ["RUST_WHITESPACE", "ReadQueryError", "check_read_query"]

_QUOTED: Final = "<quoted>"
_WORD_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_TAG_PART: Final = _WORD_START | frozenset("0123456789")
_WORD_PART: Final = _TAG_PART | {"$"}
_SNIPPET: Final = 40
# Rust's `char::is_whitespace` (the Unicode White_Space property), which GreptimeDB's SQL
# tokenizer (sqlparser) applies to the character after `--` in the MySQL dialect: U+0009-U+000D,
# U+0020, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F and U+3000.
# Python's `str.isspace` also takes U+001C-U+001F, which Rust does not.
RUST_WHITESPACE: Final = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


class ReadQueryError(ValueError):
    """The query is not exactly one SELECT statement; the message says what was found."""


@dataclass(frozen=True, slots=True)
class _Reading:
    """One way of reading the text; each flag is a rule one of the two dialects applies."""

    backslash_escapes: bool = False  # MySQL: \' inside a string does not end it
    hash_comments: bool = False  # MySQL: # starts a line comment
    dash_needs_space: bool = False  # MySQL: -- is a comment only before (Rust) whitespace
    nested_comments: bool = False  # DuckDB: /* /* */ */ is one comment
    executable_comments: bool = False  # MySQL: the body of /*! ... */ is executed
    dollar_quotes: bool = False  # DuckDB: $tag$ ... $tag$ is a string
    backtick_quotes: bool = False  # MySQL: `name` is a quoted identifier


_TRIGGERS: Final[dict[str, str]] = {
    "backslash_escapes": "\\",
    "hash_comments": "#",
    "dash_needs_space": "--",
    "nested_comments": "/*",
    "executable_comments": "/*!",
    "dollar_quotes": "$",
    "backtick_quotes": "`",
}


def _readings(sql: str) -> list[_Reading]:
    """Every combination of the flags whose trigger occurs in the text."""
    varied = [flag.name for flag in fields(_Reading) if _TRIGGERS[flag.name] in sql]
    return [
        _Reading(**dict(zip(varied, values, strict=True)))
        for values in itertools.product((False, True), repeat=len(varied))
    ]


def _describe(reading: _Reading) -> str:
    set_flags = [
        flag.name.replace("_", " ") for flag in fields(_Reading) if getattr(reading, flag.name)
    ]
    return f" (reading the text with: {', '.join(set_flags)})" if set_flags else ""


def _line_comment_at(sql: str, index: int, reading: _Reading) -> bool:
    if sql.startswith("--", index):
        after = sql[index + 2 : index + 3]
        return not (reading.dash_needs_space and after and after not in RUST_WHITESPACE)
    return sql[index] == "#" and reading.hash_comments


def _line_end(sql: str, index: int) -> int:
    end = sql.find("\n", index)
    return len(sql) if end < 0 else end + 1


def _block_end(sql: str, index: int, nested: bool) -> int:
    depth = 0
    position = index
    while position < len(sql):
        if sql.startswith("/*", position):
            depth = depth + 1 if nested or depth == 0 else depth
            position += 2
        elif sql.startswith("*/", position):
            depth -= 1
            position += 2
            if depth == 0:
                return position
        else:
            position += 1
    raise ReadQueryError(f"has an unterminated /* comment at character {index + 1}")


def _quoted_end(sql: str, index: int, quote: str, backslash: bool) -> int:
    position = index + 1
    while position < len(sql):
        char = sql[position]
        if backslash and char == "\\":
            position += 2
            continue
        if char == quote:
            if sql.startswith(quote, position + 1):  # a doubled quote stands for itself
                position += 2
                continue
            return position + 1
        position += 1
    kind = "string literal" if quote == "'" else "quoted name"
    raise ReadQueryError(f"has an unterminated {kind} ({quote}) at character {index + 1}")


def _dollar_end(sql: str, index: int) -> int | None:
    """End of a `$tag$ ... $tag$` string starting at index, or None when none starts there."""
    close = sql.find("$", index + 1)
    if close < 0:
        return None
    tag = sql[index : close + 1]
    body = tag[1:-1]
    if body and (body[0] not in _WORD_START or not set(body) <= _TAG_PART):
        return None
    end = sql.find(tag, close + 1)
    if end < 0:
        raise ReadQueryError(f"has an unterminated {tag} string at character {index + 1}")
    return end + len(tag)


def _statements(sql: str, reading: _Reading) -> list[list[tuple[str, int]]]:
    """Statements as lists of (token, offset); words upper-cased, quoted text as one token."""
    statements: list[list[tuple[str, int]]] = [[]]
    index = 0
    while index < len(sql):
        char = sql[index]
        if char.isspace():
            index += 1
        elif _line_comment_at(sql, index, reading):
            index = _line_end(sql, index)
        elif sql.startswith("/*", index):
            if reading.executable_comments and sql.startswith(("/*!", "/*M!"), index):
                index += 4 if sql[index + 2] == "M" else 3  # the body is code
            else:
                index = _block_end(sql, index, reading.nested_comments)
        elif char in "'\"" or (char == "`" and reading.backtick_quotes):
            statements[-1].append((_QUOTED, index))
            index = _quoted_end(sql, index, char, reading.backslash_escapes and char != "`")
        elif char == "$" and reading.dollar_quotes and (end := _dollar_end(sql, index)):
            statements[-1].append((_QUOTED, index))
            index = end
        elif char == ";":
            statements.append([])
            index += 1
        elif char in _WORD_START:
            start = index
            while index < len(sql) and sql[index] in _WORD_PART:
                index += 1
            statements[-1].append((sql[start:index].upper(), start))
        else:
            statements[-1].append((char, index))
            index += 1
    return [statement for statement in statements if statement]


def _first_word(tokens: list[tuple[str, int]], start: int) -> str:
    for token, _ in tokens[start:]:
        if token != "(":
            return token
    return ""


def _main_verb(tokens: list[tuple[str, int]]) -> str:
    """SELECT, or the verb after the common table expressions of a WITH."""
    first = _first_word(tokens, 0)
    if first != "WITH":
        return first
    depth = 0
    after_body = False
    for position, (token, _) in enumerate(tokens):
        if token == "(":
            if depth == 0 and after_body:
                return _first_word(tokens, position)
            depth += 1
        elif token == ")":
            depth -= 1
            after_body = depth == 0
        elif depth == 0 and after_body:
            if token not in (",", "AS"):
                return token
            after_body = False
    return ""


def _check_reading(sql: str, reading: _Reading) -> None:
    try:
        statements = _statements(sql, reading)
    except ReadQueryError as error:
        raise ReadQueryError(f"{error}{_describe(reading)}") from None
    if not statements:
        raise ReadQueryError("is empty")
    if len(statements) > 1:
        offset = statements[1][0][1]
        snippet = " ".join(sql[offset : offset + _SNIPPET].split())
        raise ReadQueryError(
            f"holds {len(statements)} statements{_describe(reading)}; the second begins "
            f"{snippet!r} (only one statement is allowed; a single trailing ';' is fine)"
        )
    tokens = statements[0]
    verb = _main_verb(tokens)
    if verb != "SELECT":
        raise ReadQueryError(
            f"must be one SELECT (or WITH ... SELECT) statement, not {verb or 'an incomplete'}"
            f"{' one' if not verb else ''}{_describe(reading)}"
        )
    depth = 0
    for token, _ in tokens:
        depth += 1 if token == "(" else -1 if token == ")" else 0
        if depth == 0 and token == "INTO":
            raise ReadQueryError("uses SELECT ... INTO, which writes; only reads are allowed")


def check_read_query(sql: str) -> None:
    """Raise ReadQueryError unless every reading finds exactly one SELECT statement."""
    for reading in _readings(sql):
        _check_reading(sql, reading)
