"""The CLI end to end, in-process: formats, the JSON contract, exit codes and messages."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.conftest import kernel, write_trace

ENVELOPE = {"tracekit", "schema", "command", "inputs", "params", "warnings", "summary", "tables"}
INFO_SUMMARY = {"rank", "events_total", "kernels", "memcpys", "memsets", "gpu_annotations", "span_ns", "num_sms"}


def test_info_default_runs_on_bundled_sample(cli):
    code, out, err = cli("info")
    assert code == 0, err
    assert "tracekit info" in out and "by_stream" in out
    assert err == ""


def test_info_json_contract(cli):
    code, out, _ = cli("info", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == ENVELOPE
    assert doc["schema"] == "tracekit.info/1" and doc["command"] == "info"
    assert INFO_SUMMARY <= set(doc["summary"])
    assert {"by_kind", "by_stream"} <= set(doc["tables"])
    s = doc["summary"]
    # the bundled sample: 3 steps × (6 layers × (1 local copy + 7 ops) + 1 all-gather), 3 × (6 × 7 PtoP + 1 DtoH)
    assert (s["kernels"], s["memcpys"], s["memsets"], s["gpu_annotations"]) == (147, 129, 0, 6)
    assert s["rank"] == 0 and s["num_sms"] == 148
    assert isinstance(s["span_ns"], int) and s["span_ns"] > 0
    by_kind = {r["kind"]: r["count"] for r in doc["tables"]["by_kind"]}
    assert by_kind["kernel"] == 147
    streams = {r["stream"]: r for r in doc["tables"]["by_stream"]}
    assert set(streams) == {7, 20, 24}
    assert streams[20]["memcpys"] == 126


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "md"])
@pytest.mark.parametrize(
    "command", ["info", "kernels", "steps", "wall", "temporal", "overlap", "allgather", "exposure", "comm", "report"]
)
def test_every_command_offers_every_format(cli, command, fmt):
    code, out, err = cli(command, "--format", fmt)
    assert code == 0, err
    assert out.strip()
    if fmt == "csv":
        rows = list(csv.reader(io.StringIO(out)))
        assert len(rows) >= 2
    if fmt == "md":
        assert "| --- |" in out


def test_kernels_match_top_and_csv_table(cli):
    code, out, _ = cli("kernels", "--match", "deep_gemm", "--top", "1", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and len(doc["tables"]["kernels"]) == 1
    row = doc["tables"]["kernels"][0]
    assert "deep_gemm" in row["name"]
    assert set(row) == {
        "name",
        "count",
        "total_ns",
        "mean_ns",
        "median_ns",
        "min_ns",
        "max_ns",
        "share_of_busy_pct",
        "category",
    }
    assert row["category"] == "gemm"  # a DeepGEMM kernel, by tracekit/data/categories.json
    assert doc["summary"]["names_matched"] == 2 and doc["summary"]["names_shown"] == 1
    code, out, _ = cli("kernels", "--format", "csv", "--table", "summary")
    assert code == 0 and out.startswith("kernels_total,")
    code, out, err = cli("kernels", "--format", "csv", "--table", "nope")
    assert code == 2 and "no table 'nope'" in err


def test_csv_out_dir_writes_one_file_per_table(cli, tmp_path):
    code, _, err = cli("info", "--format", "csv", "--out", tmp_path / "o")
    assert code == 0
    names = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert "info.summary.csv" in names and "info.by_stream.csv" in names


def test_bad_regex_is_usage_error(cli):
    code, _, err = cli("kernels", "--match", "(")
    assert code == 2 and "not a valid regular expression" in err


@pytest.mark.parametrize(
    "setup,needle",
    [
        (lambda d: d / "missing.json", "does not exist"),
        (lambda d: d, "no trace file"),
        (lambda d: _write(d / "x.json", b"not json at all"), "not JSON"),
        (lambda d: _write(d / "x.json", b'{"a": 1}'), "traceEvents"),
        (lambda d: _write(d / "x.json", b'{"traceEvents": []}'), "no usable trace events"),
        (lambda d: _write(d / "x.json.gz", b"\x1f\x8b\x08\x00garbage-garbage-garbage"), "x.json.gz"),
    ],
)
def test_bad_input_exits_3_with_one_sentence(cli, tmp_path, setup, needle):
    path = setup(tmp_path)
    code, out, err = cli("info", path)
    assert code == 3, (out, err)
    assert needle in err
    assert "Traceback" not in err and out == ""
    assert len(err.strip().splitlines()) == 1


def _write(p, data: bytes):
    p.write_bytes(data)
    return p


def test_no_kernels_exits_4(cli, tmp_path):
    p = write_trace(
        tmp_path / "cpu.json",
        [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0}],
    )
    code, out, _ = cli("info", p, "--format", "json")
    assert code == 0 and json.loads(out)["summary"]["kernels"] == 0
    code, _, err = cli("kernels", p)
    assert code == 4 and "no kernel events" in err


def test_warnings_go_to_stderr_and_json(cli, tmp_path):
    evs = [kernel(f"k{i}", float(i * 10), 5.0) for i in range(40)]
    full = write_trace(tmp_path / "f.json", evs).read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(full[: len(full) // 2])
    code, out, err = cli("info", cut, "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["summary"]["salvaged"] is True and doc["summary"]["bytes_lost"] > 0
    assert any("truncated" in w for w in doc["warnings"]) and "truncated" in err
    code, out, err = cli("--quiet", "info", cut, "--format", "json")
    assert code == 0 and err == ""


def test_version_and_help(cli):
    code, out, _ = cli("--version")
    assert code == 0 and out.startswith("tracekit ")
    for command in ("info", "kernels", "steps", "wall", "temporal", "overlap", "allgather", "exposure", "comm"):
        code, out, _ = cli(command, "--help")
        assert code == 0 and "--format" in out


def test_wall_steps_temporal_json_contract(cli):
    code, out, _ = cli("wall", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "tracekit.wall/1"
    assert {"steps", "median_wall_ns", "median_busy_ns", "median_ag_only_ns", "median_idle_ns"} <= set(doc["summary"])
    rows = doc["tables"]["per_step"]
    assert len(rows) == 3 and list(rows[0]) == [
        "step",
        "start_ns",
        "wall_ns",
        "busy_ns",
        "ag_only_ns",
        "idle_ns",
        "empty",
    ]
    assert all(r["busy_ns"] + r["ag_only_ns"] + r["idle_ns"] == r["wall_ns"] for r in rows)
    code, out, _ = cli("wall", "--ag", "ptop+local", "--format", "json")
    assert json.loads(out)["params"]["ag"] == "ptop+local"
    code, out, _ = cli("steps", "--format", "json")
    doc = json.loads(out)
    assert doc["summary"]["marker"] == "scheduler.run_batch"
    assert {"step", "name", "start_ns", "dur_ns"} <= set(doc["tables"]["steps"][0])
    code, out, _ = cli("temporal", "--per-stream", "--format", "json")
    doc = json.loads(out)
    assert set(doc["summary"]) == {
        "span_ns",
        "busy_ns",
        "idle_ns",
        "compute_ns",
        "comm_ns",
        "memory_ns",
        "non_compute_ns",
        "comm_compute_overlap_pct",
        "window",
        "window_start_ns",
        "window_end_ns",
        "profiler_steps",
        "clock_outliers",
    }  # the window keys: extended, issue 25; clock_outliers: issue 41
    assert all(isinstance(doc["summary"][k], int) for k in doc["summary"] if k.endswith("_ns"))
    assert {r["stream"] for r in doc["tables"]["per_stream"]} == {7, 20, 24}


def test_no_steps_exits_4_naming_annotations(cli, tmp_path):
    p = write_trace(
        tmp_path / "k.json",
        [
            kernel("k", 1.0, 1.0),
            {"ph": "X", "cat": "user_annotation", "name": "forward", "pid": 1, "tid": 1, "ts": 0.0, "dur": 5.0},
        ],
    )
    code, _, err = cli("wall", p)
    assert code == 0 and "forward (1)" in err and "--step-name" in err and "whole GPU span" in err
    code, _, err = cli("wall", p, "--step-name", "scheduler.run_batch")
    assert code == 4 and "forward (1)" in err and "--step-name" in err
    code, _, err = cli("steps", p, "--step-name", "nope")
    assert code == 4 and "'nope'" in err


def test_bad_selector_and_ag_are_usage_errors(cli):
    code, _, err = cli("overlap", "--a", "colour:red")
    assert code == 2 and "KEY:VALUE" in err
    code, _, err = cli("wall", "--ag", "local")
    assert code == 2


def test_allgather_exposure_comm_json_contract(cli):
    code, out, err = cli("allgather", "--ag-size", "layer=102375424", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "tracekit.allgather/1"
    assert {"allgathers", "group_size", "median_received_bytes_per_step", "unmatched"} <= set(doc["summary"])
    assert doc["summary"]["allgathers"] == 18 and doc["summary"]["group_size"] == 8 and doc["summary"]["unmatched"] == 0
    row = doc["tables"]["per_ag"][0]
    assert {
        "step",
        "stream",
        "type",
        "start_ns",
        "end_ns",
        "copies",
        "local_copy",
        "received_bytes",
        "full_bytes",
        "effective_gbps",
    } <= set(row)
    assert {"step", "type", "count", "received_bytes"} <= set(doc["tables"]["per_step_type"][0])
    code, out, _ = cli("exposure", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and "median_exposed_ns_per_step" in doc["summary"]
    assert list(doc["tables"]["per_step_type"][0]) == ["step", "type", "exposed_ns"]
    code, out, _ = cli("comm", "--format", "json")
    doc = json.loads(out)
    assert code == 0
    assert {"step", "class", "name", "critical_ns", "side_ns", "count"} <= set(doc["tables"]["per_step_class"][0])
    code, _, err = cli("allgather", "--ag-size", "nonsense")
    assert code == 2 and "TYPE=BYTES" in err


def test_verbose_says_what_was_read_and_progress_reports_bytes(cli, tmp_path):
    import tracekit

    code, out, err = cli("-v", "info", "--no-cache", "--format", "json")
    assert code == 0 and "records" in err and "events kept" in err and json.loads(out)["command"] == "info"
    seen = []
    p = write_trace(tmp_path / "p.json", [kernel(f"k{i}", float(i), 0.5) for i in range(3000)])
    tracekit.load(p, cache=False, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] == p.stat().st_size
    code, _, err = cli("-q", "-v", "info", "--no-cache")  # quiet wins over warnings, not over --verbose
    assert code == 0


def test_report_is_the_main_job(cli):
    code, out, _ = cli("report", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "tracekit.report/1"
    s = doc["summary"]
    assert s["steps"] == 3 and s["blocks_per_step"] == {"head": 1, "layer": 6} and s["allgathers"] == 18
    assert s["median_wall_ns"] == doc["tables"]["wall"][1]["wall_ns"]
    assert {"wall", "block_types", "op_tags", "allgather_types", "exposure_types", "bandwidth", "comm"} <= set(
        doc["tables"]
    )
