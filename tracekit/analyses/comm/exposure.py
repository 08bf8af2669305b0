"""A6 — `tracekit exposure`: the time weight AllGather copies run while no other GPU work does.

It reads the AllGathers :func:`tracekit.analyses.comm.segments.segment_allgathers` cut (kept on the trace: after
`allgather` with the same options, exposure segments nothing again) and charges each exposed instant to one of them.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...events import gpu_mask, lane_key
from ...result import Result, trace_input
from ...trace import Trace
from ..options import AllGatherOptions
from ..steps.keywords import options_as_objects
from ..steps.resolve import median_ns
from ...result import merge_warnings
from .segments import allgather_params, segment_for_command


@options_as_objects
def exposure(trace: Trace, ann=None, *, ag: AllGatherOptions | None = None, steps=None) -> Result:
    """`tracekit exposure`: time when AllGather copies (local copy + PtoP) run and nothing else does.

    Exposed time = union of the AllGather copy intervals minus the union of every other kernel, memcpy
    and memset on any stream. Each exposed instant is charged to the AllGather whose copy is running then
    (the earliest-started one when AllGathers of two streams run together); per step and type by the
    AllGather's step. ``tables.intervals`` holds the exposed intervals themselves. The options are
    :func:`allgathers`'s.
    """
    ag, kw = segment_for_command(trace, ann, ag=ag, steps=steps)
    # once per trace, steps and AllGather options (what the segmentation is kept by): report asks, and so do its
    # findings
    key = ("exposure", id(ag.steps), repr(sorted(kw.items())))
    hit = trace.derived.get(key)
    if hit is None or hit[0] is not ag.steps:  # the entry holds the steps, so their id cannot be reused meanwhile
        hit = trace.derived[key] = (ag.steps, _exposure(trace, ag, kw))
    res = hit[1]
    return replace(
        res,
        inputs=copy.deepcopy(res.inputs),
        params=copy.deepcopy(res.params),
        summary=copy.deepcopy(res.summary),
        tables=dict(res.tables),
        warnings=list(res.warnings),
    )


def _exposure(trace: Trace, ag, kw: dict) -> Result:
    ev = trace.events
    gpu = np.flatnonzero(gpu_mask(ev))  # the AllGather copies' ids looked for among the GPU rows only
    oth = gpu[~np.isin(ev["event_id"].to_numpy()[gpu], ag.rows["event_id"].to_numpy())]
    s, e = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    other = iv.normalize(s[oth], e[oth])
    rows = ag.rows
    ag_set = iv.normalize(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy())
    exposed = iv.subtract(ag_set, other)
    charged, piece_ag, piece_s, piece_e = _charge(exposed, rows, ag.per_ag)
    per_ag = ag.per_ag.assign(exposed_ns=charged)
    per_step_type = per_ag.groupby(["step", "type"], sort=True)["exposed_ns"].sum().reset_index()
    per_step_type = per_step_type[["step", "type", "exposed_ns"]]
    steps = ag.steps
    window = iv.measure_in_windows(exposed, steps.starts, steps.ends)
    per_step_df = pd.DataFrame({"step": steps.table["step"].to_numpy(), "exposed_ns": window})
    intervals = pd.DataFrame(
        {
            "ag": piece_ag,
            "step": per_ag["step"].to_numpy()[piece_ag] if len(piece_ag) else [],
            "type": per_ag["type"].to_numpy()[piece_ag] if len(piece_ag) else [],
            "start_ns": piece_s,
            "end_ns": piece_e,
        }
    )
    by_type = per_step_type.groupby("type")["exposed_ns"].apply(lambda x: median_ns(x.to_numpy()))
    summary = {
        "allgathers": int(len(per_ag)),
        "steps": int(len(per_step_df)),
        "total_exposed_ns": iv.total(exposed),
        "median_exposed_ns_per_step": median_ns(per_step_df["exposed_ns"].to_numpy()),
        "median_exposed_ns_per_step_by_type": {str(k): v for k, v in by_type.items()},
    }
    return Result(
        command="exposure",
        inputs=[trace_input(trace)],
        params=allgather_params(ag, kw),
        summary=summary,
        tables={
            "per_step_type": per_step_type,
            "per_step": per_step_df,
            "per_ag": per_ag[["ag", "step", "type", "start_ns", "end_ns", "exposed_ns"]],
            "intervals": intervals,
        },
        warnings=merge_warnings(trace.report.warnings, ag.warnings),
    )


def _charge(exposed, rows: pd.DataFrame, per_ag: pd.DataFrame):
    """Exposed length per AllGather, and the exposed pieces with the AllGather each is charged to."""
    n_ag = len(per_ag)
    ex_s, ex_e = exposed
    if ex_s.size == 0:
        empty = np.empty(0, dtype=np.int64)
        return np.zeros(n_ag, dtype=np.int64), empty, empty, empty
    rs, re_, rag = rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy(), rows["ag"].to_numpy()
    bounds = np.sort(np.concatenate([ex_s, ex_e, rs, re_]))
    bounds = bounds[np.concatenate(([True], bounds[1:] != bounds[:-1]))]  # np.unique, without its slow hash path
    seg_s, seg_e = bounds[:-1], bounds[1:]
    k = np.searchsorted(ex_s, seg_s, side="right") - 1
    inside = (k >= 0) & (seg_s < ex_e[np.clip(k, 0, None)])
    seg_s, seg_e = seg_s[inside], seg_e[inside]
    ag_start = per_ag["start_ns"].to_numpy()
    best = np.full(seg_s.size, -1, dtype=np.int64)
    lanes = lane_key(rows)
    for lane in np.unique(lanes):
        m = lanes == lane
        ls, le, lag = rs[m], re_[m], rag[m]
        order = np.argsort(ls, kind="stable")
        ls, le, lag = ls[order], le[order], lag[order]
        j = np.searchsorted(ls, seg_s, side="right") - 1
        cover = (j >= 0) & (seg_s < le[np.clip(j, 0, None)])
        cand = np.where(cover, lag[np.clip(j, 0, None)], -1)
        better = (cand >= 0) & ((best < 0) | (ag_start[np.clip(cand, 0, None)] < ag_start[np.clip(best, 0, None)]))
        best = np.where(better, cand, best)
    charged = np.zeros(n_ag, dtype=np.int64)
    ok = best >= 0
    np.add.at(charged, best[ok], (seg_e - seg_s)[ok])
    return charged, best[ok], seg_s[ok], seg_e[ok]
