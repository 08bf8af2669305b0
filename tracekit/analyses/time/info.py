"""`tracekit info`: what is in a trace, counted after ingest."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import intervals
from ...events import gpu_mask
from ...events import same_stream_overlaps as overlap_mask
from ...result import Result, trace_input
from ...trace import Trace


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


def trace_info(trace: Trace) -> Result:
    """Counts by kind, category, stream, copy kind and communication class, plus ingest losses."""
    ev = trace.events
    kinds = ev["kind"].value_counts(sort=False)
    first, last, span, busy = gpu_span_and_busy(ev)
    gpu = ev[gpu_mask(ev)]
    devices = [d.get("name") or None for d in trace.meta.get("device_properties", []) if isinstance(d, dict)]

    by_kind = (ev.groupby("kind", observed=True).agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum"))
               .reset_index())
    by_kind["kind"] = by_kind["kind"].astype(str)
    by_category = (ev.groupby("cat", observed=True).size().rename("count").reset_index()
                   .sort_values("count", ascending=False, kind="stable"))
    by_category["cat"] = by_category["cat"].astype(str)

    by_stream = _by_stream(ev, gpu)
    copy_kinds = _copy_kinds(ev)
    comm = ev[ev["comm_class"].notna()]
    comm_kernels = _comm_kernels(comm)
    rep = trace.report
    ingest_rows = [{"what": "records read", "count": rep.records_read},
                   {"what": "events kept", "count": rep.events_kept}]
    ingest_rows += [{"what": f"not an event: {r}", "count": c} for r, c in sorted(rep.not_events.items())]
    ingest_rows += [{"what": f"dropped: {r}", "count": c} for r, c in sorted(rep.dropped.items())]
    overlaps = same_stream_overlaps(ev)
    warnings = list(rep.warnings)
    if any(not d for d in devices):
        warnings.append(f"{trace.path}: {sum(1 for d in devices if not d)} of the {len(devices)} devices in"
                        " deviceProperties have no name; they are listed as null (shown as –)")
    if overlaps:
        warnings.append(f"{trace.path}: {overlaps} GPU activities start before the previous one on the same stream"
                        " ended (same-stream overlap); kept as written")

    summary = {
        "rank": trace.meta.get("rank"),
        "world_size": trace.meta.get("world_size"),
        "devices": devices,
        "gpus_used": len(trace.meta.get("devices_used", [])),  # a count: devices_used lists their ids
        "devices_used": trace.meta.get("devices_used", []),
        "device_names_missing": sum(1 for d in devices if not d),
        "num_sms": trace.meta.get("num_sms"),
        "events_total": int(len(ev)),
        "kernels": int(kinds.get("kernel", 0)),
        "memcpys": int(kinds.get("memcpy", 0)),
        "memsets": int(kinds.get("memset", 0)),
        "gpu_annotations": int(kinds.get("gpu_annotation", 0)),
        "comm_kernels": int(len(comm)),
        "streams": int(gpu.groupby(["device", "stream"]).ngroups) if not gpu.empty else 0,
        "first_gpu_start_ns": first if not gpu.empty else None,
        "last_gpu_end_ns": last if not gpu.empty else None,
        "span_ns": span,
        "gpu_busy_ns": busy,
        "same_stream_overlaps": overlaps,
        "records_read": rep.records_read,
        "events_dropped": int(sum(rep.dropped.values())),
        "salvaged": rep.salvaged,
        "bytes_lost": rep.bytes_lost,
        "base_time_ns": trace.meta.get("base_time_ns"),
    }
    return Result(
        command="info",
        inputs=[trace_input(trace)],
        params={},
        summary=summary,
        tables={"by_kind": by_kind, "by_category": by_category, "by_stream": by_stream,
                "copy_kinds": copy_kinds, "comm_kernels": comm_kernels, "ingest": pd.DataFrame(ingest_rows)},
        warnings=warnings,
    )

def _by_stream(ev: pd.DataFrame, gpu: pd.DataFrame) -> pd.DataFrame:
    """Per (device, stream): kernels, copies, memsets, GPU annotations and busy time."""
    lanes = ev[ev["kind"].isin(("kernel", "memcpy", "memset", "gpu_annotation"))]
    by_stream = pd.DataFrame(columns=["device", "stream", "kernels", "memcpys", "memsets", "gpu_annotations",
                                      "busy_ns"])
    if not lanes.empty:
        counts = pd.crosstab([lanes["device"], lanes["stream"]], lanes["kind"].astype(str))
        for k in ("kernel", "memcpy", "memset", "gpu_annotation"):
            if k not in counts:
                counts[k] = 0
        busy_by = (gpu.groupby(["device", "stream"])
                   .apply(lambda g: intervals.total(intervals.normalize(g["start_ns"].to_numpy(),
                                                                        g["end_ns"].to_numpy())),
                          include_groups=False)
                   if not gpu.empty else pd.Series(dtype=np.int64))
        by_stream = pd.DataFrame({
            "device": counts.index.get_level_values(0).astype(np.int64),
            "stream": counts.index.get_level_values(1).astype(np.int64),
            "kernels": counts["kernel"].to_numpy(np.int64),
            "memcpys": counts["memcpy"].to_numpy(np.int64),
            "memsets": counts["memset"].to_numpy(np.int64),
            "gpu_annotations": counts["gpu_annotation"].to_numpy(np.int64),
            "busy_ns": [int(busy_by.get((d, s), 0)) for d, s in counts.index],
        })
    return by_stream


def _copy_kinds(ev: pd.DataFrame) -> pd.DataFrame:
    """Per copy kind: count, time, bytes (known) and copies of unknown size."""
    copies = ev[ev["copy_kind"].notna()]
    copy_kinds = (copies.groupby("copy_kind", observed=True)
                  .agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum"),
                       bytes_total=("bytes", lambda b: int(b[b >= 0].sum())),
                       bytes_unknown=("bytes", lambda b: int((b < 0).sum())))
                  .reset_index())
    copy_kinds["copy_kind"] = copy_kinds["copy_kind"].astype(str)
    return copy_kinds


def _comm_kernels(comm: pd.DataFrame) -> pd.DataFrame:
    """Per communication class and NCCL collective/algo/protocol: count and time."""
    comm_kernels = (comm.groupby(["comm_class", "collective", "algo", "protocol"], observed=True, dropna=False)
                    .agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum")).reset_index())
    for c in ("comm_class", "collective", "algo", "protocol"):
        comm_kernels[c] = comm_kernels[c].astype(object).where(comm_kernels[c].notna(), None)
    comm_kernels = comm_kernels.sort_values("total_ns", ascending=False, kind="stable")
    return comm_kernels
