"""The one result shape every analysis returns, and that every renderer accepts.

The ``--format json`` envelope (docs/json-contract.md) is the Result's own serialisation, so it lives here:
:func:`to_json_obj`, and :meth:`Result.to_json` / :meth:`Result.to_dict` for notebooks and scripts.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ._version import __version__

JSON_SCHEMA_MAJOR = 1
# commands whose contract changed meaning (docs/json-contract.md says how): steps/2 — `source` is
# cpu_launch_window where it was cpu_annotation, empty markers are not steps, no marker is one whole-trace step
# imbalance/2 — every rank of a run on one clock, collectives matched across ranks (it was per-layer durations)
SCHEMA_MAJOR = {"steps": 2, "imbalance": 2}


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
        return "".join(iter_json(self, indent))

    def frames(self) -> dict[str, pd.DataFrame]:
        """``{"summary": one-row frame, **tables}`` — copies, so editing them leaves the Result as it was.
        Summary values that are lists or dicts stay Python objects in their cell."""
        summary = (
            pd.DataFrame([{k: plain_value(v) for k, v in self.summary.items()}]) if self.summary else pd.DataFrame()
        )
        return {"summary": summary, **{name: df.copy() for name, df in self.tables.items()}}

    def save(
        self,
        path: str | os.PathLike,
        format: str | None = None,
        *,
        table: str | None = None,
        all_rows: bool = False,
        wide: bool = False,
        full_paths: bool = False,
    ) -> list:
        """Write the result to ``path`` byte for byte as ``tracekit COMMAND -f FORMAT -o PATH`` writes it, and return
        the paths written. ``format`` (json, csv, md, table or html) defaults to the one the suffix names: ``.json``,
        ``.csv``, ``.md``, ``.html`` (with its json sidecar, ``FILE.json``), ``.txt`` (the table format); csv into a
        name without a suffix (or an existing folder) is a folder of one file per table. ``table``, ``all_rows`` and
        ``wide`` are ``--table``, ``--all`` and ``--wide``. Written whole or not at all, never over an input. An html
        page and its sidecar show paths relative to the page's folder (or the file name alone) unless ``full_paths``
        (``--full-paths``)."""
        # the renderers own their formats' file writing (tracekit/render/formats.py, a higher layer): imported when
        # a result is saved, never when tracekit is imported
        from .render.formats import save

        return save(self, path, format, table=table, all_rows=all_rows, wide=wide, full_paths=full_paths).paths

    def _repr_html_(self) -> str:
        # the notebook display is a renderer (tracekit/render/html/page.py, a higher layer): imported when a
        # notebook asks for it, never when tracekit is imported
        from importlib import import_module

        return import_module("tracekit.render.html.page").notebook_html(self)


# --------------------------------------------------------------------------- any file name, shown


_SURROGATE = re.compile("[\ud800-\udfff]")


def merge_warnings(*groups) -> list[str]:
    """The warnings of a result's parts, each once, in order."""
    out: list[str] = []
    for g in groups:
        for w in g:
            if w not in out:
                out.append(w)
    return out


def shown_text(text: Any) -> str:
    """``text`` as a string every output can hold (valid UTF-8), the one rule for names that are not valid Unicode:
    a byte of a file name that is not UTF-8 (which Python gives as U+DC80–U+DCFF, ``os.fsdecode``'s
    surrogateescape) shows as ``\\xNN``, the way Python's ``backslashreplace`` writes it; any other
    lone surrogate as ``\\uNNNN``. Every other character is kept (terminal-safe escaping is ``safe_text``'s job).
    Bytes are decoded the way the OS decodes file names first."""
    s = os.fsdecode(text) if isinstance(text, (bytes, os.PathLike)) else str(text)
    if not _SURROGATE.search(s):
        return s
    return _SURROGATE.sub(lambda m: escape_surrogate(m.group()), s)


def shown_ranks(ranks, most: int = 8) -> str:
    """Rank ids as every output writes them, consecutive ones as one span: "3–63", "2, 5–7"; beyond ``most`` spans,
    "and N more" (a run's missing ranks: imbalance's warning, the report's ranks line)."""
    spans: list[list[int]] = []
    for r in sorted(int(x) for x in ranks):
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    parts = [str(a) if a == b else f"{a}–{b}" for a, b in spans]
    rest = sum(b - a + 1 for a, b in spans[most:])
    return ", ".join(parts[:most]) + (f" and {rest} more" if rest else "")


def escape_surrogate(ch: str) -> str:
    """One lone surrogate as visible text: ``\\xNN`` for an undecodable byte of an OS name, else ``\\uNNNN``."""
    o = ord(ch)
    return f"\\x{o - 0xDC00:02x}" if 0xDC80 <= o <= 0xDCFF else f"\\u{o:04x}"


def utf8_text(text: str) -> str:
    """A renderer's whole output, made sure to be valid UTF-8: a surrogate no renderer escaped is shown as
    ``shown_text`` shows it (a cheap check; the text is returned as it is when it encodes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return shown_text(text)
    return text


def shown_path(path: Any) -> str:
    """A path (str, bytes or ``os.PathLike``) as text for people and for JSON (``shown_text``); the path itself is
    unchanged and still opens."""
    return shown_text(path)


def shown_obj(obj: Any) -> Any:
    """``obj`` (plain JSON objects) with every string, keys too, made valid UTF-8 (``shown_text``)."""
    if isinstance(obj, str):
        return shown_text(obj)
    if isinstance(obj, dict):
        return {shown_obj(k) if isinstance(k, str) else k: shown_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [shown_obj(v) for v in obj]
    return obj


def trace_input(trace) -> dict[str, Any]:
    """The ``inputs`` entry describing one trace."""
    return {"path": trace.path, "rank": trace.meta.get("rank"), "from_cache": trace.report.from_cache}


# --------------------------------------------------------------------------- the JSON envelope


def plain_value(v: Any) -> Any:
    """``v`` as a plain Python value for JSON and for people: numpy ints, floats and bools as Python's, NaN, infinity
    and pandas' missing values as None, dicts (keys as text), lists, tuples and arrays value by value."""
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
        return {str(k): plain_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [plain_value(x) for x in v]
    return v


def column_values(s: pd.Series) -> list[Any]:
    """One column as plain Python objects (``plain_value`` of each value). Plain numpy ints, bools and floats, and
    strings, take a vectorised path: a 10^5-step report's sidecar is 6·10^6 values."""
    dt = s.dtype
    if isinstance(dt, np.dtype) and dt.kind in "iub":
        return s.to_numpy().tolist()  # Python ints and bools
    if isinstance(dt, np.dtype) and dt.kind == "f":
        a = s.to_numpy()
        vals = a.tolist()
        for i in np.flatnonzero(~np.isfinite(a)).tolist():  # NaN and ±inf are null in JSON
            vals[i] = None
        return vals
    if isinstance(dt, pd.StringDtype):
        vals = s.tolist()
        for i in np.flatnonzero(s.isna().to_numpy()).tolist():
            vals[i] = None
        return vals
    if isinstance(dt, pd.CategoricalDtype):
        s = s.astype(object)
    return [plain_value(x) for x in s.tolist()]


def table_rows(df: pd.DataFrame, *, spread: bool = True) -> list[dict[str, Any]]:
    """Rows as plain Python objects: ints stay ints, NaN and <NA> become None.

    A table whose ``attrs["spread"]`` names a column of dicts has that dict merged into each row (records
    whose fields differ from row to row, like ``tracekit log``'s)."""
    cols = {c: column_values(df[c]) for c in df.columns}
    rows = [dict(zip(cols, vals)) for vals in zip(*cols.values())] if cols else []
    col = df.attrs.get("spread")
    if spread and col in cols:
        rows = [{**{k: v for k, v in r.items() if k != col}, **(r[col] or {})} for r in rows]
    return rows


def encode_json(obj: Any, indent: int | None = 2) -> str:
    """JSON text of plain objects, ending in a newline: orjson (compact, or its two-space indent), else msgspec
    (any other indent), else the standard library for what neither knows (integers beyond 64 bits, say).

    Measured on a 10^6-row table (benchmarks/deps.py): orjson indented 0.35 s, msgspec encode + format
    0.78 s, ``json.dumps(indent=1)`` 11.4 s. All three write the same document; floats may print as 1e-7.

    A string no encoder can write as UTF-8 (a file name holding bytes that are not UTF-8, given as lone
    surrogates) is written as ``shown_text`` shows it: the document stays valid UTF-8 JSON."""
    try:
        return _encode_json(obj, indent)
    except UnicodeEncodeError:
        return _encode_json(shown_obj(obj), indent)


def _encode_json(obj: Any, indent: int | None) -> str:
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
        text = json.dumps(obj, indent=indent, ensure_ascii=False) + "\n"
        text.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError here too: the caller shows it
        return text
    if indent is not None:
        raw = msgspec.json.format(raw, indent=indent)
    return raw.decode("utf-8") + "\n"


JSON_CHUNK_ROWS = 20_000  # rows of a table turned into Python objects at a time when the document is streamed


def iter_json(result: Result, indent: int | None = 2, *, chunk_rows: int | None = None):
    """The ``--format json`` document in pieces, joined :meth:`Result.to_json`'s text (made by it): the envelope,
    then each table ``chunk_rows`` rows at a time, so that a table of 10^6 rows never stands as 10^6 Python dicts
    (a 16-rank imbalance's 365,024 collectives made its parent peak at 732 MB while writing an 88 MB document)."""
    chunk_rows = chunk_rows or JSON_CHUNK_ROWS
    if indent not in (None, 2) or not any(len(df) > chunk_rows for df in result.tables.values()):
        yield encode_json(to_json_obj(result), indent)  # small tables: the document in one piece
        return
    token = os.urandom(8).hex()  # no name in a trace can hold it by chance or on purpose
    marks = {name: f"\x00tracekit-table-{token}-{i}\x00" for i, name in enumerate(result.tables)}
    head = to_json_obj(result, tables=False)
    head["tables"] = marks
    text = encode_json(head, indent)
    pad = "" if indent is None else " " * (2 * indent)  # a row of "tables": {name: [ ... ]} is two levels in
    for name, df in result.tables.items():
        mark = encode_json(marks[name], None).rstrip("\n")
        before, _, text = text.partition(mark)
        yield before
        yield from _table_json(df, indent, pad, chunk_rows)
    yield text


def _table_json(df: pd.DataFrame, indent: int | None, pad: str, chunk_rows: int):
    """One table as its JSON list, in the layout the whole document gives it."""
    if not len(df) or not len(df.columns):  # no rows (table_rows gives none without columns either)
        yield "[]"
        return
    yield "[" if indent is None else "[\n"
    keys = _row_keys(df)
    for start in range(0, len(df), chunk_rows):
        chunk = df.iloc[start : start + chunk_rows]
        inner = _rows_text(chunk, keys, indent, pad) if keys is not None else None
        if inner is None:  # a value only the encoders' general path writes: this chunk as row dicts
            part = encode_json(table_rows(chunk), indent).rstrip("\n")
            inner = part[1:-1].strip("\n")  # the rows without the list's brackets
            if indent is not None:
                inner = pad + inner.replace("\n", "\n" + pad)  # every line padded (a JSON string has no raw newline)
        if start:
            yield "," if indent is None else ",\n"
        yield inner  # not joined to its separator: a chunk is megabytes, and that would copy it
    yield "]" if indent is None else "\n" + pad + "]"


def _row_keys(df: pd.DataFrame) -> list[str] | None:
    """The columns as JSON keys, when every row is a flat object of them (else None: the row-dict path)."""
    cols = list(df.columns)
    if df.attrs.get("spread") in cols or len(set(cols)) != len(cols) or not all(isinstance(c, str) for c in cols):
        return None
    try:
        import orjson

        return [orjson.dumps(c).decode("utf-8") for c in cols]
    except (ImportError, TypeError):  # no orjson, or a name orjson does not write (a lone surrogate)
        return None


_PLAIN_NUMBERS = {int, float, bool, type(None)}
_PLAIN_TEXT = {str, type(None)}


def _value_texts(values: list, numbers: bool = False) -> list[str] | None:
    """Each value (``column_values``'s objects) as orjson writes it inside a row — numbers by one encode of the
    whole column split at its commas, strings once per distinct string — or None where a value is no number,
    string or null, or orjson does not write it (an integer beyond 64 bits, a lone surrogate)."""
    import orjson

    kinds = _PLAIN_NUMBERS if numbers else set(map(type, values))
    try:
        if kinds <= _PLAIN_NUMBERS:
            return orjson.dumps(values).decode("utf-8")[1:-1].split(",") if values else []
        if kinds <= _PLAIN_TEXT:
            text = {v: orjson.dumps(v).decode("utf-8") for v in dict.fromkeys(values)}
            return list(map(text.__getitem__, values))
    except TypeError:  # orjson.JSONEncodeError
        return None
    return None


def _column_texts(col: pd.Series) -> list[str] | None:
    """Each value of one column as orjson writes it inside a row (or None: see :func:`_value_texts`). numpy
    integers and bools are encoded from the array itself (no Python int per value), text columns once per distinct
    string through their codes; the rest through ``column_values``."""
    import orjson

    dt = col.dtype
    if isinstance(dt, np.dtype) and dt.kind in "iub":
        a = np.ascontiguousarray(col.to_numpy())
        return orjson.dumps(a, option=orjson.OPT_SERIALIZE_NUMPY).decode("utf-8")[1:-1].split(",") if a.size else []
    if isinstance(col.array, (pd.arrays.IntegerArray, pd.arrays.BooleanArray)):  # Int64, boolean: <NA> is null
        missing = col.isna().to_numpy()
        a = np.ascontiguousarray(col.to_numpy(dtype=dt.numpy_dtype, na_value=0))
        texts = np.array(
            orjson.dumps(a, option=orjson.OPT_SERIALIZE_NUMPY).decode("utf-8")[1:-1].split(",") if a.size else [],
            dtype=object,
        )
        texts[missing] = "null"
        return texts.tolist()
    if isinstance(dt, pd.StringDtype):
        codes, uniques = pd.factorize(col)  # a missing value: code −1, written null
        try:
            look = np.array([orjson.dumps(u).decode("utf-8") for u in uniques.tolist()] + ["null"], dtype=object)
        except TypeError:  # orjson.JSONEncodeError (a lone surrogate): the general path
            return None
        return look[codes].tolist()
    return _value_texts(column_values(col), isinstance(dt, np.dtype) and dt.kind == "f")


def _rows_text(chunk: pd.DataFrame, keys: list[str], indent: int | None, pad: str) -> str | None:
    """The rows of ``chunk`` as the text the row-dict path gives between the list's brackets (byte for byte: the
    same values, written by the same encoder, in its layout), built column by column: no dict per row. None where a
    column needs the general path."""
    cols = []
    for c in range(len(keys)):
        texts = _column_texts(chunk.iloc[:, c])
        if texts is None:
            return None
        cols.append(texts)
    n, k = len(chunk), len(keys)
    if indent is None:
        heads = ["{" + keys[0] + ":"] + ["," + key + ":" for key in keys[1:]]
        close, sep = "}", ","
    else:
        row_pad, key_pad = pad + " " * indent, pad + " " * (2 * indent)
        heads = [row_pad + "{\n" + key_pad + keys[0] + ": "] + [",\n" + key_pad + key + ": " for key in keys[1:]]
        close, sep = "\n" + row_pad + "}", ",\n"
    parts: list = [None] * (n * (2 * k + 1))
    step = 2 * k + 1
    for j in range(k):  # interleaved: each row's key, value, key, value, …, its close
        parts[2 * j :: step] = [heads[j]] * n
        parts[2 * j + 1 :: step] = cols[j]
    parts[2 * k :: step] = [close + sep] * n
    parts[-1] = close
    return "".join(parts)


def to_json_obj(result: Result, *, tables: bool = True) -> dict[str, Any]:
    """The ``--format json`` envelope of ``result`` (docs/json-contract.md)."""
    return {
        "tracekit": __version__,
        "schema": result.schema,
        "command": result.command,
        "inputs": plain_value(result.inputs),
        "params": plain_value(result.params),
        "warnings": list(result.warnings),
        "summary": plain_value(result.summary),
        "tables": {name: table_rows(df) for name, df in result.tables.items()} if tables else {},
    }
