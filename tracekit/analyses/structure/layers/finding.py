"""Automatic layers: ``find_layers`` runs the finder's steps in order, once per trace, steps, main stream and
categories, and gives a ``LayerFinding`` (the windows of every step, the types, the boundary kernel and the check).

The steps are the package's modules (see the package docstring): the per-step sequences (``read_context``), the
boundary kernel and its assembly (``choose_boundary``), the windows and type names (``step_windows``) and the check
against the structure (``structure_check``). ``auto_main_stream`` is the stream the finder reads when none is named.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from ....trace import Trace
from ...categories import resolve_categories
from ...steps.keywords import options_as_objects
from ...hardware.replay_attribution import SOURCES_KEY
from ...steps.resolve import Steps, find_steps
from .boundary import choose_boundary, structure_check
from .sequences import read_context
from .windows import step_windows

LAYER_COLUMNS = ["step", "layer", "layer_type", "start_ns", "end_ns", "kernels", "kernel_ns"]


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
    check: dict = field(default_factory=dict)  # the independent structure check (structure_check)

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
    """The automatic layers of every step (see the package docstring; ``steps``: StepOptions, Steps or a table);
    raises MissingDataError without kernels."""
    st = find_steps(trace, steps)
    ev = trace.events
    if main is None:
        main = auto_main_stream(trace)
    cr = resolve_categories(categories)
    # once per trace, steps, main stream and categories (report, findings and suggest may each ask)
    key = ("find_layers", id(st), main, cr.sources, trace.derived.get(SOURCES_KEY))
    hit = trace.derived.get(key)
    if hit is not None and hit[0] is st and hit[1] == len(ev):  # the entry holds st, so its id is not reused
        return hit[2]
    found = _find_layers(trace, st, main, cr)
    trace.derived[key] = (st, len(ev), found)
    return found


def auto_main_stream(trace: Trace) -> tuple[int, int]:
    """The main stream of an annotation naming none (the one with the most non-communication kernel time), once per events table
    (``trace.derived``: every find_layers call asks)."""
    from ....annotation import Annotation
    from ....annotation.blocks import resolve_main_stream

    ev = trace.events
    key = ("auto_main_stream", id(ev))
    hit = trace.derived.get(key)
    if hit is None or hit[0] is not ev or hit[1] != len(ev):  # the entry holds ev, so its id is not reused
        hit = trace.derived[key] = (ev, len(ev), resolve_main_stream(ev, Annotation(name="auto")))
    return hit[2]


def _find_layers(trace: Trace, st: Steps, main: tuple[int, int], cr) -> LayerFinding:
    ctx = read_context(trace, st, main, cr)
    asm = choose_boundary(ctx)
    warnings = list(st.warnings)
    if asm is None:
        warnings.append(no_stack_message(trace, main))
    windows, types = step_windows(trace, ctx, asm, cr)
    k = None
    if asm is not None and asm.k:
        ks = [v for v in asm.k.values() if v]
        k = Counter(ks).most_common(1)[0][0] if ks else None
    boundary = ctx.names[asm.token] if asm is not None else None
    check = structure_check(ctx, asm)
    if asm is not None and not check["agrees"]:
        warnings.append(
            f"{trace.path}: the automatic layers ({check['layers_per_step']} per step) are not confirmed"
            f" by the structure ({check['transitions_per_step']} attention -> MLP/MoE transitions per"
            " step on the main stream); check them before you rely on them"
        )
    return LayerFinding(windows, st, main, boundary, k, types, warnings, check)
