"""Benchmark result files (CSV, JSON, JSONL; tracekit's columns or sglang's bench outputs) → one table.

Formats are data (``tracekit/data/bench_formats.json``); docs/bench.md lists the columns.
"""
from __future__ import annotations

import csv
import io
import json
import math
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import InputError

BENCH_COLUMNS = ["deployment", "context", "concurrency", "step_time_ms", "tpot_ms", "throughput_tok_s", "format",
                 "source"]


@lru_cache(maxsize=1)
def _formats() -> list[dict]:
    text = resources.files("tracekit.data").joinpath("bench_formats.json").read_text(encoding="utf-8")
    return json.loads(text)["formats"]


def _records(path: Path) -> list[dict]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path} could not be read ({exc.strerror or exc}); check the path") from exc
    if raw[:2] == b"\x1f\x8b" or raw[:4] == b"\x28\xb5\x2f\xfd" or b'"traceEvents"' in raw[:1 << 20]:
        raise InputError(f"{path} is a compressed file or a profiler trace, not a benchmark result; tracekit bench"
                         " reads CSV, JSON or JSONL results (docs/bench.md) — for a trace use tracekit report")
    text = raw.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if not stripped:
        raise InputError(f"{path} is empty; pass a benchmark result file (CSV, JSON or JSONL)")
    if stripped[0] in "[{":
        try:
            doc = json.loads(text)
            return doc if isinstance(doc, list) else [doc]
        except json.JSONDecodeError:
            rows = []
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise InputError(f"{path} line {n} is not JSON ({exc.msg}); pass JSON, JSONL or CSV") from exc
            return rows
    return list(csv.DictReader(io.StringIO(text)))


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _field(rec: dict, alternatives: list) -> Any:
    for key, scale in alternatives:
        if key in rec and rec[key] not in (None, ""):
            if scale is None:
                return str(rec[key])
            v = _num(rec[key])
            if v is not None:
                return v * scale
    return None


def _derive(rec: dict, expr: str) -> float | None:
    names = {k: _num(v) for k, v in rec.items() if isinstance(k, str) and k.isidentifier()}
    if any(v is None for k, v in names.items() if k in expr):
        return None
    try:
        v = eval(expr, {"__builtins__": {}}, names)  # noqa: S307 - expressions come from tracekit's own data file
    except (ZeroDivisionError, NameError, TypeError):
        return None
    return float(v) if v is not None and math.isfinite(v) else None


def read_bench(paths: list[str | Path]) -> pd.DataFrame:
    """All records of all files, normalised to BENCH_COLUMNS; an unrecognised record is an error that says
    which keys were expected."""
    rows = []
    for p in map(Path, paths):
        for i, rec in enumerate(_records(p)):
            if not isinstance(rec, dict):
                raise InputError(f"{p} record {i + 1} is not an object; pass one result per row")
            fmt = next((f for f in _formats() if all(k in rec for k in f["detect"])), None)
            if fmt is None:
                wanted = "; ".join(f"{f['name']}: {', '.join(f['detect'])}" for f in _formats())
                raise InputError(f"{p} record {i + 1} matches no benchmark format (keys {sorted(map(str, rec))[:8]}); expected"
                                 f" columns — {wanted}; see docs/bench.md")
            row = {k: _field(rec, alts) for k, alts in fmt["fields"].items()}
            for k, expr in fmt.get("derived", {}).items():
                if row.get(k) is None:
                    row[k] = _derive(rec, expr)
            row["deployment"] = row.get("deployment") or p.stem
            row["format"], row["source"] = fmt["name"], str(p)
            rows.append(row)
    df = pd.DataFrame(rows, columns=BENCH_COLUMNS)
    for c in ("context", "concurrency"):
        df[c] = pd.array([int(v) if v is not None and not pd.isna(v) else None for v in df[c]], dtype="Int64")
    return df
