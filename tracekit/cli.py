"""The `tracekit` command line: parse arguments, call the Python API, render, exit.

Errors are caught in one place (:func:`run`): a TracekitError prints its one-sentence message
and exits with its code (3 bad input, 4 missing data); anything else prints one line and
suggests ``--debug``, which shows the traceback.
"""
from __future__ import annotations

import logging
import sys
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import __version__
from .analyses import (allgather_result, communication, decompose, exposure, kernel_stats, overlap, steps_result,
                       temporal, trace_info)
from .analyses.allgather import parse_sizes
from .analyses.blocks import block_stats, kernel_selection_stats
from .annotate import load_annotation
from .errors import TracekitError
from .ingest import load
from .render import emit
from .render.formats import write_csv_dir
from .result import Result

app = typer.Typer(
    name="tracekit",
    help="Where each millisecond of an LLM decode step goes: analyses of torch-profiler traces.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class Fmt(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    md = "md"


SAMPLE_TRACE = "decode_sample.json.gz"
DEFAULT_ANNOTATION = "decode_sample"  # the shipped annotation of the bundled sample


def bundled_sample() -> Path:
    """The small synthetic decode trace shipped inside the package (the default TRACE)."""
    return Path(str(resources.files("tracekit.data").joinpath("samples", SAMPLE_TRACE)))


TraceArg = Annotated[Optional[Path], typer.Argument(
    help="Trace file (.json, .json.gz, .json.zst) or a directory holding one. Default: the bundled sample.",
    show_default=False)]
FormatOpt = Annotated[Fmt, typer.Option("--format", "-f", help="Output format: table, json, csv or md.")]
OutOpt = Annotated[Optional[Path], typer.Option(
    "--out", "-o", help="Write to this file instead of stdout (csv: a directory, one file per table).")]
TableOpt = Annotated[Optional[str], typer.Option("--table", help="csv: the one table to write (default: the first).")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Neither read nor write the parquet cache.")]
CacheDirOpt = Annotated[Optional[Path], typer.Option(
    "--cache-dir", help="Cache directory (default $TRACEKIT_CACHE_DIR or ~/.cache/tracekit).")]

StepNameOpt = Annotated[Optional[str], typer.Option(
    "--step-name", help="Annotation that marks a step (default: the markers of tracekit/data/steps.json, in order).")]
MinStepOpt = Annotated[float, typer.Option("--min-step-ms", min=0, help="Ignore step annotations not longer than this.")]

_state = {"debug": False, "quiet": False}


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tracekit {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of unexpected errors.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print warnings to stderr.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """tracekit: decode-step analysis of torch-profiler traces and sglang logs."""
    _state["debug"], _state["quiet"] = debug, quiet


def _load(trace: Optional[Path], no_cache: bool, cache_dir: Optional[Path]):
    return load(trace if trace is not None else bundled_sample(), cache=not no_cache, cache_dir=cache_dir)


def _output(result: Result, fmt: Fmt, out: Optional[Path], table: Optional[str]) -> None:
    if not _state["quiet"]:
        for w in result.warnings:
            typer.echo(f"warning: {w}", err=True)
    if fmt is Fmt.csv and out is not None and table is None:
        for p in write_csv_dir(result, out):
            typer.echo(f"wrote {p}", err=True)
        return
    text = emit(result, fmt.value, table=table)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {out}", err=True)
    else:
        sys.stdout.write(text)


@app.command()
def info(trace: TraceArg = None, format: FormatOpt = Fmt.table, out: OutOpt = None, table: TableOpt = None,
         no_cache: NoCacheOpt = False, cache_dir: CacheDirOpt = None) -> None:
    """Rank, devices, SM count, GPU span, counts by kind / category / stream, copies, comm kernels, ingest losses."""
    _output(trace_info(_load(trace, no_cache, cache_dir)), format, out, table)


@app.command()
def kernels(trace: TraceArg = None,
            match: Annotated[Optional[str], typer.Option("--match", "-m", help="Keep kernel names matching this regex.")] = None,
            top: Annotated[Optional[int], typer.Option("--top", "-n", min=1, help="Show the N largest by total time.")] = None,
            format: FormatOpt = Fmt.table, out: OutOpt = None, table: TableOpt = None,
            no_cache: NoCacheOpt = False, cache_dir: CacheDirOpt = None) -> None:
    """Per kernel name: count, total, mean, median, min, max and share of GPU busy time."""
    _output(kernel_stats(_load(trace, no_cache, cache_dir), match=match, top=top), format, out, table)


@app.command()
def steps(trace: TraceArg = None, step_name: StepNameOpt = None, min_step_ms: MinStepOpt = 10.0,
          format: FormatOpt = Fmt.table, out: OutOpt = None, table: TableOpt = None,
          no_cache: NoCacheOpt = False, cache_dir: CacheDirOpt = None) -> None:
    """Decode steps (A1): each step's window and the median wall; says which marker was used."""
    res = steps_result(_load(trace, no_cache, cache_dir), step_name=step_name, min_step_ns=_ns(min_step_ms))
    _output(res, format, out, table)


class AgChoice(str, Enum):
    ptop = "ptop"
    ptop_local = "ptop+local"


@app.command()
def wall(trace: TraceArg = None,
         ag: Annotated[AgChoice, typer.Option("--ag", help="AllGather copies: PtoP only, or PtoP + the local copy kernel.")] = AgChoice.ptop,
         step_name: StepNameOpt = None, min_step_ms: MinStepOpt = 10.0,
         format: FormatOpt = Fmt.table, out: OutOpt = None, table: TableOpt = None,
         no_cache: NoCacheOpt = False, cache_dir: CacheDirOpt = None) -> None:
    """Wall-clock decomposition (A2): per step busy, only-AllGather and idle time, summing to the wall."""
    res = decompose(_load(trace, no_cache, cache_dir), ag=ag.value, step_name=step_name, min_step_ns=_ns(min_step_ms))
    _output(res, format, out, table)


@app.command(name="temporal")
def temporal_cmd(trace: TraceArg = None,
                 per_stream: Annotated[bool, typer.Option("--per-stream", help="Add the same numbers per stream.")] = False,
                 format: FormatOpt = Fmt.table, out: OutOpt = None, table: TableOpt = None,
                 no_cache: NoCacheOpt = False, cache_dir: CacheDirOpt = None) -> None:
    """Temporal breakdown of the whole trace: span, busy, idle, compute, communication, memory, overlap."""
    _output(temporal(_load(trace, no_cache, cache_dir), per_stream=per_stream), format, out, table)


@app.command(name="overlap")
def overlap_cmd(trace: TraceArg = None,
                a: Annotated[str, typer.Option("--a", help="Selection A, e.g. 'copy:PtoP' (see docs/selectors.md).")] = "copy:PtoP",
                b: Annotated[str, typer.Option("--b", help="Selection B, e.g. 'kind:kernel;!comm:any'.")] = "gpu;!copy:PtoP",
                step_name: StepNameOpt = None, min_step_ms: MinStepOpt = 10.0,
                format: FormatOpt = Fmt.table, out: OutOpt = None, table: TableOpt = None,
                no_cache: NoCacheOpt = False, cache_dir: CacheDirOpt = None) -> None:
    """Overlap of two selections: |A|, |B|, |A∩B|, |A−B| and the share of A hidden under B, per step."""
    res = overlap(_load(trace, no_cache, cache_dir), a=a, b=b, step_name=step_name, min_step_ns=_ns(min_step_ms))
    _output(res, format, out, table)


GroupOpt = Annotated[Optional[int], typer.Option("--group-size", "-g", min=2,
                                                 help="Shard group size G (default: most common copy count + 1).")]
AgSizeOpt = Annotated[Optional[list[str]], typer.Option(
    "--ag-size", help="An AllGather type and its full bytes, TYPE=BYTES (repeatable), e.g. KDA=627048448.")]
LocalOpt = Annotated[Optional[str], typer.Option(
    "--local-copy", help="Regex of the local-copy kernel (default: ag_local_copy in tracekit/data/classes.json).")]


AnnotationOpt = Annotated[Optional[str], typer.Option(
    "--annotation", "-a", help="Annotation file, or the name of a shipped one (e.g. k3_dp16).")]


def _ag_kwargs(annotation, group_size, ag_size, local_copy, step_name, min_step_ms) -> dict:
    """AllGather parameters: the annotation's, overridden by explicit options."""
    ann = load_annotation(annotation) if annotation else None
    sizes = dict(ann.allgather.sizes) if ann else {}
    sizes.update(parse_sizes(ag_size))
    return {"group_size": group_size if group_size is not None else (ann.allgather.group_size if ann else None),
            "sizes": sizes,
            "local_copy_pattern": local_copy or (ann.allgather.local_copy if ann else None),
            "step_name": step_name if step_name is not None else (ann.step.name if ann else None),
            "min_step_ns": _ns(min_step_ms)}


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


def _ns(ms: float) -> int:
    return int(round(ms * 1_000_000))


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; never raises (tests call this)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    logging.basicConfig(level=logging.WARNING)
    try:
        app(args=args, prog_name="tracekit")  # standalone: usage errors print and exit 2
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except TracekitError as exc:
        if debug:
            raise
        typer.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - the one place unexpected errors become one line
        if debug:
            raise
        typer.echo(f"error: unexpected {type(exc).__name__}: {exc} (a tracekit bug; rerun with --debug"
                   " for the traceback and report it)", err=True)
        return 1


def main() -> None:
    sys.exit(run())
