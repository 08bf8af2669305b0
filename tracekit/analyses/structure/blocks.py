"""A3 and A4 — kernel time per block type and op tag; kernel statistics split by overlap."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...annotation import Annotation, as_annotation, required_annotation
from ...annotation.blocks import AnnotatedEvents
from ...errors import MissingDataError
from ...result import Result, trace_input
from ...trace import Trace
from ..select import select as select_events
from ..steps.resolve import annotated, annotated_steps  # noqa: F401
from ..steps.finder import one_device
from ..steps.keywords import options_as_objects
from ..steps.resolve import Steps, median_ns
from ...result import merge_warnings


@options_as_objects
def block_stats(trace: Trace, ann: Annotation | str, *, steps=None, categories=None) -> Result:
    """`tracekit blocks`: per step kernel time and count per block type; per op tag the per-layer time.

    Block kernel time is the sum of the durations of the kernels in the type's blocks (all streams),
    so it exceeds the wall where streams overlap. Copies are not kernels and are not counted. ``ann``: a
    name, a path or an Annotation; ``steps``: StepOptions, Steps or a table (None: the annotation's).
    """
    ann = required_annotation(ann, "blocks")
    st, a = annotated_steps(trace, ann, steps=steps)
    b = a.blocks
    per_step_type = (
        b.groupby(["step", "block_type"], sort=True)
        .agg(blocks=("block", "size"), kernel_ns=("kernel_ns", "sum"), kernels=("kernels", "sum"))
        .reset_index()
    )
    ev = a.events
    k = ev.loc[
        ((ev["kind"] == "kernel") & ev["op_tag"].notna()).to_numpy(),
        ["op_tag", "block_type", "step", "block", "dur_ns"],
    ]  # the columns used, not a copy of the table
    per_block = k.groupby(["op_tag", "block_type", "step", "block"], observed=True)["dur_ns"].sum().reset_index()
    per_tag = (
        per_block.groupby(["op_tag", "block_type"], observed=True)["dur_ns"]
        .agg(count="size", mean_ns="mean", median_ns="median")
        .reset_index()
    )
    per_tag["op_tag"] = per_tag["op_tag"].astype(str)
    per_tag["block_type"] = per_tag["block_type"].astype(str)
    by_type = per_step_type.groupby("block_type")["kernel_ns"].apply(lambda x: median_ns(x.to_numpy()))
    summary = {
        "annotation": ann.name,
        "steps": int(b["step"].nunique()),
        "main_stream": a.main_stream[1],
        "blocks_per_step": {str(t): int(v) for t, v in per_step_type.groupby("block_type")["blocks"].median().items()},
        "median_kernel_ns_by_type": {str(t): v for t, v in by_type.items()},
        "untyped_blocks": int((b["block_type"] == "untyped").sum()),
    }
    return Result(
        command="blocks",
        inputs=[trace_input(trace)],
        params={"annotation": ann.ref, **st.options.as_params()},
        summary=summary,
        tables={
            "per_step_type": per_step_type[["step", "block_type", "blocks", "kernel_ns", "kernels"]],
            "per_tag": per_tag[["op_tag", "block_type", "count", "mean_ns", "median_ns"]],
            "blocks": b,
            "one_step": _one_step(trace, a, st, categories),
        },
        warnings=merge_warnings(trace.report.warnings, a.warnings),
    )


def _one_step(trace: Trace, a: AnnotatedEvents, st: Steps, categories=None) -> pd.DataFrame:
    """Every ns of each step charged to one kernel category, one block type and one op tag (docs/layers.md)."""
    from ..categories import trace_categories
    from ..time.onestep import one_step_tables

    return one_step_tables(
        a.events.assign(category=trace_categories(trace, categories)),
        st,
        by=("category", "block_type", "op_tag"),
        main=a.main_stream,
    )


def _stats(df: pd.DataFrame, by: str) -> pd.DataFrame:
    key = df[by].astype(object).where(df[by].notna(), "(none)")  # untagged events are a group, not dropped
    g = df.assign(**{by: key}).groupby(by, observed=True)["dur_ns"]
    out = pd.DataFrame(
        {
            "count": g.size(),
            "total_ns": g.sum(),
            "mean_ns": g.mean(),
            "median_ns": g.median(),
            "p90_ns": g.quantile(0.9),
        }
    ).reset_index()
    out[by] = out[by].astype(str)
    return out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


@options_as_objects
def kernel_selection_stats(
    trace: Trace,
    ann: Annotation | str | None = None,
    *,
    select: str | None = None,
    overlap_with: str | None = None,
    by: str = "name",
    steps=None,
    categories=None,
) -> Result:
    """`tracekit stats` (A4): count, total, mean, median, p90 of the selected events by name or tag; with
    ``overlap_with``, the same for the selected events that overlap the second selection and those that do not.
    ``select`` is the CLI's ``--select`` (default ``kind:kernel``); ``ann``
    (a name, a path or an Annotation) adds the block and tag columns, over ``steps`` (StepOptions, Steps or a
    table; None: the annotation's). A trace of several GPUs is refused, naming ``--device N``
    (:func:`~tracekit.analyses.steps.finder.one_device`, the rule of `kernels` and `report`): one GPU's totals and
    overlaps, never two pooled."""
    one_device(trace)
    select_expr = select or "kind:kernel"
    ann = as_annotation(ann)
    ev = trace.events
    warnings = list(trace.report.warnings)
    if ann is not None:
        a = annotated(trace, ann, steps=steps)
        ev = a.events
        warnings = merge_warnings(warnings, a.warnings)
    elif (
        by == "op_tag"
        or "block:" in select_expr
        or "tag:" in select_expr
        or (overlap_with and ("block:" in overlap_with or "tag:" in overlap_with))
    ):
        raise MissingDataError("selecting or grouping by block or tag needs an annotation (-a ANNOTATION)")
    from ..categories import families, trace_categories

    cats = trace_categories(trace, categories)
    ev = ev.assign(category=cats)
    ev = ev.assign(family=families(ev["category"], categories))
    m = select_events(ev, select_expr)
    chosen = ev[m]
    if chosen.empty:
        raise MissingDataError(f"{trace.path}: the selection {select_expr!r} matches no event")
    tables = {"stats": _stats(chosen, by)}
    summary = {
        "events": int(len(chosen)),
        "total_ns": int(chosen["dur_ns"].sum()),
        "mean_ns": float(chosen["dur_ns"].mean()),
        "median_ns": median_ns(chosen["dur_ns"].to_numpy()),
    }
    if overlap_with:
        other = select_events(ev, overlap_with)
        ov = _overlaps(chosen, ev[other], other[m])
        if other[m].any():
            warnings.append("the two selections share events; an event does not count as overlapping itself")
        split = chosen.assign(overlaps=ov)
        tables["overlapping"] = _stats(split[split["overlaps"]], by)
        tables["alone"] = _stats(split[~split["overlaps"]], by)
        for label, part in (("overlapping", split[split["overlaps"]]), ("alone", split[~split["overlaps"]])):
            summary[f"{label}_events"] = int(len(part))
            summary[f"{label}_mean_ns"] = float(part["dur_ns"].mean()) if len(part) else None
    return Result(
        command="stats",
        inputs=[trace_input(trace)],
        params={
            "select": select_expr,
            "overlap_with": overlap_with,
            "by": by,
            "annotation": ann.ref if ann else None,
            "categories": str(categories) if categories is not None else None,
        },
        summary=summary,
        tables=tables,
        warnings=warnings,
    )


def _overlaps(chosen: pd.DataFrame, other: pd.DataFrame, self_in_other: np.ndarray) -> np.ndarray:
    """Whether each chosen event shares time with some *other* event of the second selection.

    The number of intervals [bs, be) meeting [s, e) is #(bs < e) − #(be <= s); an event that is in both
    selections meets itself once, which is taken off."""
    s, e = chosen["start_ns"].to_numpy(), chosen["end_ns"].to_numpy()
    bs = np.sort(other["start_ns"].to_numpy())
    be = np.sort(other["end_ns"].to_numpy())
    meets = np.searchsorted(bs, e, side="left") - np.searchsorted(be, s, side="right")
    meets -= (self_in_other & (e > s)).astype(np.int64)
    return meets > 0
