"""A2 — wall-clock decomposition of each step, and the whole-trace temporal breakdown.

Per step window: ``busy`` = time when any GPU activity other than the AllGather copies runs,
``ag_only`` = time when only AllGather copies run, ``idle`` = nothing runs; the three are disjoint
and sum exactly to the wall. GPU activity = kernels, memcpys and memsets.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import intervals as iv
from ... import schema
from ...data import record_hint
from ...events import gpu_mask, kinds_mask, weight_ag_mask
from ...errors import TracekitError, UsageError
from ...result import Result, trace_input
from ...ingest.normalize import clock_jumps
from ...trace import Trace
from ..steps.keywords import options_as_objects
from ..steps.finder import one_device
from ..steps.resolve import find_steps, median_ns
from ...result import merge_warnings

AG_CHOICES = ("ptop", "ptop+local")


def ag_copy_mask(events: pd.DataFrame, ag: str) -> np.ndarray:
    """Rows that are weight-AllGather copies: PtoP memcpys, plus (ptop+local) the local-copy
    kernels that run on a stream carrying PtoP copies."""
    if ag not in AG_CHOICES:
        raise UsageError(f"--ag must be one of {', '.join(AG_CHOICES)}, not {ag!r}")
    if ag == "ptop":
        return (events["copy_kind"] == "PtoP").to_numpy()
    return weight_ag_mask(events)


@options_as_objects
def decompose(trace: Trace, *, ag: str = "ptop", steps=None) -> Result:
    """`tracekit wall`: per-step busy / only-AllGather / idle, summing exactly to the wall. ``ag``: which copies
    count as AllGather (``ptop`` or ``ptop+local``); ``steps``: StepOptions, Steps or a table."""
    ev = trace.events
    steps = find_steps(trace, steps)
    gpu_mask = kinds_mask(ev, schema.GPU_ACTIVITY_KINDS)
    ag_mask = ag_copy_mask(ev, ag) & gpu_mask
    s, e = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    other = iv.normalize(s[gpu_mask & ~ag_mask], e[gpu_mask & ~ag_mask])
    ag_set = iv.normalize(s[ag_mask], e[ag_mask])
    ag_only = iv.subtract(ag_set, other)
    ws, we = steps.starts, steps.ends
    wall = we - ws
    busy = iv.measure_in_windows(other, ws, we)
    ag_only_ns = iv.measure_in_windows(ag_only, ws, we)
    idle = wall - busy - ag_only_ns
    if (idle < 0).any():
        raise TracekitError(f"{trace.path}: decomposition parts exceed the wall in a step (a tracekit bug)")
    per_step = pd.DataFrame(
        {
            "step": steps.table["step"].to_numpy(),
            "start_ns": ws,
            "wall_ns": wall,
            "busy_ns": busy,
            "ag_only_ns": ag_only_ns,
            "idle_ns": idle,
            "empty": (busy + ag_only_ns) == 0,  # a step window in which the GPU ran nothing: all idle (docs/steps.md)
        }
    )
    warnings = merge_warnings(trace.report.warnings, steps.warnings)
    if not ag_mask.any():
        warnings.append(f"{trace.path}: no PtoP copies, so ag_only_ns is 0 in every step")
    summary = {
        "steps": int(len(per_step)),
        "empty_markers": int(steps.empty),
        "empty_steps": int(per_step["empty"].sum()),
        "marker": steps.marker,
        "trustworthy": steps.trustworthy,
        "ag_copies": int(ag_mask.sum()),
        "median_wall_ns": median_ns(wall),
        "median_busy_ns": median_ns(busy),
        "median_ag_only_ns": median_ns(ag_only_ns),
        "median_idle_ns": median_ns(idle),
    }
    return Result(
        command="wall",
        inputs=[trace_input(trace)],
        params={"ag": ag, **steps.options.as_params()},
        summary=summary,
        tables={"per_step": per_step},
        warnings=warnings,
    )


TEMPORAL_KEYS = [
    "span_ns",
    "busy_ns",
    "idle_ns",
    "compute_ns",
    "comm_ns",
    "memory_ns",
    "non_compute_ns",
    "comm_compute_overlap_pct",
]


def _temporal(gpu: pd.DataFrame) -> dict:
    if gpu.empty:
        return {k: None if k == "comm_compute_overlap_pct" else 0 for k in TEMPORAL_KEYS}
    s, e = gpu["start_ns"].to_numpy(), gpu["end_ns"].to_numpy()
    kind = gpu["kind"].to_numpy()
    is_kernel = kind == "kernel"
    is_comm = is_kernel & gpu["comm_class"].notna().to_numpy()
    is_compute = is_kernel & ~is_comm
    is_mem = ~is_kernel
    span = int(e.max() - s.min())
    busy = iv.total(iv.normalize(s, e))
    compute_set = iv.normalize(s[is_compute], e[is_compute])
    comm_set = iv.normalize(s[is_comm], e[is_comm])
    compute, comm = iv.total(compute_set), iv.total(comm_set)
    idle = span - busy
    overlap = iv.total(iv.intersect(comm_set, compute_set))
    return {
        "span_ns": span,
        "busy_ns": busy,
        "idle_ns": idle,
        "compute_ns": compute,
        "comm_ns": comm,
        "memory_ns": iv.total(iv.normalize(s[is_mem], e[is_mem])),
        "non_compute_ns": span - compute - idle,
        "comm_compute_overlap_pct": (overlap / comm * 100.0) if comm else None,
    }


def _temporal_window(trace: Trace, gpu: pd.DataFrame) -> dict:
    """Which window temporal covers, and how it differs from HolisticTraceAnalysis's default (which drops the
    last ProfilerStep and GPU rows without a CPU correlation: same definitions, less of the trace)."""
    ev = trace.events
    names = ev.loc[ev["kind"].isin(("cpu_annotation", "gpu_annotation")), "name"].astype(str)
    n_ps = int(names[names.str.fullmatch(r"ProfilerStep#\d+")].nunique()) if len(names) else 0
    window = "the whole trace: first GPU-activity start to last end, every step included"
    if n_ps >= 2:
        window += (
            f" (all {n_ps} ProfilerStep markers; HolisticTraceAnalysis's default TraceAnalysis drops the last"
            " ProfilerStep and GPU rows without a CPU correlation, so its figures cover less)"
        )
    return {
        "window": window,
        "window_start_ns": int(gpu["start_ns"].min()),
        "window_end_ns": int(gpu["end_ns"].max()),
        "profiler_steps": n_ps,
    }


@options_as_objects
def temporal(trace: Trace, *, per_stream: bool = False) -> Result:
    """`tracekit temporal`: span, busy, idle, compute, communication and memory time of the whole trace."""
    from ...errors import MissingDataError

    # the GPU rows of the columns read, not of every column
    gpu = trace.events.loc[gpu_mask(trace.events), ["start_ns", "end_ns", "kind", "comm_class", "device", "stream"]]
    if gpu.empty:
        raise MissingDataError(
            f"{trace.path} has no GPU activity (kernel, gpu_memcpy or gpu_memset events);"
            f" record the trace with {record_hint(trace.meta, 'gpu')}"
        )
    one_device(trace)  # busy, idle and overlap of one GPU's timeline: the rule steps and `kernels` follow
    warnings = list(trace.report.warnings)  # a clock jump set aside at ingest is among them, named
    summary = _temporal(gpu)
    summary.update(_temporal_window(trace, gpu))
    summary["clock_outliers"] = clock_jumps(trace.report.dropped)  # the one rule: ingest's (docs/reliability.md)
    tables = {}
    if per_stream:
        rows = [
            {"device": int(d), "stream": int(st), **_temporal(g)}
            for (d, st), g in gpu.groupby(["device", "stream"], sort=True)
        ]
        tables["per_stream"] = pd.DataFrame(rows, columns=["device", "stream", *TEMPORAL_KEYS])
    return Result(
        command="temporal",
        inputs=[trace_input(trace)],
        params={"per_stream": per_stream},
        summary=summary,
        tables=tables,
        warnings=warnings,
    )
