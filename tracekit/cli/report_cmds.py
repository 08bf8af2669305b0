"""`tracekit report` (one trace end to end) and `tracekit findings` (a ranked list of what to change), for one trace,
the ranks of one run, or (findings) two deployments (--compare A B)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UsageError
from .common import AgSizeOpt, AnnotationOpt, CategoriesOpt, GroupOpt, LocalOpt, RunArg, ag_opts, annotation_for, app
from .hw_cmds import BsOpt, HwOpt
from .options import CACHE, OUTPUT, STEP_FLAGS, CacheFlags, Output, StepFlags, WorldSizeOpt

MinMsOpt = Annotated[
    Optional[float],
    typer.Option(
        "--min-ms", min=0.0, help="Findings that gain less than this per step are listed as minor (default 0.02 ms)."
    ),
]
MinPctOpt = Annotated[
    Optional[float],
    typer.Option(
        "--min-pct",
        min=0.0,
        max=100.0,
        help="Findings that gain less than this share of the step, in %, are listed as minor (default 1 %).",
    ),
]


def one_trace_or_run(paths: list[Path] | None, world_size: int | None = None):
    """TRACE... of report and findings → (the one trace, None) or (None, the run as a ``tracekit.load_run`` Run,
    its ranks found once): two or more files are the ranks of one run; so is a directory whose traces are two or
    more distinct ranks (tracekit imbalance's rule). ``world_size``: ``--world-size``, which only a run takes."""
    trace, run = _trace_or_run(paths, world_size)
    if world_size is not None and run is None:
        raise UsageError("--world-size goes with the ranks of one run (a run directory or two or more files)")
    return trace, run


def _trace_or_run(paths: list[Path] | None, world_size: int | None):
    from ..analyses.fleet.multirank.run import load_run, run_of_ranks

    if not paths:
        return None, None
    if len(paths) > 1:
        return None, load_run(list(paths), world_size=world_size)
    path = paths[0]
    if not Path(path).is_dir():  # one nsys export of several GPU processes is a run (docs/multirank.md)
        return (None, load_run([path], world_size=world_size)) if export_of_ranks(path) else (path, None)
    from ..analyses.fleet.multirank.discover import RankConflict, find_ranks
    from ..errors import TracekitError

    try:
        ranks, skipped = find_ranks(path)
    except RankConflict:  # two files with one rank identity: said as such, not "pass one of them"
        raise
    except (TracekitError, UsageError):
        return path, None
    if len(ranks) < 2:
        return path, None
    return None, run_of_ranks(path, ranks, skipped, world_size=world_size)


def export_of_ranks(path: Path) -> bool:
    """Whether ``path`` is one nsys export of several GPU processes (the ranks of a run): an SQLite export, or a
    ``.nsys-rep`` read as its export (``nsys`` on PATH)."""
    if not str(path).lower().endswith((".sqlite", ".sqlite3", ".nsys-rep", ".qdrep")):
        return False
    from ..analyses.fleet.multirank.discover import processes_as_ranks

    return bool(processes_as_ranks([Path(path)]))


def run_imbalance(run, step_flags: StepFlags, cache: CacheFlags):
    """tracekit imbalance of the run (a ``tracekit.load_run`` Run) with the command's step options."""
    from ..fan_out import imbalance

    return imbalance(run, steps=step_flags.of_ranks(), cache=cache.cache)


def run_of_ranks_report(run, step_flags: StepFlags, cache: CacheFlags):
    """(the reference rank's file, the run's imbalance result) for `tracekit report RUN`; ``run`` is searched
    once (tracekit.load_run), never again here."""
    from ..analyses.fleet.multirank.api import reference_files

    imb = run_imbalance(run, step_flags, cache)
    from .common import _state

    if run.reference_device() is not None and _state["device"] is None:  # one export's processes: the reference's GPU
        _state["device"] = run.reference_device()
    return reference_files(run, imb)[0], imb


@app.command(name="report")
def report_cmd(
    trace: RunArg = None,
    annotation: AnnotationOpt = None,
    categories: CategoriesOpt = None,
    group_size: GroupOpt = None,
    ag_size: AgSizeOpt = None,
    local_copy: LocalOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    log: Annotated[
        Optional[Path],
        typer.Option(
            "--log",
            help="The deployment's sglang launch log: adds the memory ledger and the memory"
            " findings (and the ledger waterfall to -f html).",
        ),
    ] = None,
    world_size: WorldSizeOpt = None,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """One trace's decode step end to end: the main report.

    Wall time decomposition, block types, AllGathers, exposure, communication and findings. With no TRACE: the
    bundled sample and its annotation. TRACE may be the ranks of one run (their directory, or two or more files): then the report of
    the reference rank (the lowest rank id) with the ranks section — imbalance per step, the straggler and its
    batch, every rank's clock offset and waits (tracekit imbalance)."""
    from .reuse import reused_or_run

    trace, run = one_trace_or_run(trace, world_size)
    ranks = run_of_ranks_report(run, step_flags, cache) if run is not None else None
    if ranks is not None:
        trace = ranks[0]
    ann = annotation_for(trace, annotation)
    steps, ag = (
        step_flags.options(ann),
        ag_opts(group_size, ag_size, local_copy),
    )

    def compute():
        from ..analyses.report.trace_report import report
        from ..ingest.sglang_log import read_log

        return report(
            cache.load(trace),
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
            no_cache=not cache.cache,
            cache_dir=cache.cache_dir,
            compute=compute,
        )
    output.write(res)


@app.command(name="findings")
def findings_cmd(
    trace: RunArg = None,
    annotation: AnnotationOpt = None,
    log: Annotated[
        Optional[Path],
        typer.Option(
            "--log",
            help="sglang launch log of the trace's deployment: captured CUDA-graph sizes, memory"
            " findings (with --compare: the log of A).",
        ),
    ] = None,
    hw: HwOpt = None,
    sms: Annotated[Optional[int], typer.Option("--sms", min=1, help="SM count (default: the trace's).")] = None,
    bs: BsOpt = None,
    min_ms: MinMsOpt = None,
    min_pct: MinPctOpt = None,
    compare: Annotated[
        Optional[tuple[Path, Path]],
        typer.Option(
            "--compare",
            help="Two deployments' traces, A B, instead of TRACE: the same op slower in one,"
            " with its launch-configuration difference.",
            show_default=False,
        ),
    ] = None,
    annotation_b: Annotated[
        Optional[str], typer.Option("--annotation-b", help="With --compare: B's annotation (default: -a's).")
    ] = None,
    log_b: Annotated[
        Optional[Path], typer.Option("--log-b", help="With --compare: B's launch log or launch script (A's is --log).")
    ] = None,
    bs_b: Annotated[
        Optional[float],
        typer.Option(
            "--bs-b",
            min=0.0,
            help="With --compare: B's requests per step (A's is --bs; default: each"
            " side's step markers). Ops whose work scales with the batch are"
            " compared per request when the batches differ.",
        ),
    ] = None,
    group_size: GroupOpt = None,
    ag_size: AgSizeOpt = None,
    local_copy: LocalOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    world_size: WorldSizeOpt = None,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """What to change, ranked by what it would gain.

    Each finding with its gain in ms per step (GiB for memory), whether it is measured or estimated, the evidence,
    the command that shows it, and what to try. TRACE may be the ranks of one run (their directory, or two or more files): then the
    reference rank's findings (--device N: that GPU's rank's) ranked with what DP imbalance costs per step and which
    rank makes the others wait (tracekit imbalance), as `report` lists them."""
    from .reuse import reused_or_run

    trace, run = one_trace_or_run(trace, world_size)
    if compare is not None:  # (one trace's findings from the cache import no analysis)
        from ..analyses.findings.trace_findings import findings
        from ..ingest.launch_script import launch_config
    if compare is not None:
        if trace is not None or run is not None:
            raise UsageError("give one TRACE, or two deployments with --compare A B, not both")
        a_path, b_path = compare
        ann = annotation_for(a_path, annotation)
        ann_b = annotation_for(b_path, annotation_b) if annotation_b else ann
        res = findings(
            compare=(cache.load(a_path), cache.load(b_path)),
            ann=ann,
            ann_b=ann_b,
            min_ms=min_ms,
            min_pct=min_pct,
            bs=bs,
            bs_b=bs_b,
            config=launch_config(log) if log else None,
            config_b=launch_config(log_b) if log_b else None,
            steps=step_flags.options(ann),
        )
    elif run is not None:  # the ranks of one run: the reference rank's (or --device's) findings and who makes the
        # others wait, ranked together as `report RUN` lists them (analyses.findings.imbalance_findings.run_findings)
        ref, imb = run_of_ranks_report(run, step_flags, cache)
        ann = annotation_for(ref, annotation)
        res = _findings_of_one(
            cache.load(ref),
            ann,
            log,
            hw,
            sms=sms,
            bs=bs,
            min_ms=min_ms,
            min_pct=min_pct,
            steps=step_flags.options(ann),
            ag=ag_opts(group_size, ag_size, local_copy),
            ranks=imb,
        )
    else:
        if annotation_b or log_b or bs_b is not None:
            raise UsageError("--annotation-b, --log-b and --bs-b go with --compare A B")
        ann = annotation_for(trace, annotation)
        steps, ag = (
            step_flags.options(ann),
            ag_opts(group_size, ag_size, local_copy),
        )
        res = reused_or_run(
            "findings",
            trace,
            options={"steps": steps, "ag": ag, "hw": hw, "sms": sms, "bs": bs, "min_ms": min_ms, "min_pct": min_pct},
            ann=ann,
            files={
                "log": log,
                "hw": hw if hw is not None and Path(hw).is_file() else None,
                "steps_file": steps.steps_file,
            },
            no_cache=not cache.cache,
            cache_dir=cache.cache_dir,
            compute=lambda: _findings_of_one(
                cache.load(trace),
                ann,
                log,
                hw,
                sms=sms,
                bs=bs,
                min_ms=min_ms,
                min_pct=min_pct,
                steps=steps,
                ag=ag,
            ),
        )
    output.write(res)


def _findings_of_one(trace, ann, log, hw, **options):
    """``findings`` of one trace, with the launch log and hardware profile the options name (read here: a Result from
    the cache reads neither)."""
    from ..analyses.findings.trace_findings import findings
    from ..gpu_specs import load_profile
    from ..ingest.sglang_log import read_log

    return findings(trace, ann, log=read_log(log) if log else None, hw=load_profile(hw) if hw else None, **options)
