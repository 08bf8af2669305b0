"""Commands that use model knowledge: allgather, exposure, comm, blocks, stats."""
from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from ..analyses import allgather_result, communication, exposure
from ..analyses.blocks import block_stats, kernel_selection_stats
from ..analyses.report import report
from ..annotate import load_annotation
from .common import (DEFAULT_ANNOTATION, AgSizeOpt, AnnotationOpt, CacheDirOpt, Fmt, FormatOpt, GroupOpt, LocalOpt,
                     MinStepOpt, NoCacheOpt, OutOpt, StepNameOpt, TableOpt, TraceArg, _ag_kwargs, _load, _ns,
                     _output, app)


@app.command()
def allgather(trace: TraceArg = None, annotation: AnnotationOpt = None, group_size: GroupOpt = None, ag_size: AgSizeOpt = None,
              local_copy: LocalOpt = None, step_name: StepNameOpt = None, min_step_ms: MinStepOpt = 10.0,
              format: FormatOpt = Fmt.table, out: OutOpt = None, table: TableOpt = None,
              no_cache: NoCacheOpt = False, cache_dir: CacheDirOpt = None) -> None:
    """Weight AllGathers (A5, A8): each local copy + PtoP run, typed by size, with bytes and bandwidth."""
    res = allgather_result(_load(trace, no_cache, cache_dir),
                           **_ag_kwargs(annotation, group_size, ag_size, local_copy, step_name, min_step_ms))
    _output(res, format, out, table)


@app.command(name="exposure")
def exposure_cmd(trace: TraceArg = None, annotation: AnnotationOpt = None, group_size: GroupOpt = None, ag_size: AgSizeOpt = None,
                 local_copy: LocalOpt = None, step_name: StepNameOpt = None, min_step_ms: MinStepOpt = 10.0,
                 format: FormatOpt = Fmt.table, out: OutOpt = None, table: TableOpt = None,
                 no_cache: NoCacheOpt = False, cache_dir: CacheDirOpt = None) -> None:
    """Exposed AllGather time (A6): copies running while nothing else runs, per step and type."""
    res = exposure(_load(trace, no_cache, cache_dir), **_ag_kwargs(annotation, group_size, ag_size, local_copy,
                                                                  step_name, min_step_ms))
    _output(res, format, out, table)


@app.command()
def comm(trace: TraceArg = None, annotation: AnnotationOpt = None,
         main_stream: Annotated[Optional[int], typer.Option("--main-stream", help="The critical-path stream (default: the one with most kernel time).")] = None,
         step_name: StepNameOpt = None, min_step_ms: MinStepOpt = 10.0,
         format: FormatOpt = Fmt.table, out: OutOpt = None, table: TableOpt = None,
         no_cache: NoCacheOpt = False, cache_dir: CacheDirOpt = None) -> None:
    """Communication (A7): every comm kernel and PtoP copy per step, critical path vs side streams."""
    ann = load_annotation(annotation) if annotation else None
    res = communication(_load(trace, no_cache, cache_dir), main=main_stream,
                        local_copy_pattern=ann.allgather.local_copy if ann else None,
                        step_name=step_name if step_name is not None else (ann.step.name if ann else None),
                        min_step_ns=_ns(min_step_ms))
    _output(res, format, out, table)


@app.command()
def blocks(trace: TraceArg = None, annotation: AnnotationOpt = None,
           qlen: Annotated[Optional[int], typer.Option("--qlen", help="Tokens per request per step (for shapes).")] = None,
           step_name: StepNameOpt = None, min_step_ms: Annotated[Optional[float], typer.Option(
               "--min-step-ms", min=0, help="Step floor (default: the annotation's).")] = None,
           format: FormatOpt = Fmt.table, out: OutOpt = None, table: TableOpt = None,
           no_cache: NoCacheOpt = False, cache_dir: CacheDirOpt = None) -> None:
    """Blocks (A3): per step kernel time and count per block type, per op tag the per-layer time."""
    ann = load_annotation(annotation or DEFAULT_ANNOTATION)
    res = block_stats(_load(trace, no_cache, cache_dir), ann, qlen=qlen, step_name=step_name,
                      min_step_ns=_ns(min_step_ms) if min_step_ms is not None else None)
    _output(res, format, out, table)


class ByChoice(str, Enum):
    name = "name"
    tag = "op_tag"
    block = "block_type"


@app.command()
def stats(trace: TraceArg = None,
          select: Annotated[str, typer.Option("--select", "-s", help="Events to describe (docs/selectors.md).")] = "kind:kernel",
          overlap_with: Annotated[Optional[str], typer.Option("--overlap-with", help="Split by overlap with this selection.")] = None,
          by: Annotated[ByChoice, typer.Option("--by", help="Group by kernel name, op tag or block type.")] = ByChoice.name,
          annotation: AnnotationOpt = None, step_name: StepNameOpt = None,
          format: FormatOpt = Fmt.table, out: OutOpt = None, table: TableOpt = None,
          no_cache: NoCacheOpt = False, cache_dir: CacheDirOpt = None) -> None:
    """Kernel statistics (A4): count, total, mean, median, p90; optionally split by overlap with a selection."""
    ann = load_annotation(annotation) if annotation else None
    res = kernel_selection_stats(_load(trace, no_cache, cache_dir), select_expr=select, overlap_with=overlap_with,
                                 by=by.value, ann=ann, step_name=step_name)
    _output(res, format, out, table)




@app.command(name="report")
def report_cmd(trace: TraceArg = None, annotation: AnnotationOpt = None, step_name: StepNameOpt = None,
               min_step_ms: Annotated[Optional[float], typer.Option("--min-step-ms", min=0)] = None,
               format: FormatOpt = Fmt.table, out: OutOpt = None, table: TableOpt = None,
               no_cache: NoCacheOpt = False, cache_dir: CacheDirOpt = None) -> None:
    """The main job: one trace's decode step end to end — wall decomposition, block types, AllGathers, exposure,
    communication. With no TRACE: the bundled sample and its annotation."""
    ann_ref = annotation or (DEFAULT_ANNOTATION if trace is None else None)
    ann = load_annotation(ann_ref) if ann_ref else None
    res = report(_load(trace, no_cache, cache_dir), ann, step_name=step_name,
                 min_step_ns=_ns(min_step_ms) if min_step_ms is not None else None)
    _output(res, format, out, table)
