"""The csv format: one table per file (the first table, or ``--table``; a folder of one file per table, the
summary too). csv keeps integer nanoseconds, every row and the full kernel names (a machine format, as json).

CSV is opened by spreadsheets, which run a cell that starts with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage
return) as a formula. Text cells that start so are written with a leading ``'`` (OWASP's advice), and control,
separator and invisible format characters (a terminal escape, a bidi override, a bare carriage return) are written as
visible escapes (``\\x1b``, ``\\u202e``, ``\\r``); tab, newline and CR LF stay (csv quotes them). Numbers are
never changed. ``TRACEKIT_CSV_RAW=1`` in the environment (or ``raw=True``) writes text exactly as it is (a file with
a bare carriage return in a cell then ends its lines with CR LF, so that the cell is quoted).
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pandas as pd

from ..result import Result, plain_value, shown_text, utf8_text
from .human import _escape_char, _unsafe

CSV_RAW_ENV = "TRACEKIT_CSV_RAW"
_FORMULA = ("=", "+", "-", "@", "\t", "\r")
_CSV_SAFE = re.compile(r"[\x20-\x7e\t\n]*\Z")


def csv_raw() -> bool:
    return os.environ.get(CSV_RAW_ENV, "").strip().lower() in ("1", "yes", "true", "on")


def neutralize(text: str) -> str:
    """A text cell a spreadsheet will not run and a terminal will not obey: a leading ``'`` before a formula prefix;
    control, separator and invisible format characters as visible escapes (tab, newline and CR LF stay: csv
    quotes them)."""
    if not _CSV_SAFE.match(text):
        out = []
        for i, ch in enumerate(text):
            if ch == "\r":
                out.append("\r" if text[i + 1 : i + 2] == "\n" else "\\r")  # CR LF is a line break; a bare CR is not
            else:
                out.append(ch if ch in "\t\n" or not _unsafe(ch) else _escape_char(ch))
        text = "".join(out)
    return "'" + text if text.startswith(_FORMULA) else text


def _csv_frame(df: pd.DataFrame, raw: bool | None = None) -> pd.DataFrame:
    """csv cells holding lists or dicts are written as JSON text, not Python reprs; text cells are neutralised."""
    raw = csv_raw() if raw is None else raw
    objects = [
        c for c in df.columns if df[c].dtype == object or isinstance(df[c].dtype, (pd.StringDtype, pd.CategoricalDtype))
    ]
    bad_names = any(isinstance(c, str) and (shown_text(c) if raw else neutralize(c)) != c for c in df.columns)
    if not objects and not bad_names:
        return df
    out = df.copy()
    for c in objects:
        s = out[c].astype(object)
        vals = [json.dumps(plain_value(v), ensure_ascii=False) if isinstance(v, (dict, list)) else v for v in s]
        # raw text is kept exactly, but for what UTF-8 cannot hold (a file name's byte that is not UTF-8: shown_text)
        vals = [(shown_text(v) if raw else neutralize(v)) if isinstance(v, str) else v for v in vals]
        out[c] = pd.Series(vals, index=out.index, dtype=object)
    if bad_names:
        out.columns = [(shown_text(c) if raw else neutralize(c)) if isinstance(c, str) else c for c in out.columns]
    return out


def to_csv(result: Result, table: str | None, *, raw: bool | None = None) -> str:
    name = table or result.primary_table
    if name is None:
        df = pd.DataFrame([{k: plain_value(v) for k, v in result.summary.items()}])
    else:
        df = _table_or_error(result, name)
    return _csv_text(df, raw)


def _csv_text(df: pd.DataFrame, raw: bool | None) -> str:
    frame = _csv_frame(df, raw)
    buf = io.StringIO()
    # a bare carriage return left in a cell (raw text) is quoted only when it ends lines: then CR LF line ends
    # (RFC 4180) keep the file readable
    bare_cr = any(
        isinstance(v, str) and "\r" in v.replace("\r\n", "")
        for c in frame.columns
        if frame[c].dtype == object
        for v in frame[c]
    )
    frame.to_csv(buf, index=False, lineterminator="\r\n" if bare_cr else "\n")
    return utf8_text(buf.getvalue())


def _table_or_error(result: Result, name: str) -> pd.DataFrame:
    from ..errors import UsageError

    if name == "summary":
        return pd.DataFrame([{k: plain_value(v) for k, v in result.summary.items() if not isinstance(v, (list, dict))}])
    if name not in result.tables:
        raise UsageError(
            f"{result.command} has no table '{name}'; its tables are: {', '.join(['summary', *result.tables])}"
        )
    return result.tables[name]


def write_csv_dir(result: Result, out: Path, *, only: str | None = None, raw: bool | None = None) -> list[Path]:
    """One csv file per table (``COMMAND.TABLE.csv``, the summary too) in the directory ``out``, created when
    missing; the set is written whole or not at all (``outdir.OutputDir``)."""
    from .outdir import OutputDir

    names = [only] if only else ["summary", *result.tables]
    frames = {n: _table_or_error(result, n) for n in names}  # a bad --table is a usage error before any writing
    with OutputDir(out, what="csv file", manifest=None) as d:
        for name, df in frames.items():
            d.stage_bytes(f"{result.command}.{name}.csv", _csv_text(df, raw))
        return d.commit()
