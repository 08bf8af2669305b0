"""Findings on small hand-built traces and logs, where every number is obvious."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import tracekit
from tracekit.analyses.fleet.deployment_compare import DEFAULT_ACCEPT_LEN, Side, accept_len_of, compare
from tracekit.analyses.findings.rules import FINDING_COLUMNS, rank_findings
from tracekit.analyses.findings.trace_findings import findings
from tracekit.gpu_specs import ctas_per_sm, load_profile, sm_limits
from tracekit.errors import UsageError
from tracekit.ingest.sglang_log import read_log

from conftest import cpu_ann, gpu_ann, kernel, launch, load_events, write_trace

MARK = "scheduler.run_batch"


def _idle_trace(tmp_path):
    """One step 1000–1100 µs; four gaps of known cause:
    1010–1030 host (k2's launch returns at 1026, after the GPU went idle), 1040–1050 sync (k3 launched at 1000),
    1060–1062 short (2 µs < 5 µs), 1090–1100 unattributed (nothing follows in the step)."""
    ev = [
        cpu_ann(MARK, 980.0, 130.0, ext=1),
        gpu_ann(MARK, 1000.0, 100.0, ext=1),
        launch("cudaLaunchKernel", 990.0, 1),
        kernel("k_first", 1000.0, 10.0, corr=1),
        launch("cudaLaunchKernel", 1025.0, 2),
        kernel("k_host", 1030.0, 10.0, corr=2),
        launch("cudaLaunchKernel", 1000.0, 3),
        kernel("k_sync", 1050.0, 10.0, corr=3),
        launch("cudaLaunchKernel", 1001.0, 4),
        kernel("k_short", 1062.0, 28.0, corr=4),
    ]
    return load_events(tmp_path, ev)


def test_idle_gaps_are_split_by_why_the_gpu_waited(tmp_path):
    res = findings(_idle_trace(tmp_path))
    f = res.tables["findings"].set_index("kind")
    assert f.loc["idle_host", "gain_ms_per_step"] == pytest.approx(0.020)
    assert f.loc["idle_sync", "gain_ms_per_step"] == pytest.approx(0.010)
    assert f.loc["idle_short", "gain_ms_per_step"] == pytest.approx(0.002)
    assert f.loc["idle_unattributed", "gain_ms_per_step"] == pytest.approx(0.010)
    assert "k_host" in f.loc["idle_sync", "evidence"]  # what ended just before the wait
    assert f.loc["idle_host", "gain_pct"] == pytest.approx(20.0)  # of the 100 µs step
    # severity is relative to the step (docs/findings.md, Severity): 20 µs is 20 % of the 100 µs step and at the
    # 20 µs absolute floor, so major; 10 µs and 2 µs are under the floor whatever their share: minor, none dropped
    assert not f.loc["idle_host", "minor"] and f.drop(index="idle_host")["minor"].all()
    assert res.summary["findings"] == len(f) and res.summary["minor"] == len(f) - 1
    src = res.tables["sources"].set_index("source")
    assert bool(src.loc["idle", "ran"]) and not bool(src.loc["exposure", "ran"])
    assert "PtoP" in src.loc["exposure", "reason"]
    assert "--log" in src.loc["graphs", "reason"]


def test_min_ms_decides_minor_and_ranking_is_by_gain(tmp_path):
    res = findings(_idle_trace(tmp_path), min_ms=0.005)
    f = res.tables["findings"]
    assert list(f["rank"]) == list(range(1, len(f) + 1))
    major = f[~f["minor"]]
    assert list(major["kind"]) == ["idle_host", "idle_sync", "idle_unattributed"] or list(major["kind"]) == [
        "idle_host",
        "idle_unattributed",
        "idle_sync",
    ]  # 10 µs ties
    assert f.iloc[-1]["kind"] == "idle_short" and bool(f.iloc[-1]["minor"])
    assert list(f.columns) == FINDING_COLUMNS
    with pytest.raises(UsageError):
        findings(_idle_trace(tmp_path), min_ms=-1)


def test_a_trace_with_no_launch_records_says_so(tmp_path):
    ev = [gpu_ann(MARK, 1000.0, 100.0, ext=1), kernel("a", 1000.0, 10.0), kernel("b", 1050.0, 10.0)]
    f = findings(load_events(tmp_path, ev)).tables["findings"].set_index("kind")
    assert f.loc["idle_unattributed", "gain_ms_per_step"] == pytest.approx(0.080)
    assert "ProfilerActivity.CPU" in f.loc["idle_unattributed", "suggestion"]


LAUNCH = {"registers per thread": 64, "shared memory": 150_528}


def test_tail_waves_rank_kernels_of_two_or_more_waves_only(tmp_path):
    props = [{"id": 0, "name": "NVIDIA B200", "numSms": 100, "totalGlobalMem": 191_000_000_000}]
    ev = [
        cpu_ann(MARK, 0.0, 1000.0, ext=1),
        gpu_ann(MARK, 0.0, 1000.0, ext=1),
        # 150 KB of shared memory per block: 1 CTA per SM on a B200 (233,472 // 151,552), so 150 CTAs on 100 SMs
        # run in 2 waves at 75 %
        kernel("two_waves", 0.0, 400.0, grid=[150, 1, 1], block=[128, 1, 1], **LAUNCH),
        kernel("one_wave", 400.0, 400.0, grid=[50, 1, 1], block=[128, 1, 1], **LAUNCH),
    ]  # one wave: left out
    t = tracekit.load(write_trace(tmp_path / "w.json", ev, deviceProperties=props), cache=False)
    f = findings(t).tables["findings"]
    w = f[f["kind"] == "wave_quantization"]
    assert len(w) == 1 and "two_waves" in w.iloc[0]["title"]
    assert w.iloc[0]["gain_ms_per_step"] == pytest.approx(0.400 * (1 - 150 / 200))
    assert w.iloc[0]["basis"] == "estimated"


def test_ranking_puts_time_then_memory_then_unmeasurable():
    def row(kind, ms=None, gib=None):
        return {
            "kind": kind,
            "title": kind,
            "gain_ms_per_step": ms,
            "gain_pct": None,
            "gain_gib": gib,
            "gain_tokens": None,
            "basis": "measured",
            "evidence": "",
            "command": "",
            "suggestion": "",
            "how": "",
            "source": "x",
        }

    df = rank_findings(
        [
            row("none"),
            row("mem", gib=3.8),
            row("t1", ms=1.0),
            row("t2", ms=9.0),
            row("small", ms=0.1),
            row("tiny_mem", gib=0.01),
        ],
        min_ms=0.5,
        min_gib=0.25,
    )
    assert list(df["kind"]) == ["t2", "t1", "mem", "none", "small", "tiny_mem"]
    assert list(df["minor"]) == [False, False, False, False, True, True]


def test_occupancy_limits_follow_the_block():
    lim = sm_limits({}, load_profile("h100"))  # the one calculator waves and --compare share (test_occupancy.py)
    import numpy as np

    got, why, _ = ctas_per_sm(
        np.array([128, 1024, 128, 128]), np.array([32, 64, 255, 32]), np.array([0, 0, 0, 150_000]), lim
    )
    # 128 threads × 32 regs: threads allow 16, registers 16 → 16; 1024 × 64 regs: 2048 per warp, 8 warps per
    # sub-partition → 32 warps → 1 by registers; 255 regs × 128: 8160 → 8192 per warp, 2 per sub-partition → 8
    # warps → 2; 150,000 + 1,024 reserved → 151,040 B: 233,472 // 151,040 = 1
    assert list(got) == [16, 1, 2, 1] and list(why) == ["threads+registers", "registers", "registers", "shared_memory"]


def _log(tmp_path, args: str, extra: str = "") -> object:
    p = tmp_path / "l.log"
    p.write_text(f"[2026-10-29 20:13:05] server_args=ServerArgs({args})\n{extra}")
    return read_log(p)


def test_accept_len_comes_from_the_log(tmp_path):
    v, src, warn = accept_len_of(_log(tmp_path, "tp_size=8, dp_size=1"), "A")
    assert v == 1.0 and "no speculative" in src and "accept_len is 1" in warn
    v, src, warn = accept_len_of(_log(tmp_path, "speculative_algorithm='EAGLE', speculative_num_draft_tokens=4"), "A")
    assert v == DEFAULT_ACCEPT_LEN and "EAGLE" in warn
    lines = "".join(
        f"[2026-10-29 20:20:0{i} TP0] Decode batch. #running-req: 8, #token: 900, token usage: 0.01, "
        f"accept len: {x}, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0\n"
        for i, x in enumerate(("3.00", "3.40", "2.90"))
    )
    v, src, warn = accept_len_of(_log(tmp_path, "speculative_algorithm='EAGLE'", lines), "A")
    assert v == pytest.approx(3.0) and "3 decode-batch" in src and warn is None
    v, src, warn = accept_len_of(None, "A")
    assert v == DEFAULT_ACCEPT_LEN and "no launch log" in warn


def test_compare_uses_each_sides_accept_len():
    sweep = pd.DataFrame(
        {
            "bs": [4],
            "context": [100000],
            "median_wall_ns": [100_000_000],
            "median_busy_ns": [1],
            "median_ag_only_ns": [0],
            "median_idle_ns": [0],
            "median_exposed_ns": [0],
        }
    )
    empty = pd.DataFrame(columns=["bs", "context", "type", "median_kernel_ns"])
    a = Side("a", sweep, empty, empty, dp=1, accept_len=1.0, accept_len_source="no speculative decoding (log)")
    b = Side("b", sweep, empty, empty, dp=1, accept_len=3.0, accept_len_source="log")
    res = compare(a, b, accept_len=1.0)
    assert res.summary["accept_len_a"] == 1.0 and res.summary["accept_len_b"] == 3.0
    assert res.summary["throughput_ratio_b_over_a"]["4"] == pytest.approx(3.0)
    assert res.summary["accept_len_source_a"].startswith("no speculative")


def test_cli_refuses_trace_and_compare_together(tmp_path, cli):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [gpu_ann(MARK, 0.0, 10.0), kernel("a", 0.0, 5.0)]}))
    code, out, err = cli("findings", p, "--compare", p, p)
    assert code == 2 and "not both" in err and "Traceback" not in err
    code, out, err = cli("findings", p, "--log-b", p)
    assert code == 2 and "--compare" in err


def _ops(mean_a, mean_b, calls=10.0):
    from tracekit.analyses.findings.op_compare import OP_COLUMNS

    row = dict.fromkeys(OP_COLUMNS)
    row.update(
        op="k",
        kernel="k",
        category="x",
        calls_per_step_a=calls,
        calls_per_step_b=calls,
        mean_ns_a=mean_a,
        mean_ns_b=mean_b,
        ratio=mean_a / mean_b,
    )
    return pd.DataFrame([row], columns=OP_COLUMNS)


def test_compare_normalises_by_the_batch_or_refuses():
    from tracekit.analyses.findings.op_compare import normalise

    labels = ("A", "B")
    # B runs 128 requests per call against A's 24 and is 2.5x slower per call: per request it is 2.5 × 24 / 128 =
    # 0.47x A's (faster), so the per-call difference can be its batch's work: refused, with the reason
    r = normalise(_ops(10_000.0, 25_000.0), (24, 128), labels, 1.1).iloc[0]
    assert r["normalised_by"] == "refused" and r["slow"] is None
    assert "128 requests per call against 24" in r["compare_note"] and "faster" in r["compare_note"]
    assert r["ratio_per_request"] == pytest.approx((10_000 / 24) / (25_000 / 128))
    # B 8x slower per call with 128 vs 24 requests: per request 8 × 24 / 128 = 1.5x slower → compared per request;
    # gain = (80,000/128 − 10,000/24) ns per request × 128 requests × 10 calls = 266,667 ns per step
    r = normalise(_ops(10_000.0, 80_000.0), (24, 128), labels, 1.1).iloc[0]
    assert (r["normalised_by"], r["slow"]) == ("request", "b")
    assert r["slow_ratio"] == pytest.approx(1.5) and r["gain_ns"] == pytest.approx((625 - 10_000 / 24) * 128 * 10)
    # A (24 requests) slower per call than B (128): not from a larger batch, compared per call
    r = normalise(_ops(30_000.0, 10_000.0), (24, 128), labels, 1.1).iloc[0]
    assert (r["normalised_by"], r["slow"], r["gain_ns"]) == ("call", "a", 200_000.0)
    assert "fewer requests per call" in r["compare_note"]
    # same batch: per call, no note
    r = normalise(_ops(10_000.0, 25_000.0), (64, 64), labels, 1.1).iloc[0]
    assert (r["normalised_by"], r["slow"], r["compare_note"]) == ("call", "b", None)
    # a batch size unknown: per call, and the note says the work per call may differ
    r = normalise(_ops(10_000.0, 25_000.0), (24, None), labels, 1.1).iloc[0]
    assert r["normalised_by"] is None and r["slow"] == "b" and "batch size of B unknown" in r["compare_note"]
