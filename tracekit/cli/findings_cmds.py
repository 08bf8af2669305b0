"""`tracekit findings`: a ranked list of what to change, for one trace or for two deployments (--compare A B)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UsageError
from .common import (
    AgSizeOpt,
    AnnotationOpt,
    CacheDirOpt,
    Fmt,
    FormatOpt,
    GroupOpt,
    LocalOpt,
    MinStepOpt,
    NoCacheOpt,
    OutOpt,
    PhaseChoice,
    PhaseOpt,
    SourceChoice,
    StepNameOpt,
    StepSourceOpt,
    StepsFileOpt,
    RunArg,
    TableOpt,
    _load,
    _output,
    ag_opts,
    annotation_for,
    app,
    step_opts,
)
from .hw_cmds import BsOpt, HwOpt

MinMsOpt = Annotated[
    Optional[float],
    typer.Option(
        "--min-ms", min=0.0, help="Findings that gain less than this per step are listed as minor (default 0.5 ms)."
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


def one_trace_or_run(paths: list[Path] | None) -> tuple[Path | None, list[Path] | Path | None]:
    """TRACE... of report and findings → (the one trace, None) or (None, the run): two or more files are the ranks
    of one run; so is a directory whose traces are two or more distinct ranks (tracekit imbalance's rule)."""
    if not paths:
        return None, None
    if len(paths) > 1:
        return None, list(paths)
    path = paths[0]
    if not Path(path).is_dir():
        return path, None
    from ..analyses.fleet.multirank.discover import find_ranks
    from ..errors import TracekitError

    try:
        ranks, _ = find_ranks(path)
    except (TracekitError, UsageError):
        return path, None
    return (None, path) if len(ranks) >= 2 else (path, None)


def run_imbalance(run, step_name, min_step_ms, step_source, steps_file, no_cache: bool):
    """tracekit imbalance of the run (a directory or its files) with the command's step options."""
    from ..fan_out import imbalance

    return imbalance(
        run, steps=step_opts(None, step_name, min_step_ms, "all", step_source, steps_file), cache=not no_cache
    )


def run_of_ranks_report(run, step_name, min_step_ms, step_source, steps_file, no_cache: bool):
    """(the reference rank's file, the run's imbalance result) for `tracekit report RUN`."""
    from ..analyses.fleet.multirank.api import reference_files

    imb = run_imbalance(run, step_name, min_step_ms, step_source, steps_file, no_cache)
    return reference_files(run, imb)[0], imb


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
    """What to change, ranked by what it would gain.

    Each finding with its gain in ms per step (GiB for memory), whether it is measured or estimated, the evidence,
    the command that shows it, and what to try. TRACE may be the ranks of one run (their directory, or two or more files): then what DP
    imbalance costs per step and which rank makes the others wait (tracekit imbalance)."""
    from .reuse import reused_or_run

    trace, run = one_trace_or_run(trace)
    if compare is not None or run is not None:  # (one trace's findings from the cache import no analysis)
        from ..analyses.findings.trace_findings import findings
        from ..ingest.launch_script import launch_config
    if compare is not None:
        if trace is not None or run is not None:
            raise UsageError("give one TRACE, or two deployments with --compare A B, not both")
        a_path, b_path = compare
        ann = annotation_for(a_path, annotation)
        ann_b = annotation_for(b_path, annotation_b) if annotation_b else ann
        res = findings(
            compare=(_load(a_path, no_cache, cache_dir), _load(b_path, no_cache, cache_dir)),
            ann=ann,
            ann_b=ann_b,
            min_ms=min_ms,
            min_pct=min_pct,
            bs=bs,
            bs_b=bs_b,
            config=launch_config(log) if log else None,
            config_b=launch_config(log_b) if log_b else None,
            steps=step_opts(ann, step_name, min_step_ms, phase, step_source, steps_file),
        )
    elif run is not None:  # the ranks of one run: who makes the others wait
        res = findings(
            ranks=run_imbalance(run, step_name, min_step_ms, step_source, steps_file, no_cache),
            min_ms=min_ms,
            min_pct=min_pct,
        )
    else:
        if annotation_b or log_b or bs_b is not None:
            raise UsageError("--annotation-b, --log-b and --bs-b go with --compare A B")
        ann = annotation_for(trace, annotation)
        steps, ag = (
            step_opts(ann, step_name, min_step_ms, phase, step_source, steps_file),
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
            no_cache=no_cache,
            cache_dir=cache_dir,
            compute=lambda: _findings_of_one(
                _load(trace, no_cache, cache_dir),
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
    _output(res, format, out, table)


def _findings_of_one(trace, ann, log, hw, **options):
    """``findings`` of one trace, with the launch log and hardware profile the options name (read here: a Result from
    the cache reads neither)."""
    from ..analyses.findings.trace_findings import findings
    from ..gpu_specs import load_profile
    from ..ingest.sglang_log import read_log

    return findings(trace, ann, log=read_log(log) if log else None, hw=load_profile(hw) if hw else None, **options)
