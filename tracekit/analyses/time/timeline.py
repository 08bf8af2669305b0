"""One step as lanes of intervals — what the HTML report's step timeline draws (a renderer runs no analysis).

Lanes, top to bottom: ``step``; ``blocks`` (annotation blocks) or ``layers`` (automatic layers), labelled by type;
each GPU stream (``stream D:S``) with its kernels and copies, labelled by kernel category; ``allgathers`` (each
weight AllGather's span, labelled by layer type); ``exposed`` (exposed AllGather time).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...events import gpu_mask
from ...trace import Trace
from ..categories import trace_categories

TIMELINE_COLUMNS = ["lane", "label", "start_ns", "end_ns"]
MAX_ACTIVITIES = 20_000  # per step: beyond this, activities of one lane and label that touch are merged


def _rows(lane: str, labels, starts, ends) -> pd.DataFrame:
    return pd.DataFrame({"lane": lane, "label": pd.Series(labels, dtype=object).astype(str).to_numpy(),
                         "start_ns": np.asarray(starts, dtype=np.int64), "end_ns": np.asarray(ends, dtype=np.int64)})


def _merge_touching(df: pd.DataFrame, gap_ns: int) -> pd.DataFrame:
    """Consecutive intervals of one lane and label closer than ``gap_ns`` as one (a picture cannot show them)."""
    df = df.sort_values(["lane", "label", "start_ns"], kind="stable")
    lane_label = df["lane"] + "\0" + df["label"]
    prev_end = df.groupby(lane_label.to_numpy())["end_ns"].shift().to_numpy()
    new = np.isnan(prev_end.astype(float)) | (df["start_ns"].to_numpy() - np.nan_to_num(prev_end.astype(float)) > gap_ns)
    grp = np.cumsum(new)
    out = df.groupby(grp).agg(lane=("lane", "first"), label=("label", "first"), start_ns=("start_ns", "min"),
                              end_ns=("end_ns", "max"))
    return out.reset_index(drop=True)


def step_timeline(trace: Trace, steps, step: int, *, blocks: pd.DataFrame | None = None, block_lane: str = "blocks",
                  allgathers: pd.DataFrame | None = None, exposed: pd.DataFrame | None = None,
                  categories=None) -> pd.DataFrame:
    """The lanes of ``step`` (a step number of ``steps``): ``blocks`` has ``step, start_ns, end_ns`` and a type column
    (``block_type`` or ``layer_type``); ``allgathers`` ``step, type, start_ns, end_ns`` (exposure's per_ag);
    ``exposed`` the same columns (exposure's intervals)."""
    tab = steps.table
    row = tab[tab["step"] == step]
    if row.empty:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    s0, s1 = int(row["start_ns"].iloc[0]), int(row["end_ns"].iloc[0])
    parts = [_rows("step", [f"step {step}"], [s0], [s1])]
    if blocks is not None and len(blocks):
        b = blocks[blocks["step"] == step]
        kind = "block_type" if "block_type" in b else "layer_type"
        parts.append(_rows(block_lane, b[kind], b["start_ns"], b["end_ns"]))
    ev = trace.events
    g = gpu_mask(ev)
    st, en = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    inside = g & (st >= s0) & (st < s1)
    if inside.any():
        cats = np.asarray(trace_categories(trace, categories), dtype=object)[inside]
        lanes = (ev["device"].to_numpy()[inside].astype(str).astype(object) + ":"
                 + ev["stream"].to_numpy()[inside].astype(str).astype(object))
        acts = pd.DataFrame({"lane": "stream " + lanes, "label": pd.Series(cats).fillna("other").astype(str).to_numpy(),
                             "start_ns": st[inside], "end_ns": en[inside]})
        if len(acts) > MAX_ACTIVITIES:
            acts = _merge_touching(acts, max(1, (s1 - s0) // 4000))
        parts.append(acts.sort_values(["lane", "start_ns"], kind="stable"))
    for lane, df in (("allgathers", allgathers), ("exposed", exposed)):
        if df is not None and len(df):
            d = df[df["step"] == step]
            parts.append(_rows(lane, d["type"], d["start_ns"], d["end_ns"]))
    out = pd.concat(parts, ignore_index=True)[TIMELINE_COLUMNS]
    out.attrs["picture"] = True  # the terminal leaves it out unless --all: it is what -f html draws
    return out
