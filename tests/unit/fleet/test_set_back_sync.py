"""A clock set back between two training steps whose host waits in ``cudaStreamSynchronize`` (issue 40, "A clock set
back"): the launches then never start earlier than the launch before them, only earlier than the sync before them
ended, and the step markers cross; an NCCL stream idle across the set-back goes with its launches. Hand-built."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyses.fleet.multirank import set_back

US = 1_000
COLS = ["kind", "device", "stream", "pid", "tid", "start_ns", "end_ns", "correlation", "external_id"]


def _two_steps(back_ns: int):
    """Two steps of 10 ms: each a ProfilerStep marker (an operation), 8 launches in its first 100 µs, then a sync
    until its GPU work is done; the compute stream busy 9.6 ms a step; one all-reduce per step on an NCCL stream,
    the first step's near its end (its stream then idle ~9 ms: longer than the set-back). The clock set back by
    ``back_ns`` between the two steps. Returns the table and which rows are after the set-back (the truth)."""
    rows, after = [], []
    corr, ext = 100, 1000
    for k in range(2):
        t0 = k * 10_400 * US
        sh = -back_ns if k else 0

        def add(kind, dev, stream, s, e, c, x, k=k, sh=sh):
            rows.append((kind, dev, stream, 9, 9, s + sh, e + sh, c, x))
            after.append(k == 1)

        add("cpu_annotation", -1, -1, t0, t0 + 10_000 * US, -1, ext)
        ext += 1
        for i in range(8):
            s = t0 + 10 * US + i * 10 * US
            add("runtime", -1, -1, s, s + 5 * US, corr, ext)
            if i == 7:  # the all-reduce: on the NCCL stream, late in the step
                add("kernel", 0, 24, t0 + 7_450 * US, t0 + 9_500 * US, corr, ext)
            else:
                ks = t0 + 20 * US + i * 1_370 * US
                add("kernel", 0, 7, ks, ks + 1_360 * US, corr, ext)
            corr, ext = corr + 1, ext + 1
        add("runtime", -1, -1, t0 + 100 * US, t0 + 9_990 * US, corr, ext)  # cudaStreamSynchronize
        corr, ext = corr + 1, ext + 1
    ev = pd.DataFrame(rows, columns=COLS)
    ev["kind"] = ev["kind"].astype("category")
    # the truth's rows re-keyed: pid/tid of CPU rows, device/stream of GPU ones already set
    ev.loc[ev["device"] >= 0, ["pid", "tid"]] = [1, 7]
    return ev, np.array(after)


def test_a_set_back_across_a_sync_is_found_and_each_event_placed():
    ev, truth = _two_steps(3_000 * US)
    found = set_back.find(ev)
    assert found is not None  # before: None (no launch starts before the launch ahead of it; only the sync's end)
    mask, seen, _, _ = found
    assert (mask == truth).all()  # the NCCL stream's first all-reduce, in the after-window's time: with its launch
    assert 2_500 * US <= seen <= 3_000 * US  # a lower bound: the sync's end − the next launch


def test_no_set_back_no_finding():
    ev, _ = _two_steps(0)
    assert set_back.find(ev) is None
    ev, _ = _two_steps(-2_000 * US)  # set forward: gaps, no run-back
    assert set_back.find(ev) is None
