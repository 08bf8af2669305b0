"""Commands for any model, with no annotation: layers (found automatically) and suggest (an annotation for them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import (
    AnnotationOpt,
    CacheDirOpt,
    CategoriesOpt,
    Fmt,
    FormatOpt,
    MinStepOpt,
    NoCacheOpt,
    OutOpt,
    PhaseChoice,
    PhaseOpt,
    SourceChoice,
    StepNameOpt,
    StepsFileOpt,
    StepSourceOpt,
    TableOpt,
    TraceArg,
    _load,
    _output,
    _state,
    annotation_for,
    app,
    step_opts,
)


@app.command(name="layers")
def layers_cmd(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    categories: CategoriesOpt = None,
    step_name: StepNameOpt = None,
    min_step_ms: MinStepOpt = None,
    phase: PhaseOpt = PhaseChoice.auto,
    step_source: StepSourceOpt = SourceChoice.auto,
    steps_file: StepsFileOpt = None,
    format: FormatOpt = Fmt.table,
    out: OutOpt = None,
    table: TableOpt = None,
    no_cache: NoCacheOpt = False,
    cache_dir: CacheDirOpt = None,
) -> None:
    """The model's layers, found with no annotation.

    Per step the head, each decoder layer with its type, and the tail; the one-step table charges every ns of the
    step to one kernel category and one layer type."""
    from ..analyses.structure.layers import layers as layers_result

    ann = annotation_for(trace, annotation)
    res = layers_result(
        _load(trace, no_cache, cache_dir),
        categories=categories,
        steps=step_opts(ann, step_name, min_step_ms, phase, step_source, steps_file),
    )
    _output(res, format, out, table)


@app.command(name="suggest")
def suggest_cmd(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    categories: CategoriesOpt = None,
    name: Annotated[
        Optional[str], typer.Option("--name", help="The annotation's name (default: auto_<trace file stem>).")
    ] = None,
    step_name: StepNameOpt = None,
    min_step_ms: MinStepOpt = None,
    phase: PhaseOpt = PhaseChoice.auto,
    step_source: StepSourceOpt = SourceChoice.auto,
    steps_file: StepsFileOpt = None,
    format: FormatOpt = Fmt.table,
    out: Annotated[
        Optional[Path],
        typer.Option(
            "--out",
            "-o",
            help="Write the suggested annotation (JSON) to this file. The check (whether"
            " the engine reproduces the layers with it) is printed in --format.",
        ),
    ] = None,
    table: TableOpt = None,
    no_cache: NoCacheOpt = False,
    cache_dir: CacheDirOpt = None,
) -> None:
    """A suggested annotation for the layers that `layers` finds.

    Step marker, boundary rules, block types, op tags and AllGather sizes, checked by running the annotation
    engine on the trace: `blocks -a FILE` reproduces `layers`."""
    from ..analyses.structure.suggest import suggest as suggest_annotation

    ann = annotation_for(trace, annotation)
    doc, res = suggest_annotation(
        _load(trace, no_cache, cache_dir),
        categories=categories,
        name=name,
        steps=step_opts(ann, step_name, min_step_ms, phase, step_source, steps_file),
    )
    if out is not None:  # whole or not at all, never over an input, its folder must exist (render/files.py)
        from ..render.files import write_file

        write_file(out, json.dumps(doc, indent=2) + "\n", what="suggested annotation", inputs=res)
        typer.echo(f"wrote {out}", err=True)
    elif not _state["quiet"]:
        typer.echo("note: the annotation was not written; pass -o FILE to write it", err=True)
    _output(res, format, None, table)
