"""Findings sources read from the step timeline: weight AllGathers left exposed, idle gaps inside the steps (split
by why the GPU waited), communication on the critical path, and steps whose batch size no CUDA graph captured.

Each source takes the :class:`.context.Context` and returns rows made with :func:`.rules.finding`; it raises
MissingDataError (one sentence) when it cannot run on this input.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...errors import MissingDataError
from ...events import gpu_mask, kinds_mask, launch_index
from ..comm.communication import communication
from ..comm.exposure import exposure
from ..fleet.deployment_compare import graph_bucket
from ..steps.model import step_rules
from .context import Context
from .rules import clip_text, finding, finding_rules, log_server_args, ms_text


def exposed_allgathers(ctx: Context) -> list[dict]:
    """Exposed weight-AllGather time per layer type (the medians `tracekit exposure` reports)."""
    if not (ctx.trace.events["copy_kind"] == "PtoP").any():
        raise MissingDataError("the trace has no PtoP copies, so no weight AllGathers")
    ex = exposure(ctx.trace, ag=ctx.ag, steps=ctx.steps)
    ctx.warnings += ex.warnings
    per = ex.tables["per_step_type"]
    out = []
    for typ, ns in (ex.summary["median_exposed_ns_per_step_by_type"] or {}).items():
        if not ns:
            continue
        n = int((ex.tables["per_ag"]["type"] == typ).sum())
        steps = per.loc[per["type"] == typ, "exposed_ns"]
        out.append(
            finding(
                ctx,
                "exposed_allgather",
                "exposure",
                gain_ns=float(ns),
                type=typ,
                evidence=f"median exposed per step {ms_text(ns)} over {len(steps)} step(s) (min "
                f"{ms_text(steps.min())}, max {ms_text(steps.max())}); {n} {typ} AllGathers",
            )
        )
    return out


def idle_gaps(ctx: Context) -> list[dict]:
    """Idle time inside the steps, split by why the GPU waited (data: idle.*)."""
    ev = ctx.trace.events
    rules = finding_rules()["idle"]
    short = int(rules["short_gap_ns"])
    rows_of = np.flatnonzero(gpu_mask(ev))  # the GPU activities' rows, found once for every column
    gs = ev["start_ns"].to_numpy()[rows_of]
    order = np.argsort(gs, kind="stable")
    rows_of = rows_of[order]  # event rows of the sorted GPU activities
    gs, ge = gs[order], ev["end_ns"].to_numpy()[rows_of]
    gcorr = ev["correlation"].to_numpy()[rows_of]
    st = ctx.steps
    gaps_s, gaps_e = iv.subtract(iv.normalize(st.starts, st.ends), iv.normalize(gs, ge))
    if gaps_s.size == 0:
        return []
    step = st.step_of(gaps_s)
    nxt = np.searchsorted(gs, gaps_e, side="left")  # the first activity starting at the gap's end
    has_next = (nxt < gs.size) & (nxt >= 0)
    has_next[has_next] = gs[nxt[has_next]] == gaps_e[has_next]
    lk = np.flatnonzero(kinds_mask(ev, step_rules().launch_kinds) & (ev["correlation"].to_numpy() >= 0))
    l_corr = ev["correlation"].to_numpy()[lk]
    l_start, l_end = ev["start_ns"].to_numpy()[lk], ev["end_ns"].to_numpy()[lk]
    li = np.full(gaps_s.size, -1, dtype=np.int64)
    if has_next.any():
        li[has_next] = launch_index(gs[nxt[has_next]], gcorr[nxt[has_next]], l_corr, l_start)
    launched_end = np.where(li >= 0, l_end[np.clip(li, 0, None)] if l_end.size else 0, -1)
    dur = gaps_e - gaps_s
    # why each gap waited, as a code (0 unattributed, 1 host, 2 sync, 3 short): no string per gap
    known = li >= 0
    cls = np.where(known & (launched_end > gaps_s), 1, np.where(known & (launched_end <= gaps_s), 2, 0))
    cls[(cls == 2) & (dur < short)] = 3
    n_steps = len(st.table)
    out = []
    for c, kind in ((1, "idle_host"), (2, "idle_sync"), (3, "idle_short"), (0, "idle_unattributed")):
        m = (cls == c) & (step >= 0)
        if not m.any():
            continue
        per_step = np.bincount(np.searchsorted(st.table["step"].to_numpy(), step[m]), weights=dur[m], minlength=n_steps)
        med = float(np.median(per_step))
        extra: dict[str, Any] = {"short_us": f"{short / 1000:g}", "count": f"{int(m.sum()):,}"}
        evidence = (
            f"{int(m.sum()):,} gap(s) in {n_steps} step(s), median {ms_text(med)} per step of {ms_text(ctx.step_ns)}"
        )
        if c == 2:  # what ended just before a sync wait began (the dependency it most likely waited for)
            prev_end_order = np.argsort(ge, kind="stable")
            p = np.searchsorted(ge[prev_end_order], gaps_s[m], side="right") - 1
            picked = ev["name"].iloc[rows_of[prev_end_order[np.clip(p, 0, None)]]].astype(str).to_numpy()
            before = pd.Series(np.where(p >= 0, picked, "the step start"))
            top = pd.Series(dur[m]).groupby(before.to_numpy()).sum().sort_values(ascending=False)
            extra["after"] = clip_text(str(top.index[0]))
            evidence += "; time by what ended before the gap: " + ", ".join(
                f"{clip_text(str(n))} {ms_text(v / n_steps)}" for n, v in top.head(3).items()
            )
        out.append(finding(ctx, kind, "idle", gain_ns=med, evidence=evidence, **extra))
    return out


def critical_communication(ctx: Context) -> list[dict]:
    """Communication on the main stream (its result is the next kernel's input), per class."""
    main = ctx.ann.main_stream if ctx.ann is not None and isinstance(ctx.ann.main_stream, int) else None
    c = communication(ctx.trace, main_stream=main, ag=ctx.ag, steps=ctx.steps)
    per = c.tables["per_step_class"]
    n_steps = max(1, int(c.summary["steps"]))
    out = []
    for cls, ns in (c.summary["median_critical_ns_per_step_by_class"] or {}).items():
        if not ns:
            continue
        by_name = (per[per["class"] == cls].groupby("name", observed=True)["critical_ns"].sum() / n_steps).sort_values(
            ascending=False
        )
        by_name = by_name[by_name > 0]
        names = ", ".join(f"{clip_text(str(n), 40)} {ms_text(v)}" for n, v in by_name.head(3).items())
        out.append(
            finding(
                ctx,
                "critical_comm",
                "comm",
                gain_ns=float(ns),
                cls=cls,
                names=names or cls,
                evidence=f"median {ms_text(ns)} per step on the main stream (device {c.summary['main_device']}"
                f" stream {c.summary['main_stream']}); by name per step: {names}",
            )
        )
    return out


def graph_padding(ctx: Context) -> list[dict]:
    """Steps whose batch size was not captured as a CUDA graph (they pad to the next one, or run eagerly)."""
    if ctx.log is None:
        raise MissingDataError("needs the launch log (--log) for the captured CUDA-graph sizes")
    args = log_server_args(ctx.log)
    captured = tuple(sorted(int(x) for x in (args.get("cuda_graph_bs") or [])))
    if not captured:
        raise MissingDataError(f"{ctx.log.path} names no cuda_graph_bs")
    if args.get("disable_cuda_graph"):
        raise MissingDataError(f"{ctx.log.path}: CUDA graphs are disabled (--disable-cuda-graph)")
    bs = pd.to_numeric(ctx.steps.table["bs"], errors="coerce")
    if bs.isna().all():
        raise MissingDataError("the step markers carry no batch size")
    out = []
    for b, n in bs.dropna().astype(int).value_counts().sort_index().items():
        if b in captured:
            continue
        bucket = graph_bucket(int(b), captured)
        text = ",".join(map(str, captured))
        if bucket is None:
            out.append(
                finding(
                    ctx,
                    "graph_missing",
                    "graphs",
                    bs=b,
                    n=n,
                    largest=captured[-1],
                    captured=text,
                    evidence=f"{n} step(s) at bs {b}; captured {text}",
                )
            )
        else:
            out.append(
                finding(
                    ctx,
                    "graph_padding",
                    "graphs",
                    bs=b,
                    bucket=bucket,
                    n=n,
                    pad=bucket - b,
                    captured=text,
                    evidence=f"{n} step(s) at bs {b}; captured {text}",
                )
            )
    return out


__all__ = ["critical_communication", "exposed_allgathers", "graph_padding", "idle_gaps"]
