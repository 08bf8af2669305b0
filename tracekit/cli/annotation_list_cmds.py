"""`tracekit annotations [TRACE]`: the shipped annotations and what each covers; with a trace, which one fits it.

Not `tracekit annotate` (tracekit/cli/output_cmds.py), which writes an annotated trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import CacheDirOpt, Fmt, FormatOpt, NoCacheOpt, OutOpt, TableOpt, _load, _output, app

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
    format: FormatOpt = Fmt.table,
    out: OutOpt = None,
    table: TableOpt = None,
    no_cache: NoCacheOpt = False,
    cache_dir: CacheDirOpt = None,
) -> None:
    """The shipped annotations, and which one fits a trace.

    Without TRACE: each annotation with the models, hardware and frameworks it covers and its file. With TRACE:
    each one run on the trace and scored from 0 to 1 (step marker found, kernel time in typed blocks, op tags
    matched, blocks per step against the automatic layers, expected block counts, hardware and framework),
    ranked; `best` names the one that fits (docs/annotation-fit.md)."""
    from ..analyses.structure.fit import annotation_fit

    res = annotation_fit(
        _load(trace, no_cache, cache_dir) if trace is not None else None, annotations=annotation or None
    )
    _output(res, format, out, table)
