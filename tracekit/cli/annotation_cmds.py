"""Commands that use model knowledge: allgather, exposure, comm, blocks, stats."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import (
    AgSizeOpt,
    AnnotationOpt,
    CacheDirOpt,
    CategoriesOpt,
    Fmt,
    FormatOpt,
    GroupOpt,
    LocalOpt,
    MinStepOpt,
    NoCacheOpt,
    OutOpt,
    PhaseChoice,
    RunArg,
    PhaseOpt,
    SourceChoice,
    StepNameOpt,
    StepSourceOpt,
    StepsFileOpt,
    TableOpt,
    TraceArg,
    _load,
    _output,
    ag_opts,
    annotation_for,
    app,
    need_annotation,
    step_opts,
)


@app.command()
def allgather(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    group_size: GroupOpt = None,
    ag_size: AgSizeOpt = None,
    local_copy: LocalOpt = None,
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
    """The weight AllGathers: count, type, bytes and bandwidth.

    Each AllGather is a local copy kernel and the PtoP copies from its peers, typed by its size; per step and type
    the counts and bytes, and the copies' bandwidth."""
    from ..analyses import allgathers

    ann = annotation_for(trace, annotation)
    res = allgathers(
        _load(trace, no_cache, cache_dir),
        ann,
        ag=ag_opts(group_size, ag_size, local_copy),
        steps=step_opts(ann, step_name, min_step_ms, phase, step_source, steps_file),
    )
    _output(res, format, out, table)


@app.command(name="exposure")
def exposure_cmd(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    group_size: GroupOpt = None,
    ag_size: AgSizeOpt = None,
    local_copy: LocalOpt = None,
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
    """AllGather time no other GPU work hides, per step and type.

    Exposed time is when AllGather copies run and no other kernel or copy runs on any stream."""
    from ..analyses import exposure

    ann = annotation_for(trace, annotation)
    res = exposure(
        _load(trace, no_cache, cache_dir),
        ann,
        ag=ag_opts(group_size, ag_size, local_copy),
        steps=step_opts(ann, step_name, min_step_ms, phase, step_source, steps_file),
    )
    _output(res, format, out, table)


@app.command()
def comm(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    main_stream: Annotated[
        Optional[int],
        typer.Option(
            "--main-stream",
            help="The critical-path stream (default: the annotation's main_stream, else the one with most kernel time).",
        ),
    ] = None,
    local_copy: LocalOpt = None,
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
    """Communication per step: on the critical path or beside it.

    Every communication kernel and PtoP copy per step, split into the main stream (the critical path) and side
    streams."""
    from ..analyses import communication

    ann = annotation_for(trace, annotation)
    res = communication(
        _load(trace, no_cache, cache_dir),
        ann,
        main_stream=main_stream,
        ag=ag_opts(None, None, local_copy),
        steps=step_opts(ann, step_name, min_step_ms, phase, step_source, steps_file),
    )
    _output(res, format, out, table)


@app.command()
def blocks(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
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
    """Kernel time per block type of the model, per step.

    Per step the kernel time and count of each block type, and per op tag the time per layer. Needs an annotation
    (-a) that describes the model's blocks."""
    from ..analyses.structure.blocks import block_stats

    ann = need_annotation(annotation_for(trace, annotation), "blocks")
    res = block_stats(
        _load(trace, no_cache, cache_dir),
        ann,
        steps=step_opts(ann, step_name, min_step_ms, phase, step_source, steps_file),
    )
    _output(res, format, out, table)


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
    """Duration statistics of any selection of events.

    Count, total, mean, median and p90 per group (--by); with --overlap-with, split by overlap with a second
    selection."""
    from ..analyses.structure.blocks import kernel_selection_stats

    ann = annotation_for(trace, annotation)
    res = kernel_selection_stats(
        _load(trace, no_cache, cache_dir),
        select=select,
        overlap_with=overlap_with,
        by=by.value,
        ann=ann,
        categories=categories,
        steps=step_opts(ann, step_name, min_step_ms, phase, step_source, steps_file),
    )
    _output(res, format, out, table)


@app.command(name="report")
def report_cmd(
    trace: RunArg = None,
    annotation: AnnotationOpt = None,
    categories: CategoriesOpt = None,
    group_size: GroupOpt = None,
    ag_size: AgSizeOpt = None,
    local_copy: LocalOpt = None,
    step_name: StepNameOpt = None,
    min_step_ms: MinStepOpt = None,
    phase: PhaseOpt = PhaseChoice.auto,
    step_source: StepSourceOpt = SourceChoice.auto,
    steps_file: StepsFileOpt = None,
    log: Annotated[
        Optional[Path],
        typer.Option(
            "--log",
            help="The deployment's sglang launch log: adds the memory ledger and the memory"
            " findings (and the ledger waterfall to -f html).",
        ),
    ] = None,
    format: FormatOpt = Fmt.table,
    out: OutOpt = None,
    table: TableOpt = None,
    no_cache: NoCacheOpt = False,
    cache_dir: CacheDirOpt = None,
) -> None:
    """One trace's decode step end to end: the main report.

    Wall time decomposition, block types, AllGathers, exposure, communication and findings. With no TRACE: the
    bundled sample and its annotation. TRACE may be the ranks of one run (their directory, or two or more files): then the report of
    the reference rank (the lowest rank id) with the ranks section — imbalance per step, the straggler and its
    batch, every rank's clock offset and waits (tracekit imbalance)."""
    from .findings_cmds import one_trace_or_run, run_of_ranks_report
    from .reuse import reused_or_run

    trace, run = one_trace_or_run(trace)
    ranks = (
        run_of_ranks_report(run, step_name, min_step_ms, step_source, steps_file, no_cache) if run is not None else None
    )
    if ranks is not None:
        trace = ranks[0]
    ann = annotation_for(trace, annotation)
    steps, ag = (
        step_opts(ann, step_name, min_step_ms, phase, step_source, steps_file),
        ag_opts(group_size, ag_size, local_copy),
    )

    def compute():
        from ..analyses.report.of_trace import report
        from ..ingest.sglang_log import read_log

        return report(
            _load(trace, no_cache, cache_dir),
            ann,
            steps=steps,
            ag=ag,
            categories=categories,
            log=read_log(log) if log is not None else None,
            ranks=ranks[1] if ranks is not None else None,
        )

    if ranks is not None:
        res = compute()
    else:
        res = reused_or_run(
            "report",
            trace,
            options={"steps": steps, "ag": ag},
            ann=ann,
            files={"categories": categories, "log": log, "steps_file": steps.steps_file},
            no_cache=no_cache,
            cache_dir=cache_dir,
            compute=compute,
        )
    _output(res, format, out, table)
