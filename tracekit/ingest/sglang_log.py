"""sglang launch logs → memory records. The line grammar and every message pattern come from data.

The grammar (line prefix, rank tags, ANSI codes, the "mentions memory" hint) is
``tracekit/data/sglang_logs/_common.json``; each other ``*.json`` file there is a *pattern set*, one per
sglang era or fork (see docs/ledger.md for the format). All sets are tried on every line, user sets first,
then by ``priority``; the first pattern that matches wins, and the sets that matched are reported, so the era
of a log is detected rather than chosen.

Robustness rules: the file is read as bytes (gzip and zstd are undone) and decoded with
``errors="replace"``; ``\\r`` (tqdm, CRLF) splits a physical line into pieces; a bracket prefix
``[YYYY-MM-DD HH:MM:SS TAGS]`` may start anywhere in a piece (a log line glued to a tqdm bar), and each one
starts a new message; ANSI colour codes are stripped. A number must be followed by what the pattern says
follows it (a unit, a comma, a bracket), so a number cut off mid-line is never read as a value. Lines that
mention memory but match no pattern are kept in ``unrecognised``: nothing is dropped silently.
"""
from __future__ import annotations

import ast
import gzip
import io
import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import DataFileError, InputError, MissingDataError
from ..regexes import bounded
from .compression import HEAD_BYTES, compression_of

FIELD_TYPES = ("int", "float", "str", "bool", "intlist", "pyargs", "pairs")
_FLOAT_SUFFIXES = ("_gib", "_mib", "_s")
_UNRECOGNISED_TEXT_MAX = 400
UNRECOGNISED_KEEP = 10_000  # unrecognised memory lines kept with their text; beyond it they are counted
RESERVED_FIELDS = {"line", "ranks", "kind", "fields", "truncated", "rejected"}  # keys of a record row that fields may not shadow


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

    def pattern_of(self, record: Record) -> Pattern | None:
        """The pattern that produced ``record``."""
        return self.by_key.get((record.set, record.pattern))


@dataclass(frozen=True)
class Record:
    """One recognised message: its 1-based physical line, rank tags, kind and the fields read from it."""

    line: int
    ranks: dict[str, int]
    kind: str
    fields: dict[str, Any]
    pattern: str
    set: str


@dataclass
class SglangLog:
    """A parsed launch log: every record, every unrecognised memory line, and what was read."""

    path: str
    lines: int
    records: list[Record]
    unrecognised: list[tuple[int, dict[str, int], str]]
    set_counts: dict[str, int]
    last_line_cut: bool = False
    warnings: list[str] = field(default_factory=list)
    grammar: Grammar | None = None
    unrecognised_total: int = -1  # every unrecognised memory line, counted (-1: as many as listed)
    has_text: bool = True  # False: every line is blank

    def __post_init__(self) -> None:
        if self.unrecognised_total < 0:
            self.unrecognised_total = len(self.unrecognised)

    def ranks_present(self) -> list[dict[str, int]]:
        """Distinct rank tag sets of the records, lowest first (untagged last, when tags exist)."""
        seen: dict[frozenset, dict[str, int]] = {}
        for r in self.records:
            seen.setdefault(frozenset(r.ranks.items()), r.ranks)
        return sorted(seen.values(), key=rank_sort_key)


def split_launches(log: SglangLog) -> list[SglangLog]:
    """A log that holds several launches (a restart appends to the same file) as one log per launch: a launch
    starts at each ``server_args`` line after the first. One launch: ``[log]``."""
    starts = [r.line for r in log.records if r.kind == "server_args"]
    cuts = sorted(set(starts))[1:]
    if not cuts:
        return [log]
    bounds = [0, *cuts, log.lines + 1]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        recs = [r for r in log.records if a <= r.line < b]
        unrec = [u for u in log.unrecognised if a <= u[0] < b]
        out.append(SglangLog(path=log.path, lines=log.lines, records=recs, unrecognised=unrec,
                             set_counts=log.set_counts, last_line_cut=log.last_line_cut and b > log.lines,
                             warnings=list(log.warnings), grammar=log.grammar))
    return out


def rank_label(ranks: dict[str, int]) -> str:
    """``{"DP": 0, "TP": 0}`` → ``"DP0 TP0"``; ``{}`` → ``"untagged"``."""
    return " ".join(f"{k}{v}" for k, v in ranks.items()) or "untagged"


def rank_sort_key(ranks: dict[str, int]) -> tuple:
    order = grammar_default().rank_order
    return (not ranks, tuple(ranks.get(k, -1) for k in order), tuple(sorted(ranks.items())))


def parse_rank_spec(spec: str) -> dict[str, int]:
    """``"DP0 TP0"``, ``"dp0,tp0"``, ``"TP-1"`` → ``{"DP": 0, "TP": 0}``; an empty dict for ``untagged``."""
    text = spec.strip()
    if text.lower() in ("untagged", "none", ""):
        return {}
    pairs = re.findall(r"(ATTN_CP|MOE_DP|DP|PP|TP|EP)[-_ ]?(\d+)", text.upper())
    rest = re.sub(r"(ATTN_CP|MOE_DP|DP|PP|TP|EP)[-_ ]?(\d+)", "", text.upper())
    if not pairs or re.sub(r"[\s,;]", "", rest):
        raise ValueError(spec)
    return {k: int(v) for k, v in pairs}


# --------------------------------------------------------------------------- loading the data


def _read_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{source} is not valid JSON ({exc}); fix the file") from exc


def _compile(source: str, where: str, pattern: Any, placeholders: dict[str, str] | None = None,
             user: bool = False) -> re.Pattern:
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
            if (not isinstance(a, dict) or not isinstance(a.get("what"), str) or not isinstance(a.get("fields"), list)
                    or not all(isinstance(f, str) for f in a["fields"])):
                raise DataFileError(f"{source}: {where}.alloc must be {{\"what\": str, \"fields\": [str], "
                                    "\"state_pool\": bool}")
            unknown = [f for f in a["fields"] if f not in regex.groupindex]
            if unknown:
                raise DataFileError(f"{source}: {where}.alloc.fields names {unknown}, not groups of the regex")
            alloc = AllocRule(a["what"], tuple(a["fields"]), bool(a.get("state_pool", False)))
        if "stage" in p and not isinstance(p["stage"], str):
            raise DataFileError(f"{source}: {where}.stage must be a string")
        measured = None
        if "measured" in p:
            mv = p["measured"]
            if (not isinstance(mv, dict) or mv.get("field") not in regex.groupindex
                    or mv.get("sign", 1) not in (1, -1)):
                raise DataFileError(f"{source}: {where}.measured must be {{\"field\": <a group of the regex>, "
                                    "\"sign\": 1 or -1}")
            if "stage" not in p:
                raise DataFileError(f"{source}: {where}.measured needs a 'stage' (it explains the fall before it)")
            measured = (mv["field"], int(mv.get("sign", 1)))
        for key in ("pairs_with_unit", "pairs_may_end"):
            v = p.get(key, [])
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise DataFileError(f"{source}: {where}.{key} must be a list of key names")
        pat = Pattern(pairs_with_unit=tuple(p.get("pairs_with_unit", [])),
                      pairs_may_end=tuple(p.get("pairs_may_end", [])), id=pid, set=name, kind=p["kind"], contains=p["contains"],
                      regex=regex, const=dict(const), types=dict(types), alloc=alloc, stage=p.get("stage"),
                      measured=measured, example=p["example"])
        if pat.contains not in pat.example or not pat.regex.search(pat.example):
            raise DataFileError(f"{source}: {where} ({pat.id}) does not match its own example; fix the regex,"
                                " 'contains' or the example")
        out.append(pat)
    return PatternSet(name=name, description=str(doc.get("description", "")), priority=int(priority),
                      source=source, patterns=tuple(out))


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
    comp = {k: _compile(common_src, f"$.{k}", common.get(k))
            for k in ("line_prefix", "rank_tag", "level_source", "ansi", "memory_hint")}
    user_sets = [parse_pattern_set(_read_json(t, s), s, ph, user=True) for s, t in _user_files(extra)]
    sets = [parse_pattern_set(_read_json(t, s), s, ph) for s, t in builtin if not s.endswith("/_common.json")
            and not Path(s).name.startswith("_")]
    sets.sort(key=lambda s: -s.priority)
    ordered = tuple(user_sets + sets)
    names = [s.name for s in ordered]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        src = [s.source for s in ordered if s.name in dup]
        raise DataFileError(f"{src[-1]}: pattern set name {dup[0]!r} is used twice ({', '.join(src)}); rename one")
    patterns = tuple(p for s in ordered for p in s.patterns)
    literals = sorted({p.contains for p in patterns}, key=len, reverse=True)
    return Grammar(prefix=comp["line_prefix"], rank_tag=comp["rank_tag"], level_source=comp["level_source"],
                   ansi=comp["ansi"], memory_hint=comp["memory_hint"],
                   hint_words=tuple(str(w).lower() for w in common.get("memory_hint_words", ())),
                   rank_order=tuple(common.get("rank_order", ())), common=common, sets=ordered, patterns=patterns,
                   prefilter=re.compile("|".join(re.escape(x) for x in literals)),
                   by_key={(p.set, p.id): p for p in patterns})


def grammar_default() -> Grammar:
    return _load_grammar(())


# --------------------------------------------------------------------------- field conversion


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
        at_end = not text[m.end():].strip()
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


# --------------------------------------------------------------------------- parsing


def _messages(piece: str, g: Grammar) -> Iterable[tuple[dict[str, int], str]]:
    """Split one piece (a physical line between \\r) into (ranks, message) at every bracket prefix."""
    matches = list(g.prefix.finditer(piece)) if "[" in piece else []
    if not matches:
        yield {}, piece
        return
    head = piece[: matches[0].start()]
    if head.strip():
        yield {}, head
    for j, m in enumerate(matches):
        end = matches[j + 1].start() if j + 1 < len(matches) else len(piece)
        msg = piece[m.end():end]
        lvl = g.level_source.match(msg)
        if lvl:
            msg = msg[lvl.end():]
        tags = m.group("tags") or ""
        ranks = {k: int(v) for k, v in g.rank_tag.findall(tags)} if tags else {}
        yield ranks, msg


def parse_text(text: str, path: str = "<text>", grammar: Grammar | None = None) -> SglangLog:
    """Parse launch-log text into records. Never raises on any text."""
    return parse_lines(io.StringIO(text, newline="\n"), path, grammar)


def parse_lines(lines: Iterable[str], path: str = "<text>", grammar: Grammar | None = None) -> SglangLog:
    """Parse launch-log lines (each with its line end, as a text file yields them) into records, streaming: memory
    does not grow with the lines that match nothing, and at most ``UNRECOGNISED_KEEP`` unrecognised memory lines
    are kept (the rest are counted). Never raises on any text."""
    g = grammar or grammar_default()
    records: list[Record] = []
    unrecognised: list[tuple[int, dict[str, int], str]] = []
    n_unrecognised = 0
    counts: Counter = Counter()
    rank_cache: dict[tuple, dict[str, int]] = {}
    lineno, last_cut, has_text = 0, False, False
    rejected_warnings: list[str] = []
    n_rejected = 0
    for lineno, line in enumerate(lines, 1):
        last_cut = not line.endswith("\n")
        raw = line[:-1] if not last_cut else line
        if not raw:
            continue
        if "\x1b" in raw:
            raw = g.ansi.sub("", raw)
        for piece in raw.split("\r") if "\r" in raw else (raw,):
            if not piece.strip():
                continue
            has_text = True
            for ranks, msg in _messages(piece, g):
                msg = msg.strip()
                if not msg:
                    continue
                key = tuple(ranks.items())
                ranks = rank_cache.setdefault(key, ranks)
                rec = _match(msg, g, lineno, ranks) if g.prefilter.search(msg) else None
                if rec is not None:
                    if "rejected" in rec.fields:
                        n_rejected += 1
                        if len(rejected_warnings) < REJECTED_WARNINGS_KEEP:
                            rejected_warnings.append(_rejected_warning(path, rec))
                    records.append(rec)
                    counts[rec.set] += 1
                elif _mentions_memory(msg, g):
                    n_unrecognised += 1
                    if len(unrecognised) < UNRECOGNISED_KEEP:
                        shown = msg if len(msg) <= _UNRECOGNISED_TEXT_MAX else msg[: _UNRECOGNISED_TEXT_MAX - 1] + "…"
                        unrecognised.append((lineno, ranks, shown))
    log = SglangLog(path=path, lines=lineno, records=records, unrecognised=unrecognised,
                    set_counts=dict(counts), last_line_cut=last_cut and lineno > 0, grammar=g,
                    unrecognised_total=n_unrecognised, has_text=has_text)
    for rec in _reject_above_the_gpu(records):
        n_rejected += 1
        if len(rejected_warnings) < REJECTED_WARNINGS_KEEP:
            rejected_warnings.append(_rejected_warning(path, rec))
    log.warnings += rejected_warnings
    if n_rejected > len(rejected_warnings):
        log.warnings.append(f"{path}: {n_rejected:,} lines hold a size or free-memory reading no GPU can have; the first"
                            f" {len(rejected_warnings)} are named above, every one is marked 'rejected' in its record")
    if log.last_line_cut:
        log.warnings.append(f"{path}: the last line ({lineno}) has no line end; the file may be cut mid-line")
    if n_unrecognised > len(unrecognised):
        log.warnings.append(f"{path}: {n_unrecognised:,} lines mention memory but match no pattern; the first "
                            f"{len(unrecognised):,} are listed (tables.unrecognised), the rest counted")
    return log


def _mentions_memory(msg: str, g: Grammar) -> bool:
    if g.hint_words:
        low = msg.lower()
        if not any(w in low for w in g.hint_words):
            return False
    return g.memory_hint.search(msg) is not None


def _match(msg: str, g: Grammar, lineno: int, ranks: dict[str, int]) -> Record | None:
    for p in g.patterns:
        if p.contains in msg:
            m = p.regex.search(msg)
            if m:
                fields = fields_of(p, m)
                _reject_impossible(fields, p, g)
                return Record(line=lineno, ranks=ranks, kind=p.kind, fields=fields, pattern=p.id, set=p.set)
    return None


REJECTED_WARNINGS_KEEP = 20
_TO_GIB = {"_gib": 1.0, "_mib": 1.0 / 1024}


def _reject_impossible(fields: dict[str, Any], pattern: Pattern, g: Grammar) -> None:
    """Move the values no GPU can have out of ``fields`` into ``fields["rejected"]`` ({field: [value, why]}): a
    size or reading beyond ``max_memory_gib`` (_common.json), a negative free-memory reading (``avail*``), a
    negative allocation (the pattern's ``alloc`` fields). A "mem usage" may be slightly negative (memory freed while
    capturing) and is only bounded."""
    limit = float(g.common.get("max_memory_gib", 1024))
    alloc = set(pattern.alloc.fields) if pattern.alloc else set()
    for name in list(fields):
        value = fields[name]
        suffix = next((s for s in _TO_GIB if name.endswith(s)), None)
        if suffix is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        gib = value * _TO_GIB[suffix]
        why = None
        if not math.isfinite(gib) or abs(gib) > limit:
            why = f"more than any GPU has (over {limit:g} GiB)"
        elif gib < 0 and name.startswith("avail"):
            why = "a negative free-memory reading"
        elif gib < 0 and name in alloc:
            why = "a negative size"
        if why is not None:
            fields.setdefault("rejected", {})[name] = [value, why]
            del fields[name]


GPU_BOUND_SLACK_GIB = 1.0  # readings are printed to 0.01 GB; memory returned by the allocator may round up


def _reject_above_the_gpu(records: list[Record]) -> list[Record]:
    """Reject the free-memory readings of a rank above what its GPU holds: the rank's free memory at its first
    ``Load weight begin`` plus what the distributed init used before it (+ 1 GiB of slack). Nothing a launch does
    frees more than that. Per launch (a ``server_args`` line starts one). Returns the records changed."""
    bound: dict[tuple, tuple[float, int]] = {}
    init: dict[tuple, float] = {}
    changed = []
    for rec in records:
        f, key = rec.fields, tuple(rec.ranks.items())
        if rec.kind == "server_args":
            bound.clear()
            init.clear()
        elif rec.kind == "dist_init_end" and isinstance(f.get("usage_gib"), (int, float)) and key not in init:
            init[key] = max(0.0, float(f["usage_gib"]))
        elif rec.kind == "weight_begin" and key not in bound and isinstance(f.get("avail_gib"), (int, float)):
            bound[key] = (f["avail_gib"] + init.get(key, 0.0), rec.line)
            continue
        if key not in bound:
            continue
        limit, line = bound[key]
        for name in [n for n in f if n.startswith("avail") and n.endswith("_gib")]:
            v = f[name]
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > limit + GPU_BOUND_SLACK_GIB:
                f.setdefault("rejected", {})[name] = [v, f"more free memory than the GPU holds ({limit:g} GiB by"
                                                         f" line {line})"]
                del f[name]
                if rec not in changed:
                    changed.append(rec)
    return changed


def _rejected_warning(path: str, rec: Record) -> str:
    what = "; ".join(f"{name} = {value:g} is {why}" for name, (value, why) in rec.fields["rejected"].items())
    return (f"{path} line {rec.line}: {what}; the value is not used (the line is damaged or not what it seems)")


def _open_text(p: Path):
    """The log as a text stream (plain, .gz or .zst by content), decoded as UTF-8 with bad bytes replaced."""
    fh = open(p, "rb")
    kind = compression_of(fh.read(HEAD_BYTES))
    fh.seek(0)
    if kind == "gzip":
        raw = gzip.GzipFile(fileobj=fh)
    elif kind == "zstd":
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(fh, closefd=True)
    else:
        raw = fh
    return io.TextIOWrapper(io.BufferedReader(raw) if raw is not fh else raw, encoding="utf-8", errors="replace",
                            newline="\n")


def read_log(path: str | Path, *, patterns: Iterable[str | Path] = ()) -> SglangLog:
    """Read and parse one sglang launch log (plain, .gz or .zst). Raises InputError or MissingDataError."""
    p = Path(path)
    shown = str(path)
    if not p.exists():
        raise InputError(f"{shown} does not exist; pass the path of an sglang launch log")
    if p.is_dir():
        raise InputError(f"{shown} is a directory; pass an sglang launch log file")
    if not p.is_file():
        raise InputError(f"{shown} is not a regular file (a FIFO, a socket or a device): tracekit reads a launch log"
                         " from a file; save it to one first")
    grammar = load_grammar(patterns)
    try:
        with _open_text(p) as text:
            log = parse_lines(text, shown, grammar)
    except OSError as exc:  # unreadable, or a damaged .gz
        what = "is a damaged gzip file" if isinstance(exc, gzip.BadGzipFile) else "could not be read"
        raise InputError(f"{shown} {what} ({exc.strerror or exc}); check the path and permissions, or pass the "
                         "plain or a complete compressed log") from exc
    except EOFError as exc:
        raise InputError(f"{shown} is a damaged gzip file, cut before its end ({exc}); pass the plain or a complete"
                         " .gz log") from exc
    except Exception as exc:  # zstandard raises its own error class
        if type(exc).__name__ == "ZstdError":
            raise InputError(f"{shown} is a damaged zstd file ({exc}); pass the plain or a complete .zst log") from exc
        raise
    if not log.has_text:
        raise InputError(f"{shown} is empty; pass an sglang launch log")
    if not log.records:
        hint = f"; {len(log.unrecognised)} line(s) mention memory but match no pattern (add a pattern file with " \
               "--patterns, see docs/ledger.md)" if log.unrecognised else ""
        raise MissingDataError(f"{shown} holds no sglang launch-log line that tracekit recognises ({log.lines} lines "
                               f"read){hint}; pass an sglang server log")
    return log
