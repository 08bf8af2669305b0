"""The pieces of a terminal table (``terminal.py`` puts them together): a :class:`Block` (one table as text), the
width of each column (numbers whole, kernel names and paths at a least width, a table too wide split into column
groups), drawing a block with ``rich`` (a ``Table`` of ``Text`` cells: nothing is read as markup; a plain
``Console``: no colour), the lines each row takes, the summary as a key / value grid, and how many rows each block
shows. The rules are in ``terminal.py``'s docstring.
"""

from __future__ import annotations

import io
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import pandas as pd
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..names import name_columns
from ..result import Result, plain_value, table_rows
from .human import (
    Origin,
    _wrap_words,
    ag_measures,
    column,
    display_frame,
    fit,
    fit_left,
    label_of,
    plain_text,
    protect_numbers,
    safe_text,
    short_names,
    unit_of,
    unprotect,
    value_text,
    wrap_prose,
)

MAX_LINES = 75  # what the default output aims at (the tests hold the K3 fixtures under 80)
INLINE_KEYS = 3  # a summary dict of at most this many keys (and no sibling with the same keys) stays inline
MIN_ROWS = 3  # every table shows at least this many rows (or all it has)
NOT_A_TERMINAL_WIDTH = 100
GAP = 2
HEADER_LINES = 3  # a header wraps onto at most this many lines
NAME_MIN = 24  # a kernel-name column is at least this wide (or as wide as its longest name)
PATH_MIN = 20  # a path column too (its end: the file name)
WORD_MIN = 14  # a text column is at least as wide as its widest word up to this (categories, block types)
SECONDARY = ("min_", "max_", "median_", "p50_", "p90_", "p99_", "std_")  # columns a narrow table drops first
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


def stderr_width() -> int | None:
    """The width warnings wrap to: ``COLUMNS`` when set, else stderr's terminal's; None when stderr is no terminal
    (a log or a pipe: one line per warning, for grep)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return max(20, int(env))
    try:
        if sys.stderr.isatty():
            return max(20, os.get_terminal_size(sys.stderr.fileno()).columns)
    except (OSError, ValueError, AttributeError):
        pass
    return None


# --------------------------------------------------------------------------- text helpers


_JOINT = re.compile(r"[^ _/,]*[_/,]+|[^ _/,]+| +")  # a piece of text up to a joint: after `_`, `/`, `,`, or a space


def wrap_cell(text: str, width: int) -> str:
    """A text cell wrapped to ``width`` cells, as lines joined by newlines: at spaces, and after ``_``, ``/`` or
    ``,`` (``attention_`` / ``prefill``, ``declared_`` / ``hardware``), never inside a word that fits a line; a piece
    wider than the line folds. The one wrapping rule of table cells and headers (drawing and counting lines)."""
    if width <= 0 or cell_len(text) <= width and "\n" not in text:
        return text
    out: list[str] = []
    for para in protect_numbers(text).split("\n"):  # a number and its unit stay together
        cur = ""
        for piece in _JOINT.findall(para):
            if cell_len(cur) + cell_len(piece) <= width:
                cur += piece
                continue
            if cur.strip():
                out.append(cur.rstrip())
            cur = piece.lstrip(" ")
            while cell_len(cur) > width:  # a piece wider than the line: fold it
                out.append(cur[:width])
                cur = cur[width:]
        out.append(cur.rstrip())
    return unprotect("\n".join(out))


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
    by_cost: list[list[str]] | None = None  # the rows most costly first (shown when the block is shortened)
    order: str = ""  # " by wall ms": how by_cost is ordered
    floors: dict = field(default_factory=dict)  # column -> its least width (kernel names)


def _layout(headers: list[str], rows: list[list[str]], numeric: list[bool], width: int, floors: dict | None = None):
    """Column groups, each a list of (column, width), and the gap between columns: two spaces, or one where that
    saves splitting the table or wrapping its text. ``floors``: the least width of some text columns (names)."""
    wide = _layout_gap(headers, rows, numeric, width, GAP, floors or {})
    if len(wide) > 1 or _shortened(wide, headers, rows):
        narrow = _layout_gap(headers, rows, numeric, width, 1, floors or {})
        if len(narrow) < len(wide) or (len(wide) == 1 and len(narrow) == 1 and not _shortened(narrow, headers, rows)):
            return narrow
    return wide


class _Groups(list):
    gap = GAP


def _header_least(header: str, depth: int = HEADER_LINES) -> int:
    """The narrowest a column can be with its header on at most ``depth`` lines (words whole, up to 14 cells)."""
    full = cell_len(header)
    longest = max([cell_len(w.strip()) for w in _JOINT.findall(header)] or [1])
    for w in range(min(longest, 14), full + 1):
        if len(wrap_cell(header, w).split("\n")) <= depth:
            return w
    return full


def _shortened(groups, headers, rows) -> bool:
    return any(w < max([cell_len(r[i]) for r in rows] or [0]) for g in groups for i, w in g)


_NUMBER_RUN = re.compile(r"[+−-]?\d[\d,.]*")


def _longest_number(cells: list[str]) -> int:
    """The widest number inside text cells: a text column is never narrower (wrapping must not split it)."""
    return max((len(m) for c in cells for m in _NUMBER_RUN.findall(c)), default=0)


def _longest_word(cells: list[str], most: int = WORD_MIN) -> int:
    """The widest word of a text column, up to ``most``: a short word (a category) is not folded mid-word."""
    return max((w for c in cells for w in map(cell_len, c.split(" ")) if w <= most), default=0)


def _layout_gap(headers: list[str], rows: list[list[str]], numeric: list[bool], width: int, gap: int, floors: dict):
    n = len(headers)
    if n == 0:
        return _Groups()
    cellw = [max([cell_len(r[i]) for r in rows] or [0]) for i in range(n)]
    hdrw = [cell_len(h) for h in headers]
    natural = [max(c, h) for c, h in zip(cellw, hdrw)]
    # the least each column can take: numbers whole, headers at their longest word, text down to 8 cells
    # a numeric column is never narrower than its widest number (a text cell in it, e.g. a note, may wrap)
    numw = [max([cell_len(r[i]) for r in rows if _numberish(r[i]) or cell_len(r[i]) <= 8] or [0]) for i in range(n)]
    least = [
        max(numw[i], _header_least(headers[i]))
        if numeric[i]
        else max(
            min(cellw[i], 8),
            min(_header_least(headers[i]), 10),
            1,
            min(natural[i], floors.get(i, 0)),
            _longest_number([r[i] for r in rows]),
            _longest_word([r[i] for r in rows]),
        )
        for i in range(n)
    ]

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
                cands = [
                    i
                    for i in g
                    if ws[i] > least[i]
                    and (phase == "text" or hdrw[i] > cellw[i])
                    and (phase == "header" or not numeric[i] or numw[i] < cellw[i])
                ]
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


_RULE = box.Box("    \n    \n ─  \n    \n    \n    \n    \n    \n")  # a rule under the header, nothing else


def _console(width: int) -> Console:
    """Plain text (no colour, no markup, no emoji codes, no highlighting) ``width`` cells wide."""
    return Console(
        file=io.StringIO(),
        width=width,
        color_system=None,
        force_terminal=False,
        no_color=True,
        highlight=False,
        markup=False,
        emoji=False,
        legacy_windows=False,
        soft_wrap=False,
    )


def _rich_table(block: Block, rows: list[list[str]], group, gap: int) -> Table:
    """One column group as a rich Table: every column at the width the layout gave it; numbers right-aligned in a
    column at least as wide as the widest of them (so never wrapped or cut); text wraps (a word longer than the
    column folds), paths keep their end. Every cell is a ``Text``: nothing is read as markup."""
    t = Table(
        box=_RULE,
        show_edge=False,
        pad_edge=False,
        padding=(0, gap - 1, 0, 0),
        show_header=True,
        header_style="",
        expand=False,
    )
    for i, w in group:
        t.add_column(
            Text(wrap_cell(block.headers[i], w)),
            width=w,
            justify="right" if block.numeric[i] else "left",
            overflow="fold",
            no_wrap=False,
        )
    for r in rows:
        t.add_row(*(Text(_cell(block, i, r[i], w)) for i, w in group))
    return t


def _cell(block: Block, i: int, text: str, width: int) -> str:
    """A cell as drawn: a path keeps its end, other text wraps at its joints (:func:`wrap_cell`), a number is whole."""
    if i in block.left_cut:
        return fit_left(text, width)
    return text if block.numeric[i] else wrap_cell(text, width)


def _render(table: Table, width: int) -> list[str]:
    console = _console(width)
    console.print(table, crop=False)
    return [ln.rstrip() for ln in console.file.getvalue().splitlines()]


def _draw(block: Block, rows: list[list[str]], width: int) -> list[str]:
    lines: list[str] = []
    groups = _layout(block.headers, block.rows + (block.by_cost or []), block.numeric, width, block.floors)
    more = block.total - len(rows)
    for gi, group in enumerate(groups):
        title = block.title if len(groups) == 1 else f"{block.title} ({gi + 1}/{len(groups)})"
        if more > 0:
            title += f" — top {len(rows):,} of {block.total:,} {block.what}{block.order}; {more:,} more with --all"
        if title:
            lines += wrap_prose(title, width)
        lines += _render(_rich_table(block, rows, group, groups.gap), width)
    return lines


def _heights(block: Block, width: int) -> tuple[int, list[int]]:
    """Lines the block takes without rows, and the lines each row takes (text wraps in its column)."""
    groups = _layout(block.headers, block.rows + (block.by_cost or []), block.numeric, width, block.floors)
    console = _console(width)
    base, per_row = 0, [0] * len(block.rows)
    for g in groups:
        base += len(_render(_rich_table(block, [], g, groups.gap), width)) + (1 if block.title else 0)
        for k, r in enumerate(block.rows):
            per_row[k] += max(
                [1]
                + [
                    len(Text(_cell(block, i, r[i], w)).wrap(console, w, overflow="fold"))
                    for i, w in g
                    if not block.numeric[i] and i not in block.left_cut
                ]
            )
    return base + len(block.notes), per_row


# --------------------------------------------------------------------------- result → blocks


def _cost_column(df: pd.DataFrame) -> str | None:
    """The column that says what a row costs: the one the table names (``df.attrs["order_by"]``), else the first
    duration (not an absolute time) with numbers in it."""
    named = df.attrs.get("order_by")
    if named in df.columns and pd.api.types.is_numeric_dtype(df[named]):
        return named
    for c in df.columns:
        if unit_of(c).kind == "ns" and pd.api.types.is_numeric_dtype(df[c]) and df[c].notna().any():
            return c
    return None


def _table_block(
    name: str,
    df: pd.DataFrame,
    origin: Origin | None,
    width: int,
    limit: int | None = None,
    wide: bool = False,
    units: dict | None = None,
) -> Block:
    """A table as text: every row, or (``limit``) the first rows only — the units still follow from all of them —
    and then also its most costly rows, shown when the table is shortened. ``units``: column → the duration unit it
    is shown in (``human.column``)."""
    df = display_frame(df)
    total = len(df)
    records = short_names(table_rows(df if limit is None else df.iloc[:limit], spread=False), list(df.columns), wide)
    cost = _cost_column(df) if limit is not None and total > 1 else None
    by_cost = None
    if cost is not None:
        top = df.sort_values(cost, ascending=False, kind="stable", na_position="last").iloc[:limit]
        by_cost = short_names(table_rows(top, spread=False), list(df.columns), wide)
    headers_raw = list(df.columns)
    if len(records) == 1 and len(headers_raw) > 4 and _too_wide(records[0], headers_raw, origin, width):
        r = records[0]  # one record too wide for one line: key / value
        rows = [[label_of(k, headers_raw), value_text(k, r[k], origin)] for k in headers_raw]
        return Block(
            safe_text(name) or "(unnamed table)",
            ["key", "value"],
            rows,
            [False, False],
            total=len(rows),
            truncatable=False,
            measures=ag_measures(headers_raw),
        )
    cols = [
        column(c, _sample(df[c]) if limit is not None else [r[c] for r in records], origin, (units or {}).get(c))
        for c in headers_raw
    ]
    heads = [c.header for c in cols]
    heads = [h if heads.count(h) == 1 else safe_text(str(c.name)) for h, c in zip(heads, cols)]
    notes: list[str] = []
    rows = [[c.fmt(r[c.name]) for c in cols] for r in records]
    ranked = None if by_cost is None else [[c.fmt(r[c.name]) for c in cols] for r in by_cost]
    paths = {j for j, c in enumerate(cols) if not c.numeric and _is_path_column(c.name)}
    for j in paths:
        notes += _shorten_paths(rows, j, heads[j])
        if ranked is not None:
            _shorten_paths(ranked, j, heads[j])
    part_values = [r[c] for r in records for c in headers_raw if not cols[headers_raw.index(c)].numeric][:2000]
    floors = {j: NAME_MIN for j, c in enumerate(cols) if not c.numeric and c.name in name_columns()}
    floors.update({j: PATH_MIN for j in paths})
    block = Block(
        safe_text(name) or "(unnamed table)",
        heads,
        rows,
        [c.numeric for c in cols],
        total=total,
        notes=notes,
        measures=ag_measures(headers_raw, part_values),
        left_cut=paths,
        by_cost=ranked,
        order="" if cost is None else f" by {heads[headers_raw.index(cost)]}",
        floors=floors,
    )
    return _concise(block, [c.name for c in cols], width) if limit is not None else block


def _concise(block: Block, names: list[str], width: int) -> Block:
    """Without --all, a table that would not fit one column group drops its secondary columns (min, max, median, …:
    the last ones first) until it does, and a note names them."""
    hidden: list[str] = []
    while len(_layout(block.headers, block.rows + (block.by_cost or []), block.numeric, width, block.floors)) > 1:
        drop = next((j for j in reversed(range(len(names))) if str(names[j]).startswith(SECONDARY)), None)
        if drop is None:
            break
        hidden.insert(0, block.headers[drop])
        keep = [j for j in range(len(names)) if j != drop]
        names = [names[j] for j in keep]
        block.headers = [block.headers[j] for j in keep]
        block.numeric = [block.numeric[j] for j in keep]
        block.rows = [[r[j] for j in keep] for r in block.rows]
        if block.by_cost is not None:
            block.by_cost = [[r[j] for j in keep] for r in block.by_cost]
        where = {j: k for k, j in enumerate(keep)}
        block.left_cut = {where[j] for j in block.left_cut if j in where}
        block.floors = {where[j]: w for j, w in block.floors.items() if j in where}
    if hidden:
        block.notes.append(f"{block.title}: not shown here: {', '.join(hidden)} (--all shows them)")
    return block


def _sample(s: pd.Series, most: int = 20_000) -> list[Any]:
    """A column's values (evenly spaced ones of a huge column), as plain Python objects, for choosing its unit."""
    if len(s) > most:
        s = s.iloc[:: -(-len(s) // most)]
    if isinstance(s.dtype, pd.CategoricalDtype):
        s = s.astype(object)
    return [plain_value(x) for x in s.tolist()]


def _too_wide(record: dict, names: list, origin: Origin | None, width: int) -> bool:
    cols = [column(c, [record[c]], origin) for c in names]
    return (
        len(
            _layout([c.header for c in cols], [[c.fmt(record[c.name]) for c in cols]], [c.numeric for c in cols], width)
        )
        > 1
    )


def _is_path_column(name: str) -> bool:
    return name in _PATH_COLUMNS or name.endswith(("_path", "_file", "_dir"))


def _shorten_paths(rows: list[list[str]], j: int, header: str) -> list[str]:
    """Paths of one column relative to their common folder, named once in a note."""
    paths = [r[j] for r in rows if "/" in r[j]]
    if len(paths) < 2 and not any(cell_len(p) > 40 for p in paths):
        return []
    parents = [str(PurePosixPath(p).parent) for p in paths]
    common = (
        os.path.commonpath(parents)
        if parents and all(p.startswith("/") for p in parents) or all(not p.startswith("/") for p in parents)
        else ""
    )
    if not common or common in (".", "/"):
        return []
    for r in rows:
        if r[j].startswith(common + "/"):
            r[j] = r[j][len(common) + 1 :]
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
            across = Block(
                safe_text(title or "value"),
                [safe_text(title) or "", *map(safe_text, keys)],
                [[lab, *r] for lab, r in zip(labels, rows)],
                [False] + [True] * len(keys),
                total=len(entries),
                truncatable=False,
                measures=measures,
            )
            if len(_layout(across.headers, across.rows, across.numeric, width)) == 1:
                across.title = ""  # its first header names it
                blocks.append(across)
                continue
            down = [[safe_text(x), *(r[i] for r in rows)] for i, x in enumerate(keys)]
            blocks.append(
                Block(
                    safe_text(title or "summary"),
                    [safe_text(by.replace("_", " ")) if by else "key", *labels],
                    down,
                    [False] + [True] * len(labels),
                    total=len(down),
                    measures=measures,
                    what="keys",
                )
            )
        else:
            down = [[safe_text(x), *(plain_text(d.get(x)) for _, d in entries)] for x in keys]
            blocks.append(
                Block(
                    safe_text(title or "summary"),
                    ["key", *(label_of(k) for k, _ in entries)],
                    down,
                    [False] * (1 + len(entries)),
                    total=len(down),
                    measures=measures,
                    what="keys",
                )
            )
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
        for per in (3, 2, 1):
            if per > 1 and len(cells) <= per:
                continue
            rows = -(-len(cells) // per)  # fill down the columns, so a column reads as a list
            cols = [col for col in (cells[c * rows : (c + 1) * rows] for c in range(per)) if col]
            grid = _pairs_grid(cols, rows)
            wide = _console(10_000)  # the grid's natural width (a console of the real width would squeeze it)
            if per == 1 or Measurement.get(wide, wide.options, grid).maximum <= width:
                lines += _render(grid, width)
                break
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


def _pairs_grid(cols: list[list[tuple[str, str]]], rows: int) -> Table:
    """Key / value pairs side by side: two cells between a key and its value, three between pairs; numbers
    right-aligned in their value column."""
    grid = Table.grid(padding=(0, 2, 0, 0))
    for j in range(len(cols)):
        grid.add_column(no_wrap=True)
        grid.add_column(no_wrap=len(cols) > 1, overflow="fold")
        if j < len(cols) - 1:
            grid.add_column(width=0)  # the third cell between pairs
    for r in range(rows):
        cells: list[Text] = []
        for j, col in enumerate(cols):
            k, v = col[r] if r < len(col) else ("", "")
            cells += [Text(k), Text(v, justify="right" if _numberish(v) else "left")]
            if j < len(cols) - 1:
                cells.append(Text(""))
        grid.add_row(*cells)
    return grid


def _numberish(v: str) -> bool:
    return bool(v) and (v[0].isdigit() or v[0] in "+−-") and any(ch.isdigit() for ch in v)


def _title(result: Result) -> str:
    names = [PurePosixPath(str(i.get("path"))).name for i in result.inputs if i.get("path")]
    what = f" · {names[0]}" if len(names) == 1 else (f" · {len(names)} inputs" if names else "")
    return safe_text(f"tracekit {result.command}{what}")


def _allot(blocks: list[Block], width: int, budget: int, all_rows: bool) -> None:
    """How many rows each block shows: all with ``all_rows``; else every block at least MIN_ROWS (or all it has),
    the remaining lines shared out, small tables first. A row costs the lines its wrapped text takes."""
    for b in blocks:
        b.shown = b.total
    if all_rows:
        return
    cut = [b for b in blocks if b.truncatable]
    costs = {id(b): _heights(b, width) for b in blocks}

    def rows_cost(b: Block, n: int) -> int:
        return sum(costs[id(b)][1][:n])

    fixed = sum(costs[id(b)][0] + rows_cost(b, b.total) for b in blocks if not b.truncatable)
    left = budget - fixed - sum(costs[id(b)][0] for b in cut)
    least = MIN_ROWS
    while least > 1 and sum(rows_cost(b, min(b.total, least)) for b in cut) > left:
        least -= 1  # a long report: fewer rows each rather than far past the budget
    for b in cut:
        b.shown = min(b.total, least)
        left -= rows_cost(b, b.shown)
    pending = sorted(cut, key=lambda b: b.total - b.shown)
    while pending:
        share = left // len(pending) if left > 0 else 0
        b = pending.pop(0)
        extra = rows_cost(b, b.total) - rows_cost(b, b.shown)
        if extra <= share or (b.total - b.shown <= 1 and extra <= max(left, 0)):
            left -= extra
            b.shown = b.total
        else:
            n = b.shown
            while n < len(b.rows) and rows_cost(b, n + 1) - rows_cost(b, b.shown) <= share:
                n += 1
            left -= rows_cost(b, n) - rows_cost(b, b.shown)
            b.shown = n
