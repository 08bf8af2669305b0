"""Steps a user can trust (issue 25): empty markers judged by the work they launched, the annotation's marker
read as its dialect reads it, the floor applied after the overlap rule, and health that stops graph captures
and profiles whose GPU buffer filled. Hand-built traces; every expected number is worked out in the comments."""

from __future__ import annotations

import pytest

from tracekit.analyses import find_steps
from tracekit.analyses.steps.resolve import step_options
from tracekit.errors import UsageError
from tests.conftest import cpu_ann, gpu_ann, kernel, launch, load_events


def _ahead_trace() -> list:
    """Two 20 ms steps (CPU + GPU run_batch, ext 1 and 3), and between them an 'empty' run_batch on the CPU
    (ext 2, 40 µs) that launches two tiny kernels while the GPU still runs step 0: one on a side stream at
    5 ms (inside step 0), one queued behind step 0 at 20.01 ms. Its launch window is 5 ms .. 20.013 ms; judged by
    the GPU busy time inside that window (15 ms of step 0's kernel) it looked like a step and cut step 0 in two."""
    ev = [
        cpu_ann("scheduler.run_batch", 0.0, 100.0, ext=1),
        launch("cudaLaunchKernel", 10.0, 1),
        kernel("step0", 0.0, 20_000.0, corr=1),
        gpu_ann("scheduler.run_batch", 0.0, 20_000.0, ext=1),
        cpu_ann("scheduler.run_batch", 4_990.0, 40.0, ext=2),
        launch("cudaLaunchKernel", 4_995.0, 2),
        launch("cudaLaunchKernel", 5_000.0, 3),
        kernel("fill", 5_000.0, 3.0, corr=2, stream=9),
        kernel("fill", 20_010.0, 3.0, corr=3),
        cpu_ann("scheduler.run_batch", 30_000.0, 100.0, ext=3),
        launch("cudaLaunchKernel", 30_010.0, 4),
        kernel("step1", 30_050.0, 20_000.0, corr=4),
        gpu_ann("scheduler.run_batch", 30_050.0, 20_000.0, ext=3),
    ]
    return ev


def _windows(st):
    return st.table[["start_ns", "end_ns"]].values.tolist()


def test_empty_marker_that_launches_work_mid_step_is_no_step_with_or_without_the_name(tmp_path):
    t = load_events(tmp_path, _ahead_trace())
    plain = find_steps(t)
    assert (
        _windows(plain) == [[0, 20_000_000], [30_050_000, 50_050_000]] and plain.empty == 0
    )  # a CPU-only run_batch is no candidate
    # the annotation's marker (strict=False) and an explicit --step-name (strict) give the same steps
    for opts in (
        step_options("k3_dp16"),
        step_options(step_name="scheduler.run_batch"),
        step_options(step_name="scheduler.run_batch", source="cpu"),
    ):
        st = find_steps(t, opts)
        assert _windows(st) == [[0, 20_000_000], [30_050_000, 50_050_000]], opts
        assert st.trustworthy, st.reasons


def test_annotation_floor_filters_after_the_overlap_rule(tmp_path):
    t = load_events(tmp_path, _ahead_trace())
    # floor 20 ms: both steps are exactly 20 ms, 'longer than' is strict, so none is left and the named marker
    # gives nothing; with a 19 ms floor both stay
    assert _windows(find_steps(t, step_options(step_name="scheduler.run_batch", min_step_ns=19_000_000))) == [
        [0, 20_000_000],
        [30_050_000, 50_050_000],
    ]
    st = find_steps(t, step_options("k3_dp16", min_step_ns=19_999_999))
    assert st.below_floor == 0 and len(st.table) == 2


@pytest.mark.parametrize("value", [1e308 * 1e6, float("inf"), float("nan"), -1])
def test_absurd_floor_is_a_usage_error(value):
    with pytest.raises(UsageError, match="--min-step-ms"):
        step_options(min_step_ns=value)


def test_graph_capture_trace_is_not_trustworthy(tmp_path):
    # sglang's capture_traces: a run_batch around a capture; 40 kernel launches are captured (no GPU record),
    # two kernels run (the warm-up); the one step is 11 µs of GPU work, and the health must say why it is wrong
    ev = [
        cpu_ann("ProfilerStep#0", 0.0, 1_000.0),
        launch("cudaStreamBeginCapture", 1.0, 900),
        launch("cudaLaunchKernel", 5.0, 1),
        kernel("warm", 20.0, 5.0, corr=1),
        launch("cudaLaunchKernel", 6.0, 2),
        kernel("warm", 26.0, 6.0, corr=2),
    ]
    ev += [launch("cudaLaunchKernel", 10.0 + i, 10 + i) for i in range(40)]
    ev += [launch("cudaStreamEndCapture", 60.0, 901), launch("cudaGraphInstantiate", 61.0, 902)]
    st = find_steps(load_events(tmp_path, ev))
    assert not st.trustworthy
    (reason,) = [r for r in st.reasons if r.startswith("launches_recorded")]
    assert "40 of 42" in reason and "capture" in reason


def test_profiler_buffer_overflow_is_not_trustworthy(tmp_path):
    # 10 ProfilerStep markers, each launching 3 kernels; the GPU records stop after step 4 (the buffer filled).
    # Five steps remain (the other five markers hold no GPU work), and the trace is flagged: 15 of 30 launches
    # have no GPU record, all after the last GPU record
    ev, corr = [], 0
    for s in range(10):
        t0 = s * 1_000.0
        ev.append(cpu_ann(f"ProfilerStep#{s}", t0, 900.0))
        for k in range(3):
            corr += 1
            ev.append(launch("cudaLaunchKernel", t0 + 10 + k, corr))
            if s < 5:
                ev.append(kernel("k", t0 + 100 + 100 * k, 50.0, corr=corr))
    st = find_steps(load_events(tmp_path, ev))
    assert len(st.table) == 5 and not st.trustworthy
    (reason,) = [r for r in st.reasons if r.startswith("launches_recorded")]
    assert "15 of 30" in reason and "buffer" in reason and "15 launches came after the last GPU record" in reason


def test_a_few_unrecorded_launches_in_a_long_trace_stay_trustworthy(tmp_path):
    # 1 launch in 200 without a record (0.5 %, under the 1 % in steps.json): noted, not a failure
    ev = [cpu_ann("ProfilerStep#0", 0.0, 5_000.0)]
    for i in range(200):
        ev.append(launch("cudaLaunchKernel", 1.0 + i, i + 1))
        if i != 150:
            ev.append(kernel("k", 10.0 + 20 * i, 10.0, corr=i + 1))
    st = find_steps(load_events(tmp_path, ev))
    assert st.trustworthy, st.reasons
    row = st.health[(st.health["check"] == "launches_recorded") & (st.health["step"] == -1)].iloc[0]
    assert "1 of 200" in row["detail"]


def test_cpu_alone_step_health_has_no_nan_cover(tmp_path):
    ev = [cpu_ann("ProfilerStep#0", 0.0, 100.0), launch("cudaLaunchKernel", 10.0, 1), kernel("k", 50.0, 10.0, corr=1)]
    st = find_steps(load_events(tmp_path, ev))
    assert not any("nan" in str(d) for d in st.health["detail"])


def test_a_marker_past_the_end_of_the_recording_is_flagged(tmp_path):
    # the last run_batch marker runs to 60 ms, but the last recorded event ends at 40.005 ms: 19.995 ms of it
    # were never recorded, and counting them as idle would invent them
    ev = [
        gpu_ann("scheduler.run_batch", 0.0, 20_000.0, ext=1),
        kernel("k", 10.0, 19_000.0),
        gpu_ann("scheduler.run_batch", 20_000.0, 40_000.0, ext=2),
        kernel("k", 20_005.0, 20_000.0),
    ]
    st = find_steps(load_events(tmp_path, ev))
    assert len(st.table) == 2 and not st.trustworthy
    bad = st.health[~st.health["ok"].astype(bool)]
    assert bad[["step", "check"]].values.tolist() == [[1, "within_recording"]]
    assert "19.995 ms past the last recorded event" in bad["detail"].iloc[0]
