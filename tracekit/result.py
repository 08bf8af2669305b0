"""The one result shape every analysis returns, and that every renderer accepts.

The ``--format json`` envelope (docs/json-contract.md) is the Result's own serialisation, so it lives here:
:func:`to_json_obj`, and :meth:`Result.to_json` / :meth:`Result.to_dict` for notebooks and scripts.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ._version import __version__

JSON_SCHEMA_MAJOR = 1
# commands whose contract changed meaning (docs/json-contract.md says how): steps/2 — `source` is
# cpu_launch_window where it was cpu_annotation, empty markers are not steps, no marker is one whole-trace step
SCHEMA_MAJOR = {"steps": 2}


@dataclass(frozen=True)
class Result:
    """An analysis result: scalars in ``summary``, tables in ``tables`` (first = primary).

    ``schema`` names the JSON contract (``tracekit.<command>/<major>``); ``params`` echoes what
    was used; ``warnings`` says what was excluded or doubtful — nothing is dropped silently.

    In a notebook a Result shows itself as HTML tables (``_repr_html_``); :meth:`to_json` is exactly what
    ``--format json`` prints, :meth:`to_dict` the same document as Python objects, and :meth:`frames` every
    table (and the summary) as pandas DataFrames.
    """

    command: str
    inputs: list[dict[str, Any]]
    params: dict[str, Any]
    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame]
    warnings: list[str] = field(default_factory=list)

    @property
    def schema(self) -> str:
        return f"tracekit.{self.command}/{SCHEMA_MAJOR.get(self.command, JSON_SCHEMA_MAJOR)}"

    @property
    def primary_table(self) -> str | None:
        return next(iter(self.tables), None)

    def to_dict(self) -> dict[str, Any]:
        """The ``--format json`` document as plain Python objects (ints stay ints, NaN is None)."""
        return to_json_obj(self)

    def to_json(self, *, indent: int | None = 2) -> str:
        """The ``--format json`` document as text — with the default ``indent`` byte for byte what the CLI
        prints (ending in a newline). ``json.loads(r.to_json()) == r.to_dict()``."""
        return encode_json(to_json_obj(self), indent)

    def frames(self) -> dict[str, pd.DataFrame]:
        """``{"summary": one-row frame, **tables}`` — copies, so editing them leaves the Result as it was.
        Summary values that are lists or dicts stay Python objects in their cell."""
        summary = pd.DataFrame([{k: _scalar(v) for k, v in self.summary.items()}]) if self.summary else pd.DataFrame()
        return {"summary": summary, **{name: df.copy() for name, df in self.tables.items()}}

    def _repr_html_(self) -> str:
        # the notebook display is a renderer (tracekit/render/notebook.py, a higher layer): imported when a
        # notebook asks for it, never when tracekit is imported
        from importlib import import_module

        return import_module("tracekit.render.notebook").to_html(self)


def trace_input(trace) -> dict[str, Any]:
    """The ``inputs`` entry describing one trace."""
    return {"path": trace.path, "rank": trace.meta.get("rank"), "from_cache": trace.report.from_cache}


# --------------------------------------------------------------------------- the JSON envelope


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


def encode_json(obj: Any, indent: int | None = 2) -> str:
    """JSON text of plain objects, ending in a newline: orjson (compact, or its two-space indent), else msgspec
    (any other indent), else the standard library for what neither knows (integers beyond 64 bits, say).

    Measured on a 10^6-row table (benchmarks/deps.py): orjson indented 0.35 s, msgspec encode + format
    0.78 s, ``json.dumps(indent=1)`` 11.4 s. All three write the same document; floats may print as 1e-7."""
    try:
        import orjson

        option = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
        if indent in (None, 2):
            return orjson.dumps(obj, option=option | (orjson.OPT_INDENT_2 if indent else 0)).decode("utf-8") + "\n"
    except ImportError:
        pass
    except TypeError:  # orjson.JSONEncodeError: a value orjson does not take
        pass
    import msgspec

    try:
        raw = msgspec.json.encode(obj)
    except (TypeError, OverflowError):
        return json.dumps(obj, indent=indent, ensure_ascii=False) + "\n"
    if indent is not None:
        raw = msgspec.json.format(raw, indent=indent)
    return raw.decode("utf-8") + "\n"


def to_json_obj(result: Result) -> dict[str, Any]:
    """The ``--format json`` envelope of ``result`` (docs/json-contract.md)."""
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
