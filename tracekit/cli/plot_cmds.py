"""`tracekit plot`: pictures of the analyses as PNG or SVG (decomposition, blocks and exposure per batch size, one
step's timeline, the memory ledger)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

if TYPE_CHECKING:
    from ..result import Result

from .common import DEFAULT_ANNOTATION, AgSizeOpt, AnnotationOpt, TraceArg, ag_opts, annotation_for, app
from .export_cmds import AgMode, AgOpt
from .groups import App
from .options import CACHE, PRINTED, STEP_FLAGS, CacheFlags, Output, StepFlags

plot_app = App(
    help="Pictures of the analyses, as PNG or SVG. Decomposition, blocks and exposure per batch"
    " size, one step's timeline and the memory ledger; the --out suffix picks PNG or SVG.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(plot_app, name="plot")

TracesArg = Annotated[
    Optional[list[Path]],
    typer.Argument(
        help="Trace files (or directories holding one), one bar each. Default: the bundled sample.", show_default=False
    ),
]
ImageOpt = Annotated[Path, typer.Option("--out", "-o", help="The picture to write: .png or .svg.")]
AnnotationsOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--annotation", "-a", help="Annotation for every trace, or LABEL=ANNOTATION for one deployment (repeatable)."
    ),
]
LabelOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--label",
        help="NAME=TEXT: traces whose path contains TEXT form deployment NAME (repeatable; first match wins).",
    ),
]
TitleOpt = Annotated[Optional[str], typer.Option("--title", help="Figure title.")]


def _plot_inputs(traces, annotations, labels, cache: CacheFlags, *, need_annotation: bool):
    from ..analyses.fleet.plot_data import plot_inputs

    return plot_inputs(
        traces or None,
        annotations,
        labels,
        need_annotation=need_annotation,
        load=cache.load,
        default_annotation=DEFAULT_ANNOTATION,
    )


def _plot_result(kind: str, traces: list, points, saved: dict, params: dict, warnings: list[str], **extra) -> Result:
    from ..result import Result, trace_input

    summary = {
        "kind": kind,
        "out": saved["path"],
        "image_format": saved["format"],
        "bytes": saved["bytes"],
        "width_px": saved["width_px"],
        "height_px": saved["height_px"],
        "traces": len(traces),
        **extra,
    }
    return Result(
        command="plot",
        inputs=[trace_input(t) for t in traces],
        params={"kind": kind, **params},
        summary=summary,
        tables={"points": points},
        warnings=warnings,
    )


def _bs_plot(kind: str, traces, annotation, label, out, title, output: Output, cache: CacheFlags, **kw) -> None:
    from ..analyses.fleet import plot_data
    from ..render import plots

    inputs, warnings = _plot_inputs(traces, annotation, label, cache, need_annotation=kind == "blocks")
    if kind == "decomposition":
        points = plot_data.decomposition_points(inputs, ag=kw["ag"])
        fig = plots.decomposition_figure(points, title=title)
    elif kind == "blocks":
        points = plot_data.blocks_points(inputs)
        fig = plots.blocks_figure(points, title=title)
    else:
        points = plot_data.exposure_points(inputs, ag=ag_opts(None, kw["sizes"], None))
        fig = plots.exposure_figure(points, title=title)
    saved = plots.save_figure(fig, out)
    params = {"labels": label or [], "annotations": annotation or [], **{k: v for k, v in kw.items()}}
    output.write(_plot_result(kind, [i.trace for i in inputs], points, saved, params, warnings))


@plot_app.command(name="decomposition")
def plot_decomposition(
    traces: TracesArg = None,
    out: ImageOpt = ...,
    annotation: AnnotationsOpt = None,
    label: LabelOpt = None,
    ag: AgOpt = AgMode.ptop,
    title: TitleOpt = None,
    output: Output = PRINTED,
    cache: CacheFlags = CACHE,
) -> None:
    """Busy, AllGather-only and idle time per batch size, as bars.

    Stacked bars per bs (one or more deployments): the median step's busy / only-AllGather / idle time."""
    _bs_plot("decomposition", traces, annotation, label, out, title, output, cache, ag=ag.value)


@plot_app.command(name="blocks")
def plot_blocks(
    traces: TracesArg = None,
    out: ImageOpt = ...,
    annotation: AnnotationsOpt = None,
    label: LabelOpt = None,
    title: TitleOpt = None,
    output: Output = PRINTED,
    cache: CacheFlags = CACHE,
) -> None:
    """Kernel time per block type per batch size, as bars.

    Stacked bars per bs: the median step's kernel time per block type (needs an annotation)."""
    _bs_plot("blocks", traces, annotation, label, out, title, output, cache)


@plot_app.command(name="exposure")
def plot_exposure(
    traces: TracesArg = None,
    out: ImageOpt = ...,
    annotation: AnnotationsOpt = None,
    label: LabelOpt = None,
    ag_size: AgSizeOpt = None,
    title: TitleOpt = None,
    output: Output = PRINTED,
    cache: CacheFlags = CACHE,
) -> None:
    """Exposed AllGather time per type per batch size, as bars.

    Stacked bars per bs: the median step's exposed AllGather time per AllGather type."""
    from ..analyses.options import parse_sizes

    _bs_plot(
        "exposure",
        traces,
        annotation,
        label,
        out,
        title,
        output,
        cache,
        sizes=parse_sizes(ag_size),
    )


@plot_app.command(name="timeline")
def plot_timeline(
    trace: TraceArg = None,
    out: ImageOpt = ...,
    annotation: AnnotationOpt = None,
    step: Annotated[Optional[int], typer.Option("--step", help="Step to draw (default: the median step).")] = None,
    ag_size: AgSizeOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    title: TitleOpt = None,
    output: Output = PRINTED,
    cache: CacheFlags = CACHE,
) -> None:
    """One step as a timeline of its streams.

    Streams × time, kernels coloured by block type, AllGathers and exposed intervals overlaid."""
    from ..analyses.fleet import plot_data
    from ..exporters import collect
    from ..render import plots

    t = cache.load(trace)
    ann = annotation_for(trace, annotation)
    ex = collect(t, ann, allgather=ag_opts(None, ag_size, None), steps=step_flags.options(ann))
    chosen = step if step is not None else plot_data.median_step(ex.tables["steps"])
    fig = plots.timeline_figure(ex.tables, step=chosen, main_stream=ex.main_stream, title=title)
    saved = plots.save_figure(fig, out)
    ev = ex.tables["events"]
    gpu = ev[(ev["step"] == chosen) & ev["kind"].isin(("kernel", "memcpy", "memset"))]
    lanes = gpu.groupby(["device", "stream"]).agg(events=("dur_ns", "size"), total_ns=("dur_ns", "sum")).reset_index()
    output.write(
        _plot_result(
            "timeline",
            [t],
            lanes,
            saved,
            {"step": step, "annotation": ex.params.get("annotation")},
            ex.warnings,
            step=chosen,
        ),
    )


@plot_app.command(name="ledger")
def plot_ledger(
    logs: Annotated[list[Path], typer.Argument(help="One or two sglang launch logs (side by side).")],
    out: ImageOpt = ...,
    title: TitleOpt = None,
    rank: Annotated[
        Optional[str], typer.Option("--rank", help="Rank tags, e.g. 'DP0 TP0' (default: the lowest present).")
    ] = None,
    output: Output = PRINTED,
) -> None:
    """The memory ledger of launch logs, as a waterfall.

    Per launch log (one or two): usable GiB, each fixed overhead, then the state pools."""
    from ..result import Result

    import pandas as pd

    from ..analyses.memory.launch_log import ledger
    from ..ingest.sglang_log import read_log
    from ..render import plots

    if len(logs) > 2:
        raise typer.BadParameter("pass one or two launch logs", param_hint="LOGS")
    panels, warnings, rows_out = {}, [], []
    for log in logs:
        res = ledger(read_log(log), rank=rank)
        warnings += res.warnings
        rows = {r: v for r, v in zip(res.tables["rows"]["row"], res.tables["rows"]["value"])}
        panels[log.name] = rows
        rows_out += [
            {"log": log.name, "row": k, "gib": rows.get(k)} for k, _ in plots.LEDGER_STEPS + plots.LEDGER_POOLS
        ]
    saved = plots.save_figure(plots.ledger_figure(panels, title=title), out)
    summary = {
        "kind": "ledger",
        "out": saved["path"],
        "image_format": saved["format"],
        "bytes": saved["bytes"],
        "width_px": saved["width_px"],
        "height_px": saved["height_px"],
        "logs": len(logs),
    }
    output.write(
        Result(
            command="plot",
            inputs=[{"path": str(p)} for p in logs],
            params={"kind": "ledger", "rank": rank},
            summary=summary,
            tables={"points": pd.DataFrame(rows_out, columns=["log", "row", "gib"])},
            warnings=warnings,
        ),
    )
