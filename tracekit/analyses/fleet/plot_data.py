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
from ...errors import TracekitError
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


def _steps(inp: PlotInput, steps):
    """The trace's steps: ``steps`` (StepOptions, the same for every input) or its annotation's step options (found
    once per trace; see find_steps)."""
    from ..steps.resolve import find_steps

    return find_steps(inp.trace, steps, ann=inp.annotation)


def _base_row(inp: PlotInput, step: int) -> dict[str, Any]:
    return {"deployment": inp.deployment, "bs": inp.bs, "trace": shown_path(inp.trace.path), "step": step}


@options_as_objects
def decomposition_points(inputs: list[PlotInput], *, ag: str = "ptop", steps=None) -> pd.DataFrame:
    """Per trace, the median step's wall split into busy / ag_only / idle (as `tracekit wall`)."""
    from .. import decompose

    rows = []
    for inp in inputs:
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
def blocks_points(inputs: list[PlotInput], *, steps=None) -> pd.DataFrame:
    """Per trace and block type, the median step's block kernel time (as `tracekit blocks`)."""
    from ...annotation import annotate

    rows = []
    for inp in inputs:
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
def exposure_points(inputs: list[PlotInput], *, steps=None, ag: AllGatherOptions | None = None) -> pd.DataFrame:
    """Per trace and AllGather type, the median step's exposed AllGather time (as `tracekit exposure`; ``ag`` over
    each input's annotation)."""
    from ..comm.exposure import exposure

    rows = []
    for inp in inputs:
        st = _steps(inp, steps)
        step = median_step(st.table)
        res = exposure(inp.trace, ag=AllGatherOptions.of(ag).with_annotation(inp.annotation), steps=st)
        pst = res.tables["per_step_type"]
        for r in pst[pst["step"] == step].itertuples(index=False):
            rows.append({**_base_row(inp, step), "type": str(r.type), "exposed_ns": int(r.exposed_ns)})
        if not (pst["step"] == step).any():
            rows.append({**_base_row(inp, step), "type": "(none)", "exposed_ns": 0})
    return pd.DataFrame(rows, columns=["deployment", "bs", "trace", "step", "type", "exposed_ns"])
