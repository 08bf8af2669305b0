"""A13/A14 end to end: analyze two synthetic deployments, compare them, bench files, the rank map."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.analyses.fleet.deployment_compare import compare, config_diff, graph_bucket
from tracekit.ingest.launch_script import launch_config
from tracekit.fan_out import load_side
from tracekit.analyses.fleet.rank_map import rank_map
from tracekit.errors import UsageError
from tracekit.fan_out import analyze
from tracekit.render.outdir import write_outputs
from tracekit.ingest.bench import read_bench
from tracekit.ingest.discover import discover, parse_context, rank_tags

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sweep_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    jobs = [("dp16", 4), ("dp16", 8), ("dp16", 16), ("dp16", 24), ("dp2dcp8", 64), ("dp2dcp8", 128)]
    for preset, bs in jobs:
        side = "dp16" if preset == "dp16" else "dp2"
        subprocess.run(
            [
                sys.executable,
                str(REPO / "fixtures" / "synth.py"),
                "write",
                "--preset",
                preset,
                "--bs",
                str(bs),
                "--steps",
                "2",
                "--out",
                str(root / side / f"d_bs{bs}_100k"),
            ],
            check=True,
            capture_output=True,
        )
    return root


def test_discover_reads_points_and_ranks(tmp_path):
    for name in ("1758612345.12-TP-0.trace.json.gz", "1758612345.12-TP-1.trace.json.gz"):
        d = tmp_path / "d_bs16_100k"
        d.mkdir(exist_ok=True)
        (d / name).write_bytes(b"")
    refs = discover(tmp_path, rank="TP-1")
    assert [(r.bs, r.context, r.ranks) for r in refs] == [(16, 100_000, {"TP": 1})]
    assert len(discover(tmp_path, rank=None)) == 2
    assert parse_context("1m") == 1_000_000 and rank_tags("x-TP-3-DP-3-EP-3-decode") == {"TP": 3, "DP": 3, "EP": 3}


def test_analyze_sweep_shape(sweep_dirs, tmp_path):
    r = analyze(sweep_dirs / "dp16", annotation="k3_dp16", jobs=1)
    s = r.tables["sweep"].set_index("bs")
    assert list(s.index) == [4, 8, 16, 24] and (s["context"] == 100_000).all()
    # the study's shape: exposure and only-AllGather time fall with bs, the PtoP traffic does not
    assert s["median_ag_only_ns"].is_monotonic_decreasing
    assert s.loc[4, "median_ag_only_ns"] > 2.5 * s.loc[24, "median_ag_only_ns"]
    assert s["median_received_bytes"].nunique() == 1
    assert s["median_ptop_busy_ns"].max() / s["median_ptop_busy_ns"].min() < 1.02
    assert s["median_wall_ns"].is_monotonic_increasing
    bt = r.tables["block_types"]
    assert set(bt["block_type"]) >= {"KDA", "MLA", "MoE", "draft"}
    manifest = json.loads(write_outputs(r, tmp_path / "out").read_text())
    assert manifest["tables"]["sweep"]["rows"] == 4 and (tmp_path / "out" / "analyze.json").exists()


def test_jobs_give_identical_results(sweep_dirs):
    one = analyze(sweep_dirs / "dp2", annotation="k3_dp2_dcp8", jobs=1)
    two = analyze(sweep_dirs / "dp2", annotation="k3_dp2_dcp8", jobs=2)
    for name in one.tables:
        assert one.tables[name].equals(two.tables[name]), name


def test_dask_gives_identical_results(sweep_dirs):
    distributed = pytest.importorskip("dask.distributed", reason="dask[distributed] is an optional extra")
    one = analyze(sweep_dirs / "dp2", annotation="k3_dp2_dcp8", jobs=1)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False) as cluster:
        via = analyze(sweep_dirs / "dp2", annotation="k3_dp2_dcp8", dask=cluster.scheduler_address)
    for name in one.tables:
        assert one.tables[name].equals(via.tables[name]), name


def test_compare_dp16_against_dp2(sweep_dirs, tmp_path):
    write_outputs(analyze(sweep_dirs / "dp16", annotation="k3_dp16"), tmp_path / "a")
    a = load_side(tmp_path / "a", label="dp16", dp=16, graph_bs=(1, 2, 4, 8, 16, 24))
    b = load_side(sweep_dirs / "dp2", label="dp2", dp=2, annotation="k3_dp2_dcp8")
    r = compare(a, b)
    m = r.tables["matched"].set_index("concurrency")
    assert list(m.index) == [128, 256]
    # DP16 is slower at low instance concurrency and closer at high: B (DP2) over A (DP16) throughput falls
    assert m.loc[128, "throughput_ratio_b_over_a"] > m.loc[256, "throughput_ratio_b_over_a"] > 1.0
    steps = r.tables["steps"]
    row = steps[(steps["deployment"] == "dp16") & (steps["bs"] == 8)].iloc[0]
    assert row["est_throughput_tok_s"] == pytest.approx(8 * 16 * 3.5 / (row["median_wall_ns"] / 1e9))
    parts = r.tables["parts"]
    assert set(parts["part"]) == {"wall", "busy", "ag_only", "idle", "exposed"}
    assert set(r.tables["block_types"]["block_type"]) >= {"KDA", "MLA", "MoE"}


def test_cuda_graph_buckets():
    assert graph_bucket(20, (1, 2, 4, 8, 16, 24)) == 24 and graph_bucket(12, (1, 2, 4, 8, 16, 24)) == 16
    assert graph_bucket(30, (1, 2, 4, 8, 16, 24)) is None and graph_bucket(5, ()) == 5


def test_bench_formats(tmp_path):
    (tmp_path / "a.csv").write_text("deployment,context,concurrency,generation_time_ms\ndp16,100000,64,83.5\n")
    (tmp_path / "serving.jsonl").write_text(
        json.dumps(
            {
                "backend": "sglang",
                "max_concurrency": 32,
                "mean_tpot_ms": 14.0,
                "median_tpot_ms": 13.5,
                "random_input_len": 4096,
                "output_throughput": 2000.0,
            }
        )
        + "\n"
    )
    (tmp_path / "one.jsonl").write_text(
        json.dumps(
            {
                "run_name": "x",
                "batch_size": 16,
                "input_len": 1024,
                "output_len": 101,
                "latency": 2.1,
                "ttft": 0.1,
                "output_throughput": 800.0,
            }
        )
        + "\n"
    )
    df = read_bench([tmp_path / "a.csv", tmp_path / "serving.jsonl", tmp_path / "one.jsonl"]).set_index("format")
    assert df.loc["tracekit", "step_time_ms"] == 83.5 and df.loc["tracekit", "concurrency"] == 64
    assert df.loc["sglang.bench_serving", "tpot_ms"] == 13.5 and df.loc["sglang.bench_serving", "context"] == 4096
    assert df.loc["sglang.bench_one_batch_server", "step_time_ms"] == pytest.approx(2000 / 101)
    (tmp_path / "bad.csv").write_text("foo,bar\n1,2\n")
    from tracekit.errors import InputError

    with pytest.raises(InputError, match="matches no benchmark format"):
        read_bench([tmp_path / "bad.csv"])


def test_launch_config_diff(tmp_path):
    (tmp_path / "start_a.sh").write_text(
        "export SGLANG_VOCAB_TP_SIZE=8\nexport SGLANG_X=1\npython -m sglang.launch_server"
        " \\\n  --tp 16 --dp 16 --enable-dp-attention \\\n  --mem-fraction-static 0.88\n"
    )
    (tmp_path / "start_b.sh").write_text(
        "export SGLANG_X=1\nSGLANG_DEEPGEMM_MASKED_BLOCK_M=32 python -m"
        " sglang.launch_server --tp 16 --dp 2 --enable-dp-attention"
        " --mem-fraction-static=0.83\n"
    )
    d = config_diff(launch_config(tmp_path / "start_a.sh"), launch_config(tmp_path / "start_b.sh")).set_index("key")
    assert d.loc["--dp"].tolist() == ["16", "2"] and d.loc["--mem-fraction-static"].tolist() == ["0.88", "0.83"]
    assert d.loc["SGLANG_VOCAB_TP_SIZE", "a"] == "8" and d.loc["SGLANG_DEEPGEMM_MASKED_BLOCK_M", "b"] == "32"
    assert "SGLANG_X" not in d.index and "--tp" not in d.index


@pytest.mark.parametrize(
    "tp,dp,cp,expect",
    [
        (16, 2, 1, {"attn_tp_size": 8, 9: (1, 1)}),
        (16, 16, 1, {"attn_tp_size": 1, 9: (0, 9)}),
        (16, 2, 8, {"attn_tp_size": 1, 9: (0, 1)}),
    ],
)
def test_rank_map(tp, dp, cp, expect):
    r = rank_map(tp=tp, dp=dp, attn_cp=cp).tables["ranks"].set_index("tp_rank")
    assert (r["attn_tp_size"] == expect["attn_tp_size"]).all()
    assert (r.loc[9, "attn_tp_rank"], r.loc[9, "attn_dp_rank"]) == expect[9]
    off = rank_map(tp=8, dp=8, dp_attention=False).tables["ranks"]
    assert (off["attn_dp_rank"] == 0).all() and (off["attn_tp_size"] == 8).all()


def test_rank_map_with_dcp_and_ep():
    """The study's DP2 × DCP8 on 16 GPUs: attention TP 8 (DCP splits the KV cache, not the attention group), each
    request's KV split 8 ways; rank 9 is attention TP rank 1 of DP group 1, DCP rank 1. EP 4: MoE TP 4, rank 9 is
    in expert group 9 // 4 = 2 as MoE TP rank 1."""
    res = rank_map(tp=16, dp=2, dcp=8, ep=4)
    r = res.tables["ranks"].set_index("tp_rank")
    assert res.summary["attn_tp_size"] == 8 and res.summary["kv_split"] == 8 and res.summary["moe_tp_size"] == 4
    assert tuple(r.loc[9, ["attn_tp_rank", "attn_dp_rank", "dcp_rank", "ep_rank", "moe_tp_rank"]]) == (1, 1, 1, 2, 1)
    assert (rank_map(tp=16, dp=16).tables["ranks"]["ep_rank"] == list(range(16))).all()  # default ep = tp
    with pytest.raises(UsageError, match="--dcp 3 does not divide"):
        rank_map(tp=16, dp=2, dcp=3)
    with pytest.raises(UsageError, match="not divisible by --ep 3"):
        rank_map(tp=16, ep=3)


def test_compare_cli_with_launch_logs(sweep_dirs, tmp_path, cli):
    syn = REPO / "fixtures" / "synthetic"
    write_outputs(analyze(sweep_dirs / "dp16", annotation="k3_dp16"), tmp_path / "dp16")
    write_outputs(analyze(sweep_dirs / "dp2", annotation="k3_dp2_dcp8"), tmp_path / "dp2")
    code, out, err = cli(
        "compare",
        tmp_path / "dp16",
        tmp_path / "dp2",
        "--log-a",
        syn / "dp16.launch.log",
        "--log-b",
        syn / "dp2dcp8.launch.log",
        "--format",
        "json",
    )
    assert code == 0, err
    doc = json.loads(out)
    # dp and the captured CUDA-graph sizes come from the logs' server_args
    assert doc["params"]["dp_a"] == 16 and doc["params"]["dp_b"] == 2
    assert doc["params"]["cuda_graph_bs_a"] == [1, 2, 4, 8, 16, 24]
    assert doc["summary"]["matched_concurrencies"] == [128, 256]
    config = {r["key"]: (r["a"], r["b"]) for r in doc["tables"]["config"]}
    assert config["--mem-fraction-static"] == ("0.88", "0.83") and config["--dcp-size"] == ("1", "8")
    ledger = {r["row"]: r for r in doc["tables"]["ledger"]}
    assert ledger["fixed_overhead_gib"]["diff"] == pytest.approx(10.41)
    # no --accept-len was given: params say so (the page's command must not add one), each side's is in the summary
    assert doc["params"]["accept_len"] is None
    assert doc["summary"]["accept_len_source_a"] != "option" and doc["summary"]["accept_len_a"] > 0


# --------------------------------------------------------------------------- points that cannot be used

SYN_TRACE = REPO / "fixtures" / "synthetic" / "dp16_bs4.trace.json.gz"


def _points(root: Path, bad: dict[str, bytes]) -> Path:
    """d_bs4_100k holds a good trace; each of ``bad`` (a folder name → the bytes of its trace) a broken one."""
    (root / "d_bs4_100k").mkdir(parents=True)
    (root / "d_bs4_100k" / "1-TP-0.trace.json.gz").write_bytes(SYN_TRACE.read_bytes())
    for name, data in bad.items():
        (root / name).mkdir()
        (root / name / "1-TP-0.trace.json.gz").write_bytes(data)
    return root


def test_a_point_that_cannot_be_read_is_dropped_counted_and_named(tmp_path, cli):
    """One empty and one corrupt trace no longer end the sweep (exit 3 for all of it): each point is dropped,
    counted (summary.points_dropped), named in a warning and listed in tables.skipped; the rest is analysed."""
    root = _points(tmp_path / "sw", {"d_bs8_100k": b"", "d_bs16_100k": b"\x1f\x8b\x08junk"})
    code, out, err = cli("analyze", root, "-a", "k3_dp16", "-f", "json", "-j", "1")
    assert code == 0, err
    doc = json.loads(out)
    assert [r["point"] for r in doc["tables"]["sweep"]] == ["d_bs4_100k"]
    assert doc["summary"]["points_dropped"] == 2 and doc["summary"]["traces"] == 1
    assert doc["summary"]["skipped"] == 2
    reasons = {Path(r["path"]).parent.name: r["reason"] for r in doc["tables"]["skipped"]}
    assert set(reasons) == {"d_bs8_100k", "d_bs16_100k"}
    assert all(r.startswith("point dropped") for r in reasons.values()) and "is empty" in reasons["d_bs8_100k"]
    for point in ("d_bs8_100k", "d_bs16_100k"):
        assert any(w.startswith(f"point {point} dropped from the sweep (1 of 3 analysed)") for w in doc["warnings"])
        assert f"warning: point {point} dropped" in err
    # the process pool drops the same points and gives the same tables
    pool = analyze(root, annotation="k3_dp16", jobs=2)
    assert pool.summary["points_dropped"] == 2
    assert pool.tables["skipped"].to_dict("records") == doc["tables"]["skipped"]


def test_an_unreadable_point_directory_is_named_and_counted(tmp_path, cli, monkeypatch):
    """A point folder that cannot be listed (permission denied; faked, as root can read anything) is skipped with a
    warning that names it, and counted; the rest is analysed."""
    import os

    root = _points(tmp_path / "sw", {"d_bs8_100k": SYN_TRACE.read_bytes()})
    locked = str(root / "d_bs8_100k")
    real = os.scandir

    def scandir(path="."):
        if os.fspath(path) == locked:
            raise PermissionError(13, "Permission denied", locked)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    code, out, err = cli("analyze", root, "-a", "k3_dp16", "-f", "json", "-j", "1")
    assert code == 0, err
    doc = json.loads(out)
    assert [r["point"] for r in doc["tables"]["sweep"]] == ["d_bs4_100k"] and doc["summary"]["skipped"] == 1
    assert doc["tables"]["skipped"] == [{"path": locked, "reason": "cannot be read (Permission denied)"}]
    assert f"skipped {locked}: cannot be read" in err


def test_a_sweep_with_no_usable_point_exits_3(tmp_path, cli):
    root = tmp_path / "sw"
    for name in ("d_bs4_100k", "d_bs8_100k"):
        (root / name).mkdir(parents=True)
        (root / name / "1-TP-0.trace.json.gz").write_bytes(b"")
    code, out, err = cli("analyze", root, "-a", "k3_dp16", "-f", "json", "-j", "1")
    assert code == 3 and out == "" and err.count("\n") == 1, err
    assert f"{root}: none of its 2 operating point(s) could be analysed" in err and "is empty" in err


def test_compare_says_which_points_a_side_dropped(tmp_path):
    """A point dropped from a side's sweep is said by compare too, whether the side is analysed now or read from an
    analyze -o directory."""
    from tracekit.fan_out import compare_deployments

    a = _points(tmp_path / "a", {"d_bs8_100k": b""})
    b = _points(tmp_path / "b", {})
    now = compare_deployments(a, b, dp_a=16, dp_b=16, annotation_a="k3_dp16", annotation_b="k3_dp16")
    assert any(w.startswith("a: point d_bs8_100k dropped from the sweep") for w in now.warnings), now.warnings
    write_outputs(analyze(a, annotation="k3_dp16"), tmp_path / "a_out")
    later = compare_deployments(tmp_path / "a_out", b, dp_a=16, dp_b=16, annotation_b="k3_dp16")
    assert any(w.startswith("a_out: 1 point(s) were dropped when") and "is empty" in w for w in later.warnings), (
        later.warnings
    )


# --------------------------------------------------------------------------- Dask's daemonic workers


def test_analyze_dask_on_processes_decodes_a_helper_sized_trace(tmp_path, cli, monkeypatch):
    """`analyze --dask` on a LocalCluster of processes, with the point's trace at the size that starts the ingest's
    decode helper (TRACEKIT_WORKERS=2: the helper whatever the size; the workers inherit it): a Dask worker is
    daemonic and may not fork, so the sweep's point decodes there without the helper, as a run's ranks do
    (``load_in_worker``). It once died in the worker: "daemonic processes are not allowed to have children"."""
    distributed = pytest.importorskip("dask.distributed", reason="dask[distributed] is an optional extra")
    root = tmp_path / "sw"
    (root / "d_bs4_100k").mkdir(parents=True)
    (root / "d_bs4_100k" / "1-TP-0.trace.json.gz").write_bytes(SYN_TRACE.read_bytes())
    monkeypatch.setenv("TRACEKIT_WORKERS", "2")
    here = analyze(root, annotation="k3_dp16", jobs=1, cache=False)  # this process may fork: the helper decodes
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as lc:
        code, out, err = cli(
            "analyze", root, "-a", "k3_dp16", "--dask", lc.scheduler_address, "--no-cache", "-f", "json"
        )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["summary"]["traces"] == 1 and doc["summary"]["points_dropped"] == 0
    assert doc["tables"]["sweep"] == json.loads(here.to_json())["tables"]["sweep"]
