"""sglang launch logs → memory records. The line grammar and every message pattern come from data.

The grammar (line prefix, rank tags, ANSI codes, the "mentions memory" hint) is
``tracekit/data/sglang_logs/_common.json``; each other ``*.json`` file there is a *pattern set*, one per
sglang era or fork (see docs/ledger.md for the format); ``sglang_grammar.py`` loads them, and
``sglang_fields.py`` types what a pattern's groups read. All sets are tried on every line, user sets first,
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

import gzip
import io
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingDataError
from .compression import HEAD_BYTES, compression_of
from .sglang_fields import fields_of
from .sglang_grammar import Grammar, Pattern, grammar_default, load_grammar
from ..errors import check_argument

_UNRECOGNISED_TEXT_MAX = 400
UNRECOGNISED_KEEP = 10_000  # unrecognised memory lines kept with their text; beyond it they are counted


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


def interleaved_servers(log: SglangLog) -> str | None:
    """The sentence that says a log holds two servers' lines interleaved, or None. Within one launch (from a
    ``server_args`` line to the next) one server's rank logs each kind of ``once_per_launch`` once, and the kinds of
    each ``begin_end`` pair alternate (tracekit/data/sglang_logs/_common.json); a rank that breaks either rule is two
    start-ups mixed in one file, whose numbers would belong to neither server."""
    common = (log.grammar or grammar_default()).common
    once = set(common.get("once_per_launch", ()))
    pairs = {k: (i, j) for i, pair in enumerate(common.get("begin_end", ())) for j, k in enumerate(pair)}
    seen: dict[tuple, int] = {}  # (rank, kind) -> line of a once kind; (rank, pair) -> (side, line) of a pair
    last: dict[tuple, tuple[int, int]] = {}
    for rec in log.records:
        if rec.kind == "server_args":
            seen.clear()
            last.clear()
            continue
        rank = tuple(rec.ranks.items())
        first = None
        if rec.kind in once:
            first = seen.setdefault((rank, rec.kind), rec.line)
            first = first if first != rec.line else None
        elif rec.kind in pairs:
            pair, side = pairs[rec.kind]
            prev = last.get((rank, pair))
            first = prev[1] if prev is not None and prev[0] == side else None
            last[(rank, pair)] = (side, rec.line)
        if first is not None:
            return (
                f"{log.path} holds two servers' lines interleaved: rank {rank_label(rec.ranks)} logs {rec.kind} at"
                f" line {first} and again at line {rec.line} with no server_args line (a new launch) between, which"
                " one server never does; split the log into one file per server (by process id or port) and pass one"
            )
    return None


def split_launches(log: SglangLog) -> list[SglangLog]:
    """A log that holds several launches (a restart appends to the same file) as one log per launch: a launch
    starts at each ``server_args`` line after the first. One launch: ``[log]``. Two servers' lines interleaved
    (:func:`interleaved_servers`) are refused (InputError)."""
    mixed = interleaved_servers(log)
    if mixed is not None:
        raise InputError(mixed)
    starts = [r.line for r in log.records if r.kind == "server_args"]
    cuts = sorted(set(starts))[1:]
    if not cuts:
        return [log]
    bounds = [0, *cuts, log.lines + 1]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        recs = [r for r in log.records if a <= r.line < b]
        unrec = [u for u in log.unrecognised if a <= u[0] < b]
        out.append(
            SglangLog(
                path=log.path,
                lines=log.lines,
                records=recs,
                unrecognised=unrec,
                set_counts=log.set_counts,
                last_line_cut=log.last_line_cut and b > log.lines,
                warnings=list(log.warnings),
                grammar=log.grammar,
            )
        )
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
        msg = piece[m.end() : end]
        lvl = g.level_source.match(msg)
        if lvl:
            msg = msg[lvl.end() :]
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
    log = SglangLog(
        path=path,
        lines=lineno,
        records=records,
        unrecognised=unrecognised,
        set_counts=dict(counts),
        last_line_cut=last_cut and lineno > 0,
        grammar=g,
        unrecognised_total=n_unrecognised,
        has_text=has_text,
    )
    for rec in _reject_above_the_gpu(records):
        n_rejected += 1
        if len(rejected_warnings) < REJECTED_WARNINGS_KEEP:
            rejected_warnings.append(_rejected_warning(path, rec))
    log.warnings += rejected_warnings
    if n_rejected > len(rejected_warnings):
        log.warnings.append(
            f"{path}: {n_rejected:,} lines hold a size or free-memory reading no GPU can have; the first"
            f" {len(rejected_warnings)} are named above, every one is marked 'rejected' in its record"
        )
    if log.last_line_cut:
        log.warnings.append(f"{path}: the last line ({lineno}) has no line end; the file may be cut mid-line")
    if n_unrecognised > len(unrecognised):
        log.warnings.append(
            f"{path}: {n_unrecognised:,} lines mention memory but match no pattern; the first "
            f"{len(unrecognised):,} are listed (tables.unrecognised), the rest counted"
        )
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
    never, never_kinds = set(g.common.get("never_negative", ())), set(g.common.get("never_negative_kinds", ()))
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
        elif gib < 0 and (name in alloc or (pattern.kind in never_kinds and name in never)):
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
                f.setdefault("rejected", {})[name] = [
                    v,
                    f"more free memory than the GPU holds ({limit:g} GiB by line {line})",
                ]
                del f[name]
                if rec not in changed:
                    changed.append(rec)
    return changed


def _rejected_warning(path: str, rec: Record) -> str:
    what = "; ".join(f"{name} = {value:g} is {why}" for name, (value, why) in rec.fields["rejected"].items())
    return f"{path} line {rec.line}: {what}; the value is not used (the line is damaged or not what it seems)"


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
    return io.TextIOWrapper(
        io.BufferedReader(raw) if raw is not fh else raw, encoding="utf-8", errors="replace", newline="\n"
    )


def read_log(path: str | Path, *, patterns: Iterable[str | Path] = ()) -> SglangLog:
    """Read and parse one sglang launch log (plain, .gz or .zst). Raises InputError or MissingDataError."""
    check_argument(path, "path", "a path (str or Path) of an sglang launch log", paths=True)
    p = Path(path)
    shown = str(path)
    if not p.exists():
        raise InputError(f"{shown} does not exist; pass the path of an sglang launch log")
    if p.is_dir():
        raise InputError(f"{shown} is a directory; pass an sglang launch log file")
    if not p.is_file():
        raise InputError(
            f"{shown} is not a regular file (a FIFO, a socket or a device): tracekit reads a launch log"
            " from a file; save it to one first"
        )
    grammar = load_grammar(patterns)
    try:
        with _open_text(p) as text:
            log = parse_lines(text, shown, grammar)
    except OSError as exc:  # unreadable, or a damaged .gz
        what = "is a damaged gzip file" if isinstance(exc, gzip.BadGzipFile) else "could not be read"
        raise InputError(
            f"{shown} {what} ({exc.strerror or exc}); check the path and permissions, or pass the "
            "plain or a complete compressed log"
        ) from exc
    except EOFError as exc:
        raise InputError(
            f"{shown} is a damaged gzip file, cut before its end ({exc}); pass the plain or a complete .gz log"
        ) from exc
    except Exception as exc:  # zstandard raises its own error class
        if type(exc).__name__ == "ZstdError":
            raise InputError(f"{shown} is a damaged zstd file ({exc}); pass the plain or a complete .zst log") from exc
        raise
    if not log.has_text:
        raise InputError(f"{shown} is empty; pass an sglang launch log")
    mixed = interleaved_servers(log)
    if mixed is not None:
        raise InputError(mixed)
    if not log.records:
        hint = (
            f"; {len(log.unrecognised)} line(s) mention memory but match no pattern (add a pattern file with "
            "--patterns, see docs/ledger.md)"
            if log.unrecognised
            else ""
        )
        raise MissingDataError(
            f"{shown} holds no sglang launch-log line that tracekit recognises ({log.lines} lines "
            f"read){hint}; pass an sglang server log"
        )
    return log
