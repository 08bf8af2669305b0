"""Questions about the events table that every layer asks, answered once (docs/architecture.md).

Which events' names match a pattern (evaluated once per distinct name, never per event), the lane of an event
(device and stream as one int64 key), GPU activity, the main compute stream, and the weight-AllGather copies.
Which step an event belongs to is :meth:`tracekit.analyses.steps.resolve.Steps.step_of` (on
:func:`tracekit.intervals.window_of`).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from . import schema
from .data import load_classes
from .errors import MissingDataError
from .regexes import bounded


def name_mask(events: pd.DataFrame, pattern, *, kind: str | None = None, where: str = "a name pattern") -> np.ndarray:
    """Rows whose ``name`` the regex finds (``search``), optionally of one ``kind`` only. A pattern given as text
    comes from a user (an annotation, a selector) and runs time-bounded (:mod:`tracekit.regexes`)."""
    rx = bounded(pattern, where)
    col = events["name"]
    cats = col.cat.categories
    if len(cats) == 0:
        return np.zeros(len(events), dtype=bool)
    hit = np.fromiter((bool(rx.search(str(c))) for c in cats), dtype=bool, count=len(cats))
    codes = col.cat.codes.to_numpy()
    out = (codes >= 0) & hit[np.clip(codes, 0, None)]
    if kind is not None:
        out &= kinds_mask(events, (kind,))
    return out


def categorical_at(values, idx: np.ndarray) -> pd.Categorical:
    """``pd.Categorical(np.where(idx >= 0, values[idx], None))`` without the per-row objects: ``values`` are a few
    strings (one per block, window, ...), ``idx`` one int per row (-1: missing). Categories are the values used,
    sorted, as pd.Categorical would make them."""
    values = np.asarray(values, dtype=object)
    idx = np.asarray(idx, dtype=np.int64)
    used = (
        np.flatnonzero(np.bincount(idx[idx >= 0], minlength=values.size)) if idx.size else np.zeros(0, dtype=np.int64)
    )  # the sorted distinct indices, without sorting every row
    if used.size == 0:
        return pd.Categorical.from_codes(np.full(idx.size, -1, dtype=np.int8), categories=pd.Index([], dtype=object))
    names = sorted({values[i] for i in used.tolist()})
    pos = {n: i for i, n in enumerate(names)}
    lut = np.full(values.size + 1, -1, dtype=np.int64)  # the last slot: missing
    lut[used] = [pos[values[i]] for i in used.tolist()]
    return pd.Categorical.from_codes(lut[np.where(idx >= 0, idx, values.size)], categories=pd.Index(names))


def lane_key(events: pd.DataFrame, rows: np.ndarray | None = None) -> np.ndarray:
    """One int64 per event for its (device, stream) lane (of the rows ``rows`` only, row numbers, when given)."""
    dev, stream = events["device"].to_numpy(), events["stream"].to_numpy()
    if rows is not None:
        dev, stream = dev[rows], stream[rows]
    key = dev.astype(np.int64)  # a new array: multiplied and added in place (no temporaries of every row)
    key *= 1 << 32
    key += stream.astype(np.int64, copy=False)
    return key


def kinds_mask(events: pd.DataFrame, kinds) -> np.ndarray:
    """Rows whose kind is one of ``kinds`` (``events["kind"].isin(kinds)``), from the categorical's codes: one
    comparison of the small codes per kind asked (many times cheaper than ``isin`` on 10^6 rows); plain strings
    by ``isin``."""
    return values_mask(events, "kind", kinds)


def values_mask(events: pd.DataFrame, column: str, values) -> np.ndarray:
    """Rows whose ``column`` is one of ``values`` (texts; ``events[column].isin(values)``): :func:`kinds_mask` for
    any categorical column (kind, copy_kind, comm_class, ...); a missing value is none of them."""
    col = events[column]
    if not isinstance(col.dtype, pd.CategoricalDtype):  # a table built by hand
        return col.isin(list(values)).to_numpy()
    hit = np.flatnonzero(np.isin(np.asarray(col.cat.categories, dtype=object), list(values))).tolist()
    codes = col.cat.codes.to_numpy()  # a missing kind (code -1) is none of them
    if not hit:
        return np.zeros(codes.size, dtype=bool)
    out = codes == hit[0]  # a comparison per kind asked (a few) is cheaper than a gather through a table
    for c in hit[1:]:
        out |= codes == c
    return out


def gpu_mask(events: pd.DataFrame) -> np.ndarray:
    """Kernels, memcpys and memsets: what GPU activity means everywhere in tracekit."""
    return kinds_mask(events, schema.GPU_ACTIVITY_KINDS)


def comm_mask(events: pd.DataFrame, rows: np.ndarray | None = None) -> np.ndarray:
    """Rows that are communication kernels: a ``comm_class`` (NCCL/RCCL, DeepEP, custom all-reduce, all-to-all), as
    ``tracekit/data/classes.json`` gives it at ingest (of the rows ``rows`` only, row numbers, when given). A table
    without the column has none."""
    if "comm_class" not in events.columns:
        return np.zeros(len(events) if rows is None else len(rows), dtype=bool)
    col = events["comm_class"]
    out = col.cat.codes.to_numpy() >= 0 if isinstance(col.dtype, pd.CategoricalDtype) else col.notna().to_numpy()
    return out if rows is None else out[rows]


def comm_names(events: pd.DataFrame) -> set[str]:
    """The names of the communication events (:func:`comm_mask`), as text ("nan" for a missing name), through the
    name codes of those rows: no selection of the events table. What ``waves`` and its findings leave out of the
    tail-wave totals (a collective's grid is its channel count, persistent by design)."""
    comm, name = comm_mask(events), events["name"]
    if not isinstance(name.dtype, pd.CategoricalDtype):  # a hand-built table
        return {str(n) for n in events.loc[comm, "name"].unique()}
    codes = np.unique(name.cat.codes.to_numpy()[comm])
    cats = name.cat.categories
    return {str(cats[c]) if c >= 0 else str(np.nan) for c in codes.tolist()}


def main_stream(events: pd.DataFrame, stream: int | None = None) -> tuple[int, int]:
    """(device, stream) of the critical-path compute stream: ``stream`` when given, else the one with the most
    kernel time outside communication kernels (:func:`comm_mask`), so a collective stream (RCCL's, NCCL's) is never
    the main one; only when no stream runs any other kernel (a trace of collectives alone), the one with the most
    kernel time. Ties go to the first lane in (device, stream) order. Every command asks this one function
    (docs/layers.md, "The main stream")."""
    is_k = np.flatnonzero(kinds_mask(events, ("kernel",)))  # three columns of the kernel rows, not a copy
    if not is_k.size:
        raise MissingDataError("the trace has no kernel events, so no main compute stream")
    dev, st = events["device"].to_numpy()[is_k], events["stream"].to_numpy()[is_k]
    if stream is not None:
        hit = np.flatnonzero(st == stream)
        if hit.size == 0:
            raise MissingDataError(f"the main stream {stream} carries no kernel")
        return int(dev[hit[0]]), int(stream)
    dur = events["dur_ns"].to_numpy()[is_k]
    comm = comm_mask(events, is_k)
    if comm.any() and not comm.all():
        dur = np.where(comm, 0, dur)  # communication kernels weigh nothing: the lanes' compute time decides
    if not (
        dev.dtype.kind in "iu" and st.dtype.kind in "iu" and dur.dtype.kind == "i"
    ):  # a table built by hand: floats, missing values
        d, s = pd.Series(dur).groupby([dev, st]).sum().idxmax()
        return int(d), int(s)
    # the kernel time per (device, stream), summed on factorized codes (a few lanes): the lane of the most, the
    # first in (device, stream) order on a tie, as a groupby's idxmax gives it
    dc, du = pd.factorize(dev)
    sc, su = pd.factorize(st)
    key = dc.astype(np.int64) * len(su) + sc
    tot = np.zeros(len(du) * len(su), dtype=np.int64)
    np.add.at(tot, key, dur.astype(np.int64, copy=False))
    present = np.flatnonzero(np.bincount(key, minlength=tot.size))
    order = np.lexsort((su[present % len(su)], du[present // len(su)]))  # the lanes as the groupby sorts them
    best = int(present[order][int(np.argmax(tot[present][order]))])
    return int(du[best // len(su)]), int(su[best % len(su)])


def weight_ag_mask(events: pd.DataFrame, local_copy_pattern: str | re.Pattern | None = None) -> np.ndarray:
    """The weight-AllGather copies: PtoP memcpys, plus the local-copy kernels on the lanes that carry them."""
    pattern = local_copy_pattern if local_copy_pattern else load_classes().ag_local_copy
    ptop = (events["copy_kind"] == "PtoP").to_numpy()
    if not ptop.any():
        return ptop
    local = np.flatnonzero(name_mask(events, pattern, kind="kernel"))  # the lanes of these few rows only
    out = ptop.copy()
    out[local[np.isin(lane_key(events, local), lane_key(events, np.flatnonzero(ptop)))]] = True
    return out


def same_stream_overlaps(events: pd.DataFrame, *, tolerance_ns: int = 0, fraction: float = 0.0) -> np.ndarray:
    """Row mask: GPU activities that start before an earlier activity of their lane has ended (the lane's running
    maximum end, not only the previous event's), by more than ``max(tolerance_ns, fraction × own duration)``.
    With the defaults any overlap counts; PDL lets a kernel start a little early, so the step health check asks
    for more than half the duration (docs/steps.md)."""
    out = np.zeros(len(events), dtype=bool)
    rows = np.flatnonzero(gpu_mask(events))
    if rows.size == 0:
        return out
    lane = pd.factorize(lane_key(events, rows))[0]  # a few lanes: small codes, in no particular order
    s, e = events["start_ns"].to_numpy()[rows], events["end_ns"].to_numpy()[rows]
    # each lane's rows by start, then row: lexsort((s, lane)) as a stable sort by start (the rows come nearly in
    # start order) and a stable radix sort of the small lane codes; the lanes' own order does not matter
    by_start = np.argsort(s, kind="stable")
    order = by_start[np.argsort(lane.astype(np.int16 if lane.max() < 2**15 else np.int64)[by_start], kind="stable")]
    ln, s, e, rows = lane[order], s[order], e[order], rows[order]
    same = np.concatenate([[False], ln[1:] == ln[:-1]])
    reach = np.empty_like(e)
    cuts = np.flatnonzero(~same).tolist() + [e.size]
    for a, b in zip(cuts[:-1], cuts[1:]):  # one running maximum per lane (a few lanes, not a loop per event)
        np.maximum.accumulate(e[a:b], out=reach[a:b])
    prev = np.concatenate([[np.iinfo(np.int64).min], reach[:-1]])
    allowed = np.maximum(tolerance_ns, (fraction * (e - s)).astype(np.int64))
    out[rows[same & (prev - s > allowed)]] = True
    return out


def launch_index(
    gpu_start: np.ndarray, gpu_corr: np.ndarray, launch_corr: np.ndarray, launch_start: np.ndarray
) -> np.ndarray:
    """Per GPU activity: the index (into the launch arrays) of the runtime call that launched it — the latest
    launch of its correlation id that starts before it (ids are reused in long traces), else the id's first
    launch; -1 when no launch is known. The one rule for which launch a kernel or copy belongs to.

    An id (not negative) that one launch alone carries names that launch whatever the times, so those activities
    are looked up by id (a table over the ids' range, or one sorted search); only the activities of ids several
    launches carry (and of negative ids) are matched by time (:func:`_launch_by_time`), with those ids' launches."""
    n, m = gpu_corr.size, launch_corr.size
    out = np.full(n, -1, dtype=np.int64)
    if n == 0 or m == 0:
        return out
    lc, gc = launch_corr.astype(np.int64, copy=False), gpu_corr.astype(np.int64, copy=False)
    lo, hi = int(lc.min()), int(lc.max())
    if hi - lo <= 4 * (n + m) + 4096:  # a table over the ids' range: launches per id, and the launch of each
        off = lc - lo
        per_id = np.bincount(off, minlength=hi - lo + 1)
        which = np.full(hi - lo + 1, -1, dtype=np.int64)
        which[off] = np.arange(m)  # right where the id is carried once (the only case read)
        g = gc - lo
        inside = (g >= 0) & (g <= hi - lo)
        g = np.where(inside, g, 0)
        count = np.where(inside, per_id[g], 0)
        single = (count == 1) & (gc >= 0)
        out[single] = which[g[single]]
        by_time = per_id[off] > 1
    else:  # ids spread too wide for a table: one sorted search
        order = np.argsort(lc, kind="stable")
        sc = lc[order]
        a = np.searchsorted(sc, gc, side="left")
        count = np.searchsorted(sc, gc, side="right") - a
        single = (count == 1) & (gc >= 0)
        out[single] = order[a[single]]
        same = sc[1:] == sc[:-1]  # an id's launches side by side: each of them is a reused one
        dup = np.zeros(m, dtype=bool)
        dup[1:] |= same
        dup[:-1] |= same
        by_time = np.zeros(m, dtype=bool)
        by_time[order] = dup
    many = np.flatnonzero((count > 0) & ~single)
    if many.size:  # the rule by time, over those ids' launches (in their order)
        j = np.flatnonzero(by_time | (lc < 0))
        got = _launch_by_time(gpu_start[many], gc[many], lc[j], launch_start[j])
        out[many] = np.where(got >= 0, j[np.clip(got, 0, None)], -1)
    return out


def _launch_by_time(
    gpu_start: np.ndarray, gpu_corr: np.ndarray, launch_corr: np.ndarray, launch_start: np.ndarray
) -> np.ndarray:
    """:func:`launch_index`'s rule by time: one merge_asof by id (a packed sort was no faster)."""
    n = gpu_start.size
    if launch_corr.size == 0 or n == 0:
        return np.full(n, -1, dtype=np.int64)
    acts = pd.DataFrame({"corr": gpu_corr, "t": gpu_start, "i": np.arange(n)}).sort_values("t", kind="stable")
    lau = pd.DataFrame({"corr": launch_corr, "t": launch_start, "j": np.arange(launch_corr.size)}).sort_values(
        "t", kind="stable"
    )
    m = pd.merge_asof(acts, lau, on="t", by="corr", direction="backward")
    out = np.full(n, -1, dtype=np.int64)
    j = m["j"].to_numpy(dtype=float)
    ok = ~np.isnan(j)
    out[m["i"].to_numpy()[ok]] = j[ok].astype(np.int64)
    first = lau.drop_duplicates("corr").set_index("corr")["j"]
    missing = np.flatnonzero((out < 0) & (gpu_corr >= 0))
    if missing.size:
        out[missing] = pd.Series(gpu_corr[missing]).map(first).fillna(-1).to_numpy(np.int64)
    return out
