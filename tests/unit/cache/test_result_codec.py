"""A Result stored as JSON and buffers (issue 41) reads back exactly — every table's dtypes, its index, its attrs, the
Python types of the summary's and params' values — and a Result holding what the format does not store is not
stored at all (the command's answer is what it computed); reading never runs code."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.cache import result_codec, result_entries
from tracekit.result import Result

SYN = Path(__file__).resolve().parents[3] / "fixtures" / "synthetic"


def _same(a, b, where="") -> None:
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, (float, np.floating)) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a is b or a == b, (where, a, b)


def _assert_exact(r: Result, back: Result) -> None:
    for f in ("command", "inputs", "params", "summary", "warnings"):
        _same(getattr(r, f), getattr(back, f), f)
    assert list(r.tables) == list(back.tables)
    for name, df in r.tables.items():
        got = back.tables[name]
        pd.testing.assert_frame_equal(df, got, check_exact=True, check_column_type=True, check_index_type=True)
        assert list(df.dtypes) == list(got.dtypes), name
        _same(df.attrs, got.attrs, f"{name}.attrs")
    try:
        doc = r.to_json()
    except TypeError:  # a datetime64 column: the JSON envelope takes none (the format stores it all the same)
        return
    assert back.to_json() == doc


def test_every_kind_of_column_and_value_reads_back_exactly():
    df = pd.DataFrame(
        {
            "i64": np.array([1, -(2**62), 3], dtype="int64"),
            "u8": np.array([0, 255, 7], dtype="uint8"),
            "f": [0.1, float("nan"), -0.0],
            "inf": [float("inf"), -float("inf"), 1e-300],
            "b": [True, False, True],
            "s": pd.array(["a", None, "caf\u00e9"], dtype="str"),
            "string": pd.array(["x", pd.NA, ""], dtype="string"),
            "I": pd.array([1, None, 3], dtype="Int64"),
            "F": pd.array([0.5, None, 2.0], dtype="Float64"),
            "B": pd.array([True, None, False], dtype="boolean"),
            "cat": pd.Categorical(["b", "a", None], categories=["b", "a"]),
            "icat": pd.Categorical([3, 1, 3], ordered=True),
            "obj": np.array([{"k": [1, (2, 3)]}, "\udcff", np.float64(1.5)], dtype=object),
            "ts": np.array([1, 2, 3], dtype="datetime64[ns]"),
            "td": np.array([1, 2, 3], dtype="timedelta64[us]"),
        },
        index=pd.Index([10, 20, 30], name="row"),
    )
    df.attrs = {"picture": True, "note": ("a", 1)}
    empty = pd.DataFrame()
    summary = {
        "n": np.int64(3),
        "x": np.float32(0.25),
        "ok": np.bool_(True),
        "big": 2**70,
        "nan": float("nan"),
        "t": (1, "a"),
        "d": {1: "int key", "s": [None, pd.NA]},
        "a": np.arange(6, dtype="int32").reshape(2, 3),
    }
    r = Result(
        "report", [{"path": "t\udcff.json", "rank": None}], {"p": Path("x").name}, summary, {"t": df, "e": empty}
    )
    _assert_exact(r, result_codec.decode(result_codec.encode(r)))


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["dp16_bs4.trace.json.gz", "dp2dcp8_bs64.trace.json.gz", "dsv3_bs32.trace.json.gz"])
def test_report_and_findings_of_the_fixtures_read_back_exactly(fixture):
    trace = tracekit.load(SYN / fixture, cache=False)
    for r in (tracekit.report(trace), tracekit.findings(trace)):
        _assert_exact(r, result_codec.decode(result_codec.encode(r)))


@pytest.mark.parametrize(
    "table",
    [
        pd.DataFrame({"when": pd.to_datetime([0], utc=True)}),  # a timezone
        pd.DataFrame({"v": np.array([{1, 2}], dtype=object)}),  # a set
        pd.DataFrame([[1, 2]], columns=["a", "a"]),  # two columns of one name
    ],
)
def test_what_the_format_does_not_hold_is_not_stored(tmp_path, table):
    r = Result("report", [], {}, {}, {"t": table})
    with pytest.raises(result_codec.Unsupported):
        result_codec.encode(r)
    src = tmp_path / "t.json"
    src.write_text("{}")
    assert result_entries.put(src, "report", {"k": 1}, r, tmp_path) is None
    assert not result_entries.entry_path(src, "report", tmp_path).exists()


def test_a_document_naming_an_object_dtype_buffer_is_refused():
    """The dtype of a buffer comes from the entry: only numeric kinds are taken (an object dtype would read
    pointers)."""
    r = Result("report", [], {}, {}, {"t": pd.DataFrame({"a": np.array([1, 2], dtype="int64")})})
    data = result_codec.encode(r)
    bad = data.replace(b'"<i8"', b'"|O" ')
    n = int.from_bytes(bad[:8], "little")
    bad = (n - 0).to_bytes(8, "little") + bad[8:]
    with pytest.raises((ValueError, TypeError, KeyError)):
        result_codec.decode(bad)
