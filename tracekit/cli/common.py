"""Shared CLI pieces: the typer app, the arguments and options many commands take, loading and output.

Each command module (``tracekit/cli/*.py``) registers its commands on ``app``; ``tracekit/cli/__init__.py``
imports them all and catches errors in one place. The option groups (step, cache and output flags, each taken as
one object) are declared in ``tracekit/cli/options.py``.
"""

from __future__ import annotations

import sys
import threading
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from .groups import App

if TYPE_CHECKING:  # the API is imported inside the functions that run it: --help and --version load no pandas
    from ..result import Result

app = App(
    name="tracekit",
    help="Where each millisecond of an LLM decode step goes: analyses of PyTorch-profiler, Nsight Systems and"
    " rocprofv3 traces.",
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
    html = "html"


SAMPLE_TRACE = "decode_sample.json.gz"
DEFAULT_ANNOTATION = "decode_sample"  # the shipped annotation of the bundled sample


def bundled_sample() -> Path:
    """The small synthetic decode trace shipped inside the package (the default TRACE)."""
    return Path(str(resources.files("tracekit.data").joinpath("samples", SAMPLE_TRACE)))


TraceArg = Annotated[
    Optional[Path],
    typer.Argument(
        help="Trace file (.json, .json.gz, .json.zst) or a directory holding one. Default: the bundled sample.",
        show_default=False,
    ),
]
RunArg = Annotated[
    Optional[list[Path]],
    typer.Argument(
        help="Trace file (.json, .json.gz, .json.zst) or a directory holding one; or the ranks of one run: a directory"
        " of them, or two or more files. Default: the bundled sample.",
        show_default=False,
    ),
]
_state = {"debug": False, "quiet": False, "verbose": False, "device": None, "reading": None, "analysing": None}
AllOpt = Annotated[
    bool,
    typer.Option(
        "--all",
        help="Every row of every table in the table and md formats, which otherwise show the top rows of long"
        " tables (json and csv always hold every row). May stand anywhere before `--`.",
    ),
]
WideOpt = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="Kernel names whole in the table and md formats, which otherwise shorten them into what a"
        " person recognises (json and csv always hold the full name); anywhere on the line, like --all",
    ),
]
PROGRESS_AFTER_S = 1.0  # the reading bar appears once a load has taken this long
PHASE_AFTER_S = 2.0  # the "analysing …" line appears once the analysis after the load has taken this long


def _print_version(value: bool) -> None:
    if value:
        from .._version import version_line

        typer.echo(version_line())
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of unexpected errors.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No warnings and no progress bars on stderr.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Say on stderr what was read and how fast.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    all_rows: AllOpt = False,
    wide: WideOpt = False,
    device: Annotated[
        Optional[int],
        typer.Option(
            "--device",
            min=0,
            help="Analyse this GPU of a trace that holds several (its GPU events and every CPU event).",
        ),
    ] = None,
) -> None:
    """tracekit: decode-step analysis of torch-profiler traces and sglang logs."""
    _state["debug"], _state["quiet"], _state["verbose"] = debug, quiet, verbose
    _state["all"] = all_rows
    _state["wide"] = wide
    _state["device"] = device
    _state["reading"] = _state["analysing"] = None
    if verbose:
        import logging

        logging.getLogger("tracekit").setLevel(logging.INFO)


def show_progress() -> bool:
    """Progress bars go to stderr, only on a terminal and never with --quiet."""
    return not _state["quiet"] and sys.stderr.isatty()


class _LazyBar:
    """The reading bar, shown only once a load has taken ``PROGRESS_AFTER_S`` (a cached or small trace shows
    none, a 14 MB .gz holding 400 MB of JSON does). Compressed files count the compressed bytes read."""

    def __init__(self, size: int, compressed: bool):
        import time

        self.size, self.compressed, self.t0, self.bar, self.task = size, compressed, time.monotonic(), None, None
        self.lock = threading.Lock()

    def update(self, done: int, total: int) -> None:
        import time

        with self.lock:
            if self.bar is None:
                if time.monotonic() - self.t0 < PROGRESS_AFTER_S:
                    return
                from rich.console import Console
                from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

                what = "reading (compressed)" if self.compressed else "reading"
                self.bar = Progress(
                    what,
                    BarColumn(),
                    DownloadColumn(),
                    TransferSpeedColumn(),
                    TimeRemainingColumn(),
                    console=Console(stderr=True),
                    transient=True,
                )
                self.bar.start()
                self.task = self.bar.add_task("read", total=total or self.size)
            self.bar.update(self.task, completed=done)

    def close(self) -> None:
        with self.lock:
            if self.bar is not None:
                self.bar.stop()
                self.bar = None


class _Phase:
    """A transient status line on stderr ("analysing x.json.gz …") for work after the load that takes longer than
    ``PHASE_AFTER_S``; stopped by the output (or an error). Only on a terminal, never with --quiet."""

    def __init__(self):
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None
        self.status = None

    def start(self, text: str) -> None:
        self.stop()
        if not show_progress():
            return

        def show() -> None:
            from rich.console import Console

            with self.lock:
                if self.timer is None:  # stopped meanwhile
                    return
                self.status = Console(stderr=True).status(text)
                self.status.start()

        with self.lock:
            self.timer = threading.Timer(PHASE_AFTER_S, show)
            self.timer.daemon = True
            self.timer.start()

    def stop(self) -> None:
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if self.status is not None:
                self.status.stop()
                self.status = None


phase = _Phase()


def load(*args, **kwargs):
    """:func:`tracekit.load`, imported when a command reads a trace (so that ``--help`` loads no pandas)."""
    from ..ingest import load as load_trace

    return load_trace(*args, **kwargs)


def checked_input(trace: Optional[Path]) -> tuple[Path, Path]:
    """(the path as given, the trace file it names): a FIFO, socket or device is refused in one sentence, and the
    file is guarded (no output of this run may replace it)."""
    path = trace if trace is not None else bundled_sample()
    _state["reading"] = path
    if path.exists() and not path.is_file() and not path.is_dir():
        from ..errors import InputError

        raise InputError(
            f"{path} is not a regular file (a FIFO, a socket or a device): tracekit reads a trace from a"
            " file; save it to one first"
        )
    from ..ingest import resolve_trace_path
    from ..render.files import protect

    source = resolve_trace_path(path)
    protect(source, "the trace it reads")  # a directory's trace file: no output may replace it
    return path, source


def _load(trace: Optional[Path], no_cache: bool, cache_dir: Optional[Path]):
    import time

    from ..ingest.compression import HEAD_BYTES, is_compressed

    path, _ = checked_input(trace)
    t0 = time.perf_counter()
    size = path.stat().st_size if path.is_file() else 0
    if show_progress() and size:
        with open(path, "rb") as fh:
            compressed = is_compressed(fh.read(HEAD_BYTES))
        bar = _LazyBar(size, compressed)
        try:
            trace_obj = load(path, cache=not no_cache, cache_dir=cache_dir, progress=bar.update)
        finally:
            bar.close()
    else:
        trace_obj = load(path, cache=not no_cache, cache_dir=cache_dir)
    if _state["device"] is not None:
        trace_obj = trace_obj.on_device(_state["device"])
    if _state["verbose"]:
        rep = trace_obj.report
        dt = time.perf_counter() - t0
        how = "from the cache" if rep.from_cache else f"{rep.reader} reader, {rep.compression}"
        typer.echo(
            f"read {rep.records_read:,} records ({rep.events_kept:,} events kept) of {path} in {dt:.2f} s"
            f" ({how}; {rep.text_bytes / max(dt, 1e-9) / 1e6:,.0f} MB/s of text)",
            err=True,
        )
    _state["reading"] = None
    _state["analysing"] = path
    phase.start(f"analysing {path.name} …")
    return trace_obj


def sidecar_of(out: Path) -> Path:
    """The JSON companion of an html page written to ``out``: FILE.json beside FILE.html
    (``tracekit.render.formats.sidecar_of``, whose html renderer writes it)."""
    from ..render.formats import sidecar_of as sidecar

    return sidecar(out)


def _output(result: Result, fmt: Fmt, out: Optional[Path], table: Optional[str], *, full_paths: bool = False) -> None:
    """Warnings to stderr, then the result to stdout or to ``--out`` by its format's renderer
    (``tracekit.render.formats``, which ``Result.save`` uses too: the same bytes), written whole or not at all
    (``tracekit.render.files``: every target decided by ``output_target``)."""
    from ..render.formats import renderer
    from ..render.files import protect_result_inputs
    from ..render.table_layout import stderr_width
    from ..render.warning_folding import warning_lines

    phase.stop()

    if not _state["quiet"]:  # each fact once, alike ones folded, wrapped to the terminal (JSON keeps every one)
        for line in warning_lines(result.warnings, stderr_width()):
            typer.echo(line, err=True)
    r = renderer(
        fmt.value, table=table, all_rows=bool(_state.get("all")), wide=bool(_state.get("wide")), full_paths=full_paths
    )
    if out is None:
        for piece in r.pieces(result):  # json a table chunk at a time: a large table never stands whole
            sys.stdout.write(piece)
        return
    protect_result_inputs(result)  # what the run read (a directory's traces, say): no output replaces them
    typer.echo(r.save(result, out).message, err=True)


GroupOpt = Annotated[
    Optional[int],
    typer.Option("--group-size", "-g", min=2, help="Shard group size G (default: most common copy count + 1)."),
]
AgSizeOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--ag-size", help="An AllGather type and its full bytes, TYPE=BYTES (repeatable), e.g. KDA=627048448."
    ),
]
LocalOpt = Annotated[
    Optional[str],
    typer.Option(
        "--local-copy", help="Regex of the local-copy kernel (default: ag_local_copy in tracekit/data/classes.json)."
    ),
]


AnnotationOpt = Annotated[
    Optional[str],
    typer.Option("--annotation", "-a", help="Annotation file, or the name of a shipped one (e.g. k3_dp16)."),
]
CategoriesOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--categories",
        help="A JSON file of extra kernel-category rules, tried before the shipped ones"
        " (tracekit/data/categories.json; docs/layers.md).",
    ),
]


def annotation_for(trace: Optional[Path], annotation: Optional[str]):
    """The one rule for every command: the -a annotation; with no TRACE, the bundled sample's own; else none."""
    from ..annotation.spec import load_annotation

    if annotation:
        return load_annotation(annotation)
    return load_annotation(DEFAULT_ANNOTATION) if trace is None else None


def need_annotation(ann, what: str):
    """Commands that cut blocks need an annotation: say so in one sentence (exit 4)."""
    if ann is None:
        from ..annotation.spec import shipped
        from ..errors import MissingDataError

        names = sorted({p.stem for p in shipped().values()})
        raise MissingDataError(
            f"{what} needs an annotation that describes the model's blocks: pass -a NAME or -a"
            f" FILE (shipped: {', '.join(names)}; docs/annotations.md)"
        )
    return ann


def ag_opts(group_size, ag_size, local_copy):
    """CLI flags → the AllGatherOptions the command passes as ``ag=`` (as given: the analysis merges them with the
    annotation's allgather section, AllGatherOptions.with_annotation)."""
    from ..analyses.options import AllGatherOptions

    return AllGatherOptions(group_size=group_size, sizes=ag_size or (), local_copy=local_copy)
