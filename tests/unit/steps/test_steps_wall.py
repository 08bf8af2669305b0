"""Steps (A1), wall decomposition (A2), temporal breakdown and overlap on hand-built traces."""

from __future__ import annotations

import numpy as np
import pytest

import tracekit
from tracekit.analyses import decompose, find_steps, overlap, temporal
from tracekit.analyses.select import SelectorError, select
from tracekit.analyses.steps.model import step_options
from tracekit.errors import MissingDataError
from tests.conftest import kernel, load_events, memcpy

NO_FLOOR = step_options(min_step_ns=0)

PTOP = "Memcpy PtoP (Device -> Device)"


def gpu_ann(name, ts, dur, stream=7):
    return {
        "ph": "X",
        "cat": "gpu_user_annotation",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"External id": 1},
    }


def cpu_ann(name, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur}


def launch(name, ts, corr):
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": 100,
        "tid": 100,
        "ts": ts,
        "dur": 1.0,
        "args": {"correlation": corr, "cbid": 311},
    }


def test_gpu_step_marker_empty_markers_go_by_content(tmp_path):
    # two real steps (20 ms), one empty annotation in between (4 µs): it holds no GPU work, so it is no step,
    # whatever the floor; the floor stays a user filter
    t = load_events(
        tmp_path,
        [
            gpu_ann("scheduler.run_batch", 0.0, 20_000.0),
            gpu_ann("scheduler.run_batch", 20_100.0, 0.004),
            gpu_ann("scheduler.run_batch", 30_000.0, 20_000.0),
            kernel("k", 10.0, 5.0),
            kernel("k", 30_010.0, 5.0),
        ],
    )
    for floor in (None, 0):
        st = find_steps(t, min_step_ms=floor)
        assert st.marker == "scheduler.run_batch" and st.empty == 1 and st.candidates == 3
        assert st.table[["step", "start_ns", "dur_ns"]].values.tolist() == [
            [0, 0, 20_000_000],
            [1, 30_000_000, 20_000_000],
        ]
    with pytest.raises(MissingDataError):  # a floor above every step leaves none of the marker's steps
        find_steps(t, step_name="scheduler.run_batch", min_step_ms=20)


def test_cpu_step_marker_maps_to_gpu_window_through_graph_correlation(tmp_path):
    # a CPU step[DECODE bs=8] span containing one cudaGraphLaunch; every kernel of the replay shares its correlation
    evs = [
        cpu_ann("step[DECODE bs=8]", 100.0, 50.0),
        launch("cudaGraphLaunch", 120.0, 77),
        kernel("a", 200.0, 10.0, corr=77),
        kernel("b", 215.0, 10.0, corr=77, stream=9),
        kernel("outside", 400.0, 10.0, corr=78),
        launch("cudaLaunchKernel", 300.0, 78),
    ]
    st = find_steps(load_events(tmp_path, evs))
    row = st.table.iloc[0]
    assert st.marker == "step[MODE bs=N]" and st.match == "sglang_step" and row["source"] == "cpu_launch_window"
    assert (row["start_ns"], row["end_ns"], row["bs"], row["phase"], row["kernels"]) == (
        200_000,
        225_000,
        8,
        "decode",
        2,
    )


def test_profiler_step_fallback_and_explicit_name(tmp_path):
    evs = [
        cpu_ann("ProfilerStep#3", 0.0, 100.0),
        launch("cudaLaunchKernel", 10.0, 5),
        kernel("k", 50.0, 100.0, corr=5),
        gpu_ann("my_step", 0.0, 30_000.0),
    ]
    t = load_events(tmp_path, evs)
    st = find_steps(t)
    assert st.marker == "ProfilerStep#N" and st.table["dur_ns"].tolist() == [100_000]
    st = find_steps(t, step_name="my_step")
    assert st.marker == "my_step" and st.table["dur_ns"].tolist() == [30_000_000]


def test_no_steps_falls_back_to_the_whole_trace_naming_the_annotations_present(tmp_path):
    t = load_events(
        tmp_path,
        [
            gpu_ann("forward", 0.0, 5.0),
            cpu_ann("## Call CompiledFxGraph ##", 0.0, 5.0),
            kernel("k", 1.0, 1.0),
            kernel("k", 3.0, 1.0),
        ],
    )
    st = find_steps(t)
    assert st.match == "whole_trace" and st.table[["start_ns", "end_ns", "source", "kernels"]].values.tolist() == [
        [1_000, 4_000, "whole_trace", 2]
    ]
    (msg,) = st.warnings
    assert "forward (1)" in msg and "## Call CompiledFxGraph ## (1)" in msg and "--step-name" in msg
    with pytest.raises(MissingDataError) as exc:  # a named marker that is absent is still an error
        find_steps(t, step_name="scheduler.run_batch")
    msg = str(exc.value)
    assert exc.value.exit_code == 4
    assert "forward (1)" in msg and "## Call CompiledFxGraph ## (1)" in msg and "--step-name" in msg


def test_wall_parts_sum_exactly(tmp_path):
    # step 0..100 µs: kernel 10-40, PtoP 30-60 (only-AG 40-60), PtoP 70-80 under kernel 65-90, idle elsewhere
    evs = [
        gpu_ann("scheduler.run_batch", 0.0, 100.0),
        kernel("k1", 10.0, 30.0),
        memcpy(PTOP, 30.0, 30.0, stream=20),
        kernel("k2", 65.0, 25.0),
        memcpy(PTOP, 70.0, 10.0, stream=20),
        kernel("memcpy128", 5.0, 3.0, stream=20),
        kernel("after", 150.0, 10.0),
    ]
    t = load_events(tmp_path, evs)
    r = decompose(t, steps=NO_FLOOR)
    row = r.tables["per_step"].iloc[0].to_dict()
    # busy = k1 ∪ k2 ∪ local copy (a kernel under --ag ptop) = 30 + 25 + 3
    assert row == {
        "step": 0,
        "start_ns": 0,
        "wall_ns": 100_000,
        "busy_ns": 58_000,
        "ag_only_ns": 20_000,
        "idle_ns": 22_000,
        "empty": False,
    }
    r2 = decompose(t, ag="ptop+local", steps=NO_FLOOR)
    row2 = r2.tables["per_step"].iloc[0].to_dict()
    assert (row2["busy_ns"], row2["ag_only_ns"], row2["idle_ns"]) == (55_000, 23_000, 22_000)
    assert r.summary["median_wall_ns"] == 100_000 and r2.summary["ag_copies"] == 3


def test_wall_without_ptop_has_zero_ag_only(tmp_path):
    t = load_events(tmp_path, [gpu_ann("scheduler.run_batch", 0.0, 20_000.0), kernel("k", 10.0, 5.0)])
    r = decompose(t)
    assert r.tables["per_step"]["ag_only_ns"].tolist() == [0]
    assert any("no PtoP copies" in w for w in r.warnings)


def test_temporal_definitions(tmp_path):
    evs = [
        kernel("gemm", 0.0, 100.0),
        kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 50.0, 100.0, stream=8),  # comm, 50 overlaps compute
        kernel("void deep_ep::internode_ll::dispatch<true>", 200.0, 20.0),  # comm too (not ^nccl)
        memcpy("Memcpy DtoD (Device -> Device)", 300.0, 10.0),
        {
            "ph": "X",
            "cat": "cuda_sync",
            "name": "Stream Sync",
            "pid": 0,
            "tid": 7,
            "ts": 400.0,
            "dur": 50.0,
            "args": {"stream": 7, "device": 0},
        },  # not GPU activity
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "triton_poi_fused",
            "pid": 1,
            "tid": 1,
            "ts": 320.0,
            "dur": 500.0,
            "args": {"stream": 0, "grid": "grid(100,)"},
        },  # a CPU op with a stream arg
    ]
    s = temporal(load_events(tmp_path, evs)).summary
    assert s == {
        "span_ns": 310_000,
        "busy_ns": 180_000,
        "idle_ns": 130_000,
        "compute_ns": 100_000,
        "comm_ns": 120_000,
        "memory_ns": 10_000,
        "non_compute_ns": 80_000,
        "comm_compute_overlap_pct": pytest.approx(50_000 / 120_000 * 100),
        "profiler_steps": 0,
        "clock_outliers": 0,
        "window": "the whole trace: first GPU-activity start to last end, every step included",
        "window_start_ns": 0,
        "window_end_ns": 310_000,
    }


def test_temporal_no_comm_is_null_and_no_gpu_is_exit_4(tmp_path):
    assert temporal(load_events(tmp_path, [kernel("k", 0.0, 1.0)])).summary["comm_compute_overlap_pct"] is None
    with pytest.raises(MissingDataError):
        temporal(load_events(tmp_path, [cpu_ann("x", 0.0, 1.0)], name="cpu.json"))


def test_selectors(tmp_path):
    t = load_events(
        tmp_path,
        [
            kernel("gemm_a", 0.0, 1.0),
            kernel("ncclDevKernel_AllGather_RING_LL", 1.0, 1.0, stream=8),
            memcpy(PTOP, 2.0, 1.0, stream=20),
            cpu_ann("x", 0.0, 1.0),
        ],
    )
    ev = t.events
    names = lambda sel: sorted(ev.loc[select(ev, sel), "name"].astype(str))  # noqa: E731
    assert names("kind:kernel;!comm:any") == ["gemm_a"]
    assert names("comm:nccl") == ["ncclDevKernel_AllGather_RING_LL"]
    assert names("copy:PtoP") == [PTOP]
    assert names("gpu;stream:8|20") == sorted(["ncclDevKernel_AllGather_RING_LL", PTOP])
    assert names("name:^gemm|^x$") == ["gemm_a", "x"]
    for bad in ("colour:red", "stream:seven", "name:("):
        with pytest.raises(SelectorError):
            select(ev, bad)


def test_overlap_whole_trace_and_per_step(tmp_path):
    evs = [
        gpu_ann("scheduler.run_batch", 0.0, 100.0),
        kernel("k", 0.0, 50.0),
        memcpy(PTOP, 40.0, 20.0, stream=20),
        gpu_ann("scheduler.run_batch", 200.0, 100.0),
        memcpy(PTOP, 210.0, 10.0, stream=20),
    ]
    r = overlap(load_events(tmp_path, evs), a="copy:PtoP", b="kind:kernel", steps=NO_FLOOR)
    s = r.summary
    assert (s["a_ns"], s["b_ns"], s["a_and_b_ns"], s["a_minus_b_ns"]) == (30_000, 50_000, 10_000, 20_000)
    assert s["a_hidden_pct"] == pytest.approx(100 / 3)
    per = r.tables["per_step"]
    assert per["a_ns"].tolist() == [20_000, 10_000] and per["a_and_b_ns"].tolist() == [10_000, 0]


def _reference_decomposition(events, ws, we, ag_mask):
    """Per-ns accounting: a boolean timeline per step, deliberately naive."""
    out = []
    gpu = events["kind"].isin(["kernel", "memcpy", "memset"]).to_numpy()
    s, e = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    for lo, hi in zip(ws, we):
        other = np.zeros(hi - lo, dtype=bool)
        agt = np.zeros(hi - lo, dtype=bool)
        for i in np.flatnonzero(gpu & (e > lo) & (s < hi)):
            seg = slice(max(s[i], lo) - lo, min(e[i], hi) - lo)
            (agt if ag_mask[i] else other)[seg] = True
        busy = int(other.sum())
        ag_only = int((agt & ~other).sum())
        out.append((busy, ag_only, (hi - lo) - busy - ag_only))
    return out


@pytest.mark.parametrize("ag", ["ptop", "ptop+local"])
def test_wall_on_bundled_sample_matches_per_ns_reference(ag):
    from tracekit.analyses.time.decompose import ag_copy_mask
    from tracekit.cli import bundled_sample

    t = tracekit.load(bundled_sample(), cache=False)
    r = decompose(t, ag=ag)
    per = r.tables["per_step"]
    st = find_steps(t)
    ref = _reference_decomposition(t.events, st.starts, st.ends, ag_copy_mask(t.events, ag))
    assert list(zip(per["busy_ns"], per["ag_only_ns"], per["idle_ns"])) == ref
    assert (per["busy_ns"] + per["ag_only_ns"] + per["idle_ns"] == per["wall_ns"]).all()
    assert (per["ag_only_ns"] > 0).all()
