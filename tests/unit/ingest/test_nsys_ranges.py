"""The nsys reader reads a large table in rowid ranges, in parallel threads (``SPLIT_ROWS``, ``READERS`` in
tracekit/ingest/nsys_database.py): the trace must be the one a single query per table gives, byte for byte (events,
categories in their order, meta, report), whatever the ranges (uneven, rowid gaps, a column NULL in a whole range);
and a text in an integer column is refused in whichever range it is. NVTX texts are coded without a string per row
(``_distinct_texts``): checked against Arrow's dictionary encoding of the rows' texts made one by one."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from fixtures.synth import build
from fixtures.synthlib.nsys import write_nsys
from tests.conftest import CORPUS
from tracekit.errors import InputError
from tracekit.ingest import load, nsys_database
from tracekit.ingest.nsys_sqlite import _distinct_texts

GTID = (0x1000000 << 24) | (1851 << 24) | 7


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    """The generator's nsys export with NVTX rows added: registered and written texts (some the same text), no text,
    marks, domain records, ranges never closed; the first 40 NVTX rows without a written text; rowid gaps."""
    p = tmp_path_factory.mktemp("nsys_ranges") / "x.sqlite"
    trace, _ = build("dp16", 4, steps=1, seed=0)
    write_nsys(p, trace)
    con = sqlite3.connect(p)
    cols = [r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")]
    ids = [r[0] for r in con.execute("SELECT id FROM StringIds ORDER BY id LIMIT 5")]
    texts = dict(con.execute("SELECT id, value FROM StringIds"))
    rows = []
    for i in range(400):
        kind = 34 if i % 17 == 0 else (75 if i % 29 == 0 else 59)
        text = None if i < 40 or i % 5 == 0 else (texts[ids[i % 5]] if i % 7 == 0 else f"range {i % 23}")
        text_id = ids[i % 5] if i < 40 or i % 11 == 0 else None
        end = None if kind != 59 or i % 31 == 0 else 1_000 * i + 500
        row = {"start": 1_000 * i, "end": end, "eventType": kind, "text": text, "globalTid": GTID, "textId": text_id}
        rows.append(tuple(row.get(c) for c in cols))
    written = con.execute("SELECT * FROM NVTX_EVENTS ORDER BY rowid").fetchall()  # the generator's, after ours
    con.execute("DELETE FROM NVTX_EVENTS")
    con.executemany(f"INSERT INTO NVTX_EVENTS VALUES ({', '.join('?' * len(cols))})", rows + written)
    con.execute("DELETE FROM NVTX_EVENTS WHERE rowid % 9 = 4")
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 13 = 6")
    con.commit()
    con.close()
    return p


def read(path: Path, monkeypatch, split_rows: int, readers: int):
    monkeypatch.setattr(nsys_database, "SPLIT_ROWS", split_rows)
    monkeypatch.setattr(nsys_database, "READERS", readers)
    t = load(path, cache=False)
    report = dataclasses.asdict(t.report)
    report.pop("from_cache", None)
    return t.events, t.meta, report


def assert_same(a, b) -> None:
    pd.testing.assert_frame_equal(a[0], b[0], check_exact=True, check_categorical=True)
    for c in a[0].columns:
        if isinstance(a[0][c].dtype, pd.CategoricalDtype):
            assert list(a[0][c].cat.categories) == list(b[0][c].cat.categories), c
    assert a[1] == b[1] and a[2] == b[2]


@pytest.mark.parametrize("split_rows,readers", [(50, 2), (7, 3), (1, 16)])
def test_ranges_give_the_trace_of_one_query(export, monkeypatch, split_rows, readers):
    whole = read(export, monkeypatch, 10**12, 2)
    assert whole[2]["records_read"] > 2_500 and (whole[0]["kind"] == "cpu_annotation").sum() > 200
    assert_same(read(export, monkeypatch, split_rows, readers), whole)


def test_a_text_in_an_integer_column_in_a_late_range_is_refused(export, monkeypatch, tmp_path):
    p = tmp_path / "bad.sqlite"
    p.write_bytes(export.read_bytes())
    con = sqlite3.connect(p)
    last = con.execute("SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid = ?", (last,))
    con.commit()
    con.close()
    before = sorted(os.listdir(tmp_path))
    data = p.read_bytes()
    with pytest.raises(InputError) as exc:
        read(p, monkeypatch, 50, 2)
    assert "not an integer" in str(exc.value) and str(p) in str(exc.value) and "\n" not in str(exc.value)
    assert sorted(os.listdir(tmp_path)) == before and p.read_bytes() == data


class _Strings:
    """A stand-in for the Database's StringIds (ids ascending, texts)."""

    def __init__(self, ids: list[int], texts: list[str | None]):
        self.ids, self.texts = np.array(ids, dtype=np.int64), pa.array(texts, type=pa.string())

    def string_ids(self):
        return self.ids, self.texts


def test_distinct_texts_equal_the_dictionary_of_the_rows_texts():
    rng = np.random.default_rng(3)
    db = _Strings([2, 5, 9, 11], ["a", "shared", None, "d"])
    n = 2_000
    ids = rng.choice([-1, 2, 5, 9, 11, 4], n)
    written = [None if rng.random() < 0.3 else rng.choice(["shared", "x", "y", "a"]) for _ in range(n)]
    named = rng.random(n) < 0.8
    by_id = dict(zip(db.ids.tolist(), db.texts.to_pylist()))
    rows = [  # as the reader defined it: the registered text where there is one, else the written; none if unnamed
        (by_id.get(int(i)) if by_id.get(int(i)) is not None else w) if ok else None
        for i, w, ok in zip(ids, written, named)
    ]
    want = pc.dictionary_encode(pa.array(rows, type=pa.string()))
    chunks = pa.chunked_array([pa.array(written[:700], pa.string()), pa.array(written[700:], pa.string())])
    distinct, idx = _distinct_texts(db, ids, chunks, named)
    assert distinct.to_pylist() == want.dictionary.to_pylist()
    assert idx.tolist() == want.indices.fill_null(-1).to_pylist()
    none, idx_none = _distinct_texts(db, ids, None, named)  # an export without the text column
    rows = [by_id.get(int(i)) if ok else None for i, ok in zip(ids, named)]
    want = pc.dictionary_encode(pa.array(rows, type=pa.string()))
    assert none.to_pylist() == want.dictionary.to_pylist()
    assert idx_none.tolist() == want.indices.fill_null(-1).to_pylist()


EXPORTS = CORPUS / "nsys-ai" / "tests" / "fixtures"


@pytest.mark.slow  # two real exports read twice (~2 s)
@pytest.mark.parametrize("name", ["mfu_2gpu_before.sqlite", "mfu_2gpu_after.sqlite"])
def test_ranges_on_the_real_exports(monkeypatch, name):
    if not (EXPORTS / name).is_file():
        pytest.skip(f"{EXPORTS / name} is not here")
    assert_same(read(EXPORTS / name, monkeypatch, 4_000, 2), read(EXPORTS / name, monkeypatch, 10**12, 2))


def test_texts_only_after_the_first_batch_are_read(export, tmp_path):
    """The driver infers a column's type from the rows of its first batch: an NVTX table whose first 1,500 ranges have
    only registered strings (no text written) is read whole, its later written texts kept (it was refused as holding
    a text in an integer column while a batch was 1,024 rows)."""
    p = tmp_path / "late_texts.sqlite"
    p.write_bytes(export.read_bytes())
    con = sqlite3.connect(p)
    cols = [r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")]
    rows = con.execute("SELECT * FROM NVTX_EVENTS ORDER BY rowid").fetchall()
    text_id = con.execute("SELECT min(id) FROM StringIds").fetchone()[0]
    first = [
        tuple(
            {"start": 10 * i, "end": 10 * i + 5, "eventType": 59, "globalTid": GTID, "textId": text_id}.get(c)
            for c in cols
        )
        for i in range(1_500)
    ]
    con.execute("DELETE FROM NVTX_EVENTS")
    con.executemany(f"INSERT INTO NVTX_EVENTS VALUES ({', '.join('?' * len(cols))})", first + rows)
    con.commit()
    con.close()
    names = set(load(p, cache=False).events["name"].astype(str))
    assert {"range 1", "range 22"} <= names
