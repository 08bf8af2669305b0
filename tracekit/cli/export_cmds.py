"""Commands that write the analyses as files for other tools: export (Parquet tables) and annotate (the trace with
tracks for Perfetto)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import OutputError, UsageError
from .common import AgSizeOpt, AnnotationOpt, GroupOpt, LocalOpt, TraceArg, ag_opts, annotation_for, app
from .options import CACHE, PRINTED, STEP_FLAGS, CacheFlags, Output, StepFlags


class AgMode(str, Enum):
    ptop = "ptop"
    ptop_local = "ptop+local"


AgOpt = Annotated[
    AgMode,
    typer.Option(
        "--ag",
        help="AllGather copies in the steps' decomposition: PtoP only, or PtoP + the local copy kernel (as `wall`).",
    ),
]


@app.command(name="export")
def export_cmd(
    trace: TraceArg = None,
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Directory for the parquet files and manifest.json (created if missing)."),
    ] = ...,
    annotation: AnnotationOpt = None,
    ag: AgOpt = AgMode.ptop,
    group_size: GroupOpt = None,
    ag_size: AgSizeOpt = None,
    local_copy: LocalOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    log: Annotated[
        Optional[Path], typer.Option("--log", help="An sglang launch log: adds the memory ledger tables.")
    ] = None,
    output: Output = PRINTED,
    cache: CacheFlags = CACHE,
) -> None:
    """The analyses' tables as Parquet files, for DuckDB or pandas.

    The annotated events, steps, blocks, AllGathers, copies, exposed intervals, communication and (with --log)
    the ledger, plus manifest.json; prints the files written."""
    from ..exporters import export_parquet
    from ..render.files import check_dir_target

    try:
        check_dir_target(out, "export")  # before the work
    except OutputError as exc:  # export has always called a non-directory -o a usage error (exit 2; test_export.py)
        raise UsageError(str(exc)) from None
    ann = annotation_for(trace, annotation)
    res = export_parquet(
        cache.load(trace),
        ann,
        out,
        ag=ag.value,
        log=log,
        allgather=ag_opts(group_size, ag_size, local_copy),  # the AllGatherOptions; ag= is which copies count
        steps=step_flags.options(ann),
    )
    output.write(res)


@app.command(name="annotate")
def annotate_cmd(
    trace: TraceArg = None,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="The annotated trace to write (.json, .json.gz or .json.zst).")
    ] = ...,
    annotation: AnnotationOpt = None,
    ag: AgOpt = AgMode.ptop,
    group_size: GroupOpt = None,
    ag_size: AgSizeOpt = None,
    local_copy: LocalOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    output: Output = PRINTED,
    cache: CacheFlags = CACHE,
) -> None:
    """The trace with extra tracks for steps, blocks and AllGathers.

    The trace plus tracks for steps, blocks, AllGathers and exposed time, for Perfetto UI or chrome://tracing;
    tracekit reads it back with the same results (docs/export.md)."""
    from ..exporters import annotate_trace

    ann = annotation_for(trace, annotation)
    res = annotate_trace(
        cache.load(trace),
        ann,
        out,
        ag=ag.value,
        allgather=ag_opts(group_size, ag_size, local_copy),  # the AllGatherOptions; ag= is which copies count
        steps=step_flags.options(ann),
    )
    output.write(res)
