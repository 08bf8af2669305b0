"""A streamed table's rows are written column by column (tracekit.result._rows_text, issue 28: the 16-rank imbalance
document, 265 MB, took 7 s as row dicts): byte for byte what the encoders write from row dicts, for every kind of
value a table holds — and a value only the general path writes (an integer beyond 64 bits, a lone surrogate, a
dict) sends its chunk down that path, so the document never changes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracekit.result as result_mod
from tracekit.result import Result, encode_json, iter_json, to_json_obj

FLOATS = [0.1, 1e-7, 1e16, 1.5e300, -0.0, 5e-324, 1.7976931348623157e308, 1 / 3, 2.5, 100.0, -12345.678, 1e22]
TEXT = [
    "plain",
    'quote " and \\ back',
    "new\nline\ttab",
    "ctl \x00\x01\x1f\x7f",
    "µs → ✓ 🚀",
    "\u2028\u2029",
    "",
    "comma, inside",
    "null",
]


def _plain(n: int = 23) -> pd.DataFrame:
    i = np.arange(n)
    return pd.DataFrame(
        {
            "int": (i * 7919 - 50_000).astype(np.int64),
            "u64": np.full(n, 2**63 + 5, dtype=np.uint64),
            "i32": i.astype(np.int32),
            "float": np.array([FLOATS[k % len(FLOATS)] for k in i]),
            "f_nan": np.where(i % 3 == 0, np.nan, np.where(i % 3 == 1, np.inf, i / 7.0)),
            "f32": (i / 3.0).astype(np.float32),
            "bool": i % 2 == 0,
            "Int64": pd.array([None if k % 4 == 0 else k for k in i], dtype="Int64"),
            "boolean": pd.array([None if k % 5 == 0 else bool(k % 2) for k in i], dtype="boolean"),
            "Float64": pd.array([None if k % 6 == 0 else k / 4 for k in i], dtype="Float64"),
            "str": [TEXT[k % len(TEXT)] for k in i],
            "str_none": [None if k % 3 else TEXT[k % len(TEXT)] for k in i],
            "str_dtype": pd.array([TEXT[k % len(TEXT)] for k in i], dtype="string"),
            "cat": pd.Categorical([("a", "b", None)[k % 3] for k in i]),
            "mixed": [(1, 2.5, None, True, np.int64(3), np.float64(0.25))[k % 6] for k in i],
        }
    )


def _doc(tables: dict, indent, monkeypatch) -> tuple[str, str]:
    """The document streamed 4 rows at a time, and as the row-dict path alone writes it (each chunk's rows as dicts,
    as iter_json wrote every chunk before the rows were built column-wise)."""
    r = Result(command="kernels", inputs=[], params={}, summary={}, tables=tables)
    streamed = "".join(iter_json(r, indent, chunk_rows=4))
    with monkeypatch.context() as m:
        m.setattr(result_mod, "_row_keys", lambda df: None)
        return streamed, "".join(iter_json(r, indent, chunk_rows=4))


@pytest.mark.parametrize("indent", [2, None])
def test_every_kind_of_value_is_written_as_the_row_dicts_are(indent, monkeypatch):
    def no_row_dicts(df, **kw):  # a plain table never takes the row-dict path
        raise AssertionError("a plain table was written as row dicts")

    monkeypatch.setattr(result_mod, "table_rows", no_row_dicts)
    df = _plain()
    streamed = "".join(iter_json(Result("kernels", [], {}, {}, {"t": df, "u": df.iloc[:5]}), indent, chunk_rows=4))
    monkeypatch.undo()
    assert streamed == encode_json(to_json_obj(Result("kernels", [], {}, {}, {"t": df, "u": df.iloc[:5]})), indent)


@pytest.mark.parametrize("indent", [2, None])
@pytest.mark.parametrize("odd", ["huge_int", "surrogate", "dict", "list", "spread", "int_names", "surrogate_name"])
def test_a_value_only_the_general_path_writes_keeps_the_document(indent, odd, monkeypatch):
    df = _plain(9)
    if odd == "huge_int":
        df["odd"] = [2**70 if k == 5 else k for k in range(9)]
    elif odd == "surrogate":
        df["odd"] = pd.Series(["bad \udc80 name" if k == 6 else "ok" for k in range(9)], dtype=object)
    elif odd == "dict":
        df["odd"] = [{"k": k, "v": [1, 2.5]} for k in range(9)]
    elif odd == "list":
        df["odd"] = [[k, "x"] for k in range(9)]
    elif odd == "spread":
        df["extra"] = [{"a": k} for k in range(9)]
        df.attrs["spread"] = "extra"
    elif odd == "int_names":
        df = df.rename(columns={"int": 7})
    else:
        df.columns = pd.Index([*df.columns[:-1], "bad \udc80 col"], dtype=object)
    streamed, by_rows = _doc({"t": df}, indent, monkeypatch)
    assert streamed == by_rows


def test_the_layout_is_the_documents(monkeypatch):
    df = pd.DataFrame({"a": [1, 2], "b": ["x", None], "c": [0.5, np.nan]})
    streamed, _ = _doc({"t": df}, 2, monkeypatch)
    assert '    "t": [\n      {\n        "a": 1,\n        "b": "x",\n        "c": 0.5\n      },\n      {\n' in streamed
    assert '        "c": null\n      }\n    ]' in streamed
    compact, _ = _doc({"t": df}, None, monkeypatch)
    assert '"t":[{"a":1,"b":"x","c":0.5},{"a":2,"b":null,"c":null}]' in compact
