"""`--format json` is written a table chunk at a time (tracekit.result.iter_json) and is byte for byte the document
Result.to_json gives — to stdout, to a file and as an html page's sidecar — whatever the chunk size, the indent or
the strings in it (issue 28: the 16-rank imbalance parent peaked at 732 MB building 365,024 rows as dicts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

import tracekit
import tracekit.result as result_mod
from tracekit.result import Result, iter_json

SAMPLE = Path(__file__).resolve().parents[3] / "fixtures" / "synthetic" / "dp16_bs4.trace.json.gz"


def _result(rows: int, text: list[str]) -> Result:
    df = pd.DataFrame(
        {
            "i": np.arange(rows, dtype=np.int64),
            "s": [text[k % len(text)] for k in range(rows)] if text else [None] * rows,
            "f": np.where(np.arange(rows) % 3 == 0, np.nan, np.arange(rows) / 7.0),
        }
    )
    return Result(
        command="kernels",
        inputs=[{"path": "x"}],
        params={"p": [1, None]},
        summary={"d": {"k": "v"}},
        tables={"a": df, "empty": df.iloc[:0], "b": df.iloc[: rows // 2]},
        warnings=["w"],
    )


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(0, 40),
    chunk=st.integers(1, 9),
    indent=st.sampled_from([2, None]),
    text=st.lists(st.text(max_size=6), max_size=4),
)
def test_pieces_join_to_the_document(rows, chunk, indent, text):
    r = _result(rows, text)
    assert "".join(iter_json(r, indent, chunk_rows=chunk)) == r.to_json(indent=indent)


def test_the_cli_streams_the_same_bytes(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(result_mod, "JSON_CHUNK_ROWS", 3)
    api = tracekit.kernel_stats(tracekit.load(SAMPLE, cache=False)).to_json()
    assert sum(len(df) for df in tracekit.kernel_stats(tracekit.load(SAMPLE, cache=False)).tables.values()) > 3
    code, out, err = cli("kernels", SAMPLE, "--no-cache", "-f", "json")
    assert code == 0, err
    assert out == api
    code, _, err = cli("kernels", SAMPLE, "--no-cache", "-f", "json", "-o", tmp_path / "k.json")
    assert code == 0, err
    assert (tmp_path / "k.json").read_text(encoding="utf-8") == api
    (tmp_path / "page").mkdir()
    page = tmp_path / "page" / "k.html"  # --full-paths: the sidecar is the document as given (issue 41)
    code, _, err = cli("kernels", SAMPLE, "--no-cache", "-f", "html", "--full-paths", "-o", page)
    assert code == 0, err
    sidecars = [p for p in (tmp_path / "page").iterdir() if p.suffix == ".json"]
    assert len(sidecars) == 1 and sidecars[0].read_text(encoding="utf-8") == api


def test_a_table_with_rows_but_no_columns_is_an_empty_list():
    r = Result(
        command="kernels",
        inputs=[],
        params={},
        summary={},
        tables={"big": pd.DataFrame(index=range(5)), "a": pd.DataFrame({"x": range(5)})},
    )
    text = "".join(iter_json(r, 2, chunk_rows=2))
    assert text == r.to_json() and '"big": []' in text
