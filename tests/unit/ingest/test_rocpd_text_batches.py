"""The rocpd reader's texts when a whole batch of rows has none: ADBC's SQLite driver types each column from its first
batch of rows, so a database whose first 1,500 dispatches name a kernel with no symbol row (their display and kernel
names NULL through the LEFT JOIN) was refused as a "type mismatch" once a named dispatch came. Each query is now read
as one batch; the unnamed dispatches are kept and named by their kernel id, the others by their symbol."""

from __future__ import annotations

import sqlite3

from fixtures.synthlib.rocpd import write_rocpd
from tests.conftest import kernel, launch
from tracekit.ingest import load

UNNAMED = 1500


def trace_doc() -> dict:
    events = []
    for i in range(UNNAMED + 100):
        events.append(launch("hipLaunchKernel", 10.0 + 5 * i, corr=i + 1))
        events.append(kernel("named_kernel", 11.0 + 5 * i, 2.0, corr=i + 1))
    return {"deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X", "numSms": 304}], "traceEvents": events}


def test_a_first_batch_without_symbols_is_read(tmp_path):
    db = write_rocpd(tmp_path / "results.db", trace_doc())
    con = sqlite3.connect(db)
    (table,) = con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'rocpd_kernel_dispatch%'"
    ).fetchone()
    con.execute(
        f"UPDATE {table} SET kernel_id = 999999 WHERE id IN (SELECT id FROM {table} ORDER BY id LIMIT ?)", (UNNAMED,)
    )
    con.commit()
    con.close()
    events = load(db, cache=False).events
    names = events.loc[events["kind"] == "kernel", "name"].astype(str).value_counts()
    assert names.to_dict() == {"unknown kernel (kernel_id 999999)": UNNAMED, "named_kernel": 100}
