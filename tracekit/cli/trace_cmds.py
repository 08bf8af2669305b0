"""Commands over one trace: info, kernels, steps, wall, temporal, overlap."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from .common import AnnotationOpt, CategoriesOpt, TraceArg, annotation_for, app
from .options import CACHE, OUTPUT, REPLAY, STEP_FLAGS, CacheFlags, Output, ReplayFlags, StepFlags


@app.command()
def info(
    trace: TraceArg = None,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """What a trace holds: rank, devices, SMs, GPU time span.

    Also its events counted by kind, kernel category and stream, its copies and communication kernels, and the
    records lost or skipped while reading it."""
    from ..analyses import trace_info

    output.write(trace_info(cache.load(trace)))


class KernelBy(str, Enum):
    name = "name"
    category = "category"
    family = "family"
    op = "op"
    module = "module"


@app.command()
def kernels(
    trace: TraceArg = None,
    match: Annotated[
        Optional[str], typer.Option("--match", "-m", help="Keep kernel names matching this regex.")
    ] = None,
    top: Annotated[Optional[int], typer.Option("--top", "-n", min=1, help="Show the N largest by total time.")] = None,
    by: Annotated[
        KernelBy,
        typer.Option(
            "--by",
            help="Group by kernel name, category (gemm, attention_mla,"
            " comm_nccl, …), family (gemm, attention, comm, …), the op that launched the kernel (a graph-replayed"
            " kernel: the op of its capture, docs/replay.md) or that op's nn.Module path.",
        ),
    ] = None,
    categories: CategoriesOpt = None,
    replay: ReplayFlags = REPLAY,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """Which kernels take the GPU time, largest total first.

    Per kernel name (or category, family, launching op, module path): count, total, mean, median, min, max and share of GPU busy time."""
    from ..analyses import kernel_stats

    output.write(
        kernel_stats(
            cache.load(trace),
            match=match,
            top=top,
            by=(by or KernelBy.name).value,
            categories=categories,
            **replay.keywords(),
        )
    )


@app.command()
def steps(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """Where the steps are, and how long each one takes.

    Each step's window, phase, batch size and health; which step marker was used; the median step wall time."""
    from ..analyses import step_windows

    opts = step_flags.options(annotation_for(trace, annotation))
    res = step_windows(cache.load(trace), steps=opts)
    output.write(res)


class AgChoice(str, Enum):
    ptop = "ptop"
    ptop_local = "ptop+local"


@app.command()
def wall(
    trace: TraceArg = None,
    ag: Annotated[
        AgChoice,
        typer.Option(
            "--ag",
            help="What counts as AllGather time: the PtoP copies only (ptop), or the PtoP copies and the local copy kernel (ptop+local).",
        ),
    ] = AgChoice.ptop,
    annotation: AnnotationOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """Where each step's wall time goes: busy, AllGather-only, idle.

    Per step the time the GPU runs anything besides AllGather copies (busy), only AllGather copies, or nothing
    (idle); the three sum exactly to the step's wall time."""
    from ..analyses import decompose

    opts = step_flags.options(annotation_for(trace, annotation))
    res = decompose(cache.load(trace), ag=ag.value, steps=opts)
    output.write(res)


@app.command(name="temporal")
def temporal_cmd(
    trace: TraceArg = None,
    per_stream: Annotated[bool, typer.Option("--per-stream", help="Add the same numbers per stream.")] = False,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """How the GPU time of the whole trace splits, without steps.

    Span, busy, idle, compute, communication and memory time, and how much of them overlaps."""
    from ..analyses import temporal

    output.write(temporal(cache.load(trace), per_stream=per_stream))


@app.command(name="overlap")
def overlap_cmd(
    trace: TraceArg = None,
    a: Annotated[str, typer.Option("--a", help="Selection A, e.g. 'copy:PtoP' (see docs/selectors.md).")] = "copy:PtoP",
    b: Annotated[str, typer.Option("--b", help="Selection B, e.g. 'kind:kernel;!comm:any'.")] = "gpu;!copy:PtoP",
    annotation: AnnotationOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """How much of one selection runs hidden under another.

    Per step |A|, |B|, |A∩B|, |A−B| and the share of A hidden under B (selections: docs/selectors.md)."""
    from ..analyses import overlap

    opts = step_flags.options(annotation_for(trace, annotation))
    res = overlap(cache.load(trace), a=a, b=b, steps=opts)
    output.write(res)
