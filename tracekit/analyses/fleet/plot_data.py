"""What the per-batch-size plots draw (tracekit plot decomposition|blocks|exposure): per trace, the median step's
wall split, kernel time per block type, exposed AllGather time per type — computed by the same analyses as the
commands (``render.plots`` only draws these tables)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...annotation import Annotation, as_annotation
from ...errors import TracekitError, check_items
from ...trace import Trace
from ...result import shown_path  # a trace name that is not UTF-8 shows as \xNN
from ..options import AllGatherOptions
from ..steps.keywords import options_as_objects
from ..steps.resolve import median_step as _median_step

PARTS = ("busy", "ag_only", "idle")
_BS_IN_NAME = re.compile(r"(?<![A-Za-z])bs[_=-]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class PlotInput:
    """One trace of a per-bs plot: its deployment label, batch size (None: unknown) and annotation (an Annotation,
    or a name or path, loaded here)."""

    trace: Trace
    deployment: str
    bs: int | None
    annotation: Annotation | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "annotation", as_annotation(self.annotation, name="annotation"))


def bs_from_path(path: str | Path) -> int | None:
    """``bs(\\d+)`` in the file name, else in the nearest directory name that has one; None otherwise."""
    for part in reversed(Path(path).parts):
        m = _BS_IN_NAME.search(part)
        if m:
            return int(m.group(1))
    return None


def batch_size(trace: Trace, steps: pd.DataFrame | None = None) -> int | None:
    """The trace's bs: from the step markers (``step[DECODE bs=N]``, the median), else from its path."""
    if steps is not None and "bs" in steps and steps["bs"].notna().any():
        return int(np.median(steps["bs"].dropna().to_numpy(dtype=np.int64)))
    return bs_from_path(trace.path)


def median_step(steps: pd.DataFrame) -> int:
    """The step whose wall is the median (:func:`tracekit.analyses.steps.resolve.median_step`)."""
    if steps.empty:
        raise TracekitError("no steps to pick the median step from")
    return _median_step(steps)


def _pairs(items, what: str) -> list[tuple[str, str]]:
    from ...errors import UsageError

    out = []
    for item in [items] if isinstance(items, str) else items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value:
            raise UsageError(f"{what} {item!r} is not NAME=VALUE")
        out.append((name.strip(), value))
    return out


def plot_inputs(
    traces, annotation=None, label=None, *, need_annotation: bool = False, load=None, default_annotation=None
) -> tuple[list[PlotInput], list[str]]:
    """The traces of a per-bs plot as :class:`PlotInput` (and the warnings): ``traces`` are paths, loaded Traces or
    PlotInputs (kept as they are); ``annotation`` one annotation (a name, path or object) for every trace, or
    ``LABEL=ANNOTATION`` items for one deployment each; ``label`` ``NAME=TEXT`` items: traces whose path contains
    TEXT form deployment NAME (first match wins; else every trace is deployment "all"). ``load`` loads a path
    (default :func:`tracekit.load`); ``default_annotation`` is the one of a trace given as None (the CLI's bundled
    sample). The batch size comes from the step markers, else from the path (``bs<N>``)."""
    from ...errors import UsageError
    from ...ingest import load as load_trace
    from ..steps.resolve import find_steps

    load = load or load_trace
    label_rules = _pairs(label, "--label")
    names = {n for n, _ in label_rules}
    per_label: dict[str, Any] = {}
    common = None
    for a in [annotation] if annotation is None or not isinstance(annotation, (list, tuple)) else annotation:
        name, sep, ref = a.partition("=") if isinstance(a, str) else ("", "", a)
        if sep and name in names:
            per_label[name] = ref
        elif a is None:
            continue
        elif common is None:
            common = a
        else:
            raise UsageError(f"-a {a!r}: give one annotation for all traces, or LABEL=ANNOTATION with a --label NAME")
    inputs, warnings = [], []
    for p in list(traces) if traces is not None else [None]:
        if isinstance(p, PlotInput):
            inputs.append(p)
            continue
        where = p.path if isinstance(p, Trace) else p
        name = next((n for n, text in label_rules if where is not None and text in str(where)), None)
        if name is None:
            if label_rules:
                raise UsageError(f"{where} matches no --label; every trace needs a deployment when labels are given")
            name = "all"
        ref = per_label.get(name, common)
        ann = as_annotation(ref if ref is not None else (default_annotation if p is None else None), name="annotation")
        if ann is None and need_annotation:
            raise UsageError(f"this plot needs an annotation for {where}: pass -a ANNOTATION (or -a {name}=ANNOTATION)")
        trace = p if isinstance(p, Trace) else load(p)
        bs = batch_size(trace, find_steps(trace, ann=ann).table)
        if bs is None:
            warnings.append(f"{trace.path}: no bs in its step markers or path (bs<N>); it is drawn under its file name")
        inputs.append(PlotInput(trace=trace, deployment=name, bs=bs, annotation=ann))
    return inputs, warnings


def _as_inputs(inputs, annotation, label, need_annotation: bool = False) -> list[PlotInput]:
    """What the points functions take: PlotInputs as they are, paths and Traces made ones (:func:`plot_inputs`)."""
    inputs = check_items(
        inputs, "inputs", "paths (str or Path), Traces or PlotInputs, one or a list", Trace, PlotInput, paths=True
    )
    if all(isinstance(i, PlotInput) for i in inputs) and annotation is None and label is None:
        return list(inputs)
    return plot_inputs(inputs, annotation, label, need_annotation=need_annotation)[0]


def _steps(inp: PlotInput, steps):
    """The trace's steps: ``steps`` (StepOptions, the same for every input) or its annotation's step options (found
    once per trace; see find_steps)."""
    from ..steps.resolve import find_steps

    return find_steps(inp.trace, steps, ann=inp.annotation)


def _base_row(inp: PlotInput, step: int) -> dict[str, Any]:
    return {"deployment": inp.deployment, "bs": inp.bs, "trace": shown_path(inp.trace.path), "step": step}


@options_as_objects
def decomposition_points(inputs, *, ag: str = "ptop", steps=None, annotation=None, label=None) -> pd.DataFrame:
    """Per trace, the median step's wall split into busy / ag_only / idle (as `tracekit wall`). ``inputs``: paths,
    Traces or :class:`PlotInput`; ``annotation``/``label`` as the CLI's ``-a``/``--label`` (:func:`plot_inputs`)."""
    from .. import decompose

    rows = []
    for inp in _as_inputs(inputs, annotation, label):
        res = decompose(inp.trace, ag=ag, steps=_steps(inp, steps))
        per = res.tables["per_step"].rename(columns={"wall_ns": "dur_ns"})
        r = per[per["step"] == median_step(per)].iloc[0]
        rows.append(
            {
                **_base_row(inp, int(r["step"])),
                "wall_ns": int(r["dur_ns"]),
                **{f"{p}_ns": int(r[f"{p}_ns"]) for p in PARTS},
            }
        )
    return pd.DataFrame(
        rows, columns=["deployment", "bs", "trace", "step", "wall_ns", "busy_ns", "ag_only_ns", "idle_ns"]
    )


@options_as_objects
def blocks_points(inputs, *, steps=None, annotation=None, label=None) -> pd.DataFrame:
    """Per trace and block type, the median step's block kernel time (as `tracekit blocks`); ``inputs`` as
    :func:`decomposition_points`' (an annotation is needed)."""
    from ...annotation import annotate

    rows = []
    for inp in _as_inputs(inputs, annotation, label, need_annotation=True):
        if inp.annotation is None:
            raise TracekitError(f"{inp.trace.path}: the blocks plot needs an annotation (-a ANNOTATION)")
        table = _steps(inp, steps).table
        step = median_step(table)
        blocks = annotate(inp.trace, inp.annotation, table).blocks
        agg = (
            blocks[blocks["step"] == step]
            .groupby("block_type", sort=True)
            .agg(blocks=("block", "size"), first_block=("block", "min"), kernel_ns=("kernel_ns", "sum"))
        )
        for t, r in agg.iterrows():
            rows.append(
                {
                    **_base_row(inp, step),
                    "block_type": str(t),
                    "blocks": int(r["blocks"]),
                    "first_block": int(r["first_block"]),
                    "kernel_ns": int(r["kernel_ns"]),
                }
            )
    return pd.DataFrame(
        rows, columns=["deployment", "bs", "trace", "step", "block_type", "blocks", "first_block", "kernel_ns"]
    )


@options_as_objects
def exposure_points(
    inputs, *, steps=None, ag: AllGatherOptions | None = None, annotation=None, label=None
) -> pd.DataFrame:
    """Per trace and AllGather type, the median step's exposed AllGather time (as `tracekit exposure`; ``ag`` over
    each input's annotation); ``inputs`` as :func:`decomposition_points`'."""
    from ..comm.exposure import exposure

    rows = []
    for inp in _as_inputs(inputs, annotation, label):
        st = _steps(inp, steps)
        step = median_step(st.table)
        res = exposure(inp.trace, ag=AllGatherOptions.of(ag).with_annotation(inp.annotation), steps=st)
        pst = res.tables["per_step_type"]
        for r in pst[pst["step"] == step].itertuples(index=False):
            rows.append({**_base_row(inp, step), "type": str(r.type), "exposed_ns": int(r.exposed_ns)})
        if not (pst["step"] == step).any():
            rows.append({**_base_row(inp, step), "type": "(none)", "exposed_ns": 0})
    return pd.DataFrame(rows, columns=["deployment", "bs", "trace", "step", "type", "exposed_ns"])
