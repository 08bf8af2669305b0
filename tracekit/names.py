"""Kernel names a person recognises, for every terminal table: the one place a name is shortened.

``short_name`` turns ``void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>, …>(…)`` into
``vectorized_elementwise_kernel<FillFunctor>``, an attention kernel into its name and head dimension, a
CUTLASS or cuBLAS GEMM into its tile (``cutlass s1688gemm<128x128_16x4_nt>``); on AMD a Tensile/hipBLASLt GEMM
(a ~450-character name of layout letters, types and tile sizes) into ``hipBLASLt Alik_Bljk BBS_BH MT256x32x64 MI16x16x1``, a
mangled aiter or ck_tile kernel (``_ZN5aiter24add_rmsnorm_quant_kernelI…``) into its op. The rules are data
(``tracekit/data/kernel_names.json``). ``distinct_names`` shortens a column so that different names never read
the same: a name whose short form collides with another's gets a longer one (its template arguments, then its whole
name); where that longer form is wider than ``WIDTH`` (a Tensile name is ~450 characters), the short form with the
parts of the name that tell it from the others comes first (``… MT32x32x256 MI16x16x1 [NTA4 NEPBS16]``). json and csv
always carry the full name; so does the terminal with ``--wide``.
"""

from __future__ import annotations

import difflib
import json
import re
from functools import lru_cache
from importlib import resources
from typing import Iterable

_NAMESPACE = re.compile(r"\b[A-Za-z_]\w*::")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_TOKEN = re.compile(r"L[a-z]\d+|[A-Za-z0-9]+?(?=L[a-z]\d|[^A-Za-z0-9]|$)")  # a word, or a mangled literal (Li256)
_LITERAL = re.compile(r"L[a-z](\d+)")
_ANONYMOUS = re.compile(r"\(anonymous namespace\)::|<unnamed>::")  # as the demanglers write it: c++filt, nsys
WIDTH = 60  # the widest short form a rule may make (tests/unit/render/test_amd_kernel_names.py holds every rule to it)


@lru_cache(maxsize=1)
def _rules() -> dict:
    spec = json.loads(resources.files("tracekit.data").joinpath("kernel_names.json").read_text(encoding="utf-8"))
    return {
        "rules": [(re.compile(r["pattern"]), r["label"], bool(r.get("apart"))) for r in spec["rules"]],
        "what": re.compile(spec["what"]),
        "generic": frozenset(spec["generic"]),
        "wrappers": frozenset(spec["wrappers"]),
        "name_columns": tuple(spec["name_columns"]),
    }


def name_columns() -> tuple[str, ...]:
    """The table columns that hold kernel (or op) names: shortened in terminal tables unless ``--wide``."""
    return _rules()["name_columns"]


def _mangled_ids(name: str, i: int) -> tuple[list[str], int]:
    """The length-prefixed identifiers of a mangled nested name from ``i`` (``std::`` and substitutions skipped),
    and where they end."""
    ids: list[str] = []
    while i < len(name):
        m = re.compile(r"St|S[0-9A-Z]*_|\d+").match(name, i)
        if not m:
            break
        if not m.group().isdigit():
            i = m.end()
            continue
        end = m.end() + int(m.group())
        if end > len(name) or not _IDENT.fullmatch(name[m.end() : end]):
            break
        ids.append(name[m.end() : end])
        i = end
    return ids, i


def _mangled(name: str) -> tuple[str, str]:
    """(identifier, the rest as written) of an Itanium-mangled name (``_ZN5aiter24add_rmsnorm_quant_kernelI…``: its
    nested name read exactly by the lengths; the template arguments stay mangled); for a launcher (``wrappers``:
    ``ck_tile::kentry<…>``) the identifier of its first template argument. ('', name) when it is not one."""
    if not name.startswith("_Z"):
        return "", name
    ids, i = _mangled_ids(name, 3 if name.startswith("_ZN") else 2)
    if not ids:
        return "", name
    if ids[-1] in _rules()["wrappers"] and name.startswith("I", i):
        m = re.compile(r"I(?:L[a-z]+\d+E)*N?").match(name, i)
        inner, _ = _mangled_ids(name, m.end())
        if inner:
            return inner[-1], name[i:]
    return ids[-1], name[i:]


def _split(name: str) -> tuple[str, str, str]:
    """(identifier, template arguments, parameters) of a C++ kernel name, the return type and namespaces of the
    identifier dropped; template arguments and parameters keep their own text ('' when there are none)."""
    n = _ANONYMOUS.sub("", name.strip())
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
    return _shortened(str(name))[0]


@lru_cache(maxsize=65536)
def _shortened(text: str) -> tuple[str, bool]:
    """The short form, and whether colliding names of its kind are told apart by their words (a mangled name, or
    one a rule marked ``apart`` shortened) before their longer forms."""
    short, rule = _short(text)
    if rule is None and not _IDENT.fullmatch(short.split("<")[0].replace("cutlass ", "")):
        return text, False
    return short, text.startswith("_Z") or bool(rule and rule[2])


def _label(label: str, m: re.Match, base: str) -> str:
    """A rule's label filled from its match: a group that did not take part reads as nothing."""
    return re.sub(" {2,}", " ", label.format(None, *(g or "" for g in m.groups()), base=base)).strip()


def _short(text: str) -> tuple[str, tuple | None]:
    """The short form, and the rule that made it (None: none did)."""
    r = _rules()
    ident, rest = _mangled(text)
    if ident:  # a mangled name: its rules see it as written; else its identifier
        for rule in r["rules"]:
            m = rule[0].search(text)
            if m:
                return _label(rule[1], m, ident), rule
        return ident, None
    if "<" not in text and "(" not in text and "::" not in text and not text.startswith("void "):
        base, args = text, ""
    else:
        base, args, _ = _split(text)
    core = f"{base}<{_NAMESPACE.sub('', args)}>" if args else base
    if base in r["wrappers"] and args:
        first = _IDENT.search(_NAMESPACE.sub("", args))
        if first:
            inner = _NAMESPACE.sub("", args)[first.start() :]
            base, core = first.group(), inner
    for rule in r["rules"]:
        m = rule[0].search(core)
        if m:
            return _label(rule[1], m, base), rule
    if not args:
        return base, None
    what = next(
        (
            m.group(1)
            for m in r["what"].finditer(_NAMESPACE.sub("", args))
            if m.group(1) not in r["generic"] and m.group(1) != base
        ),
        None,
    )
    return (f"{base}<{what}>" if what else base), None


def _medium(name: str) -> str:
    """A longer form: the identifier with its template arguments (namespaces dropped)."""
    base, args, _ = _split(str(name))
    return f"{base}<{', '.join(_top_args(args))}>" if args else base


def _whole(name: str) -> str:
    base, args, params = _split(str(name))
    return _NAMESPACE.sub("", f"{base}<{args}>{params}" if args else f"{base}{params}")


def _tokens(name: str) -> list[str]:
    """The words of a name (``_`` splits them; a mangled literal ``Li256`` is its own word)."""
    return _TOKEN.findall(name.replace("_", " "))


def _apart(name: str, others: list[str]) -> str:
    """The short form and, in brackets, words of ``name`` that tell it from each of ``others``: for each other name
    the first word where the two differ, unless a word already shown does (in the name's order; a mangled name by
    its numbers, a literal ``Li256`` as ``256``)."""
    mangled = name.startswith("_Z") and any(_LITERAL.fullmatch(w) for w in _tokens(name))

    def words_of(n: str) -> list[str]:
        return [w for w in _tokens(n) if _LITERAL.fullmatch(w)] if mangled else _tokens(n)

    words, chosen = words_of(name), set()
    for other in others:
        sm = difflib.SequenceMatcher(a=words, b=words_of(other), autojunk=False)
        differ = [i for tag, i1, i2, _, _ in sm.get_opcodes() if tag != "equal" for i in range(i1, i2)]
        if differ and not chosen.intersection(differ):
            chosen.add(differ[0])
    shown = " ".join(_LITERAL.sub(r"\1", words[i]) for i in sorted(chosen))
    return f"{short_name(name)} [{shown}]" if shown else short_name(name)


def _within(forms: tuple, name: str) -> tuple:
    """The forms of ``name`` with its template arguments or whole (``_medium``, ``_whole``) only where no wider than
    ``WIDTH`` (wider, they wrap a table cell over many lines: a demangled nsys name's template arguments are ~300
    characters), then the name as it is, the last resort. The short form and ``_apart`` stay."""
    return (*(f for f in forms if f not in (_medium, _whole) or len(f(name)) <= WIDTH), str)


def distinct_names(names: Iterable[str]) -> list[str]:
    """Each name's short form; where two different names would read the same, longer forms for those, each no wider
    than ``WIDTH`` (:func:`_within`): their template arguments, the short form with the words that tell it from the
    names it collides with (``_apart``: first for a mangled name or one a rule marked ``apart``), the whole name
    without namespaces; only then the name as it is."""
    names = [str(n) for n in names]
    by_short: dict[str, list[str]] = {}
    for n in dict.fromkeys(names):
        by_short.setdefault(short_name(n), []).append(n)

    def forms(n: str) -> tuple:
        others = [o for o in by_short[short_name(n)] if o != n]
        apart = lambda x: _apart(x, others)  # noqa: E731
        if not _shortened(n)[1]:
            return _within((short_name, _medium, apart, _whole), n)
        return _within((short_name, apart, _medium, _whole), n)

    levels = {n: forms(n) for n in dict.fromkeys(names)}
    level = {n: 0 for n in levels}
    for _ in range(max((len(f) for f in levels.values()), default=0)):
        shown: dict[str, set[str]] = {}
        for n in level:
            shown.setdefault(levels[n][level[n]](n), set()).add(n)
        clash = [n for group in shown.values() if len(group) > 1 for n in group if level[n] < len(levels[n]) - 1]
        if not clash:
            break
        for n in clash:
            level[n] += 1
    return [levels[n][level[n]](n) for n in names]
