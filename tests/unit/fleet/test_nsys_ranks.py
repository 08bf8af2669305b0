"""Nsight Systems exports as the ranks of a run (docs/multirank.md, "Nsight Systems exports"): one export of two
GPU processes, and a folder of per-rank exports, on small hand-built databases whose truth is written here: rank 1
reaches each step's all-reduce LATE[k] ns after rank 0, so rank 0 waits exactly that."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import tracekit
from tracekit.analyses.fleet.multirank.discover import find_ranks
from tracekit.analyses.fleet.multirank.processes import export_of, gpu_processes, select_process, split_part
from tracekit.ingest import load

PIDS = (144, 145)  # process 144 drives device 0, process 145 device 1
LATE = (40_000, 50_000, 60_000)  # rank 1's lateness at each step's all-reduce (ns): rank 0's wait
PERIOD, WORK, TAIL = 1_000_000, 100_000, 20_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)"


def gpid(pid: int) -> int:
    return (0x1000000 << 24) | (pid << 24)


def build(path: Path, ranks: tuple[int, ...] = (0, 1), skew: int = 0) -> Path:
    """An export of the processes of ``ranks`` (rank r: process PIDS[r] on device r), three ProfilerStep#k NVTX
    ranges each, a GEMM then an all-reduce per step; rank 1's GEMM runs LATE[k] longer; the all-reduces end together
    (one host clock: the export's) but for ``skew`` ns more on rank 1, which no clock fit may take for an offset."""
    con = sqlite3.connect(path)
    c = con.cursor()
    c.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    c.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "gemm_kernel"), (2, NCCL), (3, "cudaLaunchKernel_v7000")])
    c.execute("CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER, name TEXT, label TEXT)")
    c.execute("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (59, 'NvtxPushPopRange', '')")
    c.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,"
        " contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,"
        " shortName INTEGER)"
    )
    c.execute(
        "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, text TEXT,"
        " globalTid INTEGER, textId INTEGER, domainId INTEGER)"
    )
    c.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,"
        " globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER)"
    )
    kernels, ranges, launches = [], [], []
    for k, late in enumerate(LATE):
        s = PERIOD * (k + 1)
        arrive = [s + 10_000 + WORK + (late if r == 1 else 0) for r in (0, 1)]
        end = max(arrive) + TAIL
        for r in ranks:
            g = gpid(PIDS[r])
            kernels += [
                (s + 10_000, arrive[r] - 1_000, r, 7, 10 * k + 1, g, 1, 1),
                (arrive[r], end + (skew if r == 1 else 0), r, 9, 10 * k + 2, g, 2, 2),
            ]
            ranges.append((s, s + 900_000, 59, f"ProfilerStep#{k}", g | 7, None, 0))
            launches += [(s + 1_000 * j, s + 1_000 * j + 500, g | 7, 10 * k + j, 3) for j in (1, 2)]
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?)", kernels)
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0)", launches)
    c.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?)", ranges)
    c.execute("CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT)")
    c.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2025.1.1')")
    c.execute("CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT)")
    c.executemany("INSERT INTO PROCESSES VALUES (?, ?, 'python3')", [(gpid(PIDS[r]), PIDS[r]) for r in ranks])
    con.commit()
    con.close()
    return path


def check_truth(r) -> None:
    """Rank 1 is last at every step's all-reduce; rank 0 waits LATE[k] there; one clock (offsets 0)."""
    per = r.tables["per_collective"].sort_values("step")
    assert per["last_rank"].tolist() == [1, 1, 1]
    waits = r.tables["collectives"]
    w0 = waits[waits["rank"] == 0].sort_values("step")["wait_ns"].tolist()
    assert w0 == list(LATE)
    assert waits[waits["rank"] == 1]["wait_ns"].tolist() == [0, 0, 0]
    assert r.summary["straggler"]["rank"] == 1 and r.summary["straggler"]["times_last"] == 3
    assert r.tables["ranks"]["clock_offset_ns"].tolist() == [0, 0]
    assert r.summary["ranks"] == 2 and r.summary["steps"] == 3


@pytest.mark.slow  # one imbalance (0.8 s)
def test_one_export_of_two_processes_is_a_run_of_two_ranks(tmp_path):
    f = build(tmp_path / "node.sqlite", skew=3_000)  # the ends 3 µs apart: a fit would read a 3 µs offset
    assert gpu_processes(f) == [(PIDS[0], 0), (PIDS[1], 1)]
    ranks, _ = find_ranks(f)
    assert [rf.rank for rf in ranks] == [0, 1] and [rf.source for rf in ranks] == ["process", "process"]
    assert [split_part(rf.files[0]) for rf in ranks] == [(str(f), PIDS[0]), (str(f), PIDS[1])]
    run = tracekit.load_run(f)
    assert run.nodes == {0: 0, 1: 0} and run.nodes_from == "one export"  # one export, one host clock
    assert run.reference_files() == [f]
    r = tracekit.imbalance(run, jobs=1, cache=False)
    check_truth(r)
    assert r.params["nodes_from"] == "one export"


def test_the_selected_process_holds_only_its_own_events(tmp_path):
    whole = load(build(tmp_path / "node.sqlite"), cache=False)
    one = select_process(whole, PIDS[1])
    assert set(one.events["pid"]) == {PIDS[1]} and one.meta["devices_used"] == [1]
    assert len(one.events) == len(whole.events) // 2  # each process: 6 kernels, 6 launches, 3 ranges


@pytest.mark.slow  # one imbalance (0.5 s)
def test_a_folder_of_per_rank_exports_is_a_run(tmp_path):
    build(tmp_path / "rank0.sqlite", ranks=(0,))
    build(tmp_path / "rank1.sqlite", ranks=(1,))
    ranks, _ = find_ranks(tmp_path)
    assert [(rf.rank, rf.source, rf.files[0].name) for rf in ranks] == [
        (0, "name", "rank0.sqlite"),
        (1, "name", "rank1.sqlite"),
    ]
    check_truth(tracekit.imbalance(tmp_path, jobs=1, cache=False))


def test_another_programs_sqlite_in_the_folder_is_passed_over(tmp_path):
    build(tmp_path / "rank0.sqlite", ranks=(0,))
    build(tmp_path / "rank1.sqlite", ranks=(1,))
    con = sqlite3.connect(tmp_path / "optuna.sqlite")
    con.execute("CREATE TABLE trials (id INTEGER)")
    con.commit()
    con.close()
    ranks, skipped = find_ranks(tmp_path)
    assert [rf.files[0].name for rf in ranks] == ["rank0.sqlite", "rank1.sqlite"]
    assert [(Path(p).name, why.split(" (")[0]) for p, why in skipped] == [
        ("optuna.sqlite", "not an Nsight Systems export")
    ]


def test_an_export_of_several_processes_beside_other_files_is_refused(tmp_path):
    build(tmp_path / "node.sqlite")
    build(tmp_path / "rank1.sqlite", ranks=(1,))
    with pytest.raises(tracekit.errors.InputError, match="GPU processes, the ranks of a run of its own"):
        find_ranks(tmp_path)


@pytest.mark.slow  # imbalance, report and findings (4 s)
def test_cli_imbalance_and_report_on_one_export(tmp_path, cli):
    f = build(tmp_path / "node.sqlite")
    for cmd in ("imbalance", "report", "findings"):
        code, out, err = cli(cmd, f, "-f", "json", "--no-cache")
        assert code == 0, err
        doc = json.loads(out)
        if cmd == "findings":
            continue
        summary = doc["summary"] if cmd == "imbalance" else doc["summary"]["ranks"]
        assert summary["ranks"] == 2 and summary["straggler"]["rank"] == 1
        if cmd == "report":  # the reference rank's report: its own GPU's 6 kernels, not the export's 12
            assert doc["summary"]["kernels"] == 6
    assert tracekit.report(tracekit.load_run(f)).summary["kernels"] == 6
    assert export_of(f"{f}::process=145") == f
