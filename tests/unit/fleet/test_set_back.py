"""A clock set back mid-run, found in one rank's own events by their order (issue 40): hand-built event tables."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyses.fleet.multirank import set_back

US = 1_000


def _events(back_ns: int, *, cpu: bool = True, at: int = 6) -> tuple[pd.DataFrame, np.ndarray]:
    """Ten kernels on one stream, 100 µs apart, each launched by a cudaLaunchKernel 20 µs before it and a step
    marker (an operation with an External id) every five; the clock set back by ``back_ns`` before kernel ``at``'s
    launch. Returns the table and which rows are after the set-back (the truth)."""
    rows, after = [], []
    for i in range(10):
        late = i >= at
        shift = -back_ns if late else 0
        t = 1_000 * US + i * 100 * US
        rows.append(("kernel", 0, 7, 1, 7, t + shift, t + 30 * US + shift, 100 + i, 500 + i))
        after.append(late)
        if cpu:
            rows.append(("runtime", -1, -1, 9, 9, t - 20 * US + shift, t - 15 * US + shift, 100 + i, 100 + i))
            after.append(late)
        if i % 5 == 0:
            rows.append(("cpu_annotation", -1, -1, 9, 9, t - 25 * US + shift, t + 400 * US + shift, -1, 10 + i))
            after.append(late)
    ev = pd.DataFrame(
        rows, columns=["kind", "device", "stream", "pid", "tid", "start_ns", "end_ns", "correlation", "external_id"]
    )
    ev["kind"] = ev["kind"].astype("category")
    return ev, np.array(after)


def test_a_set_back_is_found_from_the_order_of_events_and_each_event_placed():
    ev, truth = _events(3_000 * US)
    mask, seen, _, shift = set_back.find(ev)
    assert (mask == truth).all()
    # a lower bound of the set-back: the run-back of the launches (100 µs apart: 3 ms − 100 µs)
    assert 2_800 * US <= seen <= 3_000 * US
    assert shift > seen + (ev["end_ns"].max() - ev["start_ns"].min())  # more than the trace's span: a forward step


def test_undo_moves_the_events_after_it_forward_and_keeps_them_sorted():
    ev, truth = _events(3_000 * US)

    class T:  # the three fields undo reads and writes
        def __init__(self, events, meta, report):
            self.events, self.meta, self.report = events, meta, report

    moved, told = set_back.undo(T(ev, {}, None))
    (b,) = told
    k = moved.events[moved.events["kind"] == "kernel"].sort_values("correlation")
    assert (np.diff(k["start_ns"].to_numpy()) > 0).all()  # the stream runs forward again
    assert moved.events["start_ns"].is_monotonic_increasing
    assert b["shift_ns"] > b["seen_ns"] and k["start_ns"].iloc[5] < b["local_ns"] < k["start_ns"].iloc[6]


def test_no_set_back_small_run_backs_and_one_lane_alone_are_left_alone():
    assert set_back.find(_events(0)[0]) is None
    assert set_back.find(_events(-500 * US)[0]) is None  # set forward: a gap, not a run-back
    ev, _ = _events(3_000 * US, cpu=False)  # only the stream runs back: no CPU thread says the same
    assert set_back.find(ev) is None
    ev, _ = _events(0)
    ev.loc[ev.index[-1], "start_ns"] -= 50 * US  # a launch 50 µs out of order: one lane, not the clock
    assert set_back.find(ev) is None
