"""An SQLite file that is neither an Nsight Systems export nor a rocprofv3 database: one sentence saying what it is
(by its tables, tracekit/data/sqlite_kinds.json) or, for another program's database, listing its tables; exit 3, and
the file and its folder never modified. The databases are built here by hand (table names only)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tracekit.errors import InputError
from tracekit.ingest import load
from tracekit.ingest.nsys_database import NSYS_EVENT_TABLES, NSYS_MARKERS
from tracekit.ingest.sqlite_kinds import kind_of, rules, table_list


def database(path: Path, tables: list[str]) -> Path:
    con = sqlite3.connect(path)
    for t in tables:
        con.execute(f'CREATE TABLE "{t}" (id INTEGER PRIMARY KEY, value TEXT)')
        con.execute(f"INSERT INTO \"{t}\" VALUES (1, 'x')")
    con.execute("PRAGMA user_version = 7")  # a database with no table is still written
    con.commit()
    con.close()
    return path


def _folder(p: Path) -> dict[str, int]:
    return {f.name: f.stat().st_mtime_ns for f in p.parent.iterdir()}


def refused(tmp_path: Path, tables: list[str], name: str = "x.db") -> str:
    d = tmp_path / "in"
    d.mkdir()
    p = database(d / name, tables)
    before, data = _folder(p), p.read_bytes()
    with pytest.raises(InputError) as exc:
        load(p, cache=False)
    msg = str(exc.value)
    assert str(p) in msg and "\n" not in msg
    assert _folder(p) == before and p.read_bytes() == data  # read-only: no journal, WAL or -shm beside it
    return msg


COMPUTE = ["compute_dispatch", "compute_kernel", "compute_metadata", "compute_workload", "compute_metric_definition"]
RPD = ["rocpd_op", "rocpd_api", "rocpd_string", "rocpd_kernelop", "rocpd_copyapi", "rocpd_api_ops", "rocpd_metadata"]


def test_rocprof_compute_database_is_named_and_told_how_to_record(tmp_path):
    msg = refused(tmp_path, COMPUTE)
    assert "rocprof-compute analysis database" in msg and "not a trace" in msg
    assert "rocprofv3 --kernel-trace --hip-trace" in msg


def test_rocm_profile_data_is_not_taken_for_rocprofv3s_database(tmp_path):
    """RPD's tables share rocprofv3's rocpd_ prefix: the rocpd reader leaves it to its own sentence."""
    msg = refused(tmp_path, RPD, "trace.rpd")
    assert "rocmProfileData (RPD)" in msg and "rocprofv3 --kernel-trace" in msg
    assert "rocprofv3 rocpd database" not in msg


def test_nsys_export_without_string_ids(tmp_path):
    msg = refused(tmp_path, ["META_DATA_EXPORT", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL"], "run.sqlite")
    assert "Nsight Systems export without its StringIds table" in msg and "nsys export --type sqlite" in msg


def test_nsys_export_without_event_tables_names_the_option(tmp_path):
    msg = refused(tmp_path, ["StringIds", "META_DATA_EXPORT", "CUPTI_ACTIVITY_KIND_MEMCPY"], "run.sqlite")
    assert msg.endswith(
        "is an Nsight Systems export without kernels, CUDA API calls or NVTX ranges (no CUPTI_ACTIVITY_KIND_KERNEL,"
        " NVTX_EVENTS, CUPTI_ACTIVITY_KIND_RUNTIME table); profile with nsys profile --trace=cuda,nvtx and export again"
    )


def test_another_programs_database_lists_its_tables(tmp_path):
    tables = [f"t{i:02d}" for i in range(10)]
    msg = refused(tmp_path, tables)
    assert "is an SQLite database but not an Nsight Systems export nor a rocprofv3 database" in msg
    assert "(its tables: t00, t01, t02, t03, t04, t05, t06, t07, … (10 in all))" in msg
    assert "nsys export --type sqlite" in msg and "rocprofv3 --output-format rocpd" in msg


def test_a_database_without_tables(tmp_path):
    assert "(it has no tables)" in refused(tmp_path, [])


def test_a_few_tables_are_listed_whole():
    assert table_list({"b", "a"}) == "its tables: a, b"


def test_the_nsys_kinds_are_the_readers_own_tables():
    """The sentence of an export without event tables names the tables the reader needs (one list, checked here)."""
    kinds = {k["name"]: k for k in rules()["kinds"]}
    no_events = kinds["nsys export without event tables"]
    assert tuple(no_events["all"]) == NSYS_MARKERS and tuple(no_events["none"]) == NSYS_EVENT_TABLES
    assert kinds["nsys export without StringIds"]["none"] == list(NSYS_MARKERS)


def test_every_kind_is_one_sentence_naming_the_file():
    for kind in rules()["kinds"]:
        assert kind["says"].startswith("{shown} is ") and "\n" not in kind["says"] and kind["all"] is not None
        assert kind_of(frozenset(kind["all"]) | frozenset(kind.get("any", [])[:1])) is kind
    assert kind_of(frozenset({"a", "b"})) is None


def test_cli_exit_3_one_line(tmp_path, cli):
    p = database(tmp_path / "compute.db", COMPUTE)
    code, out, err = cli("info", p)
    assert code == 3 and out == "" and len(err.strip().splitlines()) == 1
    assert "rocprof-compute analysis database" in err and "Traceback" not in err
