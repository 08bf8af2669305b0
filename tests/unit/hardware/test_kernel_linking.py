"""Which op launched each kernel (tracekit/analyses/hardware/linking.py, issue 30): ``launching_ops`` (each distinct
launch searched once, a one-thread trace without thread codes) links every kernel as the version before it did —
kept here as the oracle — on random traces with several threads, reused correlation ids, kernels without a launch
and launches outside every op."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.analyses.hardware.linking import _innermost, launching_ops
from tracekit.analyses.steps.model import step_rules
from tracekit.events import launch_index

from conftest import kernel, write_trace


def _launching_ops_before(trace):
    """launching_ops as it was before: thread codes always, one innermost-op search per kernel."""
    ev = trace.events
    kind = ev["kind"]
    krow = np.flatnonzero((kind == "kernel").to_numpy(dtype=bool))
    corr, start, end = ev["correlation"].to_numpy(), ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    lrow = np.flatnonzero(ev["kind"].isin(step_rules().launch_kinds).to_numpy() & (corr >= 0))
    li = launch_index(start[krow], corr[krow], corr[lrow], start[lrow])
    launch = np.where(li >= 0, lrow[np.clip(li, 0, None)] if lrow.size else -1, -1)
    oprow = np.full(krow.size, -1, dtype=np.int64)
    crow = np.flatnonzero((kind == "cpu_op").to_numpy(dtype=bool))
    has = launch >= 0
    if not crow.size or not has.any():
        return krow, launch, oprow
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    lr, qi = launch[has], np.flatnonzero(has)
    (cp, up), (ct, ut) = (pd.factorize(np.concatenate([x[lr], x[crow]])) for x in (pid, tid))
    thread = cp.astype(np.int64) * max(len(ut), 1) + ct
    qt, ot = thread[: lr.size], thread[lr.size :]
    qo, oo = np.argsort(qt, kind="stable"), np.argsort(ot, kind="stable")
    qs, os_ = qt[qo], ot[oo]
    for t in np.unique(qt).tolist():
        oa, oz = np.searchsorted(os_, [t, t + 1])
        if oa == oz:
            continue
        qa, qz = np.searchsorted(qs, [t, t + 1])
        ops, ii = crow[oo[oa:oz]], qi[qo[qa:qz]]
        got, rows = _innermost(start[ops], end[ops], ops, 2 * start[launch[ii]])
        oprow[ii[got]] = rows
    return krow, launch, oprow


def _op(name, ts, dur, tid):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def _launch(ts, corr, tid):
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 100,
        "tid": tid,
        "ts": ts,
        "dur": 0.5,
        "args": {"correlation": corr},
    }


def _random_trace(rng, threads: int) -> list:
    ev = []
    for tid in range(1, threads + 1):
        t = 0.0
        for _ in range(int(rng.integers(3, 12))):  # a call tree per top-level op, launches inside and between
            d = float(rng.integers(5, 30))
            ev.append(_op(f"aten::outer{tid}", t, d, tid))
            if rng.random() < 0.7:
                ev.append(_op("aten::inner", t + 1, d / 2, tid))
            for _ in range(int(rng.integers(0, 4))):
                ev.append(_launch(t + float(rng.integers(0, int(d) + 3)), int(rng.integers(1, 40)), tid))
            t += d + float(rng.integers(0, 4))
    for _ in range(int(rng.integers(1, 40))):  # kernels of known and unknown ids, some before their launch
        ev.append(
            kernel("k", float(rng.integers(0, 300)), 1.0, stream=int(rng.integers(7, 9)), corr=int(rng.integers(1, 45)))
        )
    return ev


@pytest.mark.parametrize("threads", [1, 3])
def test_launching_ops_is_what_it_was(tmp_path, threads):
    rng = np.random.default_rng(threads)
    linked = 0
    for i in range(25):
        t = tracekit.load(write_trace(tmp_path / f"t{i}.json", _random_trace(rng, threads)), cache=False)
        got, want = launching_ops(t), _launching_ops_before(t)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        linked += int((got[2] >= 0).sum())
    assert linked > 50  # kernels were linked to ops, not only left without one
