"""A13 — the sweep tables of one deployment from the per-point analyses (``tracekit.fan_out`` runs those over
the files, serially, in a process pool or on Dask, and calls :func:`sweep_tables` on the results in a fixed
order, so every way of running gives identical output)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...annotation import as_annotation
from ...ingest.discover import TraceRef
from ...result import shown_path
from ..comm.allgather import allgathers
from ..comm.exposure import exposure
from ..options import AllGatherOptions
from ..structure.blocks import block_stats
from ..time.decompose import decompose
from ..steps.resolve import find_steps, median_ns

SWEEP_COLUMNS = [
    "point",
    "bs",
    "context",
    "rank",
    "steps",
    "median_wall_ns",
    "median_busy_ns",
    "median_ag_only_ns",
    "median_idle_ns",
    "median_ag_only_local_ns",
    "median_idle_local_ns",
    "median_ptop_busy_ns",
    "median_received_bytes",
    "median_exposed_ns",
    "allgathers_per_step",
    "path",
]


def _row(ref: TraceRef, res: dict[str, Any]) -> dict[str, Any]:
    ps = res["per_step"]
    ag = res["allgather"]
    ex = res["exposure"]
    recv = ag.groupby("step")["received_bytes"].sum() if not ag.empty else pd.Series(dtype=np.int64)
    count = ag.groupby("step")["count"].sum() if not ag.empty else pd.Series(dtype=np.int64)
    exp = ex.groupby("step")["exposed_ns"].sum() if not ex.empty else pd.Series(dtype=np.int64)
    return {
        "point": ref.point,
        "bs": ref.bs,
        "context": ref.context,
        "rank": ref.rank_label,
        "steps": int(len(ps)),
        "median_wall_ns": median_ns(ps["wall_ns"]),
        "median_busy_ns": median_ns(ps["busy_ns"]),
        "median_ag_only_ns": median_ns(ps["ag_only_ns"]),
        "median_idle_ns": median_ns(ps["idle_ns"]),
        "median_ag_only_local_ns": median_ns(ps["ag_only_local_ns"]),
        "median_idle_local_ns": median_ns(ps["idle_local_ns"]),
        "median_ptop_busy_ns": median_ns(ps["ptop_busy_ns"]),
        "median_received_bytes": median_ns(recv.to_numpy()) if len(recv) else 0,
        "median_exposed_ns": median_ns(exp.reindex(ps["step"], fill_value=0).to_numpy()) if len(ps) else 0,
        "allgathers_per_step": median_ns(count.to_numpy()) if len(count) else 0,
        "path": shown_path(ref.path),  # a name that is not UTF-8 shows as \\xNN (a table holds valid text only)
    }


def _long_medians(parts: list[pd.DataFrame], key: str, cols: list[str]) -> pd.DataFrame:
    """Per point and key, the median over steps of each column (a key absent in a step counts 0)."""
    out_cols = ["point", "bs", key] + [f"median_{c}" for c in cols]
    if not parts:
        return pd.DataFrame(columns=out_cols)
    rows = []
    for part in parts:
        point, bs = part["point"].iloc[0], part["bs"].iloc[0]
        steps = sorted(part["step"].unique())
        for k, g in part.groupby(key, sort=True):
            g = g.set_index("step").reindex(steps, fill_value=0)
            rows.append({"point": point, "bs": bs, key: k, **{f"median_{c}": median_ns(g[c].to_numpy()) for c in cols}})
    return pd.DataFrame(rows, columns=out_cols)


def per_trace(trace, *, ann=None, steps=None, ag: AllGatherOptions | None = None) -> dict[str, Any]:
    """Every per-trace analysis of one operating point, as plain tables (picklable). ``steps``: StepOptions, Steps
    or a table (None: the annotation's); ``ag``: the AllGather options over the annotation's."""
    ann = as_annotation(ann)
    steps = find_steps(trace, steps, ann=ann)
    out: dict[str, Any] = {"path": trace.path, "warnings": list(trace.report.warnings)}
    wall = decompose(trace, ag="ptop", steps=steps)
    wall_local = decompose(trace, ag="ptop+local", steps=steps)
    out["warnings"] += [w for w in wall.warnings if w not in out["warnings"]]
    per_step = wall.tables["per_step"].merge(
        wall_local.tables["per_step"][["step", "ag_only_ns", "idle_ns"]].rename(
            columns={"ag_only_ns": "ag_only_local_ns", "idle_ns": "idle_local_ns"}
        ),
        on="step",
    )
    out["per_step"] = per_step
    ev = trace.events
    ptop = (ev["copy_kind"] == "PtoP").to_numpy()
    ws = per_step["start_ns"].to_numpy()
    we = ws + per_step["wall_ns"].to_numpy()
    ptop_set = iv.normalize(ev["start_ns"].to_numpy()[ptop], ev["end_ns"].to_numpy()[ptop])
    per_step["ptop_busy_ns"] = iv.measure_in_windows(ptop_set, ws, we)
    out["blocks"] = pd.DataFrame(columns=["step", "block_type", "blocks", "kernel_ns", "kernels"])
    if ann is not None and ann.blocks is not None:
        b = block_stats(trace, ann, steps=steps)
        out["blocks"] = b.tables["per_step_type"]
        out["warnings"] += [w for w in b.warnings if w not in out["warnings"]]
    out["allgather"] = pd.DataFrame(columns=["step", "type", "count", "received_bytes", "full_bytes", "busy_ns"])
    out["exposure"] = pd.DataFrame(columns=["step", "type", "exposed_ns"])
    if ptop.any():
        merged = AllGatherOptions.of(ag).with_annotation(ann)
        out["allgather"] = allgathers(trace, ag=merged, steps=steps).tables["per_step_type"]
        out["exposure"] = exposure(trace, ag=merged, steps=steps).tables["per_step_type"]
    return out


def sweep_tables(refs: list[TraceRef], results: list[dict[str, Any]]) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """The sweep's tables (one row per point, medians per type) and its warnings, from :func:`per_trace` results."""
    rows, per_step, blocks, ags, exps, warnings = [], [], [], [], [], []
    for ref, res in zip(refs, results):
        rows.append(_row(ref, res))
        tag = {"point": ref.point, "bs": ref.bs}
        per_step.append(res["per_step"].assign(**tag))
        for t, store in ((res["blocks"], blocks), (res["allgather"], ags), (res["exposure"], exps)):
            if not t.empty:
                store.append(t.assign(**tag))
        warnings += [w for w in res["warnings"] if w not in warnings]
    tables = {
        "sweep": pd.DataFrame(rows, columns=SWEEP_COLUMNS),
        "block_types": _long_medians(blocks, "block_type", ["kernel_ns", "blocks"]),
        "exposure_types": _long_medians(exps, "type", ["exposed_ns"]),
        "allgather_types": _long_medians(ags, "type", ["count", "received_bytes", "busy_ns"]),
        "per_step": pd.concat(per_step, ignore_index=True),
    }
    return tables, warnings
