"""A5–A8 — weight AllGather segmentation, exposure, communication on the critical path, copy bandwidth.

A weight AllGather (sglang's weight shard) shows in a trace as, on one side stream, a local-copy kernel
(the rank's own 1/G of the weights; its name pattern is ``ag_local_copy`` in data/classes.json) followed by G−1 ``Memcpy PtoP`` copies,
one from each peer. Grouping never uses correlation ids: every copy of one CUDA-graph replay shares one.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ... import intervals as iv
from ... import schema
from ...annotation import as_annotation
from ...data import load_classes
from ...events import lane_key, weight_ag_mask
from ...events import main_stream as find_main_stream
from ...errors import MissingDataError, UsageError
from ...result import Result, trace_input
from ...trace import Trace
from ..aliases import one_of
from ..steps.resolve import Steps, get_steps, median_ns, merge_warnings, step_params
from ...regexes import bounded

SIZE_TOLERANCE_REL = 1e-4  # a full size matches a table entry within max(G bytes, 0.01 %)
UNMATCHED = "unmatched"
UNKNOWN_SIZE = "unknown_size"  # an AllGather with a copy whose bytes the trace does not give
COMM_OVERLAP_CLASSES = ("nccl", "deepep")
PER_AG_COLUMNS = ["ag", "step", "device", "stream", "type", "start_ns", "end_ns", "copies", "local_copy",
                  "local_copy_ns", "gaps_ns", "received_bytes", "full_bytes", "effective_gbps", "complete",
                  "copies_without_bytes"]


@dataclass(frozen=True)
class AllGathers:
    """Segmented AllGathers. ``rows`` are the events that are AllGather copies (local + PtoP)."""

    per_ag: pd.DataFrame
    copies: pd.DataFrame
    group_size: int
    rows: pd.DataFrame  # event rows: start_ns, end_ns, ag, is_local, device, stream
    steps: Steps
    warnings: list[str] = field(default_factory=list)


def parse_sizes(items: list[str] | None) -> dict[str, int]:
    """``["KDA=627048448", ...]`` → {"KDA": 627048448}; a bad item is a usage error."""
    out: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            out[name.strip()] = int(value.replace("_", ""))
        except ValueError:
            raise UsageError(f"--ag-size {item!r} is not TYPE=BYTES (e.g. KDA=627048448)") from None
    return out


def allgather_options(ann=None, *, group_size: int | None = None, sizes=None,
                      local_copy: str | None = None) -> dict:
    """The AllGather parameters: the annotation's ``allgather`` section, overridden by explicit options
    (``sizes`` as a dict or as ``TYPE=BYTES`` items, added to the annotation's). The one place they merge.
    ``ann``: an Annotation, or a name or path (:func:`tracekit.annotation.as_annotation`)."""
    spec = getattr(as_annotation(ann), "allgather", None)
    merged = dict(spec.sizes) if spec else {}
    merged.update(sizes if isinstance(sizes, dict) else parse_sizes(sizes))
    return {"group_size": group_size if group_size is not None else (spec.group_size if spec else None),
            "sizes": merged,
            "local_copy_pattern": local_copy or (spec.local_copy if spec else None)}


def segment_allgathers(trace: Trace, *, group_size: int | None = None, sizes: dict[str, int] | None = None,
                       local_copy_pattern: str | None = None, steps=None, step_name: str | None = None,
                       min_step_ns: int | None = None) -> AllGathers:
    """Cut the PtoP copies of every stream into AllGathers (see the module docstring).

    On each stream that carries PtoP copies, a local-copy kernel starts an AllGather and the PtoP copies
    after it join it; a run of more than G−1 copies continues as further AllGathers without a local copy
    (flagged), as does a run at the start of a stream. G is inferred as the most common copy count + 1
    unless given. Full bytes = received × G/(G−1) for a complete AllGather, else mean copy bytes × G
    (flagged incomplete). Types come from ``sizes`` (name → full bytes); sizes matching no entry are typed
    ``unmatched`` and counted, never dropped.
    """
    ev = trace.events
    warnings: list[str] = []
    pattern = (bounded(local_copy_pattern, "--local-copy (the local-copy kernel pattern)") if local_copy_pattern
               else load_classes().ag_local_copy)  # a user's pattern runs time-bounded
    ptop = (ev["copy_kind"] == "PtoP").to_numpy()
    if not ptop.any():
        raise MissingDataError(f"{trace.path} has no PtoP copies (Memcpy PtoP), so no weight AllGather to segment")
    dev, st = ev["device"].to_numpy(), ev["stream"].to_numpy()
    lanes = lane_key(ev)
    local = weight_ag_mask(ev, pattern) & ~ptop
    sel = np.flatnonzero(ptop | local)
    rows = pd.DataFrame({
        "event_id": ev["event_id"].to_numpy()[sel],
        "lane": lanes[sel], "device": dev[sel], "stream": st[sel],
        "start_ns": ev["start_ns"].to_numpy()[sel], "end_ns": ev["end_ns"].to_numpy()[sel],
        "bytes": ev["bytes"].to_numpy()[sel], "is_local": local[sel],
    }).sort_values(["lane", "start_ns"], kind="stable").reset_index(drop=True)
    lane = rows["lane"].to_numpy()
    is_local = rows["is_local"].to_numpy()
    lane_start = np.concatenate([[True], lane[1:] != lane[:-1]])
    group = np.cumsum(is_local | lane_start) - 1
    copy_rank = _rank_within(group, ~is_local)  # 0-based index of each PtoP copy inside its group
    counts = np.bincount(group, weights=~is_local, minlength=group.max() + 1).astype(np.int64)
    if group_size is None:
        positive = counts[counts > 0]
        group_size = int(np.bincount(positive).argmax()) + 1 if positive.size else 2
    if group_size < 2:
        raise UsageError(f"--group-size must be at least 2, not {group_size}")
    per = group_size - 1
    chunk = np.where(is_local, 0, copy_rank // per)
    ag_key = group * (1 << 20) + chunk
    _, ag = np.unique(ag_key, return_inverse=True)
    first_start = np.full(ag.max() + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_start, ag, rows["start_ns"].to_numpy())
    renumber = np.empty_like(first_start)
    renumber[np.argsort(first_start, kind="stable")] = np.arange(first_start.size)
    rows["ag"] = renumber[ag]  # AllGathers numbered in time order
    steps = get_steps(trace, steps, step_name=step_name, min_step_ns=min_step_ns)
    warnings += steps.warnings
    per_ag = _per_ag(rows, group_size, sizes or {}, steps)
    rows = rows.drop(columns=["lane"])
    copies = _copies(ev, rows)
    unknown = int((per_ag["type"] == UNKNOWN_SIZE).sum())
    if unknown:
        missing = int(per_ag["copies_without_bytes"].sum())
        warnings.append(f"{trace.path}: {missing} PtoP cop(ies) carry no byte count (some AMD and CUPTI versions write"
                        f" none), so {unknown} AllGather(s) have no size: their received and full bytes and their"
                        f" bandwidth are null and their type is {UNKNOWN_SIZE}")
    unmatched = int((per_ag["type"] == UNMATCHED).sum())
    if unmatched:
        sizes_seen = ", ".join(str(b) for b in sorted(set(per_ag.loc[per_ag["type"] == UNMATCHED, "full_bytes"]))[:8])
        warnings.append(f"{trace.path}: {unmatched} AllGather(s) match no size in the table (full bytes: {sizes_seen});"
                        " pass --ag-size TYPE=BYTES or an annotation with allgather_sizes")
    no_local = int((~per_ag["local_copy"]).sum())
    if no_local:
        warnings.append(f"{trace.path}: {no_local} AllGather(s) have no local copy in front (flagged local_copy=false)")
    incomplete = int((~per_ag["complete"]).sum())
    if incomplete:
        warnings.append(f"{trace.path}: {incomplete} AllGather(s) have a copy count other than G-1={per}"
                        " (flagged complete=false)")
    return AllGathers(per_ag=per_ag, copies=copies, group_size=group_size, rows=rows, steps=steps, warnings=warnings)


def _rank_within(group: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """For rows where ``mask``, the count of earlier masked rows in the same (contiguous) group."""
    c = np.cumsum(mask) - mask
    first = np.concatenate([[True], group[1:] != group[:-1]])
    base = np.maximum.accumulate(np.where(first, c, 0))
    return c - base


def _per_ag(rows: pd.DataFrame, g: int, sizes: dict[str, int], steps: Steps) -> pd.DataFrame:
    grp = rows.groupby("ag", sort=True)
    start = grp["start_ns"].min().to_numpy()
    end = grp["end_ns"].max().to_numpy()
    dur = (rows["end_ns"] - rows["start_ns"])
    is_local = rows["is_local"]
    local_ns = dur.where(is_local, 0).groupby(rows["ag"]).sum().to_numpy()
    copies = (~is_local).groupby(rows["ag"]).sum().to_numpy()
    busy = dur.groupby(rows["ag"]).sum().to_numpy()
    recv = rows["bytes"].where(~is_local & (rows["bytes"] > 0), 0).groupby(rows["ag"]).sum().to_numpy()
    no_bytes = (~is_local & (rows["bytes"] < 0)).groupby(rows["ag"]).sum().to_numpy()
    complete = copies == g - 1
    mean_copy = np.where(copies > 0, recv // np.maximum(copies, 1), 0)
    full = np.where(complete, recv * g // (g - 1), mean_copy * g)
    types = np.full(len(full), UNMATCHED, dtype=object)
    for name, size in sizes.items():
        tol = max(g, int(size * SIZE_TOLERANCE_REL))
        types[(np.abs(full - size) <= tol) & (types == UNMATCHED)] = name
    unknown = no_bytes > 0  # a missing byte count makes the sizes and the rate unknown, never smaller
    types[unknown] = UNKNOWN_SIZE
    span = end - start
    out = pd.DataFrame({
        "ag": np.arange(len(start)),
        "step": steps.step_of(start),
        "device": grp["device"].first().to_numpy(), "stream": grp["stream"].first().to_numpy(),
        "type": types, "start_ns": start, "end_ns": end, "copies": copies,
        "local_copy": grp["is_local"].any().to_numpy(), "local_copy_ns": local_ns,
        "gaps_ns": span - busy, "received_bytes": pd.arrays.IntegerArray(recv.astype(np.int64), unknown),
        "full_bytes": pd.arrays.IntegerArray(full.astype(np.int64), unknown),
        "effective_gbps": np.where((span > 0) & ~unknown, recv / np.maximum(span, 1), np.nan),
        "complete": complete, "copies_without_bytes": no_bytes.astype(np.int64),
    })
    return out[PER_AG_COLUMNS]


def _copies(ev: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    cp = rows[~rows["is_local"]]
    comm = ev["comm_class"].isin(COMM_OVERLAP_CLASSES).to_numpy()
    comm_set = iv.normalize(ev["start_ns"].to_numpy()[comm], ev["end_ns"].to_numpy()[comm])
    s, e = cp["start_ns"].to_numpy(), cp["end_ns"].to_numpy()
    dur = e - s
    return pd.DataFrame({
        "ag": cp["ag"].to_numpy(), "event_id": cp["event_id"].to_numpy(), "stream": cp["stream"].to_numpy(),
        "start_ns": s, "dur_ns": dur, "bytes": cp["bytes"].to_numpy(),
        "gbps": np.where((dur > 0) & (cp["bytes"].to_numpy() >= 0), cp["bytes"].to_numpy() / np.maximum(dur, 1),
                         np.nan),
        "overlaps_comm": iv.measure_in_windows(comm_set, s, e) > 0,
    })


def _segment(trace: Trace, ann, *, group_size, ag_size, local_copy, sizes, local_copy_pattern, steps, step_name,
             min_step_ns, phase, step_source, steps_file) -> tuple[AllGathers, dict]:
    """allgather and exposure: the annotation resolved, its AllGather options merged with the explicit ones
    (:func:`allgather_options`), the steps under its step options, then the AllGathers."""
    ann = as_annotation(ann)
    opts = allgather_options(ann, group_size=group_size, sizes=one_of(ag_size, sizes, "ag_size", "sizes"),
                             local_copy=one_of(local_copy, local_copy_pattern, "local_copy", "local_copy_pattern"))
    st = get_steps(trace, steps, ann=ann, step_name=step_name, min_step_ns=min_step_ns, phase=phase,
                   source=step_source, steps_file=steps_file)
    return segment_allgathers(trace, **opts, steps=st), opts


def allgather_result(trace: Trace, ann=None, *, group_size: int | None = None, ag_size=None,
                     local_copy: str | None = None, sizes=None, local_copy_pattern: str | None = None, steps=None,
                     step_name: str | None = None, min_step_ns: int | None = None, phase: str | None = None,
                     step_source: str | None = None, steps_file=None) -> Result:
    """`tracekit allgather`: every AllGather, per step and type counts and bytes, copy bandwidth (A5, A8).

    ``ann`` (a name, a path or an Annotation) gives the AllGather and step options that the explicit ones
    override; ``ag_size`` (``TYPE=BYTES`` items or a dict) and ``local_copy`` are the CLI's ``--ag-size`` and
    ``--local-copy`` (``sizes`` and ``local_copy_pattern`` are the same options under their older names)."""
    ag, kw = _segment(trace, ann, group_size=group_size, ag_size=ag_size, local_copy=local_copy, sizes=sizes,
                      local_copy_pattern=local_copy_pattern, steps=steps, step_name=step_name,
                      min_step_ns=min_step_ns, phase=phase, step_source=step_source, steps_file=steps_file)
    per_ag = ag.per_ag
    copies = ag.copies.merge(per_ag[["ag", "type", "step"]], on="ag", how="left")
    per_step_type = _per_step_type(ag)
    bw = (copies.groupby(["type", "overlaps_comm"]).agg(copies=("gbps", "size"), median_gbps=("gbps", "median"))
          .reset_index())
    bandwidth = []
    for t in sorted(copies["type"].unique()):
        row = {"type": t}
        for flag, label in ((True, "overlapping"), (False, "alone")):
            r = bw[(bw["type"] == t) & (bw["overlaps_comm"] == flag)]
            row[f"copies_{label}"] = int(r["copies"].iloc[0]) if len(r) else 0
            row[f"median_gbps_{label}"] = float(r["median_gbps"].iloc[0]) if len(r) else None
        bandwidth.append(row)
    per_step_recv = _sum_or_null(per_step_type.groupby("step")["received_bytes"]) if len(per_step_type) else \
        pd.Series(dtype="Int64")
    steps_unknown = int(per_step_recv.isna().sum())
    without_bytes = int(per_ag["copies_without_bytes"].sum())
    warnings = merge_warnings(trace.report.warnings, ag.warnings)
    if steps_unknown:  # a median over the known steps would be a median of a biased sample: no number
        warnings.append(f"{trace.path}: {steps_unknown} of {len(per_step_recv)} step(s) hold AllGathers whose copies"
                        f" carry no byte count ({without_bytes} cop(ies) without bytes), so the median received bytes"
                        " per step is null")
    summary = {
        "allgathers": int(len(per_ag)),
        "group_size": ag.group_size,
        "steps": int(per_ag["step"].nunique()),
        "median_received_bytes_per_step": (median_ns(per_step_recv.to_numpy(dtype=np.int64))
                                           if len(per_step_recv) and not steps_unknown else None),
        "copies_without_bytes": without_bytes,
        "steps_without_bytes": steps_unknown,
        "unmatched": int((per_ag["type"] == UNMATCHED).sum()),
        "without_local_copy": int((~per_ag["local_copy"]).sum()),
        "incomplete": int((~per_ag["complete"]).sum()),
        "median_copy_gbps": float(copies["gbps"].median()) if len(copies) else None,
    }
    return Result(command="allgather", inputs=[trace_input(trace)], params=_params(ag, kw), summary=summary,
                  tables={"per_ag": per_ag, "per_step_type": per_step_type,
                          "bandwidth": pd.DataFrame(bandwidth, columns=["type", "copies_overlapping",
                                                                        "median_gbps_overlapping", "copies_alone",
                                                                        "median_gbps_alone"]),
                          "copies": copies},
                  warnings=warnings)


def _params(ag: AllGathers, kw: dict) -> dict:
    return {"group_size": kw.get("group_size"), "group_size_used": ag.group_size, "sizes": kw.get("sizes") or {},
            "local_copy_pattern": kw.get("local_copy_pattern"), **step_params(ag.steps)}


def _per_step_type(ag: AllGathers) -> pd.DataFrame:
    per_ag = ag.per_ag
    rows = ag.rows.merge(per_ag[["ag", "step", "type"]], on="ag")
    cols = ["step", "type", "count", "received_bytes", "full_bytes", "busy_ns"]
    if per_ag.empty:
        return pd.DataFrame(columns=cols)
    g = per_ag.groupby(["step", "type"], sort=True)
    # a (step, type) with an AllGather of unknown size has an unknown total: null, never the sum of the known ones
    out = pd.DataFrame({"count": g.size(), "received_bytes": _sum_or_null(g["received_bytes"]),
                        "full_bytes": _sum_or_null(g["full_bytes"])}).reset_index()
    # the union of each (step, type)'s copy intervals, in one pass over every copy
    gid = pd.MultiIndex.from_frame(out[["step", "type"]]).get_indexer(pd.MultiIndex.from_frame(rows[["step", "type"]]))
    ok = gid >= 0
    out["busy_ns"] = iv.measure_by_group(gid[ok], rows["start_ns"].to_numpy()[ok], rows["end_ns"].to_numpy()[ok],
                                         len(out))
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
    return pd.Series(pd.arrays.IntegerArray(total.to_numpy(dtype=np.int64), unknown.to_numpy(dtype=bool)),
                     index=total.index)


# --------------------------------------------------------------------------- exposure (A6)


def exposure(trace: Trace, ann=None, *, group_size: int | None = None, ag_size=None, local_copy: str | None = None,
             sizes=None, local_copy_pattern: str | None = None, steps=None, step_name: str | None = None,
             min_step_ns: int | None = None, phase: str | None = None, step_source: str | None = None,
             steps_file=None) -> Result:
    """`tracekit exposure`: time when AllGather copies (local copy + PtoP) run and nothing else does.

    Exposed time = union of the AllGather copy intervals minus the union of every other kernel, memcpy
    and memset on any stream. Each exposed instant is charged to the AllGather whose copy is running then
    (the earliest-started one when AllGathers of two streams run together); per step and type by the
    AllGather's step. ``tables.intervals`` holds the exposed intervals themselves. The options are
    :func:`allgather_result`'s.
    """
    ag, kw = _segment(trace, ann, group_size=group_size, ag_size=ag_size, local_copy=local_copy, sizes=sizes,
                      local_copy_pattern=local_copy_pattern, steps=steps, step_name=step_name,
                      min_step_ns=min_step_ns, phase=phase, step_source=step_source, steps_file=steps_file)
    ev = trace.events
    gpu = ev["kind"].isin(schema.GPU_ACTIVITY_KINDS).to_numpy()
    is_ag = np.isin(ev["event_id"].to_numpy(), ag.rows["event_id"].to_numpy())
    s, e = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    other = iv.normalize(s[gpu & ~is_ag], e[gpu & ~is_ag])
    rows = ag.rows
    ag_set = iv.normalize(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy())
    exposed = iv.subtract(ag_set, other)
    charged, piece_ag, piece_s, piece_e = _charge(exposed, rows, ag.per_ag)
    per_ag = ag.per_ag.assign(exposed_ns=charged)
    per_step_type = (per_ag.groupby(["step", "type"], sort=True)["exposed_ns"].sum().reset_index())
    per_step_type = per_step_type[["step", "type", "exposed_ns"]]
    steps = ag.steps
    window = iv.measure_in_windows(exposed, steps.starts, steps.ends)
    per_step_df = pd.DataFrame({"step": steps.table["step"].to_numpy(), "exposed_ns": window})
    intervals = pd.DataFrame({"ag": piece_ag, "step": per_ag["step"].to_numpy()[piece_ag] if len(piece_ag) else [],
                              "type": per_ag["type"].to_numpy()[piece_ag] if len(piece_ag) else [],
                              "start_ns": piece_s, "end_ns": piece_e})
    by_type = per_step_type.groupby("type")["exposed_ns"].apply(lambda x: median_ns(x.to_numpy()))
    summary = {
        "allgathers": int(len(per_ag)),
        "steps": int(len(per_step_df)),
        "total_exposed_ns": iv.total(exposed),
        "median_exposed_ns_per_step": median_ns(per_step_df["exposed_ns"].to_numpy()),
        "median_exposed_ns_per_step_by_type": {str(k): v for k, v in by_type.items()},
    }
    return Result(command="exposure", inputs=[trace_input(trace)], params=_params(ag, kw), summary=summary,
                  tables={"per_step_type": per_step_type, "per_step": per_step_df,
                          "per_ag": per_ag[["ag", "step", "type", "start_ns", "end_ns", "exposed_ns"]],
                          "intervals": intervals},
                  warnings=merge_warnings(trace.report.warnings, ag.warnings))


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
    for lane in np.unique(rows["stream"].to_numpy() + rows["device"].to_numpy().astype(np.int64) * (1 << 32)):
        m = (rows["stream"].to_numpy() + rows["device"].to_numpy().astype(np.int64) * (1 << 32)) == lane
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


# --------------------------------------------------------------------------- communication (A7)


WEIGHT_AG_CLASS = "weight_ag"


def communication(trace: Trace, ann=None, *, main_stream: int | None = None, local_copy: str | None = None,
                  main: int | None = None, local_copy_pattern: str | None = None, steps=None,
                  step_name: str | None = None, min_step_ns: int | None = None, phase: str | None = None,
                  step_source: str | None = None, steps_file=None) -> Result:
    """`tracekit comm`: every communication kernel, and the weight AllGathers (PtoP copies and their local
    copies, class ``weight_ag``), by class and name, per step, split into critical path (on the main
    compute stream) and side streams (A7).

    ``ann`` (a name, a path or an Annotation) gives the main stream (its ``main_stream`` when a number), the
    local-copy pattern and the step options, each overridden by the explicit option; ``main_stream`` and
    ``local_copy`` are the CLI's ``--main-stream`` and ``--local-copy`` (``main`` and ``local_copy_pattern``
    are the same options under their older names)."""
    ann = as_annotation(ann)
    main = one_of(main_stream, main, "main_stream", "main")
    if main is None and ann is not None and isinstance(ann.main_stream, int):
        main = ann.main_stream
    local_copy_pattern = allgather_options(ann, local_copy=one_of(local_copy, local_copy_pattern, "local_copy",
                                                                  "local_copy_pattern"))["local_copy_pattern"]
    ev = trace.events
    warnings = list(trace.report.warnings)
    dev_main, st_main = find_main_stream(ev, main)
    is_comm = ev["comm_class"].notna().to_numpy()
    is_ag = weight_ag_mask(ev, local_copy_pattern)
    sel = is_comm | is_ag
    c = ev.loc[sel, ["name", "comm_class", "collective", "algo", "protocol", "device", "stream", "start_ns",
                     "end_ns"]].copy()
    c["class"] = c["comm_class"].astype(object).where(c["comm_class"].notna(), WEIGHT_AG_CLASS)
    c["critical"] = (c["device"] == dev_main) & (c["stream"] == st_main)
    steps = get_steps(trace, steps, ann=ann, step_name=step_name, min_step_ns=min_step_ns, phase=phase,
                      source=step_source, steps_file=steps_file)
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
