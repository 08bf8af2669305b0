"""The grammar of sglang launch logs, loaded from data: the common line grammar and the pattern sets.

The grammar (line prefix, rank tags, ANSI codes, the "mentions memory" hint) is
``tracekit/data/sglang_logs/_common.json``; each other ``*.json`` file there is a *pattern set*, one per
sglang era or fork (see docs/ledger.md for the format), and a user's pattern files are tried before them.
Every file is validated as it is loaded: an error names the file and the JSON path of what is wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import DataFileError, InputError
from ..regexes import bounded

FIELD_TYPES = ("int", "float", "str", "bool", "intlist", "pyargs", "pairs")
RESERVED_FIELDS = {
    "line",
    "ranks",
    "kind",
    "fields",
    "truncated",
    "rejected",
}  # keys of a record row that fields may not shadow


@dataclass(frozen=True)
class AllocRule:
    """A logged allocation: ``what`` it is, the fields summed for its size, and whether it is a state pool."""

    what: str
    fields: tuple[str, ...]
    state_pool: bool


@dataclass(frozen=True)
class Pattern:
    id: str
    set: str
    kind: str
    contains: str
    regex: re.Pattern
    const: dict[str, Any]
    types: dict[str, str]
    alloc: AllocRule | None = None
    stage: str | None = None
    measured: tuple[str, int] | None = None  # (field, sign): sign × field explains the fall before this stage
    example: str = ""
    pairs_with_unit: tuple[str, ...] = ()  # 'pairs' keys always printed with " GB": without it, the line was cut
    pairs_may_end: tuple[str, ...] = ()  # unit-less 'pairs' keys that may end a complete line


@dataclass(frozen=True)
class PatternSet:
    name: str
    description: str
    priority: int
    source: str
    patterns: tuple[Pattern, ...]


@dataclass(frozen=True)
class Grammar:
    """The compiled common grammar plus the pattern sets, in the order they are tried."""

    prefix: re.Pattern
    rank_tag: re.Pattern
    level_source: re.Pattern
    ansi: re.Pattern
    memory_hint: re.Pattern
    hint_words: tuple[str, ...]
    rank_order: tuple[str, ...]
    common: dict[str, Any]
    sets: tuple[PatternSet, ...]
    patterns: tuple[Pattern, ...]
    prefilter: re.Pattern
    by_key: dict[tuple[str, str], Pattern]

    def pattern_of(self, record: Any) -> Pattern | None:
        """The pattern that produced ``record`` (a :class:`~.sglang_log.Record`)."""
        return self.by_key.get((record.set, record.pattern))


def _read_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{source} is not valid JSON ({exc}); fix the file") from exc


def _compile(
    source: str, where: str, pattern: Any, placeholders: dict[str, str] | None = None, user: bool = False
) -> re.Pattern:
    """``user``: a user's pattern file, whose regexes run time-bounded (the shipped ones are linear and tested)."""
    if not isinstance(pattern, str) or not pattern:
        raise DataFileError(f"{source}: {where} must be a non-empty regular expression string")
    for name, sub in (placeholders or {}).items():
        pattern = pattern.replace("{" + name + "}", sub)
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise DataFileError(f"{source}: {where} is not a valid regular expression ({exc})") from exc
    return bounded(pattern, f"{source}: {where}", DataFileError) if user else compiled  # type: ignore[return-value]


def parse_pattern_set(doc: Any, source: str, placeholders: dict[str, str], user: bool = False) -> PatternSet:
    """Validate and compile one pattern-set document; errors name the file and the JSON path."""
    if not isinstance(doc, dict):
        raise DataFileError(f"{source}: the top level must be a JSON object with 'name' and 'patterns'")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise DataFileError(f"{source}: $.name must be a non-empty string")
    pats = doc.get("patterns")
    if not isinstance(pats, list):
        raise DataFileError(f"{source}: $.patterns must be a list of pattern objects")
    priority = doc.get("priority", 0)
    if not isinstance(priority, (int, float)):
        raise DataFileError(f"{source}: $.priority must be a number")
    out = []
    ids: set[str] = set()
    for i, p in enumerate(pats):
        where = f"$.patterns[{i}]"
        if not isinstance(p, dict):
            raise DataFileError(f"{source}: {where} must be an object")
        for key in ("kind", "contains", "regex", "example"):
            if not isinstance(p.get(key), str) or not p.get(key):
                raise DataFileError(f"{source}: {where}.{key} must be a non-empty string")
        regex = _compile(source, f"{where}.regex", p["regex"], placeholders, user)
        reserved = sorted(set(regex.groupindex) & RESERVED_FIELDS)
        if reserved:
            raise DataFileError(f"{source}: {where}.regex uses the reserved group name {reserved[0]!r}; rename it")
        pid = str(p.get("id", f"{name}#{i}"))
        if pid in ids:
            raise DataFileError(f"{source}: {where}.id {pid!r} is used twice in this file; rename one")
        ids.add(pid)
        types = p.get("types", {})
        if not isinstance(types, dict) or any(t not in FIELD_TYPES for t in types.values()):
            raise DataFileError(f"{source}: {where}.types must map field names to one of {', '.join(FIELD_TYPES)}")
        const = p.get("const", {})
        if not isinstance(const, dict):
            raise DataFileError(f"{source}: {where}.const must be an object")
        alloc = None
        if "alloc" in p:
            a = p["alloc"]
            if (
                not isinstance(a, dict)
                or not isinstance(a.get("what"), str)
                or not isinstance(a.get("fields"), list)
                or not all(isinstance(f, str) for f in a["fields"])
            ):
                raise DataFileError(
                    f'{source}: {where}.alloc must be {{"what": str, "fields": [str], "state_pool": bool}}'
                )
            unknown = [f for f in a["fields"] if f not in regex.groupindex]
            if unknown:
                raise DataFileError(f"{source}: {where}.alloc.fields names {unknown}, not groups of the regex")
            alloc = AllocRule(a["what"], tuple(a["fields"]), bool(a.get("state_pool", False)))
        if "stage" in p and not isinstance(p["stage"], str):
            raise DataFileError(f"{source}: {where}.stage must be a string")
        measured = None
        if "measured" in p:
            mv = p["measured"]
            if not isinstance(mv, dict) or mv.get("field") not in regex.groupindex or mv.get("sign", 1) not in (1, -1):
                raise DataFileError(
                    f'{source}: {where}.measured must be {{"field": <a group of the regex>, "sign": 1 or -1}}'
                )
            if "stage" not in p:
                raise DataFileError(f"{source}: {where}.measured needs a 'stage' (it explains the fall before it)")
            measured = (mv["field"], int(mv.get("sign", 1)))
        for key in ("pairs_with_unit", "pairs_may_end"):
            v = p.get(key, [])
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise DataFileError(f"{source}: {where}.{key} must be a list of key names")
        pat = Pattern(
            pairs_with_unit=tuple(p.get("pairs_with_unit", [])),
            pairs_may_end=tuple(p.get("pairs_may_end", [])),
            id=pid,
            set=name,
            kind=p["kind"],
            contains=p["contains"],
            regex=regex,
            const=dict(const),
            types=dict(types),
            alloc=alloc,
            stage=p.get("stage"),
            measured=measured,
            example=p["example"],
        )
        if pat.contains not in pat.example or not pat.regex.search(pat.example):
            raise DataFileError(
                f"{source}: {where} ({pat.id}) does not match its own example; fix the regex, 'contains' or the example"
            )
        out.append(pat)
    return PatternSet(
        name=name,
        description=str(doc.get("description", "")),
        priority=int(priority),
        source=source,
        patterns=tuple(out),
    )


def _builtin_files() -> list[tuple[str, str]]:
    base = resources.files("tracekit.data").joinpath("sglang_logs")
    files = sorted((p for p in base.iterdir() if p.name.endswith(".json")), key=lambda p: p.name)
    return [(f"tracekit/data/sglang_logs/{p.name}", p.read_text(encoding="utf-8")) for p in files]


def _user_files(paths: Iterable[str | Path]) -> list[tuple[str, str]]:
    out = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files = sorted(q for q in p.iterdir() if q.suffix == ".json" and not q.name.startswith("_"))
            if not files:
                raise InputError(f"{p} holds no pattern file (*.json); pass a pattern file or a folder of them")
        elif p.is_file():
            files = [p]
        else:
            raise InputError(f"{p} does not exist; pass an sglang log pattern file (*.json) or a folder of them")
        for q in files:
            try:
                out.append((str(q), q.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"{q} could not be read ({exc}); pass a UTF-8 JSON pattern file") from exc
    return out


def load_grammar(extra: Iterable[str | Path] = ()) -> Grammar:
    """The built-in grammar and pattern sets, with ``extra`` user pattern files (or folders) tried first."""
    extra = tuple(str(e) for e in extra)
    return _load_grammar(extra)


@lru_cache(maxsize=8)
def _load_grammar(extra: tuple[str, ...]) -> Grammar:
    builtin = _builtin_files()
    common_src, common_text = next(((s, t) for s, t in builtin if s.endswith("/_common.json")), (None, None))
    if common_src is None:
        raise DataFileError("tracekit/data/sglang_logs/_common.json is missing; reinstall tracekit")
    common = _read_json(common_text, common_src)
    if not isinstance(common, dict):
        raise DataFileError(f"{common_src}: the top level must be a JSON object")
    ph = common.get("placeholders", {})
    if not isinstance(ph, dict):
        raise DataFileError(f"{common_src}: $.placeholders must map names to regular expressions")
    comp = {
        k: _compile(common_src, f"$.{k}", common.get(k))
        for k in ("line_prefix", "rank_tag", "level_source", "ansi", "memory_hint")
    }
    user_sets = [parse_pattern_set(_read_json(t, s), s, ph, user=True) for s, t in _user_files(extra)]
    sets = [
        parse_pattern_set(_read_json(t, s), s, ph)
        for s, t in builtin
        if not s.endswith("/_common.json") and not Path(s).name.startswith("_")
    ]
    sets.sort(key=lambda s: -s.priority)
    ordered = tuple(user_sets + sets)
    names = [s.name for s in ordered]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        src = [s.source for s in ordered if s.name in dup]
        raise DataFileError(f"{src[-1]}: pattern set name {dup[0]!r} is used twice ({', '.join(src)}); rename one")
    patterns = tuple(p for s in ordered for p in s.patterns)
    literals = sorted({p.contains for p in patterns}, key=len, reverse=True)
    return Grammar(
        prefix=comp["line_prefix"],
        rank_tag=comp["rank_tag"],
        level_source=comp["level_source"],
        ansi=comp["ansi"],
        memory_hint=comp["memory_hint"],
        hint_words=tuple(str(w).lower() for w in common.get("memory_hint_words", ())),
        rank_order=tuple(common.get("rank_order", ())),
        common=common,
        sets=ordered,
        patterns=patterns,
        prefilter=re.compile("|".join(re.escape(x) for x in literals)),
        by_key={(p.set, p.id): p for p in patterns},
    )


def grammar_default() -> Grammar:
    return _load_grammar(())
