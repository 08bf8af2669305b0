"""Kernel names a person recognises, for every terminal table: the one place a name is shortened.

``short_name`` turns ``void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>, …>(…)`` into
``vectorized_elementwise_kernel<FillFunctor>``, an attention kernel into its name and head dimension, a
CUTLASS or cuBLAS GEMM into its tile (``cutlass s1688gemm<128x128_16x4_nt>``). The rules are data
(``tracekit/data/kernel_names.json``). ``distinct_names`` shortens a column so that different names never read
the same: a name whose short form collides with another's gets a longer one (its template arguments, then its whole
name). json and csv always carry the full name; so does the terminal with ``--wide``.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from typing import Iterable

_NAMESPACE = re.compile(r"\b[A-Za-z_]\w*::")
_IDENT = re.compile(r"[A-Za-z_]\w*")


@lru_cache(maxsize=1)
def _rules() -> dict:
    spec = json.loads(resources.files("tracekit.data").joinpath("kernel_names.json").read_text(encoding="utf-8"))
    return {
        "rules": [(re.compile(r["pattern"]), r["label"]) for r in spec["rules"]],
        "what": re.compile(spec["what"]),
        "generic": frozenset(spec["generic"]),
        "wrappers": frozenset(spec["wrappers"]),
        "name_columns": tuple(spec["name_columns"]),
    }


def name_columns() -> tuple[str, ...]:
    """The table columns that hold kernel (or op) names: shortened in terminal tables unless ``--wide``."""
    return _rules()["name_columns"]


def _split(name: str) -> tuple[str, str, str]:
    """(identifier, template arguments, parameters) of a C++ kernel name, the return type and namespaces of the
    identifier dropped; template arguments and parameters keep their own text ('' when there are none)."""
    n = name.strip().replace("(anonymous namespace)::", "")
    angle, paren, head_end = 0, 0, len(n)
    for i, ch in enumerate(n):
        if ch == "(" and angle == 0 and paren == 0:
            head_end = i
            break
        paren += (ch == "(") - (ch == ")")
        if paren == 0:
            angle += (ch == "<") - (ch == ">" and angle > 0)
    head, params = n[:head_end], n[head_end:]
    # the return type (void, std::enable_if<…>::type) is what comes before the last space outside <>
    angle, paren, start = 0, 0, 0
    for i, ch in enumerate(head):
        paren += (ch == "(") - (ch == ")")
        if paren == 0:
            angle += (ch == "<") - (ch == ">" and angle > 0)
        if ch == " " and angle == 0 and paren == 0 and head[i + 1 : i + 2] not in ("", "<", ">"):
            start = i + 1
    head = head[start:]
    lt = head.find("<")
    if lt < 0:
        return head.split("::")[-1].strip() or head, "", params
    ident = head[:lt].split("::")[-1].strip() or head[:lt]
    args = head[lt + 1 :]
    return ident, args[:-1] if args.endswith(">") else args, params


def _top_args(args: str) -> list[str]:
    """Template arguments at the top level, namespaces dropped."""
    out, depth, cur = [], 0, ""
    for ch in _NAMESPACE.sub("", args):
        if ch in "<({[":
            depth += 1
        elif ch in ">)}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


@lru_cache(maxsize=65536)
def short_name(name: str) -> str:
    """A kernel name a person recognises (see the module's docstring); a plain name, or one that is not a C++
    identifier, is kept as it is."""
    text = str(name)
    short = _short(text)
    return short if _IDENT.fullmatch(short.split("<")[0].replace("cutlass ", "")) else text


def _short(text: str) -> str:
    if "<" not in text and "(" not in text and "::" not in text and not text.startswith("void "):
        base, args = text, ""
    else:
        base, args, _ = _split(text)
    r = _rules()
    core = f"{base}<{_NAMESPACE.sub('', args)}>" if args else base
    if base in r["wrappers"] and args:
        first = _IDENT.search(_NAMESPACE.sub("", args))
        if first:
            inner = _NAMESPACE.sub("", args)[first.start() :]
            base, core = first.group(), inner
    for pattern, label in r["rules"]:
        m = pattern.search(core)
        if m:
            return label.format(None, *m.groups(), base=base)
    if not args:
        return base
    what = next(
        (
            m.group(1)
            for m in r["what"].finditer(_NAMESPACE.sub("", args))
            if m.group(1) not in r["generic"] and m.group(1) != base
        ),
        None,
    )
    return f"{base}<{what}>" if what else base


def _medium(name: str) -> str:
    """A longer form: the identifier with its template arguments (namespaces dropped)."""
    base, args, _ = _split(str(name))
    return f"{base}<{', '.join(_top_args(args))}>" if args else base


def _whole(name: str) -> str:
    base, args, params = _split(str(name))
    return _NAMESPACE.sub("", f"{base}<{args}>{params}" if args else f"{base}{params}")


def distinct_names(names: Iterable[str]) -> list[str]:
    """Each name's short form; where two different names would read the same, longer forms for those (their
    template arguments, then the whole name without namespaces, then the name as it is)."""
    names = [str(n) for n in names]
    levels = (short_name, _medium, _whole, str)
    level = {n: 0 for n in names}
    for _ in levels:
        shown: dict[str, set[str]] = {}
        for n in level:
            shown.setdefault(levels[level[n]](n), set()).add(n)
        clash = [n for group in shown.values() if len(group) > 1 for n in group if level[n] < len(levels) - 1]
        if not clash:
            break
        for n in clash:
            level[n] += 1
    return [levels[level[n]](n) for n in names]
