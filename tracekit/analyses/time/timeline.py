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
    return pd.DataFrame(
        {
            "lane": lane,
            "label": pd.Series(labels, dtype=object).astype(str).to_numpy(),
            "start_ns": np.asarray(starts, dtype=np.int64),
            "end_ns": np.asarray(ends, dtype=np.int64),
        }
    )


def _merge_codes(lane: np.ndarray, label: np.ndarray, start: np.ndarray, end: np.ndarray, gap_ns: int):
    """Consecutive intervals of one lane and label closer than ``gap_ns`` as one (a picture cannot show them);
    ``lane`` and ``label`` are codes in their texts' order. The merged (lane, label, start, end), sorted by lane,
    label and start."""
    if lane.size and int(lane.min()) >= 0 and int(label.min()) >= 0:  # (lane, label) as one code, in that order
        o = _by_codes_then_start(lane * (int(label.max()) + 1) + label, start)
    else:  # a missing text (code -1) or nothing
        o = np.lexsort((start, label, lane))  # stable, as the sort by the texts it replaces
    lane, label, start, end = lane[o], label[o], start[o], end[o]
    same = np.zeros(o.size, dtype=bool)
    same[1:] = (lane[1:] == lane[:-1]) & (label[1:] == label[:-1])
    prev_end = np.zeros(o.size, dtype=float)
    prev_end[1:] = end[:-1]  # as float, as the shifted column was (a gap is compared the way it was)
    first = np.flatnonzero(~same | (start - prev_end > gap_ns))
    return lane[first], label[first], np.minimum.reduceat(start, first), np.maximum.reduceat(end, first)


def _by_codes_then_start(key: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``np.lexsort((start, key))`` for small non-negative codes ``key``: a stable sort by start (the rows come
    nearly in start order), then a stable radix sort of the codes as int16 (or the lexsort when they are wide)."""
    if key.size == 0 or int(key.max()) >= 2**15 or int(key.min()) < 0:
        return np.lexsort((start, key))
    by_start = np.argsort(start, kind="stable")
    return by_start[np.argsort(key.astype(np.int16)[by_start], kind="stable")]


def _merge_touching(df: pd.DataFrame, gap_ns: int) -> pd.DataFrame:
    """:func:`_merge_codes` of a table with lane, label, start_ns and end_ns."""
    lane, lanes = pd.factorize(df["lane"], sort=True)  # codes in the texts' order
    label, labels = pd.factorize(df["label"], sort=True)
    ln, lb, s, e = _merge_codes(lane, label, df["start_ns"].to_numpy(), df["end_ns"].to_numpy(), gap_ns)
    return pd.DataFrame(
        {
            "lane": np.asarray(lanes, dtype=object)[ln],
            "label": np.asarray(labels, dtype=object)[lb],
            "start_ns": s,
            "end_ns": e,
        }
    )


def _texts(per_value: list[str], codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes into the sorted distinct texts (object array) for rows whose value code is ``codes`` and whose text is
    ``per_value[code]``: a code order that is the texts' order, two values of one text one code."""
    texts, inv = np.unique(np.array(per_value, dtype=object), return_inverse=True)
    return inv.reshape(-1)[codes], texts.astype(object)


def _lane_codes(ev: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``"stream D:S"``, the text made once per lane (codes, texts)."""
    dev, stream = ev["device"].to_numpy()[rows], ev["stream"].to_numpy()[rows]
    key = dev.astype(np.int64) * (1 << 32) + stream.astype(np.int64)
    code, uniq = pd.factorize(key)  # a few lanes, hashed: each key's first row, codes ranked as sorted keys
    first = np.full(len(uniq), code.size, dtype=np.int64)
    np.minimum.at(first, code, np.arange(code.size))
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(uniq, kind="stable")] = np.arange(len(uniq))
    first = first[np.argsort(uniq, kind="stable")]  # np.unique's return_index: by sorted key
    return _texts([f"stream {d}:{t}" for d, t in zip(dev[first].tolist(), stream[first].tolist())], rank[code])


def _category_codes(cats: pd.Categorical, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's category as text, ``other`` where it has none (codes, texts)."""
    codes = np.asarray(cats.codes)[rows].astype(np.int64)
    per_value = [str(c) for c in cats.categories.tolist()] + ["other"]
    return _texts(per_value, np.where(codes >= 0, codes, len(per_value) - 1))


def _activities(trace: Trace, rows: np.ndarray, categories, s0: int, s1: int) -> pd.DataFrame:
    """The stream lanes: each GPU activity of the step (``rows``), merged when there are more than MAX_ACTIVITIES,
    sorted by lane and start."""
    ev = trace.events
    lane, lanes = _lane_codes(ev, rows)
    label, labels = _category_codes(trace_categories(trace, categories), rows)
    start, end = ev["start_ns"].to_numpy()[rows], ev["end_ns"].to_numpy()[rows]
    if rows.size > MAX_ACTIVITIES:
        lane, label, start, end = _merge_codes(lane, label, start, end, max(1, (s1 - s0) // 4000))
    o = _by_codes_then_start(lane, start)  # by lane text, then start; stable
    return pd.DataFrame({"lane": lanes[lane[o]], "label": labels[label[o]], "start_ns": start[o], "end_ns": end[o]})


def step_timeline(
    trace: Trace,
    steps,
    step: int,
    *,
    blocks: pd.DataFrame | None = None,
    block_lane: str = "blocks",
    allgathers: pd.DataFrame | None = None,
    exposed: pd.DataFrame | None = None,
    categories=None,
) -> pd.DataFrame:
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
    st = ev["start_ns"].to_numpy()
    rows = np.flatnonzero(gpu_mask(ev) & (st >= s0) & (st < s1))
    if rows.size:
        parts.append(_activities(trace, rows, categories, s0, s1))
    for lane, df in (("allgathers", allgathers), ("exposed", exposed)):
        if df is not None and len(df):
            d = df[df["step"] == step]
            parts.append(_rows(lane, d["type"], d["start_ns"], d["end_ns"]))
    out = pd.concat(parts, ignore_index=True)[TIMELINE_COLUMNS]
    out.attrs["picture"] = True  # the terminal leaves it out unless --all: it is what -f html draws
    return out
