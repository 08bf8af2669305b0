"""The md format: a result as pipe tables for people (the summary, then each table, its first ``MD_ROWS`` rows
unless ``--all``), with units, times relative to an origin and text made safe as in the terminal (``human.py``);
not a contract: scripts read json or csv."""

from __future__ import annotations

from ..result import Result, table_rows, utf8_text
from .ranks_text import missing_line
from .warning_folding import fold_warnings
from .human import (
    ag_measures,
    column,
    display_frame,
    glossary,
    label_of,
    origin_of,
    safe_text,
    short_names,
    unit_of,
    value_text,
)

MD_ROWS = 25  # md shows this many rows of a table unless --all


def to_markdown(result: Result, *, all_rows: bool = False, wide: bool = False) -> str:
    """Pipe tables for people: the summary, then each table (its first ``MD_ROWS`` rows unless ``all_rows``), kernel
    names shortened as in the terminal unless ``wide``, and the notes and warnings."""
    origin = origin_of(result)
    out = [f"## tracekit {_md_cell(safe_text(result.command))}", ""]
    if result.summary:
        out += ["| key | value |", "| --- | --- |"]
        out += [
            f"| {_md_cell(label_of(k, result.summary))} | {_md_cell(value_text(k, v, origin))} |"
            for k, v in result.summary.items()
        ]
        out.append("")
    missing = _missing_ranks(result)  # a run's ranks without a trace: its own line, atop the ranks table
    if missing is not None and not len(result.tables.get("ranks", ())):
        out += [missing, ""]
    measures = ag_measures(list(result.summary))
    empty = []
    for name, df in result.tables.items():
        if not len(df):
            empty.append(name)
            continue
        df = display_frame(df)
        records = table_rows(df, spread=False)  # people read the fields as one JSON cell
        cols = [column(c, [r[c] for r in records], origin) for c in df.columns]
        shown = records if all_rows or len(records) <= MD_ROWS + 1 else records[:MD_ROWS]
        shown = short_names(shown, list(df.columns), wide)  # kernel names as the terminal shows them
        out += [f"### {_md_cell(safe_text(name))}", ""]
        if name == "ranks" and missing is not None:
            out += [missing, ""]
        out += [
            "| " + " | ".join(_md_cell(c.header) for c in cols) + " |",
            "|" + "".join(" ---: |" if c.numeric else " --- |" for c in cols),
        ]
        out += ["| " + " | ".join(_md_cell(c.fmt(r[c.name])) for c in cols) + " |" for r in shown]
        if len(shown) < len(records):
            out += [
                "",
                f"*… {len(records) - len(shown):,} more rows ({len(records):,} in all) — `--all` shows every row*",
            ]
        out.append("")
        measures += [m for m in ag_measures(list(df.columns)) if m not in measures]
    notes = []
    if origin is not None and (
        any(unit_of(k).kind == "abs" for k in result.summary)
        or any(unit_of(c).kind == "abs" for df in result.tables.values() if len(df) for c in df.columns)
    ):
        notes.append(origin.note())
    if len(measures) > 1:
        notes.append(glossary(measures))
    if empty:
        notes.append("no rows: " + ", ".join(safe_text(e) for e in empty))
    if notes:
        out += [f"*{_md_text(n)}*  " for n in notes] + [""]
    if result.warnings:
        out += ["### warnings", ""] + [_md_warning(w) for w in fold_warnings(result.warnings)] + [""]
    return utf8_text("\n".join(out))


def _missing_ranks(result: Result) -> str | None:
    """The line naming a run's ranks without a trace (``ranks_text.missing_line``), in bold, of ``report RUN_DIR``
    (``summary.ranks``) or ``imbalance`` (its summary); None for any other result or no rank missing."""
    r = result.summary.get("ranks") if result.command == "report" else result.summary
    if result.command not in ("report", "imbalance") or not isinstance(r, dict):
        return None
    line = missing_line(r)
    return None if line is None else f"**{_md_text(line)}**"


def _md_warning(w) -> str:
    """One folded warning as a list item (tracekit.render.warning_folding)."""
    return f"- {_md_text(safe_text(w.text))}" + (f" *({w.more_text})*" if w.more else "")


def _md_cell(text: str) -> str:
    """A pipe-table cell: backslashes and pipes escaped (so no cell splits a row), line breaks already visible."""
    return safe_text(text).replace("\\", "\\\\").replace("|", "\\|")


def _md_text(text: str) -> str:
    return safe_text(text).replace("\\", "\\\\")
