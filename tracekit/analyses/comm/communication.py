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
from ..steps.resolve import Steps, find_steps, median_ns
from ...result import merge_warnings


WEIGHT_AG_CLASS = "weight_ag"


@options_as_objects
def communication(
    trace: Trace, ann=None, *, main_stream: int | None = None, ag: AllGatherOptions | None = None, steps=None
) -> Result:
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
    # the main stream and the AllGather copies are found before the steps, so a trace that fails at either says
    # what it said before
    pre = (
        None
        if isinstance(steps, Steps)
        else (find_main_stream(trace.events, main), weight_ag_mask(trace.events, local_copy_pattern))
    )
    st = find_steps(trace, steps, ann=ann)
    # once per trace, steps and options: report asks, and so does its critical-communication finding
    key = ("communication", id(st), main, local_copy_pattern)
    hit = trace.derived.get(key)
    if hit is None or hit[0] is not st:  # the entry holds the steps, so their id cannot be reused meanwhile
        hit = trace.derived[key] = (st, _communication(trace, main, local_copy_pattern, st, pre))
    res = hit[1]
    return replace(
        res,
        inputs=copy.deepcopy(res.inputs),
        params=dict(res.params),
        summary=copy.deepcopy(res.summary),
        tables=dict(res.tables),
        warnings=list(res.warnings),
    )


def _communication(trace: Trace, main: int | None, local_copy_pattern, steps: Steps, pre: tuple | None) -> Result:
    ev = trace.events
    warnings = list(trace.report.warnings)
    (dev_main, st_main), is_ag = (
        pre if pre is not None else (find_main_stream(ev, main), weight_ag_mask(ev, local_copy_pattern))
    )
    sel = np.flatnonzero(ev["comm_class"].notna().to_numpy() | is_ag)  # the rows' columns, not a copy of them
    dev, stream = ev["device"].to_numpy()[sel], ev["stream"].to_numpy()[sel]
    start, end = ev["start_ns"].to_numpy()[sel], ev["end_ns"].to_numpy()[sel]
    warnings = merge_warnings(warnings, steps.warnings)
    ws, we, wid = steps.starts, steps.ends, steps.table["step"].to_numpy()
    table = _per_step_class(
        ev, sel, start, end, (dev == dev_main) & (stream == st_main), steps.step_of(start), ws, we, wid
    )
    per_step = (
        table.groupby(["step", "class"])
        .agg(critical_ns=("critical_ns", "sum"), side_ns=("side_ns", "sum"), count=("count", "sum"))
        .reset_index()
        if len(table)
        else pd.DataFrame(columns=["step", "class", "critical_ns", "side_ns", "count"])
    )
    by_class = per_step.groupby("class")
    summary = {
        "main_stream": st_main,
        "main_device": dev_main,
        "steps": int(len(wid)),
        "median_critical_ns_per_step_by_class": {str(k): median_ns(g["critical_ns"].to_numpy()) for k, g in by_class},
        "median_side_ns_per_step_by_class": {str(k): median_ns(g["side_ns"].to_numpy()) for k, g in by_class},
    }
    return Result(
        command="comm",
        inputs=[trace_input(trace)],
        params={"main_stream": main, **steps.options.as_params()},
        summary=summary,
        tables={"per_step_class": table, "per_step": per_step},
        warnings=warnings,
    )


TABLE_COLUMNS = ["step", "class", "name", "collective", "algo", "protocol", "critical_ns", "side_ns", "count"]


def _text_codes(col: pd.Series, rows: np.ndarray, missing: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The texts of a categorical column's rows ``rows`` as codes in the texts' sorted order, as
    ``pd.factorize(texts, sort=True)`` numbers them up to unused texts (codes, texts): a missing value is
    ``missing``, or code -1 when that is None."""
    if not isinstance(col.dtype, pd.CategoricalDtype):  # a table built by hand
        col = col.astype("category")
    codes = col.cat.codes.to_numpy()[rows].astype(np.int64)
    texts = [str(c) for c in col.cat.categories.tolist()] + ([missing] if missing is not None else [])
    if missing is not None:
        codes = np.where(codes >= 0, codes, len(texts) - 1)
    uniq = sorted(set(texts))  # two values of one text (a class named like the missing one's) are one code
    pos = {t: i for i, t in enumerate(uniq)}
    rank = np.array([pos[t] for t in texts] + [-1], dtype=np.int64)  # the last slot: code -1, missing
    return rank[codes], np.asarray(uniq, dtype=object)


def _per_step_class(
    ev: pd.DataFrame,
    sel: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    critical: np.ndarray,
    step: np.ndarray,
    ws: np.ndarray,
    we: np.ndarray,
    wid: np.ndarray,
) -> pd.DataFrame:
    """Per (class, name) — sorted, as a groupby sorts them — and step: critical and side-stream time (the union of
    the kernels in the step) and the count; only the pairs with any. ``sel``: the event rows (communication kernels
    and AllGather copies; class ``weight_ag`` where they have no communication class), with their start, end,
    whether on the main stream, and step. Arrays per name, not DataFrames per name; the names and classes from the
    columns' codes (no text per row)."""
    cls_code, cls_u = _text_codes(ev["comm_class"], sel, WEIGHT_AG_CLASS)
    name_code, name_u = _text_codes(ev["name"], sel, None)  # a missing name: -1, left out as groupby does
    ok = (cls_code >= 0) & (name_code >= 0)
    key = cls_code * max(len(name_u), 1) + name_code
    groups, first, gi = np.unique(key[ok], return_index=True, return_inverse=True)
    rows = np.flatnonzero(ok)
    n_g, n_w = groups.size, len(wid)
    s, e = start.astype(np.int64, copy=False)[rows], end.astype(np.int64, copy=False)[rows]
    crit = critical[rows]
    step = step[rows]
    order = np.argsort(gi, kind="stable")
    cuts = np.searchsorted(gi[order], np.arange(n_g + 1))
    crit_ns = np.zeros((n_g, n_w), dtype=np.int64)
    side_ns = np.zeros((n_g, n_w), dtype=np.int64)
    for g in range(n_g):  # per distinct (class, name): a few dozen
        r = order[cuts[g] : cuts[g + 1]]
        on, off = r[crit[r]], r[~crit[r]]
        crit_ns[g] = iv.measure_in_windows(iv.normalize(s[on], e[on]), ws, we)
        side_ns[g] = iv.measure_in_windows(iv.normalize(s[off], e[off]), ws, we)
    pos = np.searchsorted(wid, step)
    in_step = (step >= 0) & (pos < n_w)
    cnt = np.bincount(gi[in_step] * n_w + pos[in_step], minlength=n_g * n_w).reshape(n_g, n_w)
    g_at, w_at = np.nonzero((crit_ns != 0) | (side_ns != 0) | (cnt != 0))  # by name, then step: the rows' order
    if g_at.size == 0:
        return pd.DataFrame([], columns=TABLE_COLUMNS)
    head = sel[rows[first]]  # each name's first row gives its collective, algo and protocol
    per_g = {k: [_opt(v) for v in ev[k].take(head).tolist()] for k in ("collective", "algo", "protocol")}
    gcls, gname = cls_u[cls_code[rows[first]]], name_u[name_code[rows[first]]]
    data = {
        "step": [int(x) for x in wid[w_at].tolist()],
        "class": [gcls[g] for g in g_at.tolist()],
        "name": [gname[g] for g in g_at.tolist()],
        **{k: [v[g] for g in g_at.tolist()] for k, v in per_g.items()},
        "critical_ns": crit_ns[g_at, w_at].tolist(),
        "side_ns": side_ns[g_at, w_at].tolist(),
        "count": cnt[g_at, w_at].tolist(),
    }
    return pd.DataFrame(data, columns=TABLE_COLUMNS)


def _opt(v):
    return None if v is None or (isinstance(v, float) and v != v) or v is pd.NA else str(v)
