"""export (parquet → pandas and DuckDB), annotate (Perfetto trace that re-ingests to the same analysis), plot."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from tests.conftest import kernel, memcpy, write_trace
from tracekit.analyses import allgathers, communication, decompose, exposure
from tracekit.analyses.options import AllGatherOptions
from tracekit.analyses.steps.model import step_options
from tracekit.analyses.structure.blocks import block_stats
from tracekit.annotation import load_annotation
from tracekit.cli import bundled_sample
from tracekit.exporters import TABLE_COLUMNS, collect, write_annotated_trace, write_parquet
from tracekit.exporters.perfetto import CATEGORY, us_text

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "synthetic"
DP16 = FIX / "dp16_bs4.trace.json.gz"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "export.md"


@pytest.fixture(scope="module")
def dp16():
    trace = tracekit.load(DP16, cache=False)
    ann = load_annotation("k3_dp16")
    return trace, ann, collect(trace, ann)


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """Text columns as object with None for missing (pandas 3 reads strings as `str`, missing as NaN)."""
    out = df.copy()
    for c in out.columns:
        if (
            not isinstance(out[c].dtype, pd.CategoricalDtype)
            and not pd.api.types.is_numeric_dtype(out[c].dtype)
            and not pd.api.types.is_bool_dtype(out[c].dtype)
        ):
            out[c] = out[c].astype(object).where(out[c].notna(), None)
    return out


# --------------------------------------------------------------------------- parquet


def test_export_cli_writes_every_table_and_manifest(cli, tmp_path, dp16):
    code, out, err = cli("export", DP16, "-a", "k3_dp16", "-o", tmp_path / "x", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "tracekit.export/1" and doc["summary"]["not_exported"] == ["ledger"]
    names = ["events", "steps", "blocks", "allgathers", "copies", "exposed", "communication", "kernels"]
    assert [r["table"] for r in doc["tables"]["files"]] == names
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    assert manifest["format"] == "tracekit.export/2" and manifest["tracekit"] == tracekit.__version__
    assert "ledger" in manifest["not_exported"] and manifest["annotation"] == "k3_dp16"
    _, _, ex = dp16
    for entry in manifest["tables"]:
        assert (tmp_path / "x" / entry["file"]).exists()
        assert entry["rows"] == len(ex.tables[entry["table"]])
        assert [c["name"] for c in entry["columns"]] == list(TABLE_COLUMNS[entry["table"]])
    assert doc["summary"]["events_rows"] == len(ex.trace.events) and doc["summary"]["blocks_rows"] == 582


def test_parquet_pandas_round_trip(tmp_path, dp16):
    _, _, ex = dp16
    write_parquet(ex, tmp_path)
    from tracekit.exporters.parquet import missing_as_null

    for name, df in ex.tables.items():
        back = pd.read_parquet(tmp_path / f"{name}.parquet")
        want = missing_as_null(name, df)  # the in-memory table with its -1 markers as NULL
        assert list(back.columns) == list(TABLE_COLUMNS[name])
        pd.testing.assert_frame_equal(_plain(want), _plain(back), check_dtype=False)
        for col, (dtype, _, _) in TABLE_COLUMNS[name].items():
            if dtype == "category":
                assert isinstance(back[col].dtype, pd.CategoricalDtype), (name, col)
            elif dtype in ("int64", "int32", "bool", "float64"):
                assert str(back[col].dtype) == str(want[col].dtype), (name, col)
                assert str(want[col].dtype) in (dtype, dtype.replace("int", "Int")), (name, col)
    ev = pd.read_parquet(tmp_path / "events.parquet")
    pd.testing.assert_frame_equal(ev, missing_as_null("events", ex.tables["events"]))  # exactly, NULL for -1
    assert str(pd.read_parquet(tmp_path / "steps.parquet")["bs"].dtype) == "Int64"


def test_parquet_duckdb_queries_agree_with_the_analyses(tmp_path, dp16):
    duckdb = pytest.importorskip("duckdb")
    trace, ann, ex = dp16
    write_parquet(ex, tmp_path)
    f = {n: str(tmp_path / f"{n}.parquet") for n in ex.tables}
    for name, df in ex.tables.items():
        assert duckdb.sql(f"select count(*) from '{f[name]}'").fetchall()[0][0] == len(df)
    # block kernel time per (step, type) from the raw events = the blocks table = block_stats
    got = {
        (s, t): v
        for s, t, v in duckdb.sql(
            f"select step, block_type, sum(dur_ns) from '{f['events']}' where kind = 'kernel' and block >= 0"
            " group by 1, 2"
        ).fetchall()
    }
    want = {(r.step, r.block_type): r.kernel_ns for r in block_stats(trace, ann).tables["per_step_type"].itertuples()}
    assert got == want
    # exposed intervals sum to the exposure's total; per (step, type) through a join with the AllGathers
    total = duckdb.sql(f"select sum(end_ns - start_ns) from '{f['exposed']}'").fetchall()[0][0]
    ex_res = exposure(
        trace, ag=AllGatherOptions(group_size=8, sizes=ann.allgather.sizes, local_copy=ann.allgather.local_copy)
    )
    assert total == ex_res.summary["total_exposed_ns"]
    joined = {
        (s, t): v
        for s, t, v in duckdb.sql(
            f"select a.step, a.type, sum(e.end_ns - e.start_ns) from '{f['exposed']}' e join '{f['allgathers']}' a"
            " using (ag) group by 1, 2"
        ).fetchall()
    }
    assert joined == {
        (r.step, r.type): r.exposed_ns for r in ex_res.tables["per_step_type"].itertuples() if r.exposed_ns
    }
    # the steps table: the decomposition sums to the wall, and equals the ground truth
    truth = json.loads((FIX / "dp16_bs4.truth.json").read_text())
    rows = duckdb.sql(
        f"select step, dur_ns, busy_ns + ag_only_ns + idle_ns, exposed_ns, bs from '{f['steps']}' order by step"
    ).fetchall()
    assert [(s, w) for s, w, _, _, _ in rows] == [(s["step"], s["wall_ns"]) for s in truth["steps"]]
    assert all(w == parts for _, w, parts, _, _ in rows) and all(bs is None for *_, bs in rows)
    # copies join the events by event_id; categorical columns read as VARCHAR
    n = duckdb.sql(
        f"select count(*) from '{f['copies']}' c join '{f['events']}' e using (event_id) where e.copy_kind = 'PtoP'"
    ).fetchall()[0][0]
    assert n == len(ex.tables["copies"]) > 0
    kinds = {r[0]: r[1] for r in duckdb.sql(f"describe select * from '{f['events']}'").fetchall()}
    assert kinds["kind"] == "VARCHAR" and kinds["block_type"] == "VARCHAR" and kinds["start_ns"] == "BIGINT"


def test_allgather_tables_equal_the_truth(dp16):
    _, _, ex = dp16
    truth = json.loads((FIX / "dp16_bs4.truth.json").read_text())
    ags = ex.tables["allgathers"]
    assert sorted(zip(ags["start_ns"], ags["end_ns"], ags["type"], ags["exposed_ns"])) == sorted(
        (a["start_ns"], a["end_ns"], a["type"], a["exposed_ns"]) for a in truth["allgathers"]
    )


def test_export_without_annotation_or_allgathers(cli, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    events = [
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "scheduler.run_batch",
            "pid": 0,
            "tid": 7,
            "ts": 1000.0,
            "dur": 20000.0,
            "args": {},
        },
        kernel("gemm", 1000.0, 5000.0),
        kernel("attn", 7000.0, 9000.0),
        memcpy("Memcpy DtoH (Device -> Pinned)", 17000.0, 1000.0),
    ]
    path = write_trace(tmp_path / "plain.json", events)
    code, out, err = cli("export", path, "-o", tmp_path / "o", "--format", "json")
    assert code == 0, err
    assert "no PtoP copies" in err and "no annotation" in err
    s = json.loads(out)["summary"]
    assert (s["events_rows"], s["steps_rows"], s["blocks_rows"], s["allgathers_rows"], s["exposed_rows"]) == (
        4,
        1,
        0,
        0,
        0,
    )
    for name in ("allgathers", "exposed", "blocks", "copies"):
        back = pd.read_parquet(tmp_path / "o" / f"{name}.parquet")
        assert list(back.columns) == list(TABLE_COLUMNS[name]) and back.empty
        assert duckdb.sql(f"select count(*) from '{tmp_path / 'o' / name}.parquet'").fetchall()[0][0] == 0
    ev = pd.read_parquet(tmp_path / "o" / "events.parquet")
    assert ev["step"].tolist() == [0, 0, 0, 0] and (ev["block"] == -1).all()
    assert isinstance(ev["block_type"].dtype, pd.CategoricalDtype) and ev["block_type"].isna().all()
    steps = pd.read_parquet(tmp_path / "o" / "steps.parquet")
    assert steps["exposed_ns"].tolist() == [0] and steps["busy_ns"].tolist() == [15_000_000]


def test_export_out_must_be_a_directory(cli, tmp_path):
    (tmp_path / "f").write_text("x")
    code, _, err = cli("export", "-o", tmp_path / "f")
    assert code == 2 and "not a directory" in err
    code, _, err = cli("export")
    assert code == 2  # -o is required


# --------------------------------------------------------------------------- annotated Perfetto trace


def _analyses(trace, ann) -> dict:
    steps = step_options(step_name=ann.step.name)
    kw = {
        "ag": AllGatherOptions(
            group_size=ann.allgather.group_size, sizes=ann.allgather.sizes, local_copy=ann.allgather.local_copy
        ),
        "steps": steps,
    }
    results = {
        "wall": decompose(trace, steps=steps),
        "wall_local": decompose(trace, ag="ptop+local", steps=steps),
        "allgather": allgathers(trace, **kw),
        "exposure": exposure(trace, **kw),
        "comm": communication(trace, ag=AllGatherOptions(local_copy=ann.allgather.local_copy), steps=steps),
        "blocks": block_stats(trace, ann),
    }
    return {name: (r.summary, r.params, r.tables) for name, r in results.items()}


def _assert_same(a: dict, b: dict) -> None:
    for name, (sa, pa_, ta) in a.items():
        sb, pb, tb = b[name]
        assert sa == sb, name
        assert pa_ == pb, name
        assert list(ta) == list(tb), name
        for t in ta:
            pd.testing.assert_frame_equal(ta[t], tb[t], obj=f"{name}.{t}")


@pytest.mark.parametrize("source, ann_name", [(DP16, "k3_dp16"), (None, "decode_sample")], ids=["dp16_bs4", "sample"])
@pytest.mark.parametrize("suffix", [".json.gz", ".json"])
def test_annotated_trace_reingests_with_identical_results(cli, tmp_path, source, ann_name, suffix):
    src = source or bundled_sample()
    out = tmp_path / f"annotated{suffix}"
    args = ["annotate", *([src, "-a", ann_name] if source else []), "-o", out, "--format", "json"]
    code, stdout, err = cli(*args)
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["schema"] == "tracekit.annotate/1" and doc["summary"]["added_events"] > 0
    ann = load_annotation(ann_name)
    before = tracekit.load(src, cache=False)
    after = tracekit.load(out, cache=False)
    assert after.report.warnings == [] and after.report.dropped == {}
    _assert_same(_analyses(before, ann), _analyses(after, ann))
    # the source's events are all there, unchanged; the new ones are kind other, on no GPU
    old = after.events[after.events["cat"] != CATEGORY].reset_index(drop=True)
    new = after.events[after.events["cat"] == CATEGORY]
    cols = [c for c in before.events.columns if c not in ("name", "cat")]
    pd.testing.assert_frame_equal(old[cols], before.events[cols])
    assert old["name"].astype(str).tolist() == before.events["name"].astype(str).tolist()
    assert len(new) == doc["summary"]["added_events"]
    assert set(new["kind"]) == {"other"} and (new["device"] == -1).all() and (new["stream"] == -1).all()
    assert set(new["pid"]) == {doc["summary"]["pid"]} and doc["summary"]["pid"] not in set(before.events["pid"])
    assert after.meta["process_names"][str(doc["summary"]["pid"])].startswith("tracekit analysis")
    assert before.meta["device_properties"] == after.meta["device_properties"]
    assert before.meta["base_time_ns"] == after.meta["base_time_ns"]
    # the tracks are exact: step events start and end where the steps do; one block event per block
    ex = collect(before, ann)
    steps = new[new["name"].astype(str).str.startswith("step ")].sort_values("start_ns")
    assert steps["start_ns"].tolist() == ex.tables["steps"]["start_ns"].tolist()
    assert steps["end_ns"].tolist() == ex.tables["steps"]["end_ns"].tolist()
    tracks = {r["track"]: r["events"] for r in doc["tables"]["tracks"]}
    assert tracks["blocks"] == len(ex.tables["blocks"]) and tracks["steps"] == len(ex.tables["steps"])
    assert tracks["exposed AllGather time"] == len(ex.tables["exposed"])
    assert sum(v for k, v in tracks.items() if k.startswith("AllGathers")) == len(ex.tables["allgathers"])


def test_annotated_trace_args_and_original_records(tmp_path, dp16):
    _, _, ex = dp16
    out = tmp_path / "a.json.gz"
    write_annotated_trace(ex, out)
    doc = json.loads(gzip.decompress(out.read_bytes()))
    src = json.loads(gzip.decompress(DP16.read_bytes()))
    n = len(src["traceEvents"])
    assert doc["traceEvents"][:n] == src["traceEvents"]
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == {k: v for k, v in src.items() if k != "traceEvents"}
    extra = doc["traceEvents"][n:]
    meta = [e for e in extra if e["ph"] == "M"]
    assert {e["name"] for e in meta} == {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}
    ag = next(e for e in extra if e["ph"] == "X" and e["name"].startswith("AllGather "))
    assert ag["cat"] == CATEGORY
    assert {"type", "full_bytes", "received_bytes", "effective_gbps", "copies", "exposed_ns"} <= set(ag["args"])
    row = ex.tables["allgathers"].iloc[0]
    first = min((e for e in extra if e["ph"] == "X" and e["name"].startswith("AllGather ")), key=lambda e: e["ts"])
    assert first["args"]["full_bytes"] == int(row["full_bytes"])
    assert first["args"]["effective_gbps"] == round(float(row["effective_gbps"]), 3)
    blocks = [e for e in extra if e["ph"] == "X" and e["tid"] == 2]
    assert {e["name"] for e in blocks} == set(ex.tables["blocks"]["block_type"])
    assert all(isinstance(e["args"]["layer"], int) for e in blocks)


def test_epoch_microseconds_are_kept_exactly(tmp_path):
    """Timestamps like 1712195495519689.047 µs do not survive a float64; the annotated trace keeps them."""
    ts = ["1712195495519689.047", "1712195495529689.047", "1712195495529700.001", "1712195495539789.123"]
    text = (
        '{"traceEvents": ['
        f'{{"ph": "X", "cat": "gpu_user_annotation", "name": "scheduler.run_batch", "pid": 0, "tid": 7,'
        f' "ts": {ts[0]}, "dur": 30000.5, "args": {{}}}},'
        f'{{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": {ts[1]}, "dur": 5.25,'
        f' "args": {{"device": 0, "stream": 7, "correlation": 1, "note": 0.1}}}},'
        f'{{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": {ts[2]}, "dur": 7.0,'
        f' "args": {{"device": 0, "stream": 7, "correlation": 2}}}},'
        f'{{"ph": "X", "cat": "kernel", "name": "attn", "pid": 0, "tid": 7, "ts": {ts[3]}, "dur": 1.5,'
        f' "args": {{"device": 0, "stream": 7, "correlation": 3}}}}'
        '], "displayTimeUnit": "ms"}'
    )
    src = tmp_path / "epoch.json"
    src.write_text(text)
    trace = tracekit.load(src, cache=False)
    out = tmp_path / "epoch.annotated.json"
    write_annotated_trace(collect(trace, None), out)
    written = out.read_text()
    for t in ts + ["30000.5", "5.25", "0.1"]:
        assert t in written
    again = tracekit.load(out, cache=False)
    assert again.events[again.events["cat"] != CATEGORY]["start_ns"].tolist() == trace.events["start_ns"].tolist()
    step = again.events[(again.events["cat"] == CATEGORY) & (again.events["name"] == "step 0")]
    assert step["start_ns"].tolist() == [1712195495519689047] and step["dur_ns"].tolist() == [30000500]
    assert f'"ts":{us_text(1712195495519689047)}' in written


@pytest.mark.parametrize(
    "ns, text",
    [
        (0, "0.000"),
        (5, "0.005"),
        (1000, "1.000"),
        (5120216462, "5120216.462"),
        (1712195495519689047, "1712195495519689.047"),
        (-1500, "-1.500"),
    ],
)
def test_us_text_is_exact(ns, text):
    assert us_text(ns) == text


def test_annotate_zstd_output(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    trace = tracekit.load(bundled_sample(), cache=False)
    out = tmp_path / "s.json.zst"
    res = write_annotated_trace(collect(trace, load_annotation("decode_sample")), out)
    assert out.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    assert json.loads(zstandard.ZstdDecompressor().decompressobj().decompress(out.read_bytes()))
    assert res.summary["file_bytes"] == out.stat().st_size
    assert len(tracekit.load(out, cache=False).events) == len(trace.events) + res.summary["added_events"]


# --------------------------------------------------------------------------- plots through the CLI


def _check_png(path: Path) -> None:
    from tests.unit.render.test_plots import assert_picture

    assert_picture(path)


def test_plot_commands(cli, tmp_path):
    pytest.importorskip("matplotlib")
    d16, d2 = (
        [str(FIX / f"dp16_bs{b}.trace.json.gz") for b in (4, 24)],
        [str(FIX / f"dp2dcp8_bs{b}.trace.json.gz") for b in (64, 128)],
    )
    two = [
        *d16,
        *d2,
        "--label",
        "DP16=dp16_",
        "--label",
        "DP2xDCP8=dp2dcp8",
        "-a",
        "DP16=k3_dp16",
        "-a",
        "DP2xDCP8=k3_dp2_dcp8",
    ]
    code, out, err = cli("plot", "decomposition", *two, "-o", tmp_path / "d.png", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "tracekit.plot/1" and doc["summary"]["traces"] == 4
    pts = doc["tables"]["points"]
    assert [(p["deployment"], p["bs"]) for p in pts] == [("DP16", 4), ("DP16", 24), ("DP2xDCP8", 64), ("DP2xDCP8", 128)]
    assert all(p["busy_ns"] + p["ag_only_ns"] + p["idle_ns"] == p["wall_ns"] for p in pts)
    truth = json.loads((FIX / "dp16_bs4.truth.json").read_text())
    walls = sorted(s["wall_ns"] for s in truth["steps"])
    assert pts[0]["wall_ns"] == walls[(len(walls) - 1) // 2]  # the median step
    _check_png(tmp_path / "d.png")
    code, out, err = cli("plot", "blocks", *two, "-o", tmp_path / "b.svg", "--format", "json")
    assert code == 0, err
    assert {p["block_type"] for p in json.loads(out)["tables"]["points"]} >= {"KDA", "MoE", "MLA", "head", "tail"}
    from tests.unit.render.test_plots import assert_picture

    assert_picture(tmp_path / "b.svg")
    code, out, err = cli("plot", "exposure", *two, "-o", tmp_path / "e.png", "--format", "json")
    assert code == 0, err
    types = {(p["deployment"], p["type"]) for p in json.loads(out)["tables"]["points"]}
    assert ("DP2xDCP8", "MoE") in types and ("DP16", "KDA") in types
    _check_png(tmp_path / "e.png")
    code, out, err = cli(
        "plot", "timeline", d16[0], "-a", "k3_dp16", "--step", "1", "-o", tmp_path / "t.png", "--format", "json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["summary"]["step"] == 1 and {r["stream"] for r in doc["tables"]["points"]} >= {7, 20}
    _check_png(tmp_path / "t.png")


def test_plot_defaults_and_errors(cli, tmp_path):
    pytest.importorskip("matplotlib")
    code, out, err = cli("plot", "timeline", "-o", tmp_path / "t.png")
    assert code == 0, err  # the bundled sample and its annotation; the median step
    _check_png(tmp_path / "t.png")
    code, out, err = cli("plot", "decomposition", "-o", tmp_path / "d.png", "--format", "json")
    assert code == 0 and "no bs" in err  # drawn under its file name
    assert json.loads(out)["tables"]["points"][0]["bs"] is None
    code, _, err = cli("plot", "decomposition", "-o", tmp_path / "d.jpg")
    assert code == 2 and ".png or .svg" in err
    code, _, err = cli("plot", "blocks", str(DP16), "-o", tmp_path / "b.png")
    assert code == 2 and "needs an annotation" in err
    code, _, err = cli("plot", "decomposition", str(DP16), "--label", "X=nomatch", "-o", tmp_path / "d.png")
    assert code == 2 and "matches no --label" in err
    code, _, err = cli("plot", "timeline", str(DP16), "-a", "k3_dp16", "--step", "99", "-o", tmp_path / "t.png")
    assert code == 2 and "no step 99" in err


def test_docs_list_every_export_column_and_command():
    text = DOCS.read_text()
    from tracekit.exporters.parquet import LEDGER_COLUMNS

    for name, cols in {**TABLE_COLUMNS, **LEDGER_COLUMNS}.items():
        assert f"`{name}.parquet`" in text
        if name != "events":
            for c in cols:
                assert c in text, (name, c)
    for c in ("step", "block", "block_type", "layer", "type_layer", "op_tag"):
        assert f"`{c}`" in text
    for schema in ("tracekit.export/1", "tracekit.annotate/1", "tracekit.plot/1"):
        assert schema in text
    assert np.isfinite(len(text))


def test_export_with_a_launch_log_adds_the_ledger(cli, tmp_path):
    syn = Path(__file__).resolve().parents[2] / "fixtures" / "synthetic"
    out = tmp_path / "exp"
    code, stdout, err = cli(
        "export",
        syn / "dp16_bs4.trace.json.gz",
        "-a",
        "k3_dp16",
        "-o",
        out,
        "--log",
        syn / "dp16.launch.log",
        "--format",
        "json",
    )
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["summary"]["not_exported"] == [] and doc["summary"]["ledger_rows"] > 10
    ledger = pd.read_parquet(out / "ledger.parquet").set_index("row")
    assert ledger.loc["load_peak_gib", "value"] == pytest.approx(145.2)
    assert ledger.loc["fixed_overhead_gib", "value"] == pytest.approx(113.98)
    assert json.loads(ledger.loc["kv_gib", "lines"]) and ledger.loc["kv_gib", "how"]
    timeline = pd.read_parquet(out / "ledger_timeline.parquet")
    assert list(timeline.columns) == ["stage", "avail_gib", "line", "kind"] and len(timeline) >= 8
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["not_exported"] == {} and {"ledger", "ledger_timeline"} <= {t["table"] for t in manifest["tables"]}


def test_missing_values_are_null_in_the_files(tmp_path):
    """DuckDB's avg(bytes) over the exported events is the mean of the real byte counts (-1 was averaged in)."""
    import duckdb

    from tracekit.annotation import load_annotation
    from tracekit.exporters import export_parquet

    syn = Path(__file__).resolve().parents[2] / "fixtures" / "synthetic"
    trace = tracekit.load(syn / "dp16_bs4.trace.json.gz", cache=False)
    export_parquet(trace, load_annotation("k3_dp16"), tmp_path)
    ev = trace.events
    real = ev.loc[ev["bytes"] >= 0, "bytes"]
    avg, n, rows, outside = duckdb.sql(
        f"select avg(bytes), count(bytes), count(*), count(*) filter (where step is null)"
        f" from '{tmp_path / 'events.parquet'}'"
    ).fetchall()[0]
    assert (n, rows) == (len(real), len(ev)) and avg == pytest.approx(real.mean(), rel=1e-12)
    assert outside == int((pd.read_parquet(tmp_path / "events.parquet")["step"].isna()).sum()) > 0
    back = pd.read_parquet(tmp_path / "events.parquet")
    assert str(back["bytes"].dtype) == "Int64" and str(back["grid_x"].dtype) == "Int32"
    assert back["bytes"].isna().sum() == int((ev["bytes"] == -1).sum())
