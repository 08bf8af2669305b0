"""Automatic layers: cut each step into a head, decoder layers and a tail, with no annotation (docs/layers.md).

How (per trace, the same for every step):

1. **Segments.** The main stream's kernels of each step (the stream with the most kernel time) are cut at every
   occurrence of one *boundary kernel*; each segment is labelled by its exact sequence of kernel names.
2. **Phases.** Labels that recur within a step are linked when they follow each other. A layer of ``k`` segments
   (attention half, FFN half: ``k = 2``) makes every cycle of that graph a multiple of ``k``, so ``k`` is the gcd
   of the cycle lengths of each connected part, and each label gets a phase ``0..k-1``. The phase whose segments
   hold the mixer kernels (attention, linear attention, state space: ``layer_role`` in the categories) opens a
   layer. Between two linked segments up to ``k-1`` segments of a unique label (a one-off dense layer among MoE
   layers) belong to the layer whose phases they complete; a unique segment similar to an expected one (edit
   distance within a quarter of its length) does too.
3. **Runs and their edges.** A run is a maximal chain of linked segments. A run whose first layer lacks its first
   segment(s) (the first layer's input norm missing or a different kernel) takes them from the end of the
   segment before it when that end aligns with the missing label within the edit budget; a run whose last layer
   lacks its last segment takes the next segment when it starts with the missing label (kernels added at the
   end, such as a draft model's final norm and lm_head). A later run (draft layers after the target model) takes
   the embedding kernels right before it. Runs of fewer than two layers are not layers.
4. **The boundary kernel** is the candidate (a kernel occurring at least three times in a step) whose layers form a
   *decoder stack* and agree best with the *structure*. The structure is counted without any boundary kernel:
   every mixer -> FFN transition of the step (an attention / linear-attention / state-space kernel, then an MLP or
   MoE kernel, other kernels skipped); a decoder layer holds exactly one. A decoder stack has a layer holding a
   mixer kernel, every layer type holding a mixer or an FFN kernel (a kernel repeating inside a layer leaves
   pieces with neither), at most max(3, a quarter of the layers) types and at least 3 kernels per layer. Among the
   candidates whose share of layers holding one transition is within 5 % of the best: norm kernels covering at
   least 90 % of the best coverage, then the most main-stream kernels covered, the fewest types, the kernel closest
   after the last GEMM before it (a decomposed norm's first kernel), the rarest. Norms are tried first: one
   covering 90 % of all main-stream kernels with one transition per layer ends the search. No mixer kernel, or no
   candidate left: **no decoder stack** (``layers`` raises MissingDataError, exit 4, in one sentence).
5. **Types.** A layer's type is its sequence of main-stream kernel names, communication kernels left out (a layer
   that ends with a collective keeps its type). Names come from the categories: the mixer labels (``attn``,
   ``mla``, ``kda``, ...) and the FFN label (``moe`` before ``mlp``), ``draft:`` for the types that never share a
   run with the target model's types (those of the longest run of any step) and follow such a run in some step,
   and the most expensive distinctive kernel when two types would share a name. A type whose layers differ only
   in durations is split into ``/fast`` and ``/slow`` when the durations of one of its mixer kernels form two
   clear clusters (sliding-window vs full attention; expert GEMMs, whose time varies with routing, never split a
   type).
6. **The check.** ``check`` compares the layers with the structure: ``agrees`` when every step has as many layers
   as transitions and every layer holds exactly one; otherwise a warning says the layers are not confirmed.

Side-stream work belongs to the window it starts in, as in the annotation engine. The candidates are the distinct
main-stream names occurring three times or more, and one candidate's assembly runs over every step at once in numpy
passes over its segments, not its kernels: a segment is labelled by a hash of its codes (running sums made once per
trace), checked against the previous segment of its label by the mismatch positions of their shift (made once per
trace and shift: a repeating layer's period covers most segments) or kernel by kernel; then the label graph, phases,
links and runs. Python walks the runs that can hold layers and the unique segments inside them; a candidate's
layers stay arrays, measured in numpy, and only the chosen one's become objects. A candidate whose phases bound its
coverage below a stack already found, and its agreement at or below the best so far, is not assembled (the answer is
the same: those bounded while a later stack raised the best agreement are assembled after all). An edit distance
runs its DP only when neither a lower bound nor a subsequence settles it.

The finder's jobs live in their own modules of this room: ``layer_context`` (the per-step sequences),
``layer_align`` (edit distances), ``layer_assembly`` (segments, phases, runs and layers for one boundary kernel),
``layer_table`` (one candidate's layers as arrays), ``layer_choice`` (the boundary kernel and the check),
``layer_names`` (type names, duration splits) and ``layer_windows`` (the windows of every step); this module is the
command.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...errors import MissingDataError
from ...result import Result, trace_input
from ...trace import Trace
from ..categories import resolve_categories, trace_categories
from ..steps.keywords import options_as_objects
from ..steps.resolve import Steps, find_steps, median_ns, median_step
from ...result import merge_warnings
from ..time.onestep import one_step_tables
from .layer_choice import _choose, _structure_check
from .layer_context import _context
from .layer_windows import BETWEEN, HEAD, TAIL, _windows, layer_windows_by_event

LAYER_COLUMNS = ["step", "layer", "layer_type", "start_ns", "end_ns", "kernels", "kernel_ns"]
TYPE_COLUMNS = ["step", "layer_type", "layers", "kernel_ns", "wall_ns"]


@dataclass(frozen=True)
class LayerFinding:
    """The automatic layers of a trace: one row per window of each step (head, layers, between, tail)."""

    windows: pd.DataFrame  # step, index, kind (head|layer|between|tail), layer, layer_type, start_ns, end_ns, ...
    steps: Steps
    main_stream: tuple[int, int]
    boundary: str | None  # the boundary kernel's name
    segments_per_layer: int | None
    types: pd.DataFrame  # layer_type, signature (main-stream kernel names), label, run, layers
    warnings: list[str]
    check: dict = field(default_factory=dict)  # the independent structure check (_structure_check)

    @property
    def layers(self) -> pd.DataFrame:
        w = self.windows[self.windows["kind"] == "layer"]
        return w[LAYER_COLUMNS].reset_index(drop=True)


def no_stack_message(trace: Trace, main: tuple[int, int]) -> str:
    return (
        f"{trace.path}: no decoder stack on the main stream (device {main[0]}, stream {main[1]}): no kernel"
        " sequence repeats as a few layer types that hold attention, linear-attention or state-space kernels"
        " (attention run as plain matmul and softmax kernels is not recognised)"
    )


@options_as_objects
def find_layers(trace: Trace, *, steps=None, categories=None, main: tuple[int, int] | None = None) -> LayerFinding:
    """The automatic layers of every step (see the module docstring; ``steps``: StepOptions, Steps or a table);
    raises MissingDataError without kernels."""
    st = find_steps(trace, steps)
    ev = trace.events
    if main is None:
        main = _auto_main(trace)
    cr = resolve_categories(categories)
    # once per trace, steps, main stream and categories (report, findings and suggest may each ask)
    key = ("find_layers", id(st), main, cr.sources)
    hit = trace.derived.get(key)
    if hit is not None and hit[0] is st and hit[1] == len(ev):  # the entry holds st, so its id is not reused
        return hit[2]
    found = _find_layers(trace, st, main, cr)
    trace.derived[key] = (st, len(ev), found)
    return found


def _auto_main(trace: Trace) -> tuple[int, int]:
    """The main stream of an annotation naming none (the one with the most kernel time), once per events table
    (``trace.derived``: every find_layers call asks)."""
    from ...annotation import Annotation
    from ...annotation.blocks import resolve_main_stream

    ev = trace.events
    key = ("auto_main_stream", id(ev))
    hit = trace.derived.get(key)
    if hit is None or hit[0] is not ev or hit[1] != len(ev):  # the entry holds ev, so its id is not reused
        hit = trace.derived[key] = (ev, len(ev), resolve_main_stream(ev, Annotation(name="auto")))
    return hit[2]


def _find_layers(trace: Trace, st: Steps, main: tuple[int, int], cr) -> LayerFinding:
    ctx = _context(trace, st, main, cr)
    asm = _choose(ctx)
    warnings = list(st.warnings)
    if asm is None:
        warnings.append(no_stack_message(trace, main))
    windows, types = _windows(trace, ctx, asm, cr)
    k = None
    if asm is not None and asm.k:
        ks = [v for v in asm.k.values() if v]
        k = Counter(ks).most_common(1)[0][0] if ks else None
    boundary = ctx.names[asm.token] if asm is not None else None
    check = _structure_check(ctx, asm)
    if asm is not None and not check["agrees"]:
        warnings.append(
            f"{trace.path}: the automatic layers ({check['layers_per_step']} per step) are not confirmed"
            f" by the structure ({check['transitions_per_step']} attention -> MLP/MoE transitions per"
            " step on the main stream); check them before you rely on them"
        )
    return LayerFinding(windows, st, main, boundary, k, types, warnings, check)


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
    against the structure counted without them (_structure_check).

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
