"""Go's `fmt` printing of template values: `%v`, `Sprint`, `Sprintln` and `Sprintf`.

Values are the Python forms of what a Go template sees: `None` (nil), `bool`, `int`, `float`
(float64), `str`, `Decimal` (printed as its text, like the driver's bytes), lists and dicts.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from tensorfusion.domain.alerting.templates.limits import (
    GO_FMT_MAX_WIDTH,
    MAX_RENDER_CHARS,
    TemplateLimitError,
)

__all__ = ["GoInt", "go_sprint", "go_sprintf", "go_sprintln", "go_type_name", "go_value_text"]


class GoInt(int):
    """An `int` made by the template itself (a constant, `len`); data integers are int64."""

    __slots__ = ()


def go_type_name(value: Any) -> str:
    """The Go type name used in `%!verb(type=value)` diagnostics."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if isinstance(value, GoInt) else "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str | Decimal):
        return "string"
    if isinstance(value, list | tuple):
        return "[]interface {}"
    if isinstance(value, dict):
        return "map[string]interface {}"
    return type(value).__name__


def _shortest_digits(value: float) -> tuple[str, int]:
    """Shortest round-trip decimal digits of a finite positive float and its decimal point.

    Returns (digits, dp) such that value == 0.<digits> x 10**dp.
    """
    _, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    if not digits:
        return "0", 1
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    return stripped, len(stripped) + exponent


def _format_exponent(exp: int) -> str:
    sign = "-" if exp < 0 else "+"
    return f"e{sign}{abs(exp):02d}"


def _format_shortest_g(value: float) -> str:
    """Go's strconv.FormatFloat(value, 'g', -1, 64) (the `%v` of a float64)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    negative = math.copysign(1.0, value) < 0
    prefix = "-" if negative else ""
    if value == 0:
        return prefix + "0"
    digits, dp = _shortest_digits(abs(value))
    exp = dp - 1
    if exp < -4 or exp >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return prefix + mantissa + _format_exponent(exp)
    if dp <= 0:
        return prefix + "0." + "0" * (-dp) + digits
    if dp >= len(digits):
        return prefix + digits + "0" * (dp - len(digits))
    return prefix + digits[:dp] + "." + digits[dp:]


def go_value_text(value: Any) -> str:
    """The text of `fmt.Sprint(value)` for one operand (Go's `%v`)."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _format_shortest_g(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + " ".join(go_value_text(item) for item in value) + "]"
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda item: str(item[0]))
        return "map[" + " ".join(f"{k}:{go_value_text(v)}" for k, v in items) + "]"
    return str(value)


def go_sprint(*args: Any) -> str:
    """`fmt.Sprint`: spaces between operands when neither side is a string."""
    out: list[str] = []
    previous_is_string = True
    for index, arg in enumerate(args):
        is_string = isinstance(arg, str)
        if index > 0 and not is_string and not previous_is_string:
            out.append(" ")
        out.append(go_value_text(arg))
        previous_is_string = is_string
    return "".join(out)


def go_sprintln(*args: Any) -> str:
    """`fmt.Sprintln`: operands always separated by spaces, then a newline."""
    return " ".join(go_value_text(arg) for arg in args) + "\n"


class _FormatSpec:
    __slots__ = ("minus", "plus", "precision", "sharp", "space", "width", "zero")

    def __init__(self) -> None:
        self.minus = False
        self.plus = False
        self.sharp = False
        self.space = False
        self.zero = False
        self.width: int | None = None
        self.precision: int | None = None


def _pad(text: str, spec: _FormatSpec, *, numeric: bool = False) -> str:
    if spec.width is None or len(text) >= spec.width:
        return text
    fill = spec.width - len(text)
    if spec.minus:
        return text + " " * fill
    if spec.zero and numeric:
        sign = text[0] if text[:1] in ("-", "+", " ") else ""
        return sign + "0" * fill + text[len(sign) :]
    if spec.zero and not numeric:
        return "0" * fill + text
    return " " * fill + text


def _sign(negative: bool, spec: _FormatSpec) -> str:
    if negative:
        return "-"
    if spec.plus:
        return "+"
    if spec.space:
        return " "
    return ""


def _format_float(value: float, verb: str, spec: _FormatSpec) -> str:
    if math.isnan(value) or math.isinf(value):
        if math.isnan(value):
            text = ("+" if spec.plus else " " if spec.space else "") + "NaN"
        elif value < 0:
            text = "-Inf"
        else:
            text = (" " if spec.space and not spec.plus else "+") + "Inf"
        saved, spec.zero = spec.zero, False
        result = _pad(text, spec)
        spec.zero = saved
        return result
    negative = math.copysign(1.0, value) < 0
    magnitude = abs(value)
    if verb in ("v", "g", "G") and spec.precision is None:
        body = _format_shortest_g(magnitude)
    elif verb in ("f", "F"):
        body = f"{magnitude:.{6 if spec.precision is None else spec.precision}f}"
    elif verb in ("e", "E"):
        body = f"{magnitude:.{6 if spec.precision is None else spec.precision}e}"
    else:  # g / G with a precision
        precision = max(spec.precision or 0, 1)
        body = f"{magnitude:.{precision}g}"
        if "e" in body:
            mantissa, _, exponent = body.partition("e")
            body = mantissa + _format_exponent(int(exponent))
    if spec.sharp and "." not in body and verb not in ("e", "E") and "e" not in body:
        body += "."
    if verb in ("E", "G"):
        body = body.upper()
    return _pad(_sign(negative, spec) + body, spec, numeric=True)


def _format_int(value: int, verb: str, spec: _FormatSpec) -> str:
    negative = value < 0
    magnitude = abs(value)
    if verb == "c":
        return _pad(_rune(value), spec)
    if verb == "q":
        return _pad(_go_quote_rune(value), spec)
    prefix = ""
    if verb in ("d", "v"):
        digits = str(magnitude)
    elif verb == "x":
        digits = format(magnitude, "x")
        prefix = "0x" if spec.sharp else ""
    elif verb == "X":
        digits = format(magnitude, "X")
        prefix = "0X" if spec.sharp else ""
    elif verb == "o":
        digits = format(magnitude, "o")
        prefix = "0" if spec.sharp else ""
    elif verb == "O":
        digits = format(magnitude, "o")
        prefix = "0o"
    else:  # b
        digits = format(magnitude, "b")
    if spec.precision is not None:
        digits = digits.rjust(spec.precision, "0")
        if spec.precision == 0 and magnitude == 0:
            digits = ""
    text = _sign(negative, spec) + prefix + digits
    if spec.precision is not None:
        saved, spec.zero = spec.zero, False
        result = _pad(text, spec)
        spec.zero = saved
        return result
    return _pad(text, spec, numeric=True)


_QUOTE_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_QUOTE_ESCAPES.update({"\v": "\\v", "\\": "\\\\"})


def _go_quote(text: str, quote: str = '"') -> str:
    out = [quote]
    for char in text:
        if char == quote:
            out.append("\\" + char)
        elif char in _QUOTE_ESCAPES:
            out.append(_QUOTE_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append(quote)
    return "".join(out)


def _rune(value: int) -> str:
    """The character of a code point; U+FFFD for a surrogate or a value out of range (as Go)."""
    if 0 <= value <= 0x10FFFF and not 0xD800 <= value <= 0xDFFF:
        return chr(value)
    return "\ufffd"


def _go_quote_rune(value: int) -> str:
    return _go_quote(_rune(value), "'")


def _bad_verb(verb: str, value: Any) -> str:
    if value is None:
        return f"%!{verb}(<nil>)"
    return f"%!{verb}({go_type_name(value)}={go_value_text(value)})"


def _format_one(verb: str, value: Any, spec: _FormatSpec) -> str:
    if isinstance(value, bool):
        if verb in ("v", "t"):
            return _pad("true" if value else "false", spec)
        return _bad_verb(verb, value)
    if isinstance(value, int):
        if verb in ("v", "d", "x", "X", "o", "O", "b", "c", "q"):
            return _format_int(value, verb, spec)
        return _bad_verb(verb, value)
    if isinstance(value, float):
        if verb in ("v", "f", "F", "e", "E", "g", "G"):
            return _format_float(value, verb, spec)
        return _bad_verb(verb, value)
    if isinstance(value, str | Decimal):
        text = str(value)
        if verb == "v" and spec.sharp:
            return _pad(_go_quote(text), spec)
        if verb in ("v", "s"):
            if spec.precision is not None:
                text = text[: spec.precision]
            return _pad(text, spec)
        if verb == "q":
            return _pad(_go_quote(text), spec)
        if verb in ("x", "X"):
            encoded = text.encode("utf-8").hex()
            return _pad(encoded.upper() if verb == "X" else encoded, spec)
        return _bad_verb(verb, value)
    if value is None:
        if verb == "v":
            return _pad("<nil>", spec)
        return _bad_verb(verb, value)
    if verb in ("v", "s"):
        return _pad(go_value_text(value), spec)
    return _bad_verb(verb, value)


def _parse_count(text: str, start: int) -> tuple[int | None, int]:
    """Go fmt's `parsenum`: ASCII digits at `start`; past GO_FMT_MAX_WIDTH the rest is eaten."""
    number: int | None = None
    position = start
    while position < len(text) and "0" <= text[position] <= "9":
        if number is not None and number > GO_FMT_MAX_WIDTH:
            return None, len(text)  # Go: "crazy long number", the verb is lost (NOVERB)
        number = (number or 0) * 10 + ord(text[position]) - ord("0")
        position += 1
    return number, position


def _count_arg(args: tuple[Any, ...], index: int) -> tuple[int | None, int]:
    """Go fmt's `intFromArg`: a `*` width or precision, None when not an int or too large."""
    if index >= len(args):
        return None, index
    value = args[index]
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > GO_FMT_MAX_WIDTH:
        return None, index + 1
    return value, index + 1


def _over(limit: int) -> TemplateLimitError:
    return TemplateLimitError(f"printf output exceeds {limit} characters (the limit)")


def _check_room(spec: _FormatSpec, value: Any, *, size: int, limit: int) -> None:
    """Refuse a verb whose width or numeric precision alone would pass the output limit."""
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    needed = max(spec.width or 0, (spec.precision or 0) if numeric else 0)
    if size + needed > limit:
        raise _over(limit)


def go_sprintf(format_text: str, *args: Any, limit: int = MAX_RENDER_CHARS) -> str:
    """`fmt.Sprintf` for the verbs templates use (v d s q f F e E g G t x X o O b c %).

    Widths and precisions are bounded as Go bounds them (`%!(BADWIDTH)`, `%!(BADPREC)`,
    `%!(NOVERB)`); output past `limit` characters raises TemplateLimitError.
    """
    out: list[str] = []
    size = 0
    arg_index = 0
    position = 0
    length = len(format_text)
    while position < length:
        if size > limit:
            raise _over(limit)
        percent = format_text.find("%", position)
        if percent < 0:
            out.append(format_text[position:])
            size += length - position
            break
        out.append(format_text[position:percent])
        size += percent - position
        position = percent + 1
        spec = _FormatSpec()
        while position < length and format_text[position] in "-+# 0":
            flag = format_text[position]
            if flag == "-":
                spec.minus = True
            elif flag == "+":
                spec.plus = True
            elif flag == "#":
                spec.sharp = True
            elif flag == " ":
                spec.space = True
            else:
                spec.zero = True
            position += 1
        if position < length and format_text[position] == "*":
            position += 1
            spec.width, arg_index = _count_arg(args, arg_index)
            if spec.width is None:
                out.append("%!(BADWIDTH)")
            elif spec.width < 0:
                spec.minus, spec.width = True, -spec.width
        else:
            spec.width, position = _parse_count(format_text, position)
        if position + 1 < length and format_text[position] == ".":
            position += 1
            if format_text[position] == "*":
                position += 1
                spec.precision, arg_index = _count_arg(args, arg_index)
                if spec.precision is None or spec.precision < 0:
                    spec.precision = None
                    out.append("%!(BADPREC)")
            else:
                precision, position = _parse_count(format_text, position)
                spec.precision = precision or 0
        if position >= length:
            out.append("%!(NOVERB)")
            break
        verb = format_text[position]
        position += 1
        if verb == "%":
            out.append("%")
            size += 1
            continue
        if arg_index >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        value = args[arg_index]
        arg_index += 1
        if spec.minus:
            spec.zero = False
        _check_room(spec, value, size=size, limit=limit)
        piece = _format_one(verb, value, spec)
        out.append(piece)
        size += len(piece)
    if arg_index < len(args):
        extras = ", ".join(
            "<nil>" if a is None else f"{go_type_name(a)}={go_value_text(a)}"
            for a in args[arg_index:]
        )
        out.append(f"%!(EXTRA {extras})")
    text = "".join(out)
    if len(text) > limit:
        raise _over(limit)
    return text
