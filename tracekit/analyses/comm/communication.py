"""A7 — `tracekit comm`: every communication kernel and the weight AllGather copies, per step, on the critical path
(the main compute stream) or beside it.

It needs no AllGather segmentation: which copies are weight AllGathers is :func:`tracekit.events.weight_ag_mask`,
with the local-copy pattern merged with the annotation's by :meth:`AllGatherOptions.with_annotation`.
"""
from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...annotation import as_annotation
from ...events import main_stream as find_main_stream
from ...events import weight_ag_mask
from ...result import Result, trace_input
from ...trace import Trace
from ..options import AllGatherOptions
from ..steps.keywords import options_as_objects
from ..steps.resolve import Steps, get_steps, median_ns, merge_warnings, step_params


WEIGHT_AG_CLASS = "weight_ag"


@options_as_objects
def communication(trace: Trace, ann=None, *, main_stream: int | None = None, ag: AllGatherOptions | None = None,
                  steps=None) -> Result:
    """`tracekit comm`: every communication kernel, and the weight AllGathers (PtoP copies and their local
    copies, class ``weight_ag``), by class and name, per step, split into critical path (on the main
    compute stream) and side streams (A7).

    ``ann`` (a name, a path or an Annotation) gives the main stream (its ``main_stream`` when a number), the
    local-copy pattern and the step options, each overridden by the explicit option: ``main_stream`` (the CLI's
    ``--main-stream``), ``ag`` (:class:`AllGatherOptions`; only its ``local_copy``, the CLI's ``--local-copy``, is
    read here) and ``steps`` (StepOptions, Steps or a table)."""
    ann = as_annotation(ann)
    main = main_stream
    if main is None and ann is not None and isinstance(ann.main_stream, int):
        main = ann.main_stream
    local_copy_pattern = AllGatherOptions.of(ag).with_annotation(ann).local_copy
    # the main stream is found before the steps, so a trace with neither says what it said before
    lane = None if isinstance(steps, Steps) else find_main_stream(trace.events, main)
    st = get_steps(trace, steps, ann=ann)
    # once per trace, steps and options: report asks, and so does its critical-communication finding
    key = ("communication", id(st), main, local_copy_pattern)
    hit = trace.derived.get(key)
    if hit is None or hit[0] is not st:  # the entry holds the steps, so their id cannot be reused meanwhile
        hit = trace.derived[key] = (st, _communication(trace, main, local_copy_pattern, st, lane))
    res = hit[1]
    return replace(res, inputs=copy.deepcopy(res.inputs), params=dict(res.params),
                   summary=copy.deepcopy(res.summary), tables=dict(res.tables), warnings=list(res.warnings))


def _communication(trace: Trace, main: int | None, local_copy_pattern, steps: Steps,
                   lane: tuple[int, int] | None) -> Result:
    ev = trace.events
    warnings = list(trace.report.warnings)
    dev_main, st_main = lane if lane is not None else find_main_stream(ev, main)
    is_comm = ev["comm_class"].notna().to_numpy()
    is_ag = weight_ag_mask(ev, local_copy_pattern)
    sel = is_comm | is_ag
    c = ev.loc[sel, ["name", "comm_class", "collective", "algo", "protocol", "device", "stream", "start_ns",
                     "end_ns"]].copy()
    c["class"] = c["comm_class"].astype(object).where(c["comm_class"].notna(), WEIGHT_AG_CLASS)
    c["critical"] = (c["device"] == dev_main) & (c["stream"] == st_main)
    warnings = merge_warnings(warnings, steps.warnings)
    ws, we, wid = steps.starts, steps.ends, steps.table["step"].to_numpy()
    c["step"] = steps.step_of(c["start_ns"].to_numpy())
    rows = []
    for (cls, name), g in c.groupby(["class", c["name"].astype(str)], sort=True, observed=True):
        crit = g[g["critical"]]
        side = g[~g["critical"]]
        crit_ns = iv.measure_in_windows(iv.normalize(crit["start_ns"], crit["end_ns"]), ws, we)
        side_ns = iv.measure_in_windows(iv.normalize(side["start_ns"], side["end_ns"]), ws, we)
        cnt = np.bincount(np.searchsorted(wid, g["step"].to_numpy()[g["step"].to_numpy() >= 0]),
                          minlength=len(wid))
        first = g.iloc[0]
        for i in range(len(wid)):
            if crit_ns[i] or side_ns[i] or cnt[i]:
                rows.append({"step": int(wid[i]), "class": cls, "name": name,
                             "collective": _opt(first["collective"]), "algo": _opt(first["algo"]),
                             "protocol": _opt(first["protocol"]), "critical_ns": int(crit_ns[i]),
                             "side_ns": int(side_ns[i]), "count": int(cnt[i])})
    table = pd.DataFrame(rows, columns=["step", "class", "name", "collective", "algo", "protocol", "critical_ns",
                                        "side_ns", "count"])
    per_step = (table.groupby(["step", "class"]).agg(critical_ns=("critical_ns", "sum"), side_ns=("side_ns", "sum"),
                                                    count=("count", "sum")).reset_index()
                if len(table) else pd.DataFrame(columns=["step", "class", "critical_ns", "side_ns", "count"]))
    by_class = per_step.groupby("class")
    summary = {
        "main_stream": st_main, "main_device": dev_main, "steps": int(len(wid)),
        "median_critical_ns_per_step_by_class": {str(k): median_ns(g["critical_ns"].to_numpy()) for k, g in by_class},
        "median_side_ns_per_step_by_class": {str(k): median_ns(g["side_ns"].to_numpy()) for k, g in by_class},
    }
    return Result(command="comm", inputs=[trace_input(trace)],
                  params={"main_stream": main, **step_params(steps)},
                  summary=summary, tables={"per_step_class": table, "per_step": per_step}, warnings=warnings)


def _opt(v):
    return None if v is None or (isinstance(v, float) and v != v) or v is pd.NA else str(v)
