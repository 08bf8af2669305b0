"""`tracekit layers`: the automatic layers of a trace as a Result (``layers``) and the note `report` gives when it
used them (``automatic_note``).

Per step the layers ``find_layers`` found, per step and type their count, kernel time and wall time, the one-step
table charged by category and layer type, every window, and a summary (layers per step, types, head and tail
kernels, the boundary kernel, the check)."""

from __future__ import annotations

import numpy as np

from ....errors import MissingDataError
from ....result import Result, trace_input
from ....trace import Trace
from ...categories import resolve_categories, trace_categories
from ...steps.keywords import options_as_objects
from ....result import merge_warnings
from ...steps.resolve import median_ns, median_step
from ...time.onestep import one_step_tables
from .finding import find_layers, no_stack_message
from .windows import BETWEEN, HEAD, TAIL, layer_windows_by_event

TYPE_COLUMNS = ["step", "layer_type", "layers", "kernel_ns", "wall_ns"]


def automatic_note(result: Result) -> str:
    """What `report` says when it used the automatic layers (no annotation)."""
    s = result.summary
    return (
        f"layers found automatically ({s['layers_per_step']} per step; types {', '.join(s['types']) or 'none'})"
        " — `tracekit suggest` writes an annotation to name them"
    )


@options_as_objects
def layers(trace: Trace, *, steps=None, categories=None, missing_ok: bool = False) -> Result:
    """`tracekit layers`: per step the decoder layers found automatically, their types, and the one-step table.

    ``tables.layers``: one row per layer (LAYER_COLUMNS); ``tables.layer_types``: per step and type the layer
    count, the kernel time of its layers (all streams, exceeding the wall where streams overlap) and their wall
    time (the windows' durations; head, between and tail rows make the wall add up to the step's);
    ``tables.one_step``: every ns of each step charged to one category and to one layer type
    (tracekit.analyses.time.onestep); ``tables.windows``: every window of each step. ``summary.check``: the layers
    against the structure counted without them (structure_check).

    A trace without a decoder stack (a CNN, a recommender's training step) raises MissingDataError (exit 4) in one
    sentence; with ``missing_ok`` (``report`` on any trace) the Result has no layers and says so in a warning.
    """
    cr = resolve_categories(categories)
    found = find_layers(trace, steps=steps, categories=cr)
    if found.boundary is None and not missing_ok:
        raise MissingDataError(no_stack_message(trace, found.main_stream))
    st = found.steps
    win = found.windows
    lay = found.layers
    per_type = (
        win.assign(wall_ns=win["end_ns"] - win["start_ns"])
        .groupby(["step", "layer_type"], sort=True)
        .agg(layers=("kind", "size"), kernel_ns=("kernel_ns", "sum"), wall_ns=("wall_ns", "sum"))
        .reset_index()
    )
    per_type = per_type[TYPE_COLUMNS].astype({"layers": np.int64, "kernel_ns": np.int64, "wall_ns": np.int64})
    ev = trace.events
    evc = ev.assign(category=trace_categories(trace, cr), layer_type=layer_windows_by_event(ev, win))
    one = one_step_tables(evc, st, by=("category", "layer_type"), main=found.main_stream)
    counts = lay.groupby("step").size()
    layer_types = sorted(set(lay["layer_type"]))
    types = {}
    for t in layer_types:
        per = lay[lay["layer_type"] == t].groupby("step").size().reindex(st.table["step"], fill_value=0)
        types[t] = median_ns(per.to_numpy())
    head = win[win["kind"] == HEAD].groupby("step")["kernels"].sum().reindex(st.table["step"], fill_value=0)
    tail = win[win["kind"] == TAIL].groupby("step")["kernels"].sum().reindex(st.table["step"], fill_value=0)
    between = win[win["kind"] == BETWEEN].groupby("step")["kernels"].sum().reindex(st.table["step"], fill_value=0)
    period = win.loc[win["kind"] == "layer", "main_kernels"].to_numpy()
    summary = {
        "steps": int(len(st.table)),
        "layers_per_step": median_ns(counts.reindex(st.table["step"], fill_value=0).to_numpy()) if len(st.table) else 0,
        "types": types,
        "head_kernels": median_ns(head.to_numpy()),
        "tail_kernels": median_ns(tail.to_numpy()),
        "period_kernels": median_ns(period) if period.size else None,
        "between_kernels": median_ns(between.to_numpy()),
        "boundary_kernel": found.boundary,
        "segments_per_layer": found.segments_per_layer,
        "main_stream": found.main_stream[1],
        "median_step": median_step(st),
        "inexact_layers": int((~win.loc[win["kind"] == "layer", "exact"]).sum()),
        "check": found.check,
    }
    warnings = merge_warnings(trace.report.warnings, found.warnings)
    return Result(
        command="layers",
        inputs=[trace_input(trace)],
        params={**st.options.as_params(), "categories": list(cr.sources[:-1]) or None},
        summary=summary,
        tables={"layers": lay, "layer_types": per_type, "one_step": one, "windows": win.drop(columns=["first_kernel"])},
        warnings=warnings,
    )
