"""A Result as bytes and back, exactly, without pickle: reading an entry can build data, never run code.

The bytes are a JSON document (8 bytes of its length, little-endian, then the document) followed by the raw
buffers of the numeric columns. The document holds the Result's command, inputs, params, summary, warnings and,
for every table, its columns (name, dtype, values), its index and its ``attrs``. A column is stored by its dtype:

* numpy bool, integer, float, complex, datetime64 and timedelta64: its bytes, a buffer (read back with
  ``numpy.frombuffer`` under the dtype the document names — one of those kinds, never an object dtype);
* pandas' masked dtypes (``Int64``, ``Float64``, ``boolean``, …): its values and its mask, two buffers;
* pandas' strings (``str``, ``string``; either storage): a JSON list, ``null`` for a missing value;
* categoricals: the categories (stored as a column is) and the codes;
* ``object``: each value in the tagged form below.

Values outside tables (and in ``object`` columns) keep their Python type: ``None``, bools, ints, floats (NaN and
±infinity included) and strings are JSON's; a list is ``{"l": [...]}``, a tuple ``{"t": [...]}``, a dict
``{"d": [[key, value], ...]}`` (keys of any type), a numpy scalar ``{"n": [dtype, value]}``, a numpy array
``{"a": [dtype, shape, buffer]}``, ``pd.NA`` ``{"NA": 0}``, ``pd.NaT`` ``{"NaT": 0}``. Anything else (a dtype or
a value of a type not listed) raises :class:`Unsupported` when the Result is stored — the command then stores
nothing, and its answer is what it computed — so what is read back is always what was written.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from ..result import Result

_NUMERIC_KINDS = "biufcmM"


class Unsupported(TypeError):
    """A Result holding a value or dtype this format does not store (the Result is then not cached)."""


class _Writer:
    def __init__(self) -> None:
        self.buffers: list[bytes] = []
        self.size = 0

    def buffer(self, data: bytes) -> list[int]:
        self.buffers.append(data)
        self.size += len(data)
        return [self.size - len(data), len(data)]

    # ------------------------------------------------------------------ values
    def value(self, v: Any) -> Any:
        t = type(v)
        if v is None or t in (bool, int, str):
            return v
        if t is float:
            return v if math.isfinite(v) else {"f": repr(v)}  # JSON has no NaN or infinity
        if t is list:
            return {"l": [self.value(x) for x in v]}
        if t is tuple:
            return {"t": [self.value(x) for x in v]}
        if t is dict:
            return {"d": [[self.value(k), self.value(x)] for k, x in v.items()]}
        if v is pd.NA:
            return {"NA": 0}
        if v is pd.NaT:
            return {"NaT": 0}
        if isinstance(v, np.generic) and v.dtype.kind in _NUMERIC_KINDS:
            return {"n": [v.dtype.str, self.value(v.item()) if v.dtype.kind in "biuf" else self.array(np.array(v))]}
        if t is np.ndarray:
            return {"a": self.array(v)}
        raise Unsupported(f"a value of type {t.__name__}")

    def array(self, a: np.ndarray) -> list:
        if a.dtype.kind not in _NUMERIC_KINDS or a.dtype.hasobject:
            raise Unsupported(f"an array of dtype {a.dtype}")
        return [a.dtype.str, list(a.shape), self.buffer(np.ascontiguousarray(a).tobytes())]

    # ------------------------------------------------------------------ columns
    def column(self, values) -> dict[str, Any]:
        dtype = values.dtype
        if isinstance(dtype, np.dtype):
            if dtype.kind == "O":
                return {"object": [self.value(x) for x in np.asarray(values, dtype=object).tolist()]}
            return {"numpy": self.array(np.asarray(values))}
        if isinstance(dtype, pd.CategoricalDtype):
            cat = pd.Categorical(values)
            return {
                "category": self.column(dtype.categories),
                "ordered": bool(dtype.ordered),
                "codes": self.array(np.asarray(cat.codes)),
            }
        if isinstance(dtype, pd.StringDtype):
            na_nan = dtype.na_value is not pd.NA
            return {
                "string": [dtype.storage, na_nan],
                "values": pd.array(values, dtype=dtype).to_numpy(dtype=object, na_value=None).tolist(),
            }
        if type(dtype) in _MASKED:
            arr = pd.array(values, dtype=dtype)
            mask = np.asarray(arr.isna())
            data = arr.to_numpy(dtype=dtype.numpy_dtype, na_value=dtype.numpy_dtype.type(0))
            return {"masked": dtype.name, "data": self.array(data), "mask": self.array(mask)}
        raise Unsupported(f"a column of dtype {dtype}")

    def index(self, index: pd.Index) -> dict[str, Any]:
        if isinstance(index, pd.MultiIndex):
            raise Unsupported("a MultiIndex")
        name = self.value(index.name)
        if type(index) is pd.RangeIndex:
            return {"range": [index.start, index.stop, index.step], "name": name}
        return {"values": self.column(index), "name": name}

    def table(self, df: pd.DataFrame) -> dict[str, Any]:
        if not df.columns.is_unique:
            raise Unsupported("a table with two columns of one name")
        return {
            "columns": self.index(df.columns),
            "index": self.index(df.index),
            "data": [self.column(df[c]) for c in df.columns],
            "attrs": self.value(dict(df.attrs)),
        }


_MASKED = {
    pd.Int8Dtype: pd.arrays.IntegerArray,
    pd.Int16Dtype: pd.arrays.IntegerArray,
    pd.Int32Dtype: pd.arrays.IntegerArray,
    pd.Int64Dtype: pd.arrays.IntegerArray,
    pd.UInt8Dtype: pd.arrays.IntegerArray,
    pd.UInt16Dtype: pd.arrays.IntegerArray,
    pd.UInt32Dtype: pd.arrays.IntegerArray,
    pd.UInt64Dtype: pd.arrays.IntegerArray,
    pd.Float32Dtype: pd.arrays.FloatingArray,
    pd.Float64Dtype: pd.arrays.FloatingArray,
    pd.BooleanDtype: pd.arrays.BooleanArray,
}
_MASKED_BY_NAME = {cls().name: (cls, arr) for cls, arr in _MASKED.items()}


def encode(result: Result) -> bytes:
    """``result`` as bytes (Unsupported when it holds what the format does not store)."""
    if type(result) is not Result:
        raise Unsupported(f"a {type(result).__name__}, not a Result")
    w = _Writer()
    doc = {
        "command": w.value(result.command),
        "inputs": w.value(result.inputs),
        "params": w.value(result.params),
        "summary": w.value(result.summary),
        "warnings": w.value(result.warnings),
        "tables": [[w.value(name), w.table(df)] for name, df in result.tables.items()],
    }
    head = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    return len(head).to_bytes(8, "little") + head + b"".join(w.buffers)


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data = data

    def buffer(self, ref: list) -> memoryview:
        start, length = ref
        if not (0 <= start and 0 <= length and start + length <= len(self.data)):
            raise ValueError("a buffer beyond the entry's end")
        return self.data[start : start + length]

    def value(self, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        ((tag, x),) = v.items()
        if tag == "f":
            return float(x)
        if tag == "l":
            return [self.value(i) for i in x]
        if tag == "t":
            return tuple(self.value(i) for i in x)
        if tag == "d":
            return {self.value(k): self.value(i) for k, i in x}
        if tag == "NA":
            return pd.NA
        if tag == "NaT":
            return pd.NaT
        if tag == "n":
            dtype, item = _numeric_dtype(x[0]), x[1]
            return dtype.type(self.value(item)) if dtype.kind in "biuf" else self.array(item)[()]
        if tag == "a":
            return self.array(x)
        raise ValueError(f"an unknown tag {tag!r}")

    def array(self, spec: list) -> np.ndarray:
        dtype, shape, ref = _numeric_dtype(spec[0]), tuple(int(n) for n in spec[1]), spec[2]
        return np.frombuffer(self.buffer(ref), dtype=dtype).reshape(shape).copy()

    def column(self, spec: dict[str, Any]):
        if "numpy" in spec:
            return self.array(spec["numpy"])
        if "object" in spec:
            out = np.empty(len(spec["object"]), dtype=object)
            out[:] = [self.value(x) for x in spec["object"]]
            return out
        if "category" in spec:
            categories = pd.Index(self.column(spec["category"]))
            dtype = pd.CategoricalDtype(categories, ordered=bool(spec["ordered"]))
            return pd.Categorical.from_codes(self.array(spec["codes"]), dtype=dtype)
        if "string" in spec:
            storage, na_nan = spec["string"]
            dtype = pd.StringDtype(storage, na_value=np.nan if na_nan else pd.NA)
            return pd.array(spec["values"], dtype=dtype)
        if "masked" in spec:
            _, array_type = _MASKED_BY_NAME[spec["masked"]]
            return array_type(self.array(spec["data"]), self.array(spec["mask"]).astype(bool, copy=False))
        raise ValueError("a column of an unknown kind")

    def index(self, spec: dict[str, Any]) -> pd.Index:
        name = self.value(spec["name"])
        if "range" in spec:
            return pd.RangeIndex(*spec["range"], name=name)
        return pd.Index(self.column(spec["values"]), name=name, copy=False)

    def table(self, spec: dict[str, Any]) -> pd.DataFrame:
        columns = self.index(spec["columns"])
        index = self.index(spec["index"])
        data = [self.column(c) for c in spec["data"]]
        if len(data) != len(columns) or any(len(c) != len(index) for c in data):
            raise ValueError("a table whose columns do not agree with its index")
        df = pd.DataFrame(dict(zip(range(len(data)), data)), index=index, copy=False)
        df.columns = columns
        df.attrs = self.value(spec["attrs"])
        return df


def _numeric_dtype(text: str) -> np.dtype:
    dtype = np.dtype(str(text))
    if dtype.kind not in _NUMERIC_KINDS or dtype.hasobject or dtype.fields is not None:
        raise ValueError(f"a buffer of dtype {dtype}")
    return dtype


def decode(data) -> Result:
    """The Result ``encode`` made of ``data`` (bytes or a memoryview); ValueError/KeyError/TypeError when it is not."""
    view = memoryview(data)
    n = int.from_bytes(view[:8], "little")
    if not 8 <= 8 + n <= len(view):
        raise ValueError("the document is longer than the entry")
    doc = json.loads(bytes(view[8 : 8 + n]))
    r = _Reader(view[8 + n :])
    return Result(
        command=r.value(doc["command"]),
        inputs=r.value(doc["inputs"]),
        params=r.value(doc["params"]),
        summary=r.value(doc["summary"]),
        tables={r.value(name): r.table(spec) for name, spec in doc["tables"]},
        warnings=r.value(doc["warnings"]),
    )
