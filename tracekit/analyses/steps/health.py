"""Whether a step set can be trusted: every health check of the steps (kernels in each step, CUDA-graph replays,
launches with no GPU record, a GPU span that misses the launched work, same-stream overlaps, the ingest, windows past
the recording) as the ``health`` table, and the warnings a step set carries because of them. Thresholds are
``tracekit/data/steps.json``'s (:func:`.model.step_rules`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...events import kinds_mask, same_stream_overlaps, values_mask
from ...trace import Trace
from .activity import Launches, StepActivity
from .model import HEALTH_COLUMNS, Steps, step_rules


def kernels_per_step(ctx: StepActivity, table: pd.DataFrame) -> np.ndarray:
    s, e = table["start_ns"].to_numpy(np.int64), table["end_ns"].to_numpy(np.int64)
    ks = ctx.gs[ctx.gkernel]
    k = np.searchsorted(s, ks, side="right") - 1
    inside = (k >= 0) & (ks < e[np.clip(k, 0, None)])
    return np.bincount(k[inside], minlength=len(table)).astype(np.int64)


def _gpu_events_per_step(ctx: StepActivity, table: pd.DataFrame) -> np.ndarray:
    """How many GPU events (kernels, copies, memsets) start in each step: 0 marks an empty step (finder.empty_steps)."""
    s, e = table["start_ns"].to_numpy(np.int64), table["end_ns"].to_numpy(np.int64)
    k = np.searchsorted(s, ctx.gs, side="right") - 1
    inside = (k >= 0) & (ctx.gs < e[np.clip(k, 0, None)])
    return np.bincount(k[inside], minlength=len(table)).astype(np.int64)


def health_table(ctx: StepActivity, table: pd.DataFrame, lw: Launches, extra: dict) -> pd.DataFrame:
    """The steps' health table (HEALTH_COLUMNS): each step's checks, then the whole trace's (step -1)."""
    rows = []
    kernels = kernels_per_step(ctx, table)
    active = _gpu_events_per_step(ctx, table)
    overlaps = _same_stream_overlaps(ctx, table)
    for i, r in enumerate(table.itertuples(index=False)):  # one row per step and check: steps are few
        step = int(r.step)
        rows.append(
            (
                step,
                "kernels",
                bool(kernels[i] > 0 or active[i] == 0),
                f"{int(kernels[i])} kernel(s) in the step"
                if kernels[i]
                else "an empty step: the GPU ran nothing in it, so all of it is idle (docs/steps.md)"
                if active[i] == 0
                else "the step holds no kernel: nothing in it can be attributed",
            )
        )
        ci = int(r.cpu)
        if ci >= 0 or r.source == "whole_trace":
            n, lost = (
                (int(lw.graphs[ci]), int(lw.graphs_empty[ci]))
                if ci >= 0
                else (int(ctx.l_graph.sum()), int((ctx.l_graph & ~ctx.l_recorded).sum()))
            )
            rows.append(
                (
                    step,
                    "graph_replays",
                    lost == 0,
                    f"{n} CUDA-graph launch(es), every replay recorded"
                    if lost == 0
                    else f"{lost} of {n} CUDA-graph launch(es) left no GPU events (the profiler under-recorded the"
                    " replays): idle time in this step is not real idle",
                )
            )
        if ci >= 0 and lw.launched.size and lw.launched[ci] > 0:
            n, lost = int(lw.launched[ci]), int(lw.unrecorded[ci])
            rows.append(
                (
                    step,
                    "launches_recorded",
                    lost <= ctx.rules.unrecorded_max * n,
                    f"{n} kernel/copy launch(es), every one with a GPU record"
                    if lost == 0
                    else f"{lost} of {n} kernel/copy launch(es) in the step left no GPU record"
                    f"{_unrecorded_cause(ctx)}: the step's GPU work is missing from the trace",
                )
            )
        if r.gpu_cover is not None and pd.notna(r.gpu_cover):
            cover = float(r.gpu_cover)
            if r.switched:
                detail = (
                    f"the GPU marker span covers {cover:.1%} of the GPU work launched in the step;"
                    " the launch window is used instead"
                )
            elif r.widened:
                detail = (
                    f"{int(r.widened)} GPU activities launched in the step ran outside its GPU marker span;"
                    " the window was widened to hold them"
                )
            else:
                detail = f"the GPU marker span covers {cover:.1%} of the GPU work launched in the step"
            ok = bool(r.switched or r.widened or cover >= 0.999)
            rows.append((step, "window_covers_launched_work", ok, detail))
        n_ov = int(overlaps[i])
        rows.append(
            (
                step,
                "same_stream_overlap",
                n_ov == 0,
                "no two activities of one stream overlap"
                if n_ov == 0
                else f"{n_ov} activit(ies) overlap earlier ones on the same stream by more than half their"
                " duration (duplicated or damaged timestamps)",
            )
        )
    rep = ctx.trace.report
    lost_recs = sum(rep.dropped.values())
    ingest_ok = lost_recs == 0 and not rep.salvaged
    problems = []
    if lost_recs:
        problems.append(
            f"{lost_recs} event(s) dropped at ingest ({', '.join(f'{k}: {v}' for k, v in rep.dropped.items())})"
        )
    if rep.salvaged:
        problems.append(
            f"the file was truncated and salvaged ({rep.bytes_lost:,} bytes lost): the last step may be cut"
        )
    rows.append((-1, "ingest", ingest_ok, "every record was read" if ingest_ok else "; ".join(problems)))
    rows += _past_the_recording(ctx, table)
    rows += _launch_health(ctx)
    under = int(extra.get("under_recorded_markers", 0))
    if under:
        rows.append(
            (
                -1,
                "graph_replays",
                False,
                f"{under} step marker(s) launched CUDA graphs whose replays left"
                " no GPU events at all; those steps are missing",
            )
        )
    return pd.DataFrame(rows, columns=HEALTH_COLUMNS)


def _past_the_recording(ctx: StepActivity, table: pd.DataFrame) -> list[tuple]:
    """A step window that ends after every recorded event (a marker the profiler closed when it stopped) holds
    time nothing was recorded in; counted as idle it would be invented. Its tail past the last GPU activity is
    compared with the other steps' tails (a marker that always ends a little after its last kernel is no
    overhang). Listed only for the steps it concerns."""
    ev = ctx.ev
    # tracekit's own tracks (category "tracekit", written by `annotate`) are no recorded activity
    rec = ~kinds_mask(ev, ("gpu_annotation", "cpu_annotation")) & ~values_mask(ev, "cat", ("tracekit",))
    if not rec.any() or table.empty or ctx.busy_set[0].size == 0:
        return []
    last = int(ev["end_ns"].to_numpy()[rec].max())
    s, e = table["start_ns"].to_numpy(np.int64), table["end_ns"].to_numpy(np.int64)
    bs, be = ctx.busy_set
    k = np.searchsorted(bs, e, side="left") - 1  # the last busy interval that starts before the window's end
    last_busy = np.where(k >= 0, np.minimum(be[np.clip(k, 0, None)], e), s)
    tail = e - np.maximum(last_busy, s)
    out = []
    for i in np.flatnonzero(e > last).tolist():  # the steps that end past the recording: one or two
        others = np.delete(tail, i)
        usual = float(np.median(others)) if others.size else 0.0
        if tail[i] > usual + max(10_000, 0.05 * float(np.median(e - s))):
            out.append(
                (
                    int(table["step"].iloc[i]),
                    "within_recording",
                    False,
                    f"the step's window runs {(e[i] - last) / 1e6:,.3f} ms past the last recorded event (the"
                    " profile stopped inside it): that time was not recorded, and its idle time is not real",
                )
            )
    return out


def _unrecorded_cause(ctx: StepActivity) -> str:
    if ctx.captures:
        return " (the trace records a CUDA-graph capture: captured launches do not run)"
    last_gpu = ctx.ge.max() if ctx.ge.size else None
    missing = ctx.l_gpu & ~ctx.l_recorded
    if last_gpu is None or (missing & (ctx.l_start > last_gpu)).sum() >= 0.5 * max(1, missing.sum()):
        return " (the GPU records stop before the launches do: the profiler's GPU buffer probably filled)"
    return ""


def _launch_health(ctx: StepActivity) -> list[tuple]:
    """Whole-trace check: every kernel/copy launch left a GPU record. When many did not, the trace is a graph
    capture (the launches were recorded into a graph, not run) or the profiler's GPU buffer filled (GPU records
    stop while the CPU goes on launching); either way the steps' GPU time is not the GPU time that was spent."""
    n = int(ctx.l_gpu.sum())
    if n == 0:
        return []
    missing = ctx.l_gpu & ~ctx.l_recorded
    lost = int(missing.sum())
    if lost == 0:
        return [(-1, "launches_recorded", True, f"every one of the {n:,} kernel/copy launches has a GPU record")]
    share = lost / n
    ok = share <= ctx.rules.unrecorded_max
    what = f"{lost:,} of {n:,} kernel/copy launches ({share:.1%}) left no GPU record"
    last_gpu = int(ctx.ge.max()) if ctx.ge.size else None
    after = int((missing & (ctx.l_start > last_gpu)).sum()) if last_gpu is not None else lost
    if ctx.captures:
        detail = (
            f"{what} and the trace holds {ctx.captures} graph-capture call(s): it records a CUDA-graph"
            f" capture, where launches are captured, not run ({ctx.gs.size:,} GPU activities ran); profile"
            " the replays (the steps after capture) instead"
        )
    elif last_gpu is None or after >= 0.5 * lost:
        t_gpu = "never" if last_gpu is None else f"at {(last_gpu - int(ctx.l_start.min())) / 1e6:,.3f} ms"
        t_cpu = (int(ctx.l_start[ctx.l_gpu].max()) - int(ctx.l_start.min())) / 1e6
        detail = (
            f"{what}: the GPU records stop {t_gpu} while launches go on to {t_cpu:,.3f} ms (after the first"
            f" launch); {after:,} launches came after the last GPU record — the profiler's GPU buffer"
            " probably filled: record fewer steps, or raise the CUPTI buffer size"
        )
    else:
        detail = f"{what}: their GPU work is missing from the trace"
    return [(-1, "launches_recorded", ok, detail)]


def _same_stream_overlaps(ctx: StepActivity, table: pd.DataFrame) -> np.ndarray:
    """Per step: activities overlapping an earlier one of their stream by more than half their duration."""
    bad = same_stream_overlaps(ctx.ev, tolerance_ns=ctx.rules.overlap_ns, fraction=0.5)
    k = iv.window_of(
        ctx.ev["start_ns"].to_numpy()[bad], table["start_ns"].to_numpy(np.int64), table["end_ns"].to_numpy(np.int64)
    )
    return np.bincount(k[k >= 0], minlength=len(table)).astype(np.int64)


def with_health_warnings(trace: Trace, st: Steps, table: pd.DataFrame) -> Steps:
    warnings = list(st.warnings)
    switched, widened = int(table["switched"].sum()), int((table["widened"] > 0).sum())
    if switched:
        warnings.append(
            f"{trace.path}: the GPU spans of {switched} {st.marker} marker(s) cover less than"
            f" {step_rules(st.options.steps_file).gpu_cover_min:.0%} of the work launched inside them;"
            " their windows are the launch windows (--step-source gpu keeps the GPU spans)"
        )
    if widened:
        warnings.append(
            f"{trace.path}: in {widened} step(s) GPU work launched in the step ran outside the"
            f" {st.marker} GPU span; the windows were widened to hold it"
        )
    for reason in st.reasons:  # empty markers are expected (sglang writes them between steps): counted only
        warnings.append(f"{trace.path}: steps not trustworthy — {reason}")
    return Steps(
        st.table,
        st.marker,
        st.match,
        st.options,
        st.candidates,
        st.empty,
        st.below_floor,
        st.phases,
        st.health,
        warnings,
    )


__all__ = ["health_table", "kernels_per_step", "with_health_warnings"]
