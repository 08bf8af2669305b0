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

Every command resolves its options once (:func:`step_options`) and calls :func:`find_steps`, which
computes the steps once per (trace, options) and caches them on the trace.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...result import Result, trace_input
from ...trace import Trace
from .finder import compute_steps
from .keywords import options_as_objects
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
from ...errors import UsageError

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
    "compute_steps",
    "find_steps",
    "get_steps",
    "median_ns",
    "median_step",
    "merge_warnings",
    "step_options",
    "step_params",
    "step_rules",
    "steps_result",
]


def find_steps(
    trace: Trace, options: StepOptions | None = None, *, step_name: str | None = None, min_step_ns: int | None = None
) -> Steps:
    """The steps of a trace under these options, computed once per (trace, options)."""
    if options is None:
        options = step_options(step_name=step_name, min_step_ns=min_step_ns)
    key = ("steps", options)
    cached = trace.derived.get(key)
    if cached is None:
        cached = trace.derived[key] = compute_steps(trace, options)
    return cached


def get_steps(
    trace: Trace,
    steps=None,
    *,
    ann=None,
    step_name: str | None = None,
    min_step_ns: int | None = None,
    phase: str | None = None,
    source: str | None = None,
    steps_file=None,
) -> Steps:
    """What an analysis calls: ``steps`` as given (Steps, StepOptions or a table), else resolved from the rest."""
    if isinstance(steps, Steps):
        return steps
    if isinstance(steps, StepOptions):
        return find_steps(trace, steps)
    if isinstance(steps, pd.DataFrame):
        return Steps.from_table(steps)
    if steps is not None:
        raise UsageError(f"steps= takes Steps, StepOptions or a table, not {type(steps).__name__}")
    return find_steps(
        trace,
        step_options(
            ann, step_name=step_name, min_step_ns=min_step_ns, phase=phase, source=source, steps_file=steps_file
        ),
    )


# --------------------------------------------------------------------------------------------------
# `tracekit steps`
# --------------------------------------------------------------------------------------------------


@options_as_objects
def steps_result(trace: Trace, ann=None, *, steps=None) -> Result:
    """`tracekit steps`: every step window with its phase and health, and the median wall. ``ann`` (a name, a
    path or an Annotation) gives the step options when ``steps`` (StepOptions, Steps or a table) is None."""
    st = get_steps(trace, steps, ann=ann)
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
    warnings = merge_warnings(trace.report.warnings, st.warnings)
    if st.below_floor:
        warnings.append(
            f"{trace.path}: {st.below_floor} {st.marker} step(s) not longer than"
            f" {st.min_step_ns / 1e6:g} ms were not counted (--min-step-ms)"
        )
    return Result(
        command="steps",
        inputs=[trace_input(trace)],
        params=step_params(st),
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


def step_params(st: Steps) -> dict:
    """The ``params`` entries that say how the steps were found (the same in every command)."""
    o = st.options
    return {
        "step_name": o.name,
        "min_step_ns": o.min_step_ns,
        "phase": o.phase,
        "step_source": o.source,
        "steps_file": o.steps_file,
    }


def merge_warnings(*groups) -> list[str]:
    """Warnings of several parts, each once, in order."""
    out: list[str] = []
    for g in groups:
        for w in g:
            if w not in out:
                out.append(w)
    return out
