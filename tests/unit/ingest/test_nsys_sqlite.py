"""The Nsight Systems SQLite reader on small hand-built exports (the schema of nsys export 3.x, the columns the
reader uses), and hostile databases: one sentence, exit 3, and nothing written beside them."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.errors import InputError
from tracekit.ingest import load

PID0, PID1 = 144, 145
GPID0, GPID1 = (0x1000000 << 24) | (PID0 << 24), (0x1000000 << 24) | (PID1 << 24)


def gtid(gpid: int, tid: int) -> int:
    return gpid | tid


def build(path: Path, *, with_gpu: bool = True, drop: tuple[str, ...] = ()) -> Path:
    con = sqlite3.connect(path)
    c = con.cursor()
    c.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    c.executemany(
        "INSERT INTO StringIds VALUES (?, ?)",
        [
            (1, "cudaLaunchKernel_v7000"),
            (2, "gemm_kernel"),
            (3, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)"),
            (4, "step[DECODE bs=8]"),
            (5, "cudaMemcpyAsync_v3020"),
            (6, "cuLaunchKernelEx"),
        ],
    )
    c.execute("CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER, name TEXT, label TEXT)")
    c.executemany(
        "INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)",
        [
            (34, "NvtxMark", ""),
            (59, "NvtxPushPopRange", ""),
            (60, "NvtxStartEndRange", ""),
            (75, "NvtxDomainCreate", ""),
        ],
    )
    c.execute("CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER, name TEXT, label TEXT)")
    c.executemany(
        "INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)",
        [(1, "CUDA_MEMCPY_KIND_HTOD", ""), (10, "CUDA_MEMCPY_KIND_PTOP", "")],
    )
    c.execute("CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER, name TEXT, label TEXT)")
    c.executemany("INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)", [(0, "P", "Pageable"), (2, "D", "Device")])
    c.execute("CREATE TABLE ENUM_CUPTI_SYNC_TYPE (id INTEGER, name TEXT, label TEXT)")
    c.execute(
        "INSERT INTO ENUM_CUPTI_SYNC_TYPE VALUES (3, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE', '')"
    )
    c.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,"
        " globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER)"
    )
    # both processes number their correlations from 10: the reader keeps them apart
    c.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0)",
        [
            (1_000, 2_000, gtid(GPID0, 7), 10, 1),
            (3_000, 4_000, gtid(GPID0, 7), 11, 6),
            (5_000, 5_500, gtid(GPID0, 7), 12, 5),
            (1_100, 2_100, gtid(GPID1, 9), 10, 1),
            (4_000, 3_000, gtid(GPID1, 9), 11, 1),  # ends before it starts: dropped, counted
        ],
    )
    if with_gpu:
        c.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,"
            " contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,"
            " shortName INTEGER, registersPerThread INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER,"
            " blockX INTEGER, blockY INTEGER, blockZ INTEGER, staticSharedMemory INTEGER,"
            " dynamicSharedMemory INTEGER, graphNodeId INTEGER, graphId INTEGER)"
        )
        c.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, 1, 1, 128, 1, 1, ?, ?, ?, ?)",
            [
                (10_000, 20_000, 0, 7, 10, GPID0, 2, 2, 96, 132, 1024, 4096, None, None),
                (20_500, 30_000, 0, 21, 11, GPID0, 3, 3, 64, 8, 0, 0, 55, 3),
                (12_000, 22_000, 1, 7, 10, GPID1, 2, 2, 96, 132, 1024, 4096, None, None),
            ],
        )
        c.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,"
            " contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER,"
            " copyKind INTEGER, srcKind INTEGER, dstKind INTEGER)"
        )
        c.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (31000, 32000, 0, 1, 7, 12, ?, 4096, 1, 0, 2)", (GPID0,)
        )
        c.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,"
            " contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, value INTEGER,"
            " bytes INTEGER, memKind INTEGER)"
        )
        c.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (33000, 33100, 0, 1, 7, NULL, ?, 0, 256, 2)", (GPID0,))
        c.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL, end INTEGER NOT NULL,"
            " deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER,"
            " syncType INTEGER)"
        )
        c.execute("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (34000, 35000, 0, 1, 7, 13, ?, 3)", (GPID0,))
        c.execute(
            "CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, smCount INTEGER, totalMemory INTEGER,"
            " computeMajor INTEGER, computeMinor INTEGER, clockRate INTEGER, threadsPerWarp INTEGER,"
            " maxWarpsPerSm INTEGER)"
        )
        c.executemany(
            "INSERT INTO TARGET_INFO_GPU VALUES (?, 'NVIDIA H100 80GB HBM3', 132, 85520809984, 9, 0, 1980000000, 32, 64)",
            [(0,), (1,)],
        )
    c.execute(
        "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, text TEXT,"
        " globalTid INTEGER, textId INTEGER, domainId INTEGER)"
    )
    c.executemany(
        "INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (500, 6_000, 59, None, gtid(GPID0, 7), 4, 0),  # registered string
            (900, 2_500, 59, "inner", gtid(GPID0, 7), None, 0),  # nested, text as written
            (700, None, 34, "mark", gtid(GPID0, 7), None, 0),  # a mark: instant
            (100, None, 75, "NCCL", gtid(GPID0, 7), None, 1),  # a domain: meta, not an event
            (800, None, 59, "open", gtid(GPID1, 9), None, 0),  # never closed: dropped, counted
        ],
    )
    c.execute("CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT)")
    c.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2025.1.1')")
    c.execute("CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT)")
    c.executemany("INSERT INTO PROCESSES VALUES (?, ?, 'python3')", [(GPID0, PID0), (GPID1, PID1)])
    for t in drop:
        c.execute(f"DROP TABLE {t}")
    con.commit()
    con.close()
    return path


@pytest.fixture
def export(tmp_path):
    return build(tmp_path / "run.sqlite")


def test_reader_fills_the_events_table(export):
    tr = load(export, cache=False)
    ev = tr.events
    kinds = ev["kind"].astype(str).value_counts().to_dict()
    assert kinds == {"runtime": 4, "kernel": 3, "memcpy": 1, "memset": 1, "sync": 1, "cpu_annotation": 2, "instant": 1}
    k = ev[ev["kind"] == "kernel"].reset_index(drop=True)
    assert k["start_ns"].tolist() == [10_000, 12_000, 20_500] and k["dur_ns"].tolist() == [10_000, 10_000, 9_500]
    assert k["device"].tolist() == [0, 1, 0] and k["stream"].tolist() == [7, 7, 21]
    assert k["pid"].tolist() == [PID0, PID1, PID0]
    assert (k["grid_x"].tolist(), k["block_x"].tolist(), k["registers"].tolist()) == (
        [132, 132, 8],
        [128] * 3,
        [96, 96, 64],
    )
    assert k["shared_mem"].tolist() == [1024 + 4096, 1024 + 4096, 0]
    nccl = k.iloc[2]
    assert (nccl["comm_class"], nccl["collective"], nccl["algo"], nccl["protocol"]) == (
        "nccl",
        "AllReduce",
        "RING",
        "LL",
    )
    copy = ev[ev["kind"] == "memcpy"].iloc[0]
    assert copy["name"] == "Memcpy HtoD (Pageable -> Device)" and copy["copy_kind"] == "HtoD" and copy["bytes"] == 4096
    assert ev[ev["kind"] == "memset"].iloc[0]["name"] == "Memset (Device)"
    assert ev[ev["kind"] == "sync"].iloc[0]["name"] == "Stream Sync"
    rt = ev[ev["kind"] == "runtime"]
    assert set(rt["name"].astype(str)) == {"cudaLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync"}
    assert set(rt.loc[rt["name"] == "cuLaunchKernelEx", "cat"].astype(str)) == {"cuda_driver"}
    # correlations are kept apart per process: each launch links to its own kernel only
    by_corr = dict(zip(rt["correlation"], rt["pid"]))
    for _, row in k.iterrows():
        assert by_corr[row["correlation"]] == row["pid"]
    nvtx = ev[ev["kind"] == "cpu_annotation"]
    assert nvtx["name"].astype(str).tolist() == ["step[DECODE bs=8]", "inner"]
    assert nvtx["tid"].tolist() == [7, 7] and (nvtx["device"] == -1).all()


def test_report_counts_every_row(export):
    tr = load(export, cache=False)
    rep = tr.report
    assert rep.records_read == 5 + 3 + 1 + 1 + 1 + 5
    assert rep.dropped == {"record that ends before it starts": 1, "NVTX range that was never closed (no end time)": 1}
    assert sum(rep.not_events.values()) == 1 and rep.events_kept == len(tr.events) == 13


def test_meta_devices_profiler_and_domains(export):
    m = load(export, cache=False).meta
    assert m["devices_used"] == [0, 1] and m["num_sms"] == 132 and m["device_pids"] == {"0": [PID0], "1": [PID1]}
    d = m["device_properties"][0]
    assert d["numSms"] == 132 and d["totalGlobalMem"] == 85520809984 and d["computeMajor"] == 9
    assert d["maxThreadsPerMultiprocessor"] == 2048
    assert m["nvtx_domains"] == {"1": "NCCL"}
    p = m["profiler"]
    assert p["name"] == "nsys" and p["version"] == "2025.1.1" and "graph_node_ids" in p["recorded"]
    assert "cpu_annotation" in p["recorded"] and "kernel" in p["recorded"]


def test_on_device_keeps_that_process_cpu_events(export):
    tr = load(export, cache=False).on_device(1)
    cpu = tr.events[tr.events["device"] < 0]
    assert set(cpu["pid"]) == {PID1} and (tr.events["device"] >= -1).all()


def test_steps_from_nvtx_ranges(export):
    from tracekit.analyses.steps.resolve import find_steps

    steps = find_steps(load(export, cache=False).on_device(0))
    assert steps.table["name"].tolist() == ["step[DECODE bs=8]"] and steps.table["phase"].tolist() == ["decode"]
    # the launch window: from the first to the last GPU work launched inside the range
    assert steps.table["start_ns"].tolist() == [10_000] and steps.table["end_ns"].tolist() == [32_000]


def test_content_not_extension(tmp_path, export):
    other = tmp_path / "trace.json"
    other.write_bytes(export.read_bytes())
    assert load(other, cache=False).meta["profiler"]["name"] == "nsys"


def _folder(p: Path) -> dict[str, int]:
    return {f.name: f.stat().st_mtime_ns for f in p.parent.iterdir()}


def test_read_only_leaves_nothing_beside(export):
    before = _folder(export)
    data = export.read_bytes()
    load(export, cache=False)
    assert _folder(export) == before and export.read_bytes() == data


def hostile(tmp_path: Path, name: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    return d


@pytest.mark.parametrize("case", ["not_nsys", "truncated", "no_tables", "garbage_page", "empty"])
def test_hostile_databases(tmp_path, case):
    d = hostile(tmp_path, case)
    p = d / "x.sqlite"
    if case == "not_nsys":
        con = sqlite3.connect(p)
        con.execute("CREATE TABLE t (a INTEGER)")
        con.commit()
        con.close()
        said = "not an Nsight Systems export"
    elif case == "truncated":
        data = build(d / "whole.sqlite").read_bytes()
        (d / "whole.sqlite").unlink()
        p.write_bytes(data[: len(data) // 2])
        said = "truncated"
    elif case == "no_tables":
        build(p, with_gpu=False, drop=("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"))
        said = "without kernels"
    elif case == "garbage_page":
        data = bytearray(build(d / "whole.sqlite").read_bytes())
        (d / "whole.sqlite").unlink()
        data[4096:8192] = b"\xff" * 4096  # the second page (sqlite_master's tables) is noise
        p.write_bytes(bytes(data))
        said = "damaged"
    else:
        p.write_bytes(b"SQLite format 3\x00")
        said = "truncated"
    before, data = _folder(p), p.read_bytes()
    with pytest.raises(InputError) as exc:
        load(p, cache=False)
    msg = str(exc.value)
    assert said in msg and str(p) in msg and "\n" not in msg
    assert _folder(p) == before and p.read_bytes() == data


def test_locked_database(tmp_path):
    p = build(hostile(tmp_path, "locked") / "x.sqlite")
    holder = sqlite3.connect(p, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO StringIds VALUES (99, 'pending')")
    try:
        with pytest.raises(InputError, match="locked"):
            load(p, cache=False)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_report_without_nsys_says_how_to_export(tmp_path, monkeypatch):
    p = tmp_path / "run.nsys-rep"
    p.write_bytes(b"\x00" * 64)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys here
    with pytest.raises(InputError, match="nsys export --type sqlite"):
        load(p, cache=False)


@pytest.mark.slow
def test_cli_exit_3_one_sentence(tmp_path):
    p = tmp_path / "x.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (a)")
    con.commit()
    con.close()
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from tracekit.cli import main; sys.exit(main())", "info", str(p)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "not an Nsight Systems export" in done.stderr


@pytest.mark.parametrize("at", ["first", "late"])
def test_text_in_an_integer_column_is_refused(tmp_path, at):
    """A text where nsys writes integers is one sentence and exit 3, whether it is in the reader's first batch of
    rows or far after it (the Arrow reader infers each column's type from its first rows)."""
    src = build(tmp_path / "x.sqlite")
    con = sqlite3.connect(src)
    cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    row = list(con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone())
    filler = [row] * (0 if at == "first" else 3000)
    con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(cols))})", filler)
    bad = list(row)
    bad[cols.index("start")] = "abc"
    con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(cols))})", bad)
    if at == "first":
        con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start != 'abc'")
    con.commit()
    con.close()
    before, data = _folder(src), src.read_bytes()
    with pytest.raises(InputError) as exc:
        load(src, cache=False)
    msg = str(exc.value)
    assert "not an integer" in msg and str(src) in msg and "\n" not in msg
    assert _folder(src) == before and src.read_bytes() == data
