"""Terminal tables for people (not a contract: scripts use --format json or csv).

Tables are drawn by ``rich`` (``Table`` of ``Text`` cells, so no name can be taken for markup; a ``Console`` of the
terminal's width writing plain text, no colour):

* **Width**: the terminal's (``COLUMNS``, else the real width; 100 when stdout is not a terminal). A number is never
  broken or shortened: each column gets a width here (numbers: at least their widest; text: what is left), text
  wraps in its column (a word longer than it folds; paths keep their end), headers wrap by words, and a table still
  too wide is split into column groups that repeat its first column.
* **Kernel names** are shortened into something a person recognises (``tracekit/names.py``), each different name still
  reading differently; ``wide=True`` (``--wide``) shows them whole. json and csv always carry the full name.
* **Shortened tables show their most costly rows** (by their first duration column, e.g. ``wall ms``), not the
  first ones in data order.
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

from ..result import Result, plain_value, utf8_text
from .table_layout import (
    INLINE_KEYS,
    MAX_LINES,
    NOT_A_TERMINAL_WIDTH,  # noqa: F401
    _allot,
    _dict_blocks,
    _draw,
    _summary_lines,
    _table_block,
    _title,
    terminal_width,
)
from .human import fit, fit_left, wrap_prose, _wrap_words  # noqa: F401 - re-exported
from .human import ag_measures, glossary, label_of, origin_of, safe_text, unit_of, value_text
from ..names import name_columns, short_name
from .report_text import SCREEN_LINES, report_text


# --------------------------------------------------------------------------- the whole output


def to_text(
    result: Result,
    width: int | None = None,
    color: bool = False,
    *,
    all_rows: bool = False,
    max_lines: int = MAX_LINES,
    wide: bool = False,
) -> str:
    """``result`` as text for a terminal ``width`` cells wide (default: :func:`terminal_width`); ``wide``: kernel
    names whole."""
    width = max(20, width or terminal_width())
    from .ranks_text import ranks_part

    result, ranks_lines = ranks_part(result, width, all_rows, to_text)  # report RUN_DIR: its ranks section (issue 28)
    if result.command == "report" and not all_rows:  # one screen that reads (report_text.py)
        screen = report_text(result, width, wide=wide, lines=SCREEN_LINES - len(ranks_lines))  # one screen in all
        if screen is not None:
            return utf8_text(screen + "".join(f"{ln}\n" for ln in ranks_lines))
        max_lines = min(max_lines, SCREEN_LINES - 4)  # a report without a one-step table: its tables, as short
    origin = origin_of(result)
    scalars, dicts = [], []
    keysets = [tuple(plain_value(v)) for v in result.summary.values() if isinstance(plain_value(v), dict)]
    for k, v in result.summary.items():
        sv = plain_value(v)
        if isinstance(sv, dict) and sv and not (len(sv) <= INLINE_KEYS and keysets.count(tuple(sv)) == 1):
            dicts.append((k, sv))
        else:
            if not wide and isinstance(sv, str) and (k in name_columns() or str(k).endswith(("_kernel", "top_name"))):
                v = short_name(sv)  # a kernel name in the summary, as the tables show it
            scalars.append((label_of(k, result.summary), value_text(k, v, origin)))
    head = [_title(result)]
    summary, summary_notes = _summary_lines(scalars, width)
    summary_measures = ag_measures(list(result.summary))
    blocks = _dict_blocks(dicts, origin, width)
    empty = [name for name, df in result.tables.items() if len(df) == 0]
    limit = None if all_rows else max_lines  # no table shows more rows than the whole output has lines
    from .findings_text import findings_lines, is_findings

    lists = [
        findings_lines(name, df, width, all_rows, detailed=result.command == "findings", wide=wide)
        for name, df in result.tables.items()
        if len(df) and is_findings(df)
    ]
    pictures = [name for name, df in result.tables.items() if len(df) and df.attrs.get("picture") and not all_rows]
    blocks += [
        _table_block(name, df, origin, width, limit, wide)
        for name, df in result.tables.items()
        if len(df) and not is_findings(df) and name not in pictures
    ]
    uses_abs = any(unit_of(k).kind == "abs" for k in result.summary) or any(
        unit_of(c).kind == "abs" for df in result.tables.values() if len(df) for c in df.columns
    )

    _allot(
        blocks,
        width,
        max_lines - len(head) - len(summary) - len(summary_notes) - 4 - sum(len(x) for x in lists) - len(ranks_lines),
        all_rows,
    )

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
        rows = (b.by_cost if b.by_cost is not None and b.shown < b.total else b.rows)[: b.shown]
        out += _draw(b, rows, width)
        out += [ln for note in b.notes for ln in wrap_prose(note, width)]
        maybe_glossary(b.measures)
    tail = []
    if uses_abs and origin is not None:
        tail.append(origin.note())
    if empty:
        tail.append("no rows: " + ", ".join(safe_text(e) for e in empty))
    if pictures:
        tail.append(
            "not shown: "
            + ", ".join(f"{safe_text(p)} ({len(result.tables[p]):,} rows, what -f html draws)" for p in pictures)
            + "; --all or -f json has them"
        )
    if tail:
        out += [ln for t in tail for ln in wrap_prose(t, width)]
    return utf8_text("\n".join(out) + "\n")
