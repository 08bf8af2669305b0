"""A5 — the weight AllGathers cut out of a trace, once per trace and options: what ``allgather``, ``exposure``,
``hbm`` and ``suggest`` all read.

A weight AllGather (sglang's weight shard) shows in a trace as, on one side stream, a local-copy kernel
(the rank's own 1/G of the weights; its name pattern is ``ag_local_copy`` in data/classes.json) followed by G−1 ``Memcpy PtoP`` copies,
one from each peer. Grouping never uses correlation ids: every copy of one CUDA-graph replay shares one.

:func:`allgather_options` is the one place the AllGather options merge with an annotation's;
:func:`segment_allgathers` cuts the copies into AllGathers and keeps the result on the trace (``trace.derived``), so
that a report asking for the AllGathers and then for their exposure segments them once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...annotation import as_annotation
from ...data import load_classes
from ...events import lane_key, values_mask, weight_ag_mask
from ...errors import MissingDataError
from ...regexes import bounded
from ...trace import Trace
from ..options import AllGatherOptions
from ..steps.keywords import options_as_objects
from ..steps.resolve import Steps, find_steps

SIZE_TOLERANCE_REL = 1e-4  # a full size matches a table entry within max(G bytes, 0.01 %)
UNMATCHED = "unmatched"
UNKNOWN_SIZE = "unknown_size"  # an AllGather with a copy whose bytes the trace does not give
COMM_OVERLAP_CLASSES = ("nccl", "deepep")
PER_AG_COLUMNS = [
    "ag",
    "step",
    "device",
    "stream",
    "type",
    "start_ns",
    "end_ns",
    "copies",
    "local_copy",
    "local_copy_ns",
    "gaps_ns",
    "received_bytes",
    "full_bytes",
    "effective_gbps",
    "complete",
    "copies_without_bytes",
]


@dataclass(frozen=True)
class AllGathers:
    """Segmented AllGathers. ``rows`` are the events that are AllGather copies (local + PtoP)."""

    per_ag: pd.DataFrame
    copies: pd.DataFrame
    group_size: int
    rows: pd.DataFrame  # event rows: start_ns, end_ns, ag, is_local, device, stream
    steps: Steps
    warnings: list[str] = field(default_factory=list)


def allgather_options(ann=None, *, group_size: int | None = None, sizes=None, local_copy: str | None = None) -> dict:
    """The AllGather parameters as keywords: the annotation's ``allgather`` section, overridden by explicit options
    (``sizes`` as a dict or as ``TYPE=BYTES`` items, added to the annotation's). The merge itself is
    :meth:`AllGatherOptions.with_annotation`, the one place it happens. ``ann``: an Annotation, or a name or path
    (:func:`tracekit.annotation.as_annotation`)."""
    return (
        AllGatherOptions(group_size=group_size, sizes=sizes or (), local_copy=local_copy)
        .with_annotation(ann)
        .as_keywords()
    )


@options_as_objects
def segment_allgathers(trace: Trace, *, ag: AllGatherOptions | None = None, steps=None) -> AllGathers:
    """Cut the PtoP copies of every stream into AllGathers (see the module docstring), once per trace, steps and
    options (kept in ``trace.derived``; each caller gets its own list of warnings).

    On each stream that carries PtoP copies, a local-copy kernel starts an AllGather and the PtoP copies
    after it join it; a run of more than G−1 copies continues as further AllGathers without a local copy
    (flagged), as does a run at the start of a stream. G is inferred as the most common copy count + 1
    unless given. Full bytes = received × G/(G−1) for a complete AllGather, else mean copy bytes × G
    (flagged incomplete). Types come from ``sizes`` (name → full bytes, the first listed wins a tie); sizes
    matching no entry are typed ``unmatched`` and counted, never dropped.

    ``ag``: the :class:`AllGatherOptions` as they are (no annotation: a command merges its annotation's first,
    :func:`segment_for_command`); ``steps``: StepOptions, Steps or a table (:func:`get_steps`).
    """
    opts = AllGatherOptions.of(ag)
    group_size, sizes, local_copy_pattern = opts.group_size, opts.size_map, opts.local_copy
    ev = trace.events
    pattern = (
        bounded(local_copy_pattern, "--local-copy (the local-copy kernel pattern)")
        if local_copy_pattern
        else load_classes().ag_local_copy
    )  # a user's pattern runs time-bounded
    ptop = (ev["copy_kind"] == "PtoP").to_numpy()
    if not ptop.any():
        raise MissingDataError(f"{trace.path} has no PtoP copies (Memcpy PtoP), so no weight AllGather to segment")
    st = find_steps(trace, steps)
    key = ("allgathers", id(st), group_size, tuple(sizes.items()), local_copy_pattern)  # in order: it types ties
    hit = trace.derived.get(key)
    if hit is None or hit[0] is not st:  # the entry holds the steps, so their id cannot be reused meanwhile
        hit = trace.derived[key] = (
            st,
            _segment(trace, ptop, weight_ag_mask(ev, pattern) & ~ptop, group_size, sizes, st),
        )
    return replace(hit[1], warnings=list(hit[1].warnings))


def _segment(
    trace: Trace, ptop: np.ndarray, local: np.ndarray, group_size: int | None, sizes: dict[str, int], steps: Steps
) -> AllGathers:
    """The segmentation itself: the copies (``ptop`` and ``local`` rows of the events) cut into numbered
    AllGathers, measured and typed."""
    ev = trace.events
    rows = _copy_rows(ev, ptop, local)
    group_size = _number_allgathers(rows, group_size)
    per_ag = _per_ag(rows, group_size, sizes, steps)
    rows = rows.drop(columns=["lane"])
    warnings = steps.warnings + _warnings(trace, per_ag, group_size)
    return AllGathers(
        per_ag=per_ag, copies=_copies(ev, rows), group_size=group_size, rows=rows, steps=steps, warnings=warnings
    )


def _copy_rows(ev: pd.DataFrame, ptop: np.ndarray, local: np.ndarray) -> pd.DataFrame:
    """The AllGather copies (PtoP and local) as rows in lane and time order."""
    sel = np.flatnonzero(ptop | local)
    return (
        pd.DataFrame(
            {
                "event_id": ev["event_id"].to_numpy()[sel],
                "lane": lane_key(ev, sel),
                "device": ev["device"].to_numpy()[sel],
                "stream": ev["stream"].to_numpy()[sel],
                "start_ns": ev["start_ns"].to_numpy()[sel],
                "end_ns": ev["end_ns"].to_numpy()[sel],
                "bytes": ev["bytes"].to_numpy()[sel],
                "is_local": local[sel],
            }
        )
        .sort_values(["lane", "start_ns"], kind="stable")
        .reset_index(drop=True)
    )


def _number_allgathers(rows: pd.DataFrame, group_size: int | None) -> int:
    """Cut the copy rows into AllGathers (column ``ag``, numbered in time order); returns the group size G used."""
    lane = rows["lane"].to_numpy()
    is_local = rows["is_local"].to_numpy()
    lane_start = np.concatenate([[True], lane[1:] != lane[:-1]])
    group = np.cumsum(is_local | lane_start) - 1
    copy_rank = _rank_within(group, ~is_local)  # 0-based index of each PtoP copy inside its group
    counts = np.bincount(group, weights=~is_local, minlength=group.max() + 1).astype(np.int64)
    if group_size is None:
        positive = counts[counts > 0]
        group_size = int(np.bincount(positive).argmax()) + 1 if positive.size else 2  # at least 2
    chunk = np.where(is_local, 0, copy_rank // (group_size - 1))
    ag_key = group * (1 << 20) + chunk
    _, ag = np.unique(ag_key, return_inverse=True)
    first_start = np.full(ag.max() + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_start, ag, rows["start_ns"].to_numpy())
    renumber = np.empty_like(first_start)
    renumber[np.argsort(first_start, kind="stable")] = np.arange(first_start.size)
    rows["ag"] = renumber[ag]  # AllGathers numbered in time order
    return group_size


def _warnings(trace: Trace, per_ag: pd.DataFrame, group_size: int) -> list[str]:
    """What the segmentation says about AllGathers without sizes, types, local copies or all their copies."""
    warnings = []
    unknown = int((per_ag["type"] == UNKNOWN_SIZE).sum())
    if unknown:
        missing = int(per_ag["copies_without_bytes"].sum())
        warnings.append(
            f"{trace.path}: {missing} PtoP cop(ies) carry no byte count (some AMD and CUPTI versions write"
            f" none), so {unknown} AllGather(s) have no size: their received and full bytes and their"
            f" bandwidth are null and their type is {UNKNOWN_SIZE}"
        )
    unmatched = int((per_ag["type"] == UNMATCHED).sum())
    if unmatched:
        sizes_seen = ", ".join(str(b) for b in sorted(set(per_ag.loc[per_ag["type"] == UNMATCHED, "full_bytes"]))[:8])
        warnings.append(
            f"{trace.path}: {unmatched} AllGather(s) match no size in the table (full bytes: {sizes_seen});"
            " pass --ag-size TYPE=BYTES or an annotation with allgather_sizes"
        )
    no_local = int((~per_ag["local_copy"]).sum())
    if no_local:
        warnings.append(f"{trace.path}: {no_local} AllGather(s) have no local copy in front (flagged local_copy=false)")
    incomplete = int((~per_ag["complete"]).sum())
    if incomplete:
        warnings.append(
            f"{trace.path}: {incomplete} AllGather(s) have a copy count other than G-1={group_size - 1}"
            " (flagged complete=false)"
        )
    return warnings


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
    dur = rows["end_ns"] - rows["start_ns"]
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
    out = pd.DataFrame(
        {
            "ag": np.arange(len(start)),
            "step": steps.step_of(start),
            "device": grp["device"].first().to_numpy(),
            "stream": grp["stream"].first().to_numpy(),
            "type": types,
            "start_ns": start,
            "end_ns": end,
            "copies": copies,
            "local_copy": grp["is_local"].any().to_numpy(),
            "local_copy_ns": local_ns,
            "gaps_ns": span - busy,
            "received_bytes": pd.arrays.IntegerArray(recv.astype(np.int64), unknown),
            "full_bytes": pd.arrays.IntegerArray(full.astype(np.int64), unknown),
            "effective_gbps": np.where((span > 0) & ~unknown, recv / np.maximum(span, 1), np.nan),
            "complete": complete,
            "copies_without_bytes": no_bytes.astype(np.int64),
        }
    )
    return out[PER_AG_COLUMNS]


def _copies(ev: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    cp = rows[~rows["is_local"]]
    comm = values_mask(ev, "comm_class", COMM_OVERLAP_CLASSES)
    comm_set = iv.normalize(ev["start_ns"].to_numpy()[comm], ev["end_ns"].to_numpy()[comm])
    s, e = cp["start_ns"].to_numpy(), cp["end_ns"].to_numpy()
    dur = e - s
    return pd.DataFrame(
        {
            "ag": cp["ag"].to_numpy(),
            "event_id": cp["event_id"].to_numpy(),
            "stream": cp["stream"].to_numpy(),
            "start_ns": s,
            "dur_ns": dur,
            "bytes": cp["bytes"].to_numpy(),
            "gbps": np.where(
                (dur > 0) & (cp["bytes"].to_numpy() >= 0), cp["bytes"].to_numpy() / np.maximum(dur, 1), np.nan
            ),
            "overlaps_comm": iv.measure_in_windows(comm_set, s, e) > 0,
        }
    )


def segment_for_command(trace: Trace, ann, *, ag: AllGatherOptions | None, steps) -> tuple[AllGathers, dict]:
    """allgather and exposure: the annotation resolved, its AllGather options under the explicit ones
    (:meth:`AllGatherOptions.with_annotation`), the steps under its step options, then the AllGathers (segmented
    once for both); with the merged options as the keywords the result's ``params`` record."""
    ann = as_annotation(ann)
    opts = AllGatherOptions.of(ag).with_annotation(ann)
    st = find_steps(trace, steps, ann=ann)
    return segment_allgathers(trace, ag=opts, steps=st), opts.as_keywords()


def allgather_params(ag: AllGathers, kw: dict) -> dict:
    """The ``params`` of the allgather and exposure results: the AllGather options given and used, the steps'."""
    return {
        "group_size": kw.get("group_size"),
        "group_size_used": ag.group_size,
        "sizes": kw.get("sizes") or {},
        "local_copy_pattern": kw.get("local_copy_pattern"),
        **ag.steps.options.as_params(),
    }
