"""Writers for every result: one envelope for JSON, one table per file for CSV, pipe tables for md.

The JSON envelope is the stable contract documented in docs/json-contract.md. Human formats
(table, md) show ``*_ns`` values as milliseconds or microseconds; machine formats (json, csv)
keep integer nanoseconds.
"""
from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._version import __version__
from ..result import Result

FORMATS = ("table", "json", "csv", "md")


def _scalar(v: Any) -> Any:
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return None if math.isnan(f) or math.isinf(f) else f
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, dict):
        return {str(k): _scalar(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_scalar(x) for x in v]
    return v


def table_rows(df: pd.DataFrame, *, spread: bool = True) -> list[dict[str, Any]]:
    """Rows as plain Python objects: ints stay ints, NaN and <NA> become None.

    A table whose ``attrs["spread"]`` names a column of dicts has that dict merged into each row (records
    whose fields differ from row to row, like ``tracekit log``'s)."""
    cols = {}
    for c in df.columns:
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            s = s.astype(object)
        cols[c] = [_scalar(x) for x in s.tolist()]
    rows = [dict(zip(cols, vals)) for vals in zip(*cols.values())] if cols else []
    col = df.attrs.get("spread")
    if spread and col in cols:
        rows = [{**{k: v for k, v in r.items() if k != col}, **(r[col] or {})} for r in rows]
    return rows


def _csv_frame(df: pd.DataFrame) -> pd.DataFrame:
    """csv cells holding lists or dicts are written as JSON text, not Python reprs."""
    if not any(df[c].dtype == object for c in df.columns):
        return df
    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object:
            out[c] = [json.dumps(_scalar(v), ensure_ascii=False) if isinstance(v, (dict, list)) else v
                      for v in out[c]]
    return out


def to_json_obj(result: Result) -> dict[str, Any]:
    return {
        "tracekit": __version__,
        "schema": result.schema,
        "command": result.command,
        "inputs": _scalar(result.inputs),
        "params": _scalar(result.params),
        "warnings": list(result.warnings),
        "summary": _scalar(result.summary),
        "tables": {name: table_rows(df) for name, df in result.tables.items()},
    }


def _human_value(key: str, v: Any) -> str:
    v = _scalar(v)
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if key.endswith("_ns") and isinstance(v, (int, float)):
        return f"{v / 1e6:,.3f} ms" if abs(v) >= 1e5 else f"{v / 1e3:,.2f} µs"
    if key.endswith("_bytes") and isinstance(v, (int, float)):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def _human_frame(df: pd.DataFrame, max_chars: int = 90) -> tuple[list[str], list[list[str]]]:
    headers = list(df.columns)
    rows = []
    for row in table_rows(df, spread=False):  # people read the fields as one JSON cell
        cells = []
        for k in headers:
            text = _human_value(k, row[k])
            cells.append(text if len(text) <= max_chars else text[: max_chars - 1] + "…")
        rows.append(cells)
    return headers, rows


def to_markdown(result: Result) -> str:
    out = [f"## tracekit {result.command}", ""]
    if result.summary:
        out += ["| key | value |", "| --- | --- |"]
        out += [f"| {k} | {_md_cell(_human_value(k, v))} |" for k, v in result.summary.items()]
        out.append("")
    for name, df in result.tables.items():
        headers, rows = _human_frame(df, max_chars=200)
        out += [f"### {name}", "", "| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
        out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
        out.append("")
    if result.warnings:
        out += ["### warnings", ""] + [f"- {w}" for w in result.warnings] + [""]
    return "\n".join(out)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_csv(result: Result, table: str | None) -> str:
    name = table or result.primary_table
    if name is None:
        df = pd.DataFrame([{k: _scalar(v) for k, v in result.summary.items()}])
    else:
        df = _table_or_error(result, name)
    buf = io.StringIO()
    _csv_frame(df).to_csv(buf, index=False)
    return buf.getvalue()


def _table_or_error(result: Result, name: str) -> pd.DataFrame:
    from ..errors import UsageError

    if name == "summary":
        return pd.DataFrame([{k: _scalar(v) for k, v in result.summary.items() if not isinstance(v, (list, dict))}])
    if name not in result.tables:
        raise UsageError(f"{result.command} has no table '{name}'; its tables are: "
                         f"{', '.join(['summary', *result.tables])}")
    return result.tables[name]


def write_csv_dir(result: Result, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in ["summary", *result.tables]:
        p = out / f"{result.command}.{name}.csv"
        _csv_frame(_table_or_error(result, name)).to_csv(p, index=False)
        paths.append(p)
    return paths
