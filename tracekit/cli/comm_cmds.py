"""Commands over a trace's communication: allgather (the weight AllGathers), exposure (their time no other GPU work
hides) and comm (every communication kernel and copy, on the critical path or beside it)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .common import AgSizeOpt, AnnotationOpt, GroupOpt, LocalOpt, TraceArg, ag_opts, annotation_for, app
from .options import CACHE, OUTPUT, STEP_FLAGS, CacheFlags, Output, StepFlags


@app.command()
def allgather(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    group_size: GroupOpt = None,
    ag_size: AgSizeOpt = None,
    local_copy: LocalOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """The weight AllGathers: count, type, bytes and bandwidth.

    Each AllGather is a local copy kernel and the PtoP copies from its peers, typed by its size; per step and type
    the counts and bytes, and the copies' bandwidth."""
    from ..analyses import allgathers

    ann = annotation_for(trace, annotation)
    res = allgathers(
        cache.load(trace),
        ann,
        ag=ag_opts(group_size, ag_size, local_copy),
        steps=step_flags.options(ann),
    )
    output.write(res)


@app.command(name="exposure")
def exposure_cmd(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    group_size: GroupOpt = None,
    ag_size: AgSizeOpt = None,
    local_copy: LocalOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """AllGather time no other GPU work hides, per step and type.

    Exposed time is when AllGather copies run and no other kernel or copy runs on any stream."""
    from ..analyses import exposure

    ann = annotation_for(trace, annotation)
    res = exposure(
        cache.load(trace),
        ann,
        ag=ag_opts(group_size, ag_size, local_copy),
        steps=step_flags.options(ann),
    )
    output.write(res)


@app.command()
def comm(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    main_stream: Annotated[
        Optional[int],
        typer.Option(
            "--main-stream",
            help="The critical-path stream (default: the annotation's main_stream, else the one with most non-communication kernel time).",
        ),
    ] = None,
    local_copy: LocalOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """Communication per step: on the critical path or beside it.

    Every communication kernel and PtoP copy per step, split into the main stream (the critical path) and side
    streams."""
    from ..analyses import communication

    ann = annotation_for(trace, annotation)
    res = communication(
        cache.load(trace),
        ann,
        main_stream=main_stream,
        ag=ag_opts(None, None, local_copy),
        steps=step_flags.options(ann),
    )
    output.write(res)
