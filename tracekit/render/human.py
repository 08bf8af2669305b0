"""What people read: units from key names, times relative to an origin, epochs as dates, safe text.

Shared by the terminal tables (``terminal.py``), markdown (``markdown.py``) and the HTML page and notebook
display (``html/``). None of this is a contract: scripts read ``--format json`` or ``csv``.

* **Units come from the key's name**: a ``ns`` token (``wall_ns``, ``median_exposed_ns_per_step``,
  ``wall_ns_a``) is a duration, ``bytes`` a size, ``gbps`` GB/s, ``pct`` %, ``gib`` GiB, ``ms``/``us``
  themselves, ``tok_s`` tokens/s. A table column gets one unit, in its header (``wall ms``, ``received GB``);
  a single value carries its unit (``83.142 ms``).
* **Absolute times** (``start_ns``, ``end_ns``, ``*_start_ns``, ``*_end_ns``) are shown relative to one origin per
  result (``+83.142``): the first step's start when the result has a steps table, else the first GPU activity,
  else the earliest time shown; the origin itself is named once, as a date when it is an epoch value.
* **Epoch values** (``base_time_ns``, and any ``ns`` value past 2000-01-01 since 1970) are dates, never durations.
* **Text is safe**: control characters (C0, DEL, C1), line and paragraph separators, bidirectional overrides and
  other invisible format characters are shown as visible escapes (``\\x1b``, ``\\n``, ``\\u202e``), so a name can
  neither move the cursor, colour the terminal, break a row nor reorder what is printed. Cells are plain text:
  nothing is interpreted as rich markup.
* **Kernel names are shortened** (``short_names``, with ``tracekit.names``' one shortener) in the terminal tables and
  md, into what a person recognises, unless ``--wide``; json and csv always hold the full name.
"""

from __future__ import annotations

import math
import re
import statistics
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pandas as pd
from rich.cells import cell_len, set_cell_size

from ..names import distinct_names, name_columns, short_name
from ..result import Result, plain_value, escape_surrogate

EPOCH_MIN_NS = 946_684_800 * 10**9  # 2000-01-01: any ns value past this counted from 1970 is a date
EPOCH_MAX_NS = 4_102_444_800 * 10**9  # 2100-01-01
ABSOLUTE_KEYS = ("start_ns", "end_ns")
EPOCH_KEYS = ("base_time_ns",)
_NOT_BYTES = ("copies_without_bytes", "bytes_unknown")  # counts, named after bytes

# --------------------------------------------------------------------------- safe text

_ASCII_SAFE = re.compile(r"[\x20-\x7e]*\Z")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp", "Co", "Cn") and ch not in ("\u200d",)


def _escape_char(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    o = ord(ch)
    if 0xD800 <= o <= 0xDFFF:  # a lone surrogate: a file name's byte that is not UTF-8 shows as \xNN (shown_text)
        return escape_surrogate(ch)
    return f"\\x{o:02x}" if o < 0x100 else (f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")


def safe_text(text: Any) -> str:
    """``text`` with every control, separator and invisible format character as a visible escape."""
    s = str(text)
    if _ASCII_SAFE.match(s):
        return s
    return "".join(_escape_char(ch) if _unsafe(ch) else ch for ch in s)


# --------------------------------------------------------------------------- units from names


@dataclass(frozen=True)
class Unit:
    kind: str  # ns, abs, epoch, bytes, gbps, pct, gib, mib, gb, ms, us, s, tok_s, tflops, or "" (none)
    label: str  # the key without its unit, words separated by spaces


_UNIT_TOKENS = {
    "ns": "ns",
    "bytes": "bytes",
    "gbps": "gbps",
    "tbps": "tbps",
    "pct": "pct",
    "gib": "gib",
    "mib": "mib",
    "gb": "gb",
    "ms": "ms",
    "us": "us",
    "tflops": "tflops",
}


def unit_of(key: str) -> Unit:
    """The unit a key's name states, and the key without it (``median_exposed_ns_per_step`` → ns,
    "median exposed per step")."""
    k = str(key)
    if k in EPOCH_KEYS:
        return Unit("epoch", _words(k.rsplit("_", 1)[0]))
    if k in ABSOLUTE_KEYS or k.endswith(("_start_ns", "_end_ns")):
        return Unit("abs", _words(k[:-3]))
    tokens = k.split("_")
    if len(tokens) >= 2 and tokens[-2:] == ["tok", "s"]:
        return Unit("tok_s", _words("_".join(tokens[:-2])))
    if k in _NOT_BYTES:
        return Unit("", _words(k))
    for i, t in enumerate(tokens):
        kind = _UNIT_TOKENS.get(t)
        if kind is not None and (len(tokens) > 1 or kind in ("bytes", "gbps")):
            # a key that starts with its unit (bytes_per_token) keeps the word: the rest does not say what it is
            rest = tokens if i == 0 and len(tokens) > 1 else tokens[:i] + tokens[i + 1 :]
            return Unit(kind, _words("_".join(rest)))
    return Unit("", _words(k))


def _words(k: str) -> str:
    return k.replace("_", " ").strip()


_UNIT_WORD = {
    "gbps": "GB/s",
    "tbps": "TB/s",
    "pct": "%",
    "gib": "GiB",
    "mib": "MiB",
    "gb": "GB",
    "ms": "ms",
    "us": "µs",
    "tok_s": "tok/s",
    "tflops": "TFLOP/s",
}


def _num(v: Any) -> float | None:
    v = plain_value(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _exact(v: Any) -> int | float | None:
    """The value as a number without losing digits: ints stay ints (epoch ns exceed float precision)."""
    v = plain_value(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v


def _signed_delta(v: Any, o: int, div: float, dec: int) -> str:
    x = _exact(v)
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    d = x - o  # exact for ints
    return f"{'+' if d >= 0 else '−'}{_fmt_num(abs(d) / div, dec)}"


def is_epoch(ns: float) -> bool:
    return EPOCH_MIN_NS <= ns < EPOCH_MAX_NS


def epoch_text(ns: float) -> str:
    """An epoch in ns as a UTC date: 2025-10-29 13:13:00 UTC (sub-second digits only when there are any)."""
    ns = int(ns) if not isinstance(ns, float) or ns.is_integer() else int(round(ns))
    secs, rest = divmod(ns, 10**9)
    dt = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=secs)
    text = dt.strftime("%Y-%m-%d %H:%M:%S")
    if rest:
        text += f".{rest:09d}".rstrip("0")
    return text + " UTC"


def _duration_scale(ns_values: list[float]) -> tuple[str, float, int]:
    """(unit, divisor, decimals) for durations of this typical size."""
    med = statistics.median(ns_values) if ns_values else 0.0
    if med >= 1e10:
        return "s", 1e9, 3
    if med >= 1e5:
        return "ms", 1e6, 3
    if med >= 1e3:
        return "µs", 1e3, 2
    return "ns", 1.0, 0


def _bytes_scale(values: list[float]) -> tuple[str, float, int]:
    med = statistics.median(values) if values else 0.0
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if med >= div:
            return unit, div, 3
    return "B", 1.0, 0


def _float_decimals(values: list[float]) -> int:
    m = statistics.median(values) if values else 0.0
    return 3 if m < 10 else 2 if m < 1000 else 1 if m < 1e6 else 0


def _typical(values: list[Any]) -> list[float]:
    nums = [abs(x) for x in (_num(v) for v in values) if x is not None and math.isfinite(x)]
    nonzero = [x for x in nums if x != 0]
    return nonzero or nums


def _fmt_num(x: float, decimals: int) -> str:
    if decimals == 0:
        return f"{round(x):,}"
    return f"{x:,.{decimals}f}"


def plain_text(v: Any) -> str:
    """A value with no unit: yes/no, 1,234, 3.142, lists and dicts as compact text."""
    v = plain_value(v)
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return _fmt_num(v, _float_decimals([abs(v)]))
    if isinstance(v, dict):
        return safe_text(", ".join(f"{k}: {plain_text(x)}" for k, x in v.items())) if v else "–"
    if isinstance(v, list):
        return (
            safe_text(("; " if any(isinstance(x, dict) for x in v) else ", ").join(plain_text(x) for x in v))
            if v
            else "none"
        )
    return safe_text(v)


# --------------------------------------------------------------------------- origins of absolute times


@dataclass(frozen=True)
class Origin:
    ns: int
    what: str  # "the first step's start", …

    def note(self, unit: str = "ms") -> str:
        where = epoch_text(self.ns) if is_epoch(self.ns) else f"{self.ns / 1e6:,.3f} ms on the trace clock"
        return f"+ times: {unit} after {self.what} ({where})"


def origin_of(result: Result) -> Origin | None:
    """The one origin of a result's absolute times (None when it shows none)."""
    for name in ("steps", "wall", "per_step"):
        df = result.tables.get(name)
        if df is not None and len(df) and "start_ns" in df.columns and "step" in df.columns:
            s = pd.to_numeric(df["start_ns"], errors="coerce").dropna()
            if len(s):
                return Origin(int(s.min()), "the first step's start")
    first = _exact(result.summary.get("first_gpu_start_ns"))
    if first is not None:
        return Origin(int(first), "the first GPU activity")
    values: list[float] = [
        x for k, v in result.summary.items() if unit_of(k).kind == "abs" for x in [_exact(v)] if x is not None
    ]
    for df in result.tables.values():
        for c in df.columns:
            if unit_of(c).kind == "abs" and len(df):
                s = pd.to_numeric(df[c], errors="coerce").dropna()
                if len(s):
                    values.append(_exact(s.min()))
    return Origin(int(min(values)), "the earliest time shown") if values else None


# --------------------------------------------------------------------------- one value, with its unit


def value_text(key: str, v: Any, origin: Origin | None = None) -> str:
    """One value for people, with its unit (``83.142 ms``, ``48.410 GB``, ``+0.000 ms``, a date)."""
    u = unit_of(key)
    x = _num(v)
    if x is None:
        sv = plain_value(v)
        if isinstance(sv, dict) and sv and all(not isinstance(y, (dict, list)) for y in sv.values()):
            base = str(key).split("_by_", 1)[0]
            return ", ".join(f"{safe_text(k)}: {value_text(base, y, origin)}" for k, y in sv.items())
        return plain_text(sv)
    if not math.isfinite(x):
        return "–"
    if u.kind == "abs" and origin is not None:
        unit, div, dec = _duration_scale([abs(_exact(v) - origin.ns)])
        unit, div, dec = ("ms", 1e6, 3) if unit in ("µs", "ns") else (unit, div, dec)
        return f"{_signed_delta(v, origin.ns, div, dec)} {unit}"
    if u.kind == "epoch" or (u.kind in ("ns", "abs") and is_epoch(abs(x))):
        return epoch_text(_exact(v)) if is_epoch(x) else f"{int(x):,} ns"
    if u.kind == "abs":
        return f"{x / 1e6:,.3f} ms on the trace clock"
    if u.kind == "ns":
        unit, div, dec = _duration_scale([abs(x)] if x else [])
        return f"{_fmt_num(x / div, dec)} {unit}"
    if u.kind == "bytes":
        if x < 0:
            return "–"
        unit, div, dec = _bytes_scale([x])
        return f"{_fmt_num(x / div, dec)} {unit}"
    if u.kind == "pct":
        return f"{x:,.1f} %"
    if u.kind in _UNIT_WORD:
        return f"{plain_text(v)} {_UNIT_WORD[u.kind]}"
    return plain_text(v)


# keys whose words would state what their value is not: the findings' summed gains overlap, so their sum (capped at
# the step) is an upper bound of what fixing them all gains, never a total to expect (docs/json-contract.md)
LABELS = {"total_gain_ms": "gains at most", "total_gain_gib": "memory gains at most"}


def label_of(key: str, siblings: Any = ()) -> str:
    """A summary key for people: its words, without the unit the value carries — unless a sibling key would read
    the same (``hbm_gb`` and ``hbm_gbps``), then all its words; a key of :data:`LABELS` reads as it says."""
    if key in LABELS:
        return LABELS[key]
    u = unit_of(key)
    label = u.label or str(key)
    if any(s != key and (unit_of(s).label or str(s)) == label for s in siblings):
        label = _words(str(key))
    return safe_text(label)


# --------------------------------------------------------------------------- one column, one unit in its header


@dataclass(frozen=True)
class Column:
    name: str
    header: str
    numeric: bool  # right-aligned, never shortened
    fmt: Callable[[Any], str]
    kind: str


DURATION_UNITS = {"s": ("s", 1e9, 3), "ms": ("ms", 1e6, 3), "µs": ("µs", 1e3, 2), "ns": ("ns", 1.0, 0)}


def column(name: str, values: list[Any], origin: Origin | None = None, unit: str | None = None) -> Column:
    """How to show one table column: its header with the unit, and each cell without it. ``unit`` (a key of
    :data:`DURATION_UNITS`) fixes a duration column's unit, where a table's columns must read in one (the report's
    step table: wall and overlapped both in ms, whatever their size); else the column's typical value picks it."""
    u = unit_of(name)
    label = safe_text(u.label or str(name))
    nums = [_num(v) for v in values]
    numeric = all(x is not None or plain_value(v) is None for x, v in zip(nums, values)) and any(
        x is not None for x in nums
    )
    if not numeric and u.label and all(plain_value(v) is None for v in values):  # a measure unknown in every row
        return Column(name, label, True, lambda v: "–", u.kind)  # its name as a measure's, each cell "–"
    if not numeric:
        return Column(name, safe_text(str(name)), False, _cell_text, u.kind)
    typical = _typical(values)
    if u.kind == "epoch" or (
        u.kind in ("ns", "abs") and typical and all(is_epoch(x) for x in typical) and u.kind != "abs"
    ):
        return Column(name, label, False, lambda v: "–" if _exact(v) is None else epoch_text(_exact(v)), "epoch")
    if u.kind == "abs" and origin is not None:
        rel = [abs(x - origin.ns) for x in (_exact(v) for v in values) if x is not None]
        unit, div, dec = _duration_scale([x for x in rel if x] or rel)
        unit, div, dec = ("ms", 1e6, 3) if unit in ("µs", "ns") else (unit, div, dec)
        return Column(
            name, f"{label} {unit}", True, lambda v, o=origin.ns, div=div, dec=dec: _signed_delta(v, o, div, dec), "abs"
        )
    if u.kind == "ns" and unit in DURATION_UNITS:
        unit, div, dec = DURATION_UNITS[unit]
        return Column(name, f"{label} {unit}", True, _scaled(div, dec, epoch=True), u.kind)
    if u.kind in ("ns", "abs"):
        unit, div, dec = _duration_scale(typical)
        if u.kind == "abs":  # no origin: the trace clock, in ms
            unit, div, dec = "ms", 1e6, 3
        return Column(name, f"{label} {unit}", True, _scaled(div, dec, epoch=True), u.kind)
    if u.kind == "bytes":
        unit, div, dec = _bytes_scale([x for x in typical if x > 0])
        return Column(name, f"{label} {unit}".strip(), True, _scaled(div, dec, nonneg=True), "bytes")
    if u.kind == "pct":
        return Column(name, f"{label} %".strip(), True, _scaled(1.0, 1), "pct")
    if u.kind in _UNIT_WORD:
        dec = _float_decimals(typical) if any(isinstance(plain_value(v), float) for v in values) else 0
        return Column(name, f"{label} {_UNIT_WORD[u.kind]}".strip(), True, _scaled(1.0, dec), u.kind)
    if any(isinstance(plain_value(v), float) for v in values):
        whole = all(float(x).is_integer() for x in (_num(v) for v in values) if x is not None and math.isfinite(x))
        return Column(name, label, True, _scaled(1.0, 0 if whole else _float_decimals(typical)), "float")
    if all(isinstance(plain_value(v), bool) or plain_value(v) is None for v in values):
        return Column(name, label, False, _cell_text, "bool")
    return Column(name, label, True, _cell_text, "int")


def _scaled(div: float, dec: int, *, nonneg: bool = False, epoch: bool = False) -> Callable[[Any], str]:
    def fmt(v: Any) -> str:
        x = _num(v)
        if x is None or not math.isfinite(x) or (nonneg and x < 0):
            return "–"
        if epoch and is_epoch(abs(x)):
            return epoch_text(_exact(v))
        return _fmt_num(x / div, dec)

    return fmt


def _cell_text(v: Any) -> str:
    v = plain_value(v)
    if isinstance(v, (dict, list)):
        import json

        return safe_text(json.dumps(v, ensure_ascii=False))
    return plain_text(v)


# --------------------------------------------------------------------------- what a table shows


def display_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The rows people read, in the order they expect: operating points by bs, then context (numerically),
    within each deployment."""
    if "bs" in df.columns and ({"point", "deployment"} & set(df.columns)) and len(df) > 1:
        keys = [k for k in ("deployment", "bs", "context") if k in df.columns]
        order = pd.DataFrame({k: df[k] for k in keys}).reset_index(drop=True)
        if "deployment" in order:
            first = {d: i for i, d in enumerate(dict.fromkeys(order["deployment"].astype(str)))}
            order["deployment"] = order["deployment"].astype(str).map(first)
        for k in ("bs", "context"):
            if k in order:
                order[k] = pd.to_numeric(order[k], errors="coerce")
        idx = order.sort_values(keys, kind="stable", na_position="last").index
        return df.iloc[list(idx)]
    return df


AG_MEASURES = {
    "ag_only": "only AllGather PtoP copies run",
    "ag_only_local": "the same, local copies counted",
    "exposed": "copy time no other GPU work hides",
}


def ag_measures(names: list[str], values: list[Any] = ()) -> list[str]:
    """Which AllGather measures these keys (or these cell values, e.g. compare's `part`) show."""
    found = []
    for n in [*map(str, names), *(str(v) for v in values if isinstance(v, str))]:
        m = (
            "ag_only_local"
            if "ag_only_local" in n
            else "ag_only"
            if "ag_only" in n
            else "exposed"
            if "exposed" in n
            else None
        )
        if m and m not in found:
            found.append(m)
    return found


def glossary(measures: list[str]) -> str:
    return "; ".join(f"{m.replace('_', ' ')}: {AG_MEASURES[m]}" for m in AG_MEASURES if m in measures)


# --------------------------------------------------------------------------- fitting text into cells


def fit(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, shortened with an ellipsis."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    return set_cell_size(text, width - 1).rstrip() + "…"


def fit_left(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, its start replaced by an ellipsis (paths keep their file name)."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    out = ""
    for ch in reversed(text):
        if cell_len(ch + out) > width - 1:
            break
        out = ch + out
    return "…" + out


def _wrap_words(text: str, width: int) -> list[str]:
    lines: list[str] = []
    cur = ""
    for word in text.split(" "):
        if not cur:
            cur = word
        elif cell_len(cur) + 1 + cell_len(word) <= width:
            cur += " " + word
        else:
            lines.append(cur)
            cur = word
    lines.append(cur)
    return [fit(ln, width) for ln in lines]


# a number and its unit are one word for wrapping, and so is a number's thousands separator: "72.0 %", "4,031 ms",
# "10,888.911 ms/step" never break (private-use stand-ins: safe text shows those escaped, so none is in the text)
_GLUE, _THOUSANDS = "\ue000", "\ue001"
UNITS = "ns|µs|us|ms|s|min|h|%|B|kB|KB|MB|GB|TB|KiB|MiB|GiB|TiB|GB/s|TB/s|MB/s|TFLOP/s|GFLOP/s|FLOP/s|tok/s|W|MHz|GHz|×"
_NUMBER_UNIT = re.compile(r"(?<![\w.])([-+−]?\d[\d,]*(?:\.\d+)?) (" + UNITS + r")(/step|/call|/token)?(?![\w/])")
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_FOLDERS = re.compile(r"[^/]*/+|[^/]+")  # a path up to each folder's slash
_PIECE = re.compile(r"[^_/,:]*(?:[_/,]|::)+|[^_/,:]*:(?!:)|[^_/,:]+")  # a word up to a joint: _ / , or ::


def protect_numbers(text: str) -> str:
    """``text`` with each number glued to its unit and its thousands separators kept inside it (stand-ins that
    :func:`unprotect` turns back): the one rule of every wrapping of text here (prose, table cells)."""
    return _DIGIT_COMMA.sub(
        _THOUSANDS, _NUMBER_UNIT.sub(lambda m: m.group(1) + _GLUE + m.group(2) + (m.group(3) or ""), text)
    )


def unprotect(text: str) -> str:
    return text.replace(_GLUE, " ").replace(_THOUSANDS, ",")


def _fold(cur: str, word: str, width: int, pad: str, lines: list[str]) -> str:
    """A word wider than a line: folded at its joints (after ``/``, ``_``, ``,``, ``::``), so a path breaks between
    its folders (a file name kept whole where it fits a line) and a name between its parts; a piece still wider
    than a line folds where it must."""
    pieces = _FOLDERS.findall(word) if "/" in word else [word]
    pieces = [q for p in pieces for q in ([p] if cell_len(pad) + cell_len(p) <= width else _PIECE.findall(p))]
    for piece in pieces:
        if cur.strip() and cell_len(cur) + cell_len(piece) > width:
            lines.append(cur.rstrip())
            cur = pad
        while cell_len(cur) + cell_len(piece) > width:  # a piece wider than a line: cut where it must
            head = piece[: len(set_cell_size(piece, max(1, width - cell_len(cur))).rstrip())] or piece[:1]
            lines.append(cur + head)
            piece, cur = piece[len(head) :], pad
        cur += piece
    return cur


def wrap_prose(text: str, width: int, indent: str = "") -> list[str]:
    """Prose (notes, the glossary, findings) wrapped at word boundaries, continuation lines indented two more
    spaces; a number never leaves its unit (:func:`protect_numbers`), and a word wider than a line (a path, a long
    name) folds at its joints (:func:`_fold`)."""
    words, lines, cur = protect_numbers(text).split(" "), [], indent
    cont = indent + "  "
    pad = cont if cell_len(cont) < width // 2 else ""
    for w in words:
        if not cur.strip():  # nothing but the indent yet
            cur = cur + w if cell_len(cur) + cell_len(w) <= width else _fold(cur, w, width, pad, lines)
            continue
        if cell_len(cur) + 1 + cell_len(w) <= width:
            cur += " " + w
            continue
        lines.append(cur.rstrip())
        cur = cont + w if cell_len(cont) + cell_len(w) <= width else _fold(pad, w, width, pad, lines)
    if cur.strip():
        lines.append(cur.rstrip())
    return [unprotect(ln) for ln in lines]


def shorter_names(text: str, width: int) -> str:
    """``text`` with each word too wide for a line of ``width`` that is a kernel name written in its short form
    (:func:`tracekit.names.short_name`, the one shortener of the tables): what the terminal shows unless ``--wide``
    (json keeps the name whole). A path is not a kernel name: it keeps its folders."""
    if not any(cell_len(w) > width for w in text.split(" ")):
        return text
    return " ".join(
        short_name(w) if cell_len(w) > width and "/" not in w and cell_len(short_name(w)) < cell_len(w) else w
        for w in text.split(" ")
    )


def short_names(records: list[dict], headers: list, wide: bool) -> list[dict]:
    """Kernel names shortened (``names.distinct_names``: different names still read differently) unless ``wide``."""
    cols = [c for c in headers if c in name_columns() and any(isinstance(r[c], str) for r in records)]
    if wide or not cols:
        return records
    out = [dict(r) for r in records]
    for c in cols:
        texts = [i for i, r in enumerate(out) if isinstance(r[c], str)]
        for i, short in zip(texts, distinct_names([out[i][c] for i in texts])):
            out[i][c] = short
    return out
