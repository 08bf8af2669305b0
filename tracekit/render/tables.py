"""Terminal tables for people (not a contract: scripts use --format json or csv).

The layout is plain text drawn here, not rich markup, so no name can be taken for markup:

* **Width**: the terminal's (``COLUMNS``, else the real width; 100 when stdout is not a terminal). A number is never
  broken or shortened: text cells are shortened with an ellipsis (paths from the left, keeping the file name),
  headers wrap onto a second line, and a table still too wide is split into column groups that repeat its first
  column.
* **Units in headers** (``wall ms``, ``received GB``), absolute times relative to one origin (``+83.142``), epochs
  as dates, summary dicts as small tables (human.py has the rules).
* **Concise by default**: the whole output aims at :data:`MAX_LINES` lines; every table shows at least
  :data:`MIN_ROWS` rows, small tables all of theirs, and a shortened table says ``… N more rows — --all shows every
  row``. ``all_rows=True`` (``--all``) shows everything; json and csv always hold everything.
* Tables without rows are not drawn (one line names them). A table of one row is drawn as key / value.
* Under the first block that shows more than one AllGather measure (``ag_only``, ``ag_only_local``, ``exposed``),
  a one-line glossary says how they differ.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import pandas as pd
from rich.cells import cell_len

from ..result import Result, _scalar, table_rows, utf8_text
from .human import fit, fit_left, wrap_prose, _wrap_words  # noqa: F401 - re-exported
from .human import (Origin, ag_measures, column, display_frame, glossary, label_of, origin_of, plain_text,
                    safe_text, unit_of, value_text)

MAX_LINES = 75  # what the default output aims at (the tests hold the K3 fixtures under 80)
INLINE_KEYS = 3  # a summary dict of at most this many keys (and no sibling with the same keys) stays inline
MIN_ROWS = 3  # every table shows at least this many rows (or all it has)
NOT_A_TERMINAL_WIDTH = 100
GAP = 2
HEADER_LINES = 3  # a header wraps onto at most this many lines
_PATH_COLUMNS = ("path", "file", "trace", "out", "out_dir", "source", "manifest", "log", "dir", "directory")


def terminal_width() -> int:
    """``COLUMNS`` when set, else the terminal's width, else 100 (not a terminal)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        if sys.stdout.isatty():
            return os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError, AttributeError):
        pass
    return NOT_A_TERMINAL_WIDTH


# --------------------------------------------------------------------------- text helpers


def _pad(text: str, width: int, right: bool) -> str:
    pad = " " * max(0, width - cell_len(text))
    return pad + text if right else text + pad


# --------------------------------------------------------------------------- a block: one table to draw


@dataclass
class Block:
    title: str
    headers: list[str]
    rows: list[list[str]]  # the rows as text (every row, or the first ones the output can show)
    numeric: list[bool]
    total: int  # rows in the data
    notes: list[str] = field(default_factory=list)
    measures: list[str] = field(default_factory=list)  # AllGather measures it shows
    truncatable: bool = True
    shown: int = 0
    what: str = "rows"
    left_cut: set = field(default_factory=set)  # columns shortened from the left (paths keep their file name)


def _layout(headers: list[str], rows: list[list[str]], numeric: list[bool], width: int):
    """Column groups, each a list of (column, width), and the gap between columns: two spaces, or one where that
    saves splitting the table or shortening its text."""
    wide = _layout_gap(headers, rows, numeric, width, GAP)
    if len(wide) > 1 or _shortened(wide, headers, rows):
        narrow = _layout_gap(headers, rows, numeric, width, 1)
        if len(narrow) < len(wide) or (len(wide) == 1 and len(narrow) == 1 and not _shortened(narrow, headers, rows)):
            return narrow
    return wide


class _Groups(list):
    gap = GAP


def _header_least(header: str, depth: int = HEADER_LINES) -> int:
    """The narrowest a column can be with its header on at most ``depth`` lines (words whole, up to 14 cells)."""
    full = cell_len(header)
    longest = max([cell_len(w) for w in header.split(" ")] or [1])
    for w in range(min(longest, 14), full + 1):
        if len(_wrap_words(header, w)) <= depth:
            return w
    return full


def _shortened(groups, headers, rows) -> bool:
    return any(w < max([cell_len(r[i]) for r in rows] or [0]) for g in groups for i, w in g)


def _layout_gap(headers: list[str], rows: list[list[str]], numeric: list[bool], width: int, gap: int):
    n = len(headers)
    if n == 0:
        return _Groups()
    cellw = [max([cell_len(r[i]) for r in rows] or [0]) for i in range(n)]
    hdrw = [cell_len(h) for h in headers]
    natural = [max(c, h) for c, h in zip(cellw, hdrw)]
    # the least each column can take: numbers whole, headers at their longest word, text down to 8 cells
    least = [max(cellw[i], _header_least(headers[i])) if numeric[i] else
             max(min(cellw[i], 8), min(_header_least(headers[i]), 10), 1) for i in range(n)]

    def total(cols: list[int], ws: dict[int, int]) -> int:
        return sum(ws[i] for i in cols) + gap * (len(cols) - 1)

    lw = dict(enumerate(least))
    key = 0 if n > 1 else None
    rest = [i for i in range(n) if i != key]
    groups: list[list[int]] = [] if rest else [[0]]
    while rest:
        g = ([key] if key is not None else []) + [rest.pop(0)]
        while rest and total(g + [rest[0]], lw) <= width:
            g.append(rest.pop(0))
        groups.append(g)
    out = []
    for g in groups:
        ws = {i: natural[i] for i in g}
        excess = total(g, ws) - width
        # first wrap headers wider than their cells, then shorten text, widest first
        for phase in ("header", "text"):
            while excess > 0:
                cands = [i for i in g if ws[i] > least[i] and (phase == "text" or hdrw[i] > cellw[i])
                         and (phase == "header" or not numeric[i])]
                if phase == "header":
                    cands = [i for i in cands if ws[i] > max(cellw[i], least[i])]
                if not cands:
                    break
                i = max(cands, key=lambda j: ws[j] - least[j])
                floor = max(cellw[i], least[i]) if phase == "header" else least[i]
                step = min(excess, ws[i] - floor)
                if step <= 0:
                    break
                ws[i] -= step
                excess -= step
        out.append([(i, ws[i]) for i in g])
    groups = _Groups(out)
    groups.gap = gap
    return groups


def _draw(block: Block, rows: list[list[str]], width: int) -> list[str]:
    lines: list[str] = []
    groups = _layout(block.headers, rows, block.numeric, width)
    more = block.total - len(rows)
    for gi, group in enumerate(groups):
        title = block.title if len(groups) == 1 else f"{block.title} ({gi + 1}/{len(groups)})"
        if more > 0:
            title += f" — top {len(rows):,} of {block.total:,} {block.what}; {more:,} more with --all"
        if title:
            lines.append(fit(title, width))
        head = [_wrap_words(block.headers[i], w) for i, w in group]
        depth = max(len(h) for h in head)
        for k in range(depth):
            cells = []
            for (i, w), h in zip(group, head):
                part = h[k - (depth - len(h))] if k >= depth - len(h) else ""  # headers sit on the rule
                cells.append(_pad(part, w, block.numeric[i]))
            lines.append((" " * groups.gap).join(cells).rstrip())
        lines.append((" " * groups.gap).join("─" * w for _, w in group))
        for r in rows:
            cells = [_pad(r[i] if block.numeric[i] else (fit_left if i in block.left_cut else fit)(r[i], w), w,
                          block.numeric[i]) for i, w in group]
            lines.append((" " * groups.gap).join(cells).rstrip())
    return lines


def _cost(block: Block, rows: int, width: int) -> int:
    """Lines the block takes with ``rows`` rows shown (its layout from all rows: an upper bound)."""
    groups = _layout(block.headers, block.rows, block.numeric, width)
    head = max((max(len(_wrap_words(block.headers[i], w)) for i, w in g) for g in groups), default=1)
    return len(groups) * ((1 if block.title else 0) + head + 1 + rows) + len(block.notes)


# --------------------------------------------------------------------------- result → blocks


def _table_block(name: str, df: pd.DataFrame, origin: Origin | None, width: int, limit: int | None = None) -> Block:
    """A table as text: every row, or (``limit``) the first rows only — the units still follow from all of them."""
    df = display_frame(df)
    total = len(df)
    records = table_rows(df if limit is None else df.iloc[:limit], spread=False)  # fields: one JSON cell
    headers_raw = list(df.columns)
    if len(records) == 1 and len(headers_raw) > 4 and _too_wide(records[0], headers_raw, origin, width):
        r = records[0]  # one record too wide for one line: key / value
        rows = [[label_of(k, headers_raw), value_text(k, r[k], origin)] for k in headers_raw]
        return Block(safe_text(name) or "(unnamed table)", ["key", "value"], rows, [False, False], total=len(rows), truncatable=False,
                     measures=ag_measures(headers_raw))
    cols = [column(c, _sample(df[c]) if limit is not None else [r[c] for r in records], origin) for c in headers_raw]
    heads = [c.header for c in cols]
    heads = [h if heads.count(h) == 1 else safe_text(str(c.name)) for h, c in zip(heads, cols)]
    notes: list[str] = []
    rows = [[c.fmt(r[c.name]) for c in cols] for r in records]
    paths = {j for j, c in enumerate(cols) if not c.numeric and _is_path_column(c.name)}
    for j in paths:
        notes += _shorten_paths(rows, j, heads[j])
    part_values = [r[c] for r in records for c in headers_raw if not cols[headers_raw.index(c)].numeric][:2000]
    return Block(safe_text(name) or "(unnamed table)", heads, rows, [c.numeric for c in cols], total=total,
                 notes=notes, measures=ag_measures(headers_raw, part_values), left_cut=paths)


def _sample(s: pd.Series, most: int = 20_000) -> list[Any]:
    """A column's values (evenly spaced ones of a huge column), as plain Python objects, for choosing its unit."""
    if len(s) > most:
        s = s.iloc[:: -(-len(s) // most)]
    if isinstance(s.dtype, pd.CategoricalDtype):
        s = s.astype(object)
    return [_scalar(x) for x in s.tolist()]


def _too_wide(record: dict, names: list, origin: Origin | None, width: int) -> bool:
    cols = [column(c, [record[c]], origin) for c in names]
    return len(_layout([c.header for c in cols], [[c.fmt(record[c.name]) for c in cols]], [c.numeric for c in cols],
                       width)) > 1


def _is_path_column(name: str) -> bool:
    return name in _PATH_COLUMNS or name.endswith(("_path", "_file", "_dir"))


def _shorten_paths(rows: list[list[str]], j: int, header: str) -> list[str]:
    """Paths of one column relative to their common folder, named once in a note."""
    paths = [r[j] for r in rows if "/" in r[j]]
    if len(paths) < 2 and not any(cell_len(p) > 40 for p in paths):
        return []
    parents = [str(PurePosixPath(p).parent) for p in paths]
    common = os.path.commonpath(parents) if parents and all(p.startswith("/") for p in parents) or \
        all(not p.startswith("/") for p in parents) else ""
    if not common or common in (".", "/"):
        return []
    for r in rows:
        if r[j].startswith(common + "/"):
            r[j] = r[j][len(common) + 1:]
    return [f"{header}: under {common}/"]


def _dict_blocks(items: list[tuple[str, dict]], origin: Origin | None, width: int) -> list[Block]:
    """Dict-valued summary entries as small tables: entries with the same keys share one table."""
    groups: dict[tuple[str, ...], list[tuple[str, dict]]] = {}
    for k, d in items:
        groups.setdefault(tuple(d), []).append((k, d))
    blocks = []
    for keys, entries in groups.items():
        flat = all(not isinstance(v, (dict, list)) for _, d in entries for v in d.values())
        by = next((k.split("_by_", 1)[1] for k, _ in entries if "_by_" in k), None)
        title = f"by {by.replace('_', ' ')}" if by else (label_of(entries[0][0]) if len(entries) == 1 else "")
        measures = ag_measures([k for k, _ in entries])
        if flat:
            labels, rows = [], []
            for k, d in entries:
                base = k.split("_by_", 1)[0]
                c = column(base, list(d.values()), origin)
                labels.append(c.header)
                rows.append([c.fmt(d[x]) for x in keys])
            across = Block(safe_text(title or "value"), [safe_text(title) or "", *map(safe_text, keys)],
                           [[lab, *r] for lab, r in zip(labels, rows)], [False] + [True] * len(keys),
                           total=len(entries), truncatable=False, measures=measures)
            if len(_layout(across.headers, across.rows, across.numeric, width)) == 1:
                across.title = ""  # its first header names it
                blocks.append(across)
                continue
            down = [[safe_text(x), *(r[i] for r in rows)] for i, x in enumerate(keys)]
            blocks.append(Block(safe_text(title or "summary"), [safe_text(by.replace("_", " ")) if by else "key",
                                                                 *labels], down,
                                [False] + [True] * len(labels), total=len(down), measures=measures, what="keys"))
        else:
            down = [[safe_text(x), *(plain_text(d.get(x)) for _, d in entries)] for x in keys]
            blocks.append(Block(safe_text(title or "summary"), ["key", *(label_of(k) for k, _ in entries)], down,
                                [False] * (1 + len(entries)), total=len(down), measures=measures, what="keys"))
    return blocks


def _summary_lines(items: list[tuple[str, str]], width: int) -> tuple[list[str], list[str]]:
    """Scalar summary entries as a key / value grid, as many pairs to a line as fit; long values alone."""
    if not items:
        return [], []
    notes: list[str] = []
    short = [(k, v) for k, v in items if cell_len(v) <= 28]
    long_ = [(k, v) for k, v in items if cell_len(v) > 28]
    lines: list[str] = []
    if short:
        cells = [(fit(k, 32), v) for k, v in short]
        grid = None
        for per in (3, 2):
            if len(cells) <= per:
                continue
            rows = -(-len(cells) // per)  # fill down the columns, so a column reads as a list
            cols = [col for col in (cells[c * rows:(c + 1) * rows] for c in range(per)) if col]
            kws = [max(cell_len(k) for k, _ in col) for col in cols]
            vws = [max(cell_len(v) for _, v in col) for col in cols]
            if sum(kws) + sum(vws) + 2 * per + 3 * (per - 1) <= width:
                grid = (rows, cols, kws, vws)
                break
        if grid is None:
            grid = (len(cells), [cells], [max(cell_len(k) for k, _ in cells)], [max(cell_len(v) for _, v in cells)])
        rows, cols, kws, vws = grid
        for r in range(rows):
            parts = [_pad(col[r][0], kw, False) + "  " + _pad(col[r][1], vw, _numberish(col[r][1]))
                     for col, kw, vw in zip(cols, kws, vws) if r < len(col)]
            lines.append("   ".join(parts).rstrip())
    if long_:
        kw = min(max(cell_len(k) for k, _ in long_), 32)
        for k, v in long_:
            room = max(width - kw - 2, 16)
            if cell_len(v) > room and "/" in v and " " not in v.strip():  # a long path: in a footnote
                notes.append(f"[{len(notes) + 1}] {v}")
                v = fit_left(v, room - 5) + f" [{len(notes)}]"
            parts = _wrap_words(v, room) if cell_len(v) > room else [v]  # words whole: numbers are never cut
            lines.append(_pad(fit(k, kw), kw, False) + "  " + parts[0])
            lines += [" " * (kw + 2) + p for p in parts[1:]]
    return lines, notes


def _numberish(v: str) -> bool:
    return bool(v) and (v[0].isdigit() or v[0] in "+−-") and any(ch.isdigit() for ch in v)


def _title(result: Result) -> str:
    names = [PurePosixPath(str(i.get("path"))).name for i in result.inputs if i.get("path")]
    what = f" · {names[0]}" if len(names) == 1 else (f" · {len(names)} inputs" if names else "")
    return safe_text(f"tracekit {result.command}{what}")


# --------------------------------------------------------------------------- the whole output


def to_text(result: Result, width: int | None = None, color: bool = False, *, all_rows: bool = False,
            max_lines: int = MAX_LINES) -> str:
    """``result`` as text for a terminal ``width`` cells wide (default: :func:`terminal_width`)."""
    width = max(20, width or terminal_width())
    from .ranks_text import ranks_part

    result, ranks_lines = ranks_part(result, width, all_rows)  # report RUN_DIR: its ranks section (issue 28)
    origin = origin_of(result)
    scalars, dicts = [], []
    keysets = [tuple(_scalar(v)) for v in result.summary.values() if isinstance(_scalar(v), dict)]
    for k, v in result.summary.items():
        sv = _scalar(v)
        if isinstance(sv, dict) and sv and not (len(sv) <= INLINE_KEYS and keysets.count(tuple(sv)) == 1):
            dicts.append((k, sv))
        else:
            scalars.append((label_of(k, result.summary), value_text(k, v, origin)))
    head = [_title(result)]
    summary, summary_notes = _summary_lines(scalars, width)
    summary_measures = ag_measures(list(result.summary))
    blocks = _dict_blocks(dicts, origin, width)
    empty = [name for name, df in result.tables.items() if len(df) == 0]
    limit = None if all_rows else max_lines  # no table shows more rows than the whole output has lines
    from .findings_text import findings_lines, is_findings

    lists = [findings_lines(name, df, width, all_rows, detailed=result.command == "findings")
             for name, df in result.tables.items() if len(df) and is_findings(df)]
    pictures = [name for name, df in result.tables.items() if len(df) and df.attrs.get("picture") and not all_rows]
    blocks += [_table_block(name, df, origin, width, limit) for name, df in result.tables.items()
               if len(df) and not is_findings(df) and name not in pictures]
    uses_abs = any(unit_of(k).kind == "abs" for k in result.summary) or any(
        unit_of(c).kind == "abs" for df in result.tables.values() if len(df) for c in df.columns)

    _allot(blocks, width, max_lines - len(head) - len(summary) - len(summary_notes) - 4
           - sum(len(x) for x in lists), all_rows)

    out: list[str] = list(head)
    said_glossary = False

    def maybe_glossary(measures: list[str]) -> None:
        nonlocal said_glossary
        if len(measures) > 1 and not said_glossary:
            out.extend(wrap_prose(glossary(measures), width))
            said_glossary = True

    if summary:
        out += summary + summary_notes
        maybe_glossary(summary_measures)
    for lines in lists:
        out += lines
    out += ranks_lines
    for b in blocks:
        b.shown = min(b.shown, len(b.rows))
        rows = b.rows[: b.shown]
        out += _draw(b, rows, width)
        out += [ln for note in b.notes for ln in wrap_prose(note, width)]
        maybe_glossary(b.measures)
    tail = []
    if uses_abs and origin is not None:
        tail.append(origin.note())
    if empty:
        tail.append("no rows: " + ", ".join(safe_text(e) for e in empty))
    if pictures:
        tail.append("not shown: " + ", ".join(f"{safe_text(p)} ({len(result.tables[p]):,} rows, what -f html draws)"
                                              for p in pictures) + "; --all or -f json has them")
    if tail:
        out += [ln for t in tail for ln in wrap_prose(t, width)]
    return utf8_text("\n".join(out) + "\n")


def _allot(blocks: list[Block], width: int, budget: int, all_rows: bool) -> None:
    """How many rows each block shows: all with ``all_rows``; else every block at least MIN_ROWS (or all it has),
    the remaining lines shared out, small tables first."""
    for b in blocks:
        b.shown = b.total
    if all_rows:
        return
    cut = [b for b in blocks if b.truncatable]
    fixed = sum(_cost(b, b.total, width) for b in blocks if not b.truncatable)
    per_row = {id(b): len(_layout(b.headers, b.rows, b.numeric, width)) for b in cut}
    base = {id(b): _cost(b, 0, width) for b in cut}
    left = budget - fixed - sum(base.values())
    least = MIN_ROWS
    while least > 1 and sum(min(b.total, least) * per_row[id(b)] for b in cut) > left:
        least -= 1  # a long report: fewer rows each rather than far past the budget
    for b in cut:
        b.shown = min(b.total, least)
        left -= b.shown * per_row[id(b)]
    pending = sorted(cut, key=lambda b: b.total - b.shown)
    while pending:
        share = left // len(pending) if left > 0 else 0
        b = pending.pop(0)
        want = b.total - b.shown
        extra_cost = want * per_row[id(b)]
        if extra_cost <= share or (want <= 1 and extra_cost <= max(left, 0)):
            b.shown = b.total
            left -= extra_cost
        else:
            add = max(0, share // per_row[id(b)])
            b.shown += add
            left -= add * per_row[id(b)]
