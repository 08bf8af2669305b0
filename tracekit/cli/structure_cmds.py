"""Commands over the model's structure: blocks and stats (an annotation's block types), layers (found with no
annotation), suggest (an annotation for them) and annotations (the shipped ones, and which one fits a trace)."""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import AnnotationOpt, CategoriesOpt, TraceArg, _state, annotation_for, app, need_annotation
from .options import CACHE, OUTPUT, STEP_FLAGS, CacheFlags, Output, StepFlags


@app.command()
def blocks(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """Kernel time per block type of the model, per step.

    Per step the kernel time and count of each block type, and per op tag the time per layer. Needs an annotation
    (-a) that describes the model's blocks."""
    from ..analyses.structure.blocks import block_stats

    ann = need_annotation(annotation_for(trace, annotation), "blocks")
    res = block_stats(
        cache.load(trace),
        ann,
        steps=step_flags.options(ann),
    )
    output.write(res)


class ByChoice(str, Enum):
    name = "name"
    tag = "op_tag"
    block = "block_type"
    category = "category"
    family = "family"


@app.command()
def stats(
    trace: TraceArg = None,
    select: Annotated[
        str, typer.Option("--select", "-s", help="Events to describe (docs/selectors.md).")
    ] = "kind:kernel",
    overlap_with: Annotated[
        Optional[str],
        typer.Option(
            "--overlap-with",
            help="Also split each group into the events that overlap this selection and those that do not.",
        ),
    ] = None,
    by: Annotated[
        ByChoice, typer.Option("--by", help="Group by kernel name, op tag, block type, kernel category or family.")
    ] = ByChoice.name,
    annotation: AnnotationOpt = None,
    categories: CategoriesOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """Duration statistics of any selection of events.

    Count, total, mean, median and p90 per group (--by); with --overlap-with, split by overlap with a second
    selection."""
    from ..analyses.structure.blocks import kernel_selection_stats

    ann = annotation_for(trace, annotation)
    res = kernel_selection_stats(
        cache.load(trace),
        select=select,
        overlap_with=overlap_with,
        by=by.value,
        ann=ann,
        categories=categories,
        steps=step_flags.options(ann),
    )
    output.write(res)


@app.command(name="layers")
def layers_cmd(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    categories: CategoriesOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """The model's layers, found with no annotation.

    Per step the head, each decoder layer with its type, and the tail; the one-step table charges every ns of the
    step to one kernel category and one layer type."""
    from ..analyses.structure.layers import layers as layers_result

    ann = annotation_for(trace, annotation)
    res = layers_result(
        cache.load(trace),
        categories=categories,
        steps=step_flags.options(ann),
    )
    output.write(res)


SuggestOutOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--out",
        "-o",
        help="Write the suggested annotation (JSON) to this file. The check (whether"
        " the engine reproduces the layers with it) is printed in --format.",
    ),
]


@app.command(name="suggest")
def suggest_cmd(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    categories: CategoriesOpt = None,
    name: Annotated[
        Optional[str], typer.Option("--name", help="The annotation's name (default: auto_<trace file stem>).")
    ] = None,
    step_flags: StepFlags = STEP_FLAGS,
    output: Output = OUTPUT.with_option("out", SuggestOutOpt),
    cache: CacheFlags = CACHE,
) -> None:
    """A suggested annotation for the layers that `layers` finds.

    Step marker, boundary rules, block types, op tags and AllGather sizes, checked by running the annotation
    engine on the trace: `blocks -a FILE` reproduces `layers`."""
    from ..analyses.structure.suggest import suggest as suggest_annotation

    ann = annotation_for(trace, annotation)
    doc, res = suggest_annotation(
        cache.load(trace),
        categories=categories,
        name=name,
        steps=step_flags.options(ann),
    )
    out = output.out
    if out is not None:  # whole or not at all, never over an input, its folder must exist (render/files.py)
        from ..render.files import write_file

        write_file(out, json.dumps(doc, indent=2) + "\n", what="suggested annotation", inputs=res)
        typer.echo(f"wrote {out}", err=True)
    elif not _state["quiet"]:
        typer.echo("note: the annotation was not written; pass -o FILE to write it", err=True)
    dataclasses.replace(output, out=None).write(res)  # the check, to stdout


# not the shared TraceArg: without a trace this command lists the annotations (it does not read the bundled sample)
FitTraceArg = Annotated[
    Optional[Path],
    typer.Argument(
        help="Trace file (.json, .json.gz, .json.zst) or a directory holding one, to judge every annotation against."
        " Default: none, list the annotations.",
        show_default=False,
    ),
]

AnnotationsOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--annotation",
        "-a",
        help="Judge only this annotation (a shipped name or a JSON file; repeatable). Default:"
        " every shipped annotation.",
    ),
]


@app.command(name="annotations")
def annotations_cmd(
    trace: FitTraceArg = None,
    annotation: AnnotationsOpt = None,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """The shipped annotations, and which one fits a trace.

    Without TRACE: each annotation with the models, hardware and frameworks it covers and its file. With TRACE:
    each one run on the trace and scored from 0 to 1 (step marker found, kernel time in typed blocks, op tags
    matched, blocks per step against the automatic layers, expected block counts, hardware and framework),
    ranked; `best` names the one that fits (docs/annotation-fit.md)."""
    from ..analyses.structure.fit import annotation_fit

    res = annotation_fit(cache.load(trace) if trace is not None else None, annotations=annotation or None)
    output.write(res)
