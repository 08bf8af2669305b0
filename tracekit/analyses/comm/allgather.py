"""A5, A8 — `tracekit allgather`: every weight AllGather, per step and type counts and bytes, copy bandwidth.

The AllGathers are those :func:`tracekit.analyses.comm.segments.segment_allgathers` cuts (once per trace and
options); this module only tabulates them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...result import Result, trace_input
from ...trace import Trace
from ..options import AllGatherOptions
from ..steps.keywords import options_as_objects
from ..steps.resolve import median_ns
from ...result import merge_warnings
from .segments import UNMATCHED, AllGathers, allgather_params, segment_for_command


@options_as_objects
def allgathers(trace: Trace, ann=None, *, ag: AllGatherOptions | None = None, steps=None) -> Result:
    """`tracekit allgather`: every AllGather, per step and type counts and bytes, copy bandwidth (A5, A8).

    ``ann`` (a name, a path or an Annotation) gives the AllGather and step options that ``ag``
    (:class:`AllGatherOptions`: the CLI's ``--group-size``, ``--ag-size``, ``--local-copy``) and ``steps``
    (StepOptions, Steps or a table) override."""
    ag, kw = segment_for_command(trace, ann, ag=ag, steps=steps)
    per_ag = ag.per_ag.copy()  # the result's own: the segmentation stays kept on the trace as it was
    copies = ag.copies.merge(per_ag[["ag", "type", "step"]], on="ag", how="left")
    per_step_type = _per_step_type(ag)
    bw = (
        copies.groupby(["type", "overlaps_comm"])
        .agg(copies=("gbps", "size"), median_gbps=("gbps", "median"))
        .reset_index()
    )
    bandwidth = []
    for t in sorted(copies["type"].unique()):
        row = {"type": t}
        for flag, label in ((True, "overlapping"), (False, "alone")):
            r = bw[(bw["type"] == t) & (bw["overlaps_comm"] == flag)]
            row[f"copies_{label}"] = int(r["copies"].iloc[0]) if len(r) else 0
            row[f"median_gbps_{label}"] = float(r["median_gbps"].iloc[0]) if len(r) else None
        bandwidth.append(row)
    per_step_recv = (
        _sum_or_null(per_step_type.groupby("step")["received_bytes"])
        if len(per_step_type)
        else pd.Series(dtype="Int64")
    )
    steps_unknown = int(per_step_recv.isna().sum())
    without_bytes = int(per_ag["copies_without_bytes"].sum())
    warnings = merge_warnings(trace.report.warnings, ag.warnings)
    if steps_unknown:  # a median over the known steps would be a median of a biased sample: no number
        warnings.append(
            f"{trace.path}: {steps_unknown} of {len(per_step_recv)} step(s) hold AllGathers whose copies"
            f" carry no byte count ({without_bytes} cop(ies) without bytes), so the median received bytes"
            " per step is null"
        )
    summary = {
        "allgathers": int(len(per_ag)),
        "group_size": ag.group_size,
        "steps": int(per_ag["step"].nunique()),
        "median_received_bytes_per_step": (
            median_ns(per_step_recv.to_numpy(dtype=np.int64)) if len(per_step_recv) and not steps_unknown else None
        ),
        "copies_without_bytes": without_bytes,
        "steps_without_bytes": steps_unknown,
        "unmatched": int((per_ag["type"] == UNMATCHED).sum()),
        "without_local_copy": int((~per_ag["local_copy"]).sum()),
        "incomplete": int((~per_ag["complete"]).sum()),
        "median_copy_gbps": float(copies["gbps"].median()) if len(copies) else None,
    }
    return Result(
        command="allgather",
        inputs=[trace_input(trace)],
        params=allgather_params(ag, kw),
        summary=summary,
        tables={
            "per_ag": per_ag,
            "per_step_type": per_step_type,
            "bandwidth": pd.DataFrame(
                bandwidth,
                columns=["type", "copies_overlapping", "median_gbps_overlapping", "copies_alone", "median_gbps_alone"],
            ),
            "copies": copies,
        },
        warnings=warnings,
    )


def _per_step_type(ag: AllGathers) -> pd.DataFrame:
    per_ag = ag.per_ag
    rows = ag.rows.merge(per_ag[["ag", "step", "type"]], on="ag")
    cols = ["step", "type", "count", "received_bytes", "full_bytes", "busy_ns"]
    if per_ag.empty:
        return pd.DataFrame(columns=cols)
    g = per_ag.groupby(["step", "type"], sort=True)
    # a (step, type) with an AllGather of unknown size has an unknown total: null, never the sum of the known ones
    out = pd.DataFrame(
        {
            "count": g.size(),
            "received_bytes": _sum_or_null(g["received_bytes"]),
            "full_bytes": _sum_or_null(g["full_bytes"]),
        }
    ).reset_index()
    # the union of each (step, type)'s copy intervals, in one pass over every copy
    gid = pd.MultiIndex.from_frame(out[["step", "type"]]).get_indexer(pd.MultiIndex.from_frame(rows[["step", "type"]]))
    ok = gid >= 0
    out["busy_ns"] = iv.measure_by_group(
        gid[ok], rows["start_ns"].to_numpy()[ok], rows["end_ns"].to_numpy()[ok], len(out)
    )
    out["step"] = out["step"].astype(int)
    for c in ("count", "busy_ns"):
        out[c] = out[c].astype("int64")
    for c in ("received_bytes", "full_bytes"):
        out[c] = out[c].astype("Int64")
    return out[cols]


def _sum_or_null(col) -> pd.Series:
    """Per group, the sum of a nullable column, or null when any member is null (pandas' sum skips nulls: an
    AllGather whose copies carry no byte count would count as 0 bytes)."""
    total = col.sum()
    unknown = col.apply(lambda x: bool(x.isna().any()))
    return pd.Series(
        pd.arrays.IntegerArray(total.to_numpy(dtype=np.int64), unknown.to_numpy(dtype=bool)), index=total.index
    )
