"""The fields of a matched log message, typed: the text of each named group read as the pattern's ``types`` say
(int, float, str, bool, intlist, pyargs, pairs). A number is a value only when the text around it is complete, so
a message cut off mid-number marks the record ``truncated`` rather than reading a wrong value.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from .sglang_grammar import Pattern

_FLOAT_SUFFIXES = ("_gib", "_mib", "_s")


def _number(text: str) -> int | float | None:
    t = text.replace(",", "")
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return None


def _intlist(text: str) -> list[int] | None:
    """``[1, 2, 4]`` → [1, 2, 4]; None when the closing bracket is missing (a cut line) or an item is not an int."""
    m = re.match(r"\s*\[([^\[\]]*)\]", text)
    if not m:
        return None
    items = [x.strip() for x in m.group(1).split(",") if x.strip()]
    return [int(x) for x in items] if all(re.fullmatch(r"-?\d+", x) for x in items) else None


_PAIR = re.compile(r"(\w+)=(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(\s*GB)?(?=\s*,|\s*$)")


def _pairs(text: str, with_unit: tuple[str, ...] = (), may_end: tuple[str, ...] = ()) -> tuple[dict[str, Any], bool]:
    """``a=1, b=2.5, c=3.00 GB`` → ({a: 1, b: 2.5, c_gib: 3.0}, cut); non-numeric values are skipped.

    A number is a value only when something follows it: a comma, or its GB unit. A key in ``with_unit`` seen
    without GB, or a unit-less number that ends the text (unless its key is in ``may_end``: the format's last
    key), was cut off: it is not a value, and cut is True."""
    out: dict[str, Any] = {}
    cut = False
    for m in _PAIR.finditer(text):
        key, num, gb = m.group(1), m.group(2), m.group(3)
        val = _number(num)
        if val is None:
            continue
        at_end = not text[m.end() :].strip()
        if (key in with_unit and not gb) or (at_end and not gb and key not in may_end):
            cut = True
            continue
        if gb:
            out[f"{key}_gib"] = float(val)
        else:
            out[key] = val
    return out, cut


def _jsonable(v: Any, depth: int = 0) -> bool:
    if depth > 20:
        return False
    if v is None or isinstance(v, (bool, int, str)):
        return True
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, (list, tuple)):
        return all(_jsonable(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, (str, int)) and _jsonable(x, depth + 1) for k, x in v.items())
    return False


def _pyvalue(text: str) -> Any:
    """A Python literal as a JSON-ready value; anything else (enums, objects, sets, junk) stays its text."""
    text = text.strip()
    if len(text) > 100_000:
        return text
    try:
        val = ast.literal_eval(text)
    except Exception:  # noqa: BLE001 - any repr that is not a literal stays text
        return text
    if isinstance(val, tuple):
        val = list(val)
    return val if _jsonable(val) else text


def parse_pyargs(text: str) -> tuple[dict[str, Any], bool]:
    """The inside of ``ServerArgs(k=v, ...)`` → ({k: value}, truncated).

    Values are Python literals where possible (numbers, strings, lists, dicts, None, booleans), else their text.
    Without the closing parenthesis the line was cut: the last, incomplete pair is dropped and truncated is True.
    """
    out: dict[str, Any] = {}
    depth, quote, esc, start, i, n = 0, "", False, 0, 0, len(text)
    closed = False
    pieces: list[str] = []
    while i < n:
        c = text[i]
        if quote:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                pieces.append(text[start:i])
                closed = True
                break
            depth -= 1
        elif c == "," and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
        i += 1
    for piece in pieces:
        key, eq, value = piece.partition("=")
        key = key.strip()
        if eq and key.isidentifier():
            out[key] = _pyvalue(value)
    return out, not closed


def _convert(name: str, text: str, ftype: str | None) -> Any:
    if ftype == "str":
        return text.strip()
    if ftype == "bool":
        return text.strip() == "True"
    if ftype == "intlist":
        return _intlist(text)
    if ftype == "float" or (ftype is None and name.endswith(_FLOAT_SUFFIXES)):
        val = _number(text)
        return float(val) if val is not None else None
    if ftype == "int":
        val = _number(text)
        return int(val) if isinstance(val, int) else None
    val = _number(text)
    return val if val is not None else text.strip()


def fields_of(pattern: Pattern, m: re.Match) -> dict[str, Any]:
    """The fields of one match: named groups that matched (typed), then the pattern's constants."""
    out: dict[str, Any] = {}
    truncated = False
    for name, text in m.groupdict().items():
        if text is None:
            continue
        ftype = pattern.types.get(name)
        if ftype == "pairs":
            pairs, cut = _pairs(text, pattern.pairs_with_unit, pattern.pairs_may_end)
            out.update(pairs)
            truncated |= cut
            continue
        if ftype == "pyargs":
            args, cut = parse_pyargs(text)
            out[name] = args
            truncated |= cut
            continue
        val = _convert(name, text, ftype)
        if val is None:
            truncated = True  # e.g. a list without its closing bracket: not a value
            continue
        out[name] = val
    for k, v in pattern.const.items():
        out.setdefault(k, v)
    if truncated:
        out["truncated"] = True
    return out
