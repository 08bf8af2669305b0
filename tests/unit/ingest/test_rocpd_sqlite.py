"""The rocpd SQLite reader (rocprofv3's database, ROCm 7's default output) on a small hand-built trace written by
fixtures/synthlib/rocpd.py (rocprofiler-sdk's documented schema), and hostile databases: one sentence, exit 3, and
nothing written beside them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from fixtures.synthlib.rocpd import UUID, VIEWS, write_rocpd
from tests.conftest import cpu_ann, kernel, launch, memcpy
from tracekit.errors import InputError
from tracekit.ingest import load

DEVICE = {
    "id": 0,
    "name": "AMD Instinct MI300X",
    "numSms": 304,
    "warpSize": 64,
    "maxThreadsPerMultiprocessor": 2048,
    "sharedMemPerMultiprocessor": 65536,
    "computeMajor": 9,
    "computeMinor": 4,
    "totalGlobalMem": 192 * 2**30,
}


def trace_doc() -> dict:
    return {
        "deviceProperties": [DEVICE],
        "traceEvents": [
            cpu_ann("step 0", 10.0, 200.0),
            launch("hipLaunchKernel", 12.0, corr=5),
            kernel(
                "gemm_kernel",
                20.0,
                30.0,
                corr=5,
                grid=[4, 2, 1],
                block=[256, 1, 1],
                **{"registers per thread": 128, "shared memory": 16384},
            ),
            launch("hipLaunchKernel", 60.0, corr=6),
            kernel("rcclKernel_AllReduce", 70.0, 50.5, stream=9, corr=6, grid=[8, 1, 1], block=[64, 1, 1]),
            memcpy("Memcpy HtoD (Host -> Device)", 130.0, 4.25, nbytes=4096),
        ],
    }


@pytest.fixture
def db(tmp_path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    return write_rocpd(d / "results.db", trace_doc())


def test_reader_fills_the_events_table(db):
    t = load(db, cache=False)
    ev = t.events
    k = ev[ev["kind"] == "kernel"].sort_values("start_ns")
    assert list(k["name"]) == ["gemm_kernel", "rcclKernel_AllReduce"]
    assert list(k["start_ns"]) == [20_000, 70_000] and list(k["dur_ns"]) == [30_000, 50_500]
    gemm = k.iloc[0]
    # the grid back in workgroups (rocpd stores work-items), registers and LDS from the kernel symbol
    assert [gemm["grid_x"], gemm["grid_y"], gemm["block_x"]] == [4, 2, 256]
    assert gemm["registers"] == 128 and gemm["shared_mem"] == 16384
    assert list(k["stream"]) == [7, 9] and set(k["device"]) == {0}
    rt = ev[ev["cat"] == "hip_runtime"]
    assert sorted(rt["correlation"]) == sorted(k["correlation"]) == [5, 6]  # launches link to their kernels
    ann = ev[ev["cat"] == "user_annotation"]
    assert list(ann["name"]) == ["step 0"]  # a roctx range is named by its message, not roctxRangePushA
    cp = ev[ev["kind"] == "memcpy"]
    assert list(cp["name"]) == ["Memcpy HtoD (Host -> Device)"] and list(cp["bytes"]) == [4096]


def test_info_says_rocprofv3_rocpd_and_what_it_recorded(db):
    meta = load(db, cache=False).meta
    assert meta["profiler"]["name"] == "rocprofv3" and "rocpd" in meta["profiler"]["label"]
    assert {"kernel", "memcpy", "runtime", "kernel_resources"} <= set(meta["profiler"]["recorded"])
    dev = meta["device_properties"][0]
    assert dev["numSms"] == 304 and dev["name"] == "AMD Instinct MI300X" and meta["kernel_resources"] is True


def test_registers_are_arch_plus_accumulation_vgprs(db):
    con = sqlite3.connect(db)
    con.execute("PRAGMA synchronous = OFF")  # no fsync: a test
    con.execute(
        f'UPDATE "rocpd_info_kernel_symbol{UUID}" SET accum_vgpr_count = 64 WHERE display_name = ?', ("gemm_kernel",)
    )
    con.commit()
    con.close()
    ev = load(db, cache=False).events
    assert int(ev.loc[ev["name"] == "gemm_kernel", "registers"].iloc[0]) == 128 + 64


def test_report_counts_every_row(db):
    con = sqlite3.connect(db)
    con.execute("PRAGMA synchronous = OFF")  # no fsync: a test
    rows = sum(
        con.execute(f'SELECT count(*) FROM "rocpd_{t}{UUID}"').fetchone()[0]
        for t in ("kernel_dispatch", "memory_copy", "region")
    )
    cat = con.execute(f'SELECT id FROM "rocpd_string{UUID}" WHERE string = ?', ("MEMORY_COPY",)).fetchone()[0]
    ev = con.execute(f'SELECT event_id FROM "rocpd_region{UUID}" LIMIT 1').fetchone()[0]
    con.execute(f'UPDATE "rocpd_event{UUID}" SET category_id = ? WHERE id = ?', (cat, ev))  # a category not read
    con.commit()
    con.close()
    r = load(db, cache=False).report
    assert r.records_read == rows and r.events_kept == rows - 1
    assert sum(r.not_events.values()) == 1 and "MEMORY_COPY" in next(iter(r.not_events))


def test_suffixed_tables_without_views(db):
    whole = load(db, cache=False).events
    con = sqlite3.connect(db)
    con.execute("PRAGMA synchronous = OFF")  # no fsync: a test
    con.execute("DROP VIEW kernels")
    for v in VIEWS:
        con.execute(f"DROP VIEW rocpd_{v}")
    con.commit()
    con.close()
    assert load(db, cache=False).events.equals(whole)


def test_content_not_extension(db):
    other = db.parent / "trace.json"
    other.write_bytes(db.read_bytes())
    assert load(other, cache=False).meta["profiler"]["name"] == "rocprofv3"


def _folder(p: Path) -> dict[str, int]:
    return {f.name: f.stat().st_mtime_ns for f in p.parent.iterdir()}


def test_read_only_leaves_nothing_beside(db):
    before, data = _folder(db), db.read_bytes()
    load(db, cache=False)
    assert _folder(db) == before and db.read_bytes() == data


@pytest.mark.parametrize("case", ["missing_tables", "no_events", "truncated"])
def test_hostile_databases(db, case):
    p = db
    if case == "missing_tables":
        con = sqlite3.connect(p)
        con.execute("PRAGMA synchronous = OFF")  # no fsync: a test
        con.execute("DROP VIEW kernels")
        for t in ("kernel_dispatch", "memory_copy", "region"):
            con.execute(f"DROP VIEW rocpd_{t}")
            con.execute(f'DROP TABLE "rocpd_{t}{UUID}"')
        con.commit()
        con.close()
        said = "without its kernel dispatch"
    elif case == "no_events":
        con = sqlite3.connect(p)
        con.execute("PRAGMA synchronous = OFF")  # no fsync: a test
        for t in ("kernel_dispatch", "memory_copy", "region"):
            con.execute(f'DELETE FROM "rocpd_{t}{UUID}"')
        con.commit()
        con.close()
        said = "no kernel, copy or API record"
    else:
        data = p.read_bytes()
        p.write_bytes(data[: len(data) // 2])
        said = "truncated"
    before, data = _folder(p), p.read_bytes()
    with pytest.raises(InputError) as exc:
        load(p, cache=False)
    msg = str(exc.value)
    assert said in msg and str(p) in msg and "\n" not in msg
    assert _folder(p) == before and p.read_bytes() == data


def test_locked_database(db):
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute(f'INSERT INTO "rocpd_string{UUID}" (string) VALUES (?)', ("pending",))
    try:
        with pytest.raises(InputError, match="locked"):
            load(db, cache=False)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.slow
def test_cli_exit_3_one_sentence(cli, db):
    con = sqlite3.connect(db)
    con.execute("PRAGMA synchronous = OFF")  # no fsync: a test
    con.execute("DROP VIEW kernels")
    con.execute("DROP VIEW rocpd_string")
    con.execute(f'DROP TABLE "rocpd_string{UUID}"')
    con.commit()
    con.close()
    code, out, err = cli("info", db, "--no-cache")
    assert code == 3 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "rocpd database" in err and json.dumps(str(db))[1:-1] in err


def test_two_uuids_are_read_as_their_union(db):
    """A database holding two runs' tables (two ``{{uuid}}`` suffixes, their own guid, no unsuffixed views) reads
    both: every record twice, each joined within its own guid."""
    whole = load(db, cache=False)
    con = sqlite3.connect(db)
    con.execute("PRAGMA synchronous = OFF")  # no fsync: a test
    other = UUID.replace("0000734d", "0000beef")
    con.execute("DROP VIEW kernels")
    for v in VIEWS:
        con.execute(f"DROP VIEW rocpd_{v}")
        con.execute(f'CREATE TABLE "rocpd_{v}{other}" AS SELECT * FROM "rocpd_{v}{UUID}"')
        if "guid" in [r[1] for r in con.execute(f'PRAGMA table_info("rocpd_{v}{other}")')]:
            con.execute(f"UPDATE \"rocpd_{v}{other}\" SET guid = 'second-run'")
    con.commit()
    con.close()
    both = load(db, cache=False)
    assert len(both.events) == 2 * len(whole.events)
    k1 = whole.events[whole.events["kind"] == "kernel"]
    k2 = both.events[both.events["kind"] == "kernel"]
    assert sorted(k2["name"]) == sorted(list(k1["name"]) * 2) and sorted(k2["registers"]) == sorted(
        list(k1["registers"]) * 2
    )


def test_dispatch_without_its_symbol_is_an_unknown_kernel(db):
    con = sqlite3.connect(db)
    con.execute("PRAGMA synchronous = OFF")  # no fsync: a test
    kid = con.execute(f'SELECT id FROM "rocpd_info_kernel_symbol{UUID}" WHERE display_name = ?', ("gemm_kernel",))
    kid = kid.fetchone()[0]
    con.execute(f'DELETE FROM "rocpd_info_kernel_symbol{UUID}" WHERE id = ?', (kid,))
    con.commit()
    con.close()
    ev = load(db, cache=False).events
    k = ev[ev["kind"] == "kernel"].sort_values("start_ns")
    assert list(k["name"]) == [f"unknown kernel (kernel_id {kid})", "rcclKernel_AllReduce"]
    assert int(k["registers"].iloc[0]) == -1 and int(k["shared_mem"].iloc[0]) == 16384  # LDS is the dispatch's


@pytest.mark.parametrize("case", ["rocmprofiledata", "no_guid"])
def test_rocpd_of_another_schema(tmp_path, db, case):
    """rocmProfileData's older rocpd (rocpd_op, rocpd_api, no guids), or a region table without the columns joined
    on: one sentence naming the schema it reads."""
    if case == "rocmprofiledata":
        p = tmp_path / "old.rpd"
        con = sqlite3.connect(p)
        con.execute("CREATE TABLE rocpd_string (id INTEGER PRIMARY KEY, string TEXT)")
        con.execute("CREATE TABLE rocpd_op (id INTEGER PRIMARY KEY, gpuId INTEGER, start INTEGER, end INTEGER)")
        con.execute("CREATE TABLE rocpd_api (id INTEGER PRIMARY KEY, pid INTEGER, start INTEGER, end INTEGER)")
        said = "rocmProfileData (RPD)"  # its own sentence (sqlite_kinds.json), not the rocpd reader's
    else:
        p = db
        con = sqlite3.connect(p)
        con.execute("PRAGMA synchronous = OFF")  # no fsync: a test
        con.execute("DROP VIEW kernels")
        con.execute("DROP VIEW rocpd_region")
        con.execute(f'ALTER TABLE "rocpd_region{UUID}" RENAME COLUMN name_id TO label_id')
        said = "rocpd_region lacks name_id"
    con.commit()
    con.close()
    before = _folder(p)
    with pytest.raises(InputError) as exc:
        load(p, cache=False)
    assert said in str(exc.value) and str(p) in str(exc.value) and _folder(p) == before


def test_kernels_equal_the_documented_kernels_view(db):
    """Per device: the kernel count, busy time and VGPRs of the reader equal an independent query of rocprofiler-sdk's
    documented ``kernels`` view (data_views.sql's columns, as fixtures/synthlib/rocpd_schema.py defines it; a kernel without a VGPR count
    has unknown registers, -1)."""
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT agent_type_index, count(*), sum(duration), "
        " sum(CASE WHEN vgpr_count > 0 THEN vgpr_count + accum_vgpr_count ELSE -1 END) FROM kernels"
        " GROUP BY agent_type_index"
    ).fetchall()
    con.close()
    ev = load(db, cache=False).events
    k = ev[ev["kind"] == "kernel"]
    mine = [
        (int(d), len(g), int(g["dur_ns"].sum()), int(g["registers"].astype("int64").sum()))
        for d, g in k.groupby("device", observed=True)
    ]
    assert rows and mine == [tuple(int(x) for x in r) for r in rows]
