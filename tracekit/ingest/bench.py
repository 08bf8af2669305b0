"""Benchmark result files (CSV, JSON, JSONL; tracekit's columns or sglang's bench outputs) → one table.

Formats are data (``tracekit/data/bench_formats.json``); docs/bench.md lists the columns.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import InputError
from .compression import HEAD_BYTES, is_compressed
from ..errors import check_items

BENCH_COLUMNS = [
    "deployment",
    "context",
    "concurrency",
    "step_time_ms",
    "tpot_ms",
    "throughput_tok_s",
    "format",
    "source",
]


@lru_cache(maxsize=1)
def _formats() -> list[dict]:
    text = resources.files("tracekit.data").joinpath("bench_formats.json").read_text(encoding="utf-8")
    return json.loads(text)["formats"]


def _records(path: Path) -> list[tuple[str, Any]]:
    """(where, record) of every record: ``line N`` (CSV, JSONL: the physical line it starts on) or ``record N``
    (a JSON document), so a warning can point at the row."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path} could not be read ({exc.strerror or exc}); check the path") from exc
    if is_compressed(raw[:HEAD_BYTES]) or b'"traceEvents"' in raw[: 1 << 20]:
        raise InputError(
            f"{path} is a compressed file or a profiler trace, not a benchmark result; tracekit bench"
            " reads CSV, JSON or JSONL results (docs/bench.md) — for a trace use tracekit report"
        )
    text = raw.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if not stripped:
        raise InputError(f"{path} is empty; pass a benchmark result file (CSV, JSON or JSONL)")
    if stripped[0] in "[{":
        try:
            doc = json.loads(text)
            return [(f"record {i}", r) for i, r in enumerate(doc if isinstance(doc, list) else [doc], 1)]
        except json.JSONDecodeError:
            rows = []
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    try:
                        rows.append((f"line {n}", json.loads(line)))
                    except json.JSONDecodeError as exc:
                        raise InputError(f"{path} line {n} is not JSON ({exc.msg}); pass JSON, JSONL or CSV") from exc
            return rows
    reader = csv.DictReader(io.StringIO(text))
    out = []
    start = 2  # the header is line 1
    for rec in reader:
        out.append((f"line {start}", rec))
        start = reader.line_num + 1
    return out


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _not_a_number(v: Any) -> bool:
    """A cell that is there (not empty, not null) but is not a finite number: text such as ``n/a`` or ``12 ms``,
    ``nan``, ``inf``, a boolean, a list."""
    if v is None or (isinstance(v, str) and not v.strip()):
        return False
    return isinstance(v, bool) or _num(v) is None


def _field(rec: dict, alternatives: list, bad: list[tuple[str, Any]]) -> Any:
    """The first alternative present; number fields skip (and report in ``bad``) a cell that is not a number."""
    for key, scale in alternatives:
        if key in rec and rec[key] not in (None, ""):
            if scale is None:
                return str(rec[key])
            v = None if isinstance(rec[key], bool) else _num(rec[key])
            if v is not None:
                return v * scale
            bad.append((key, rec[key]))
    return None


def _derive(rec: dict, expr: str, bad: list[tuple[str, Any]]) -> float | None:
    names = {k: _num(v) for k, v in rec.items() if isinstance(k, str) and k.isidentifier()}
    used = [k for k in names if re.search(rf"\b{re.escape(k)}\b", expr)]
    text = [k for k in used if _not_a_number(rec[k])]
    bad += [(k, rec[k]) for k in text]
    if any(names[k] is None for k in used):
        return None
    try:
        v = eval(expr, {"__builtins__": {}}, names)  # noqa: S307 - expressions come from tracekit's own data file
    except (ZeroDivisionError, NameError, TypeError):
        return None
    return float(v) if v is not None and math.isfinite(v) else None


def read_bench(paths: list[str | Path]) -> pd.DataFrame:
    """All records of all files, normalised to BENCH_COLUMNS; an unrecognised record is an error that says
    which keys were expected. A number column holding text (``n/a``, ``12 ms``, ``nan``) gives a null, never a
    silent one: ``df.attrs["warnings"]`` names the file, the row and the column of each (the first few per file,
    with the count), and ``df.attrs["text_in_number_columns"]`` counts them."""
    paths = check_items(paths, "paths", "a path (str or Path) of a benchmark file or a list of them", paths=True)
    rows = []
    warnings: list[str] = []
    text_cells = 0
    for p in map(Path, paths):
        bad_here: list[str] = []
        for i, (where, rec) in enumerate(_records(p)):
            if not isinstance(rec, dict):
                raise InputError(f"{p} record {i + 1} is not an object; pass one result per row")
            fmt = next((f for f in _formats() if all(k in rec for k in f["detect"])), None)
            if fmt is None:
                wanted = "; ".join(f"{f['name']}: {', '.join(f['detect'])}" for f in _formats())
                raise InputError(
                    f"{p} record {i + 1} matches no benchmark format (keys {sorted(map(str, rec))[:8]}); expected"
                    f" columns — {wanted}; see docs/bench.md"
                )
            bad: list[tuple[str, Any]] = []
            row = {k: _field(rec, alts, bad) for k, alts in fmt["fields"].items()}
            for k, expr in fmt.get("derived", {}).items():
                if row.get(k) is None:
                    row[k] = _derive(rec, expr, bad)
            for k in ("context", "concurrency"):  # counts: 8.5 requests is not a count, and never silently 8
                v = row.get(k)
                if v is not None and not float(v).is_integer():
                    bad.append((k, v))
                    row[k] = None
            seen: set[str] = set()
            for col, val in bad:
                if col not in seen:
                    seen.add(col)
                    bad_here.append(f"{where} column {col!r} = {str(val)[:40]!r}")
            row["deployment"] = row.get("deployment") or p.stem
            row["format"], row["source"] = fmt["name"], str(p)
            rows.append(row)
        if bad_here:
            text_cells += len(bad_here)
            more = f" and {len(bad_here) - 5} more" if len(bad_here) > 5 else ""
            warnings.append(
                f"{p}: {len(bad_here)} cell(s) of a number column hold no number (or a fraction where a"
                f" count belongs), so those values are null: {'; '.join(bad_here[:5])}{more}"
            )
    df = pd.DataFrame(rows, columns=BENCH_COLUMNS)
    for c in ("context", "concurrency"):
        df[c] = pd.array([int(v) if v is not None and not pd.isna(v) else None for v in df[c]], dtype="Int64")
    df.attrs["warnings"] = warnings
    df.attrs["text_in_number_columns"] = text_cells
    return df
