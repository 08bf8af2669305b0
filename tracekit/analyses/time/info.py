"""`tracekit info`: what is in a trace, counted after ingest."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import intervals, schema
from ...events import gpu_mask, kinds_mask
from ...gpu_specs import detect_profile, devices_phrase, profile_stand_in
from ...events import same_stream_overlaps as overlap_mask
from ...result import Result, trace_input
from ...trace import Trace
from ..steps.keywords import options_as_objects
from ..steps.resolve import graph_replay_note


def _profiler(trace) -> dict:
    """meta["profiler"] ({name, label, version, recorded}); a trace cached before it existed was Kineto's."""
    p = trace.meta.get("profiler")
    return p if isinstance(p, dict) else {"name": p or "kineto", "label": None, "version": None, "recorded": None}


def gpu_span_and_busy(events: pd.DataFrame) -> tuple[int, int, int, int]:
    """(first start, last end, span, busy) of GPU activity: kernels, memcpys, memsets."""
    m = gpu_mask(events)
    if not m.any():
        return 0, 0, 0, 0
    s = events["start_ns"].to_numpy()[m]
    e = events["end_ns"].to_numpy()[m]
    first, last = int(s.min()), int(e.max())
    return first, last, last - first, intervals.total(intervals.normalize(s, e))


def same_stream_overlaps(events: pd.DataFrame) -> int:
    """Number of GPU activities that start before an earlier one on their stream has ended."""
    return int(overlap_mask(events).sum())


def _counted(col: pd.Series, weights: np.ndarray | None = None) -> tuple[pd.Categorical, np.ndarray, np.ndarray]:
    """Per category present in ``col`` (in category order, missing values left out, as ``groupby(observed=True)``):
    the category, its row count and the sum of ``weights`` over its rows."""
    codes = col.cat.codes.to_numpy()
    ok = codes >= 0
    n = len(col.cat.categories)
    count = np.bincount(codes[ok], minlength=n).astype(np.int64)
    total = np.zeros(n, dtype=np.int64)
    if weights is not None:  # int64 sums: a float bincount is exact only below 2**53
        np.add.at(total, codes[ok], weights[ok].astype(np.int64))
    present = np.flatnonzero(count)
    return pd.Categorical.from_codes(present, dtype=col.dtype), count[present], total[present]


def _lanes_at(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """:func:`tracekit.events.lane_key` of the rows ``rows`` only (not an int64 copy of two whole columns)."""
    return ev["device"].to_numpy()[rows].astype(np.int64) * (1 << 32) + ev["stream"].to_numpy()[rows].astype(np.int64)


def _span_and_busy(ev: pd.DataFrame, gpu: np.ndarray) -> tuple[int, int, int, int]:
    """:func:`gpu_span_and_busy` of the GPU rows ``gpu`` (row numbers)."""
    if gpu.size == 0:
        return 0, 0, 0, 0
    s, e = ev["start_ns"].to_numpy()[gpu], ev["end_ns"].to_numpy()[gpu]
    first, last = int(s.min()), int(e.max())
    return first, last, last - first, intervals.total(intervals.normalize(s, e))


@options_as_objects
def trace_info(trace: Trace) -> Result:
    """Counts by kind, category, stream, copy kind and communication class, plus ingest losses."""
    ev = trace.events
    gpu = np.flatnonzero(kinds_mask(ev, schema.GPU_ACTIVITY_KINDS))  # row numbers: no copy of the table's rows
    first, last, span, busy = _span_and_busy(ev, gpu)
    devices: list | None = [
        d.get("name") or None for d in trace.meta.get("device_properties", []) if isinstance(d, dict)
    ]
    used = trace.meta.get("devices_used", [])
    described = trace.meta.get("device_properties") or []
    phrase = devices_phrase(trace.meta)  # deviceProperties, TARGET_INFO_GPU, rocprofv3 agents
    # GPUs used that the file describes nowhere: their names are unknown (null), not "none"
    undescribed = [u for u in used if not any(isinstance(d, dict) and d.get("id") == u for d in described)]
    names_missing = sum(1 for d in devices if not d) + (len(undescribed) if not described else 0)
    kind_of, kind_n, kind_ns = _counted(ev["kind"], ev["dur_ns"].to_numpy())
    kinds = dict(zip(kind_of.astype(str).tolist(), kind_n.tolist()))
    by_kind = pd.DataFrame({"kind": kind_of, "count": kind_n, "total_ns": kind_ns})  # groupby(kind).agg's table
    by_kind["kind"] = by_kind["kind"].astype(str)
    cat_of, cat_n, _ = _counted(ev["cat"])
    by_category = pd.DataFrame({"cat": cat_of, "count": cat_n}).sort_values("count", ascending=False, kind="stable")
    by_category["cat"] = by_category["cat"].astype(str)

    by_stream = _by_stream(ev, gpu)
    copy_kinds = _copy_kinds(ev)
    comm = ev.loc[ev["comm_class"].notna().to_numpy(), ["comm_class", "collective", "algo", "protocol", "dur_ns"]]
    comm_kernels = _comm_kernels(comm)
    rep = trace.report
    ingest_rows = [
        {"what": "records read", "count": rep.records_read},
        {"what": "events kept", "count": rep.events_kept},
    ]
    ingest_rows += [{"what": f"not an event: {r}", "count": c} for r, c in sorted(rep.not_events.items())]
    ingest_rows += [{"what": f"dropped: {r}", "count": c} for r, c in sorted(rep.dropped.items())]
    overlaps = same_stream_overlaps(ev)
    warnings = list(rep.warnings)
    if any(not d for d in devices):
        warnings.append(
            f"{trace.path}: {sum(1 for d in devices if not d)} of the {len(devices)} devices in"
            f" {phrase} have no name; they are listed as null (shown as –)"
        )
    if not described and used:
        devices = None  # unknown, not an empty list: the file used GPUs it does not describe
        warnings.append(
            f"{trace.path}: the {len(used)} GPU(s) used are described nowhere in the file (it has no {phrase}),"
            " so their names and SM counts are unknown"
        )
    hw = detect_profile(trace.meta)
    stand_in = profile_stand_in(trace.meta, hw)
    if overlaps:
        warnings.append(
            f"{trace.path}: {overlaps} GPU activities start before the previous one on the same stream"
            " ended (same-stream overlap); kept as written"
        )

    summary = {
        "rank": trace.meta.get("rank"),
        "world_size": trace.meta.get("world_size"),
        "devices": devices,
        "gpus_used": len(trace.meta.get("devices_used", [])),  # a count: devices_used lists their ids
        "devices_used": trace.meta.get("devices_used", []),
        "device_names_missing": names_missing,
        "num_sms": trace.meta.get("num_sms"),
        "events_total": int(len(ev)),
        "kernels": int(kinds.get("kernel", 0)),
        "memcpys": int(kinds.get("memcpy", 0)),
        "memsets": int(kinds.get("memset", 0)),
        "gpu_annotations": int(kinds.get("gpu_annotation", 0)),
        "comm_kernels": int(len(comm)),
        "streams": int(np.unique(_lanes_at(ev, gpu)).size),
        "first_gpu_start_ns": first if gpu.size else None,
        "last_gpu_end_ns": last if gpu.size else None,
        "span_ns": span,
        "gpu_busy_ns": busy,
        "same_stream_overlaps": overlaps,
        "records_read": rep.records_read,
        "events_dropped": int(sum(rep.dropped.values())),
        "salvaged": rep.salvaged,
        "bytes_lost": rep.bytes_lost,
        "base_time_ns": trace.meta.get("base_time_ns"),
        **graph_replay_note(trace),
        "profiler": _profiler(trace).get("name"),  # which profiler wrote the file: kineto, nsys, rocprofv3
        "profiler_label": _profiler(trace).get("label"),
        "recorded": _profiler(trace).get("recorded"),
        "hw_profile": hw.name if hw is not None else None,  # the shipped profile the analyses detect, or null
        "hw_stand_in": stand_in,  # why that profile stands in for a device that is not its model, or null
    }
    return Result(
        command="info",
        inputs=[trace_input(trace)],
        params={},
        summary=summary,
        tables={
            "by_kind": by_kind,
            "by_category": by_category,
            "by_stream": by_stream,
            "copy_kinds": copy_kinds,
            "comm_kernels": comm_kernels,
            "ingest": pd.DataFrame(ingest_rows),
        },
        warnings=warnings,
    )


def _by_stream(ev: pd.DataFrame, gpu: np.ndarray) -> pd.DataFrame:
    """Per (device, stream): kernels, copies, memsets, GPU annotations and busy time (``gpu``: the GPU activity's
    row numbers). Arrays of the lane rows only, never a copy of the table's rows."""
    lane_kinds = ("kernel", "memcpy", "memset", "gpu_annotation")
    rows = np.flatnonzero(kinds_mask(ev, lane_kinds))
    if rows.size == 0:
        return pd.DataFrame(columns=["device", "stream", "kernels", "memcpys", "memsets", "gpu_annotations", "busy_ns"])
    dev_all, st_all = ev["device"].to_numpy(), ev["stream"].to_numpy()
    lanes, first, inv = np.unique(_lanes_at(ev, rows), return_index=True, return_inverse=True)
    dev, st = dev_all[rows[first]].astype(np.int64), st_all[rows[first]].astype(np.int64)
    order = np.lexsort((st, dev))  # (device, stream) order, as a crosstab's index
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    n = lanes.size
    cats = ev["kind"].cat.categories
    lut = np.array([lane_kinds.index(c) if c in lane_kinds else -1 for c in cats.tolist()], dtype=np.int64)
    kind_at = lut[ev["kind"].cat.codes.to_numpy()[rows]]
    counts = np.bincount(rank[inv] * 4 + kind_at, minlength=4 * n).reshape(n, 4)
    g_lane = rank[np.searchsorted(lanes, _lanes_at(ev, gpu))] if gpu.size else np.zeros(0, np.int64)
    s, e = ev["start_ns"].to_numpy()[gpu], ev["end_ns"].to_numpy()[gpu]
    busy = intervals.measure_by_group(g_lane, s, e, n)
    return pd.DataFrame(
        {
            "device": dev[order],
            "stream": st[order],
            "kernels": counts[:, 0],
            "memcpys": counts[:, 1],
            "memsets": counts[:, 2],
            "gpu_annotations": counts[:, 3],
            "busy_ns": busy,
        }
    )


def _copy_kinds(ev: pd.DataFrame) -> pd.DataFrame:
    """Per copy kind: count, time, bytes (known) and copies of unknown size."""
    copies = ev.loc[ev["copy_kind"].notna().to_numpy(), ["copy_kind", "dur_ns", "bytes"]]
    copy_kinds = (
        copies.groupby("copy_kind", observed=True)
        .agg(
            count=("dur_ns", "size"),
            total_ns=("dur_ns", "sum"),
            bytes_total=("bytes", lambda b: int(b[b >= 0].sum())),
            bytes_unknown=("bytes", lambda b: int((b < 0).sum())),
        )
        .reset_index()
    )
    copy_kinds["copy_kind"] = copy_kinds["copy_kind"].astype(str)
    return copy_kinds


def _comm_kernels(comm: pd.DataFrame) -> pd.DataFrame:
    """Per communication class and NCCL collective/algo/protocol: count and time."""
    comm_kernels = (
        comm.groupby(["comm_class", "collective", "algo", "protocol"], observed=True, dropna=False)
        .agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum"))
        .reset_index()
    )
    for c in ("comm_class", "collective", "algo", "protocol"):
        comm_kernels[c] = comm_kernels[c].astype(object).where(comm_kernels[c].notna(), None)
    comm_kernels = comm_kernels.sort_values("total_ns", ascending=False, kind="stable")
    return comm_kernels
