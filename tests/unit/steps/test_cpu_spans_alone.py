"""A dialect whose marker is a GPU span (sglang's ``scheduler.run_batch``) takes its CPU spans alone as steps when the
trace holds no GPU span at all (its profiler records none: nsys, rocprofv3), and not when the trace has GPU spans
(a CPU-only run_batch there is one of sglang's idle iterations); ``--step-source gpu`` never does."""

from __future__ import annotations

from tracekit.analyses.steps.resolve import find_steps, step_options
from tests.conftest import cpu_ann, gpu_ann, kernel, launch
from tests.conftest import load_events as load


def _run_batches(other_gpu_span: bool) -> list[dict]:
    """Two run_batch CPU spans of 100 µs, each launching two kernels (2 ms of work), and an idle one that launches
    nothing; with ``other_gpu_span``, a GPU span of another name elsewhere."""
    evs = []
    for i, t0 in enumerate([0.0, 10_000.0]):
        evs.append(cpu_ann("scheduler.run_batch", t0, 100.0))
        for j in range(2):
            corr = 10 * i + j + 1
            evs += [
                launch("cudaLaunchKernel", t0 + 10 + j, corr),
                kernel(f"k{j}", t0 + 200 + 1_000 * j, 900.0, corr=corr),
            ]
    evs.append(cpu_ann("scheduler.run_batch", 5_000.0, 4.0))
    if other_gpu_span:
        evs.append(gpu_ann("record_param_comms", 30_000.0, 10.0, ext=99))
    return evs


def test_cpu_spans_are_the_steps_without_any_gpu_span(tmp_path):
    trace = load(tmp_path, _run_batches(False))
    st = find_steps(trace)
    assert st.marker == "scheduler.run_batch" and st.empty == 1
    rows = st.table[["start_ns", "end_ns", "source"]].values.tolist()
    assert rows == [[200_000, 2_100_000, "cpu_launch_window"], [10_200_000, 12_100_000, "cpu_launch_window"]]
    assert find_steps(trace, step_options(source="gpu")).marker == "whole trace"


def test_cpu_spans_alone_are_no_steps_beside_gpu_spans(tmp_path):
    st = find_steps(load(tmp_path, _run_batches(True)))
    assert st.marker == "whole trace"
