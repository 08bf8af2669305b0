"""Which op launched each kernel: kernel --correlation--> runtime launch --> the innermost ``cpu_op`` on the launch's
thread whose interval holds the launch's start (docs/roofline.md, "Shapes from the trace").

The launch is :func:`tracekit.events.launch_index`'s (the latest launch of the kernel's correlation id that starts
before it, else the id's first; an id one launch carries is looked up, not merged by time).

Innermost is found without a loop over events: per thread the ops are sorted by start (outer first on ties); an op's
nesting depth is (its rank + 1) minus the ops that ended by its start; a launch's depth is the ops started minus the
ops ended at its time; the innermost enclosing op is the last op started before it at that depth (one sorted search
by depth, position). Ops that do not nest (a malformed thread) are checked: the op found must hold the launch, else
the kernel has no op. Each distinct launch is searched once, in time order, however many kernels it launched.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...events import kinds_mask, launch_index
from ...launch_apis import launch_mask
from ...trace import Trace
from ..steps.model import step_rules


def launching_ops(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per kernel row of ``trace.events`` (returned first): the row of the launching runtime call (-1: none) and of
    the innermost cpu_op on its thread that holds that call (-1: none)."""
    ev = trace.events
    krow = np.flatnonzero(kinds_mask(ev, ("kernel",)))
    corr = ev["correlation"].to_numpy()
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    lrow = np.flatnonzero(kinds_mask(ev, step_rules().launch_kinds) & (corr >= 0) & launch_mask(ev["name"]))
    li = launch_index(start[krow], corr[krow], corr[lrow], start[lrow])
    launch = np.where(li >= 0, lrow[np.clip(li, 0, None)] if lrow.size else -1, -1)
    oprow = np.full(krow.size, -1, dtype=np.int64)
    crow = np.flatnonzero(kinds_mask(ev, ("cpu_op",)))
    has = launch >= 0
    if not crow.size or not has.any():
        return krow, launch, oprow
    seen = np.zeros(len(ev), dtype=bool)  # the distinct launches, in row order, and each kernel's among them
    seen[launch[has]] = True
    lu = np.flatnonzero(seen)
    at = np.zeros(len(ev), dtype=np.int64)
    at[lu] = np.arange(lu.size)
    op_of = np.full(lu.size, -1, dtype=np.int64)  # per distinct launch: its innermost op's row
    for ops, q in _threads(ev, lu, crow):  # one pass per thread that launches, not per event
        got, rows = _innermost(start[ops], end[ops], ops, 2 * start[lu[q]])
        op_of[q[got]] = rows
    oprow[has] = op_of[at[launch[has]]]
    return krow, launch, oprow


def ops_holding(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Per event row in ``rows`` (launch records, say): the row of the innermost cpu_op on its thread whose interval
    holds its start (-1: none); each distinct row searched once."""
    rows = np.asarray(rows, dtype=np.int64)
    out = np.full(rows.size, -1, dtype=np.int64)
    crow = np.flatnonzero(kinds_mask(ev, ("cpu_op",)))
    if not crow.size or not rows.size:
        return out
    lu, at = np.unique(rows, return_inverse=True)
    start, end = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    op_of = np.full(lu.size, -1, dtype=np.int64)
    for ops, q in _threads(ev, lu, crow):
        got, r = _innermost(start[ops], end[ops], ops, 2 * start[lu[q]])
        op_of[q[got]] = r
    return op_of[at]


def _threads(ev: pd.DataFrame, lu: np.ndarray, crow: np.ndarray):
    """Per (pid, tid) that launches and has ops: (its ops' rows in row order, the positions in ``lu`` of its
    launches in row order)."""
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    p, t = pid[crow], tid[crow]
    p0, t0 = p[0], t[0]
    if (p == p0).all() and (t == t0).all() and (pid[lu] == p0).all() and (tid[lu] == t0).all():
        yield crow, np.arange(lu.size)  # one thread (the usual trace): no thread codes to build
        return
    (cp, up), (ct, ut) = (pd.factorize(np.concatenate([x[lu], x[crow]])) for x in (pid, tid))
    thread = cp.astype(np.int64) * max(len(ut), 1) + ct  # (pid, tid) as one code, launches first
    qt, ot = thread[: lu.size], thread[lu.size :]
    qo, oo = np.argsort(qt, kind="stable"), np.argsort(ot, kind="stable")
    qs, os_ = qt[qo], ot[oo]
    for th in np.unique(qt).tolist():
        oa, oz = np.searchsorted(os_, [th, th + 1])
        if oa == oz:
            continue
        qa, qz = np.searchsorted(qs, [th, th + 1])
        yield crow[oo[oa:oz]], qo[qa:qz]


def _innermost(s: np.ndarray, e: np.ndarray, r: np.ndarray, tq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of one thread's ops (start, end, row) the innermost holding each (doubled) time ``tq``: (found, their rows)."""
    if s.size > 1 and not (s[1:] > s[:-1]).all():  # by start, the outer (longer) op first on ties (rows: by start)
        order = np.lexsort((-(e - s), s))
        s, e, r = s[order], e[order], r[order]
    # doubled times: an op ends before another starts at the same instant; a zero-length op ends just after
    s2, e2 = 2 * s, 2 * e + (e == s)
    ends = np.sort(e2, kind="stable")  # the same values; timsort takes the runs of nested ends (10x quicksort here)
    depth = np.arange(1, s.size + 1) - np.searchsorted(ends, s2, side="right")
    started = np.searchsorted(s2, tq, side="right")
    qdepth = started - np.searchsorted(ends, tq, side="right")
    # the last op started by tq at tq's depth: keys (depth, position) sorted, searched with (depth, started - 1)
    n, by_depth = s.size + 1, np.argsort(depth, kind="stable")
    j = np.searchsorted(depth[by_depth] * n + by_depth, qdepth * n + (started - 1), side="right") - 1
    k = by_depth[np.clip(j, 0, None)]
    holds = (qdepth > 0) & (j >= 0) & (depth[k] == qdepth) & (s2[k] <= tq) & (e2[k] > tq)
    return holds, r[k[holds]]


__all__ = ["launching_ops", "ops_holding"]
