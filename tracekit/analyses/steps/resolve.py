"""A1 — steps: which markers delimit a step, its phase, batch size and GPU window; found once per trace.

How frameworks mark a step is data (``tracekit/data/steps.json``, docs/steps.md): sglang
``step[MODE bs=N …]`` and its batch markers, vLLM's ``execute_…`` names, ATOM, TensorRT-LLM,
``ProfilerStep#N``. The dialects are tried in order; the first that yields a step wins.

A marker is a GPU span (``gpu_annotation``) or a CPU span (``cpu_annotation``); the two halves of one
marker share an External id. A CPU span's window is the first to the last GPU activity launched inside
it (the runtime call with the same correlation; a CUDA-graph replay's activities share its launch's).
``--step-source auto`` uses the GPU span unless it covers less than half of the work launched inside
the matching CPU span (ROCm writes ~17 µs GPU spans), and widens it to hold every activity launched in
the step (graph kernels that arrive after the marker, sglang #31545). A span holding no GPU activity, or
far less than its siblings, is an empty marker, not a step. No marker at all: one window over the
whole GPU span, with a warning. Each step is checked (``health``) and a step set says whether its numbers
can be trusted.

Every command resolves its options once (:func:`step_options`) and calls :func:`find_steps` once, which computes
the steps once per (trace, options) and caches them on the trace; a report passes the Steps it found to each part.
:func:`annotated_steps` runs the block engine (:func:`tracekit.annotation.annotate`) over those steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...launch_apis import graph_launch_names, is_graph_launch
from ...annotation import Annotation, annotate, required_annotation
from ...annotation.blocks import AnnotatedEvents
from ...errors import TracekitError, UsageError
from ...result import Result, merge_warnings, trace_input
from ...trace import Trace
from .keywords import options_as_objects
from .finder import scan
from .model import (
    DEFAULT_MIN_STEP_NS,
    HEALTH_COLUMNS,
    PHASE_CHOICES,
    PHASES,
    SOURCE_CHOICES,
    SOURCES,
    STEP_COLUMNS,
    Dialect,
    StepOptions,
    StepRules,
    Steps,
    median_ns,
    step_options,
    step_rules,
)
from ...errors import check_argument

__all__ = [
    "DEFAULT_MIN_STEP_NS",
    "HEALTH_COLUMNS",
    "PHASES",
    "PHASE_CHOICES",
    "SOURCES",
    "SOURCE_CHOICES",
    "STEP_COLUMNS",
    "Dialect",
    "StepOptions",
    "StepRules",
    "Steps",
    "annotated",
    "annotated_steps",
    "find_steps",
    "median_ns",
    "median_step",
    "step_options",
    "step_rules",
    "step_windows",
]


@options_as_objects
def find_steps(trace: Trace, steps=None, *, ann=None) -> Steps:
    """The steps of a trace, found once per (trace, options) and cached on the trace. ``steps``: Steps (returned as
    given), StepOptions, a table with start_ns and end_ns (:meth:`Steps.from_table`), or None: the options of
    ``ann`` (an Annotation, a name or a path; :func:`step_options`), else the defaults."""
    if isinstance(steps, Steps):
        return steps
    if isinstance(steps, pd.DataFrame):
        return Steps.from_table(steps)
    if steps is None:
        steps = step_options(ann)
    elif not isinstance(steps, StepOptions):
        raise UsageError(f"steps= takes Steps, StepOptions or a table, not {type(steps).__name__}")
    key = ("steps", steps)
    cached = trace.derived.get(key)
    if cached is None:
        cached = trace.derived[key] = scan(trace, steps)
    return cached


def annotated_steps(
    trace: Trace, ann: Annotation | str, *, steps=None, what: str = "blocks", keep: bool = True
) -> tuple[Steps, AnnotatedEvents]:
    """The steps (``steps``: as :func:`find_steps` takes them; None: the annotation's step options), then the events
    with the annotation's block columns. ``ann``: an Annotation, or a name or path
    (:func:`tracekit.annotation.as_annotation`). ``keep``: keep the block columns on the trace for the next caller
    (:func:`tracekit.annotation.annotate`)."""
    check_argument(trace, "trace", "a loaded Trace (tracekit.load)", Trace)
    ann = required_annotation(ann, what)
    st = find_steps(trace, steps, ann=ann)
    a = annotate(trace, ann, st.table, keep=keep)
    a.warnings[:0] = [w for w in st.warnings if w not in a.warnings]
    return st, a


def annotated(trace: Trace, ann: Annotation | str, *, steps=None) -> AnnotatedEvents:
    """The events with the block columns (see :func:`annotated_steps`)."""
    check_argument(trace, "trace", "a loaded Trace (tracekit.load)", Trace)
    return annotated_steps(trace, ann, steps=steps, what="annotated")[1]


# --------------------------------------------------------------------------------------------------
# `tracekit steps`
# --------------------------------------------------------------------------------------------------


@options_as_objects
def step_windows(trace: Trace, ann=None, *, steps=None) -> Result:
    """`tracekit steps`: every step window with its phase and health, and the median wall. ``ann`` (a name, a
    path or an Annotation) gives the step options when ``steps`` (StepOptions, Steps or a table) is None."""
    st = find_steps(trace, steps, ann=ann)
    durs = st.table["dur_ns"].to_numpy()
    summary = {
        "marker": st.marker,
        "match": st.match,
        "source": str(st.table["source"].iloc[0]) if len(st.table) else None,
        "steps": int(len(st.table)),
        "marker_spans": st.candidates,
        "empty_markers": st.empty,
        "below_floor": st.below_floor,
        "phase": st.options.phase,
        "phases": st.phases,
        "trustworthy": st.trustworthy,
        "reasons": st.reasons,
        "median_wall_ns": median_ns(durs),
        "min_wall_ns": int(durs.min()) if durs.size else None,
        "max_wall_ns": int(durs.max()) if durs.size else None,
    }
    summary.update(graph_replay_note(trace))
    warnings = merge_warnings(trace.report.warnings, st.warnings)
    if st.below_floor:
        warnings.append(
            f"{trace.path}: {st.below_floor} {st.marker} step(s) not longer than"
            f" {st.min_step_ns / 1e6:g} ms were not counted (--min-step-ms)"
        )
    return Result(
        command="steps",
        inputs=[trace_input(trace)],
        params=st.options.as_params(),
        summary=summary,
        tables={"steps": st.table, "health": st.health},
        warnings=warnings,
    )


def median_step(steps) -> int | None:
    """The step whose wall is the median — the lower of the two middle steps for an even count — so that a
    'typical step' is a step that happened (Steps or a table with step and dur_ns or start_ns/end_ns)."""
    table = getattr(steps, "table", steps)
    if table is None or len(table) == 0:
        return None
    dur = table["dur_ns"] if "dur_ns" in table else table["end_ns"] - table["start_ns"]
    order = pd.DataFrame({"dur": dur.to_numpy(np.int64), "step": table["step"].to_numpy()}).sort_values(
        ["dur", "step"], kind="stable"
    )
    return int(order["step"].iloc[(len(order) - 1) // 2])


GRAPH_LAUNCH = graph_launch_names()  # tracekit/data/launch_apis.json


def graph_replay_note(trace: Trace) -> dict:
    """For a trace whose kernels CUDA/HIP graph launches replay: ``graph_replay``, one sentence saying whether capture
    traces of the graphs are beside it (``capture_traces/``) and which commands use them (docs/replay.md), or what
    to record; nothing for a trace without graph launches (``info`` and ``steps`` say it)."""
    from ...ingest.captures import RECORD_HINT, find_captures

    ev = trace.events
    names = ev["name"]
    cats = names.cat.categories if isinstance(names.dtype, pd.CategoricalDtype) else pd.Index(names.dropna().unique())
    launch = [c for c in cats if is_graph_launch(c)]
    n = int(((ev["kind"] == "runtime") & names.isin(launch)).sum()) if launch else 0
    if not n:
        return {}
    try:
        found = find_captures(trace.path)
    except (OSError, TracekitError):  # an unreadable folder or details file beside the trace: none found
        found = []
    if found:
        text = (
            f"{n:,} graph launch(es) replay kernels; {len(found)} capture trace(s) beside it (capture_traces/) give"
            " their ops: tracekit replay, roofline, hbm, findings, report and kernels --by op use them"
        )
    else:
        text = f"{n:,} graph launch(es) replay kernels with no op or shapes; {RECORD_HINT}"
    return {"graph_replay": text}
