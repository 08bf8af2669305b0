"""Analyses over many files: a sweep's operating points (serially, in a process pool or on Dask), a deployment's
two sides, a run's ranks, benchmark files. The layer above the analyses: it loads (through ``tracekit.ingest``)
and fans out; the analyses it calls are pure functions of tables.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from .errors import InputError, MissingDataError, UsageError, WorkerError, check_argument, check_items
from .ingest import load
from .ingest.bench import read_bench
from .ingest.discover import DEFAULT_POINT_PATTERN, TraceRef, discover_all
from .ingest.launch_script import launch_config
from .result import Result, shown_path, shown_text
from .analyses.fleet.deployment_compare import (
    DEFAULT_ACCEPT_LEN,
    Side,
    accept_len_of,
    bench_table,
    compare,
    config_diff,
    same_point,
)
from .analyses.fleet.multirank import Run, plan_run, reduce_point
from .analyses.fleet.multirank.api import ArrivingReductions
from .analyses.fleet.multirank.mapper import in_worker, load_in_worker, start_worker
from .analyses.options import AllGatherOptions
from .analyses.steps.keywords import options_as_objects
from .analyses.steps.resolve import StepOptions, step_options
from .analyses.fleet.sweep_tables import per_trace, sweep_tables

__all__ = [
    "SweepOptions",
    "analyze_trace",
    "run_sweep",
    "analyze",
    "default_jobs",
    "load_side",
    "compare_deployments",
    "imbalance",
    "benchmark_table",
]

TAKES_FOLDER = "a path (str or Path) of a folder of traces"
TAKES_SIDE = "a path (str or Path) of an analyze output or a folder of traces"
TAKES_RUN = "a path (str or Path) of a run's folder or a list of its rank files"


@dataclass(frozen=True)
class SweepOptions:
    """What every point of a sweep is analysed with (frozen and picklable: it travels to the workers)."""

    annotation: str | None = None
    steps: StepOptions | None = None  # None: the annotation's step options
    cache: bool = True
    ag: AllGatherOptions = AllGatherOptions()  # over the annotation's


def analyze_trace(path: str, opts: SweepOptions) -> dict[str, Any]:
    """Every per-trace analysis of one operating point (a pure function of a file and plain options: it runs the
    same in this process, a worker process or a Dask worker, whose daemonic processes decode without the ingest's
    helper process, as the ranks of a run do)."""
    from .annotation import load_annotation

    ann = load_annotation(opts.annotation) if opts.annotation else None
    trace = load_in_worker(path, opts.cache)
    return per_trace(trace, ann=ann, steps=opts.steps or step_options(ann), ag=opts.ag)


def analyze_point(path: str, opts: SweepOptions) -> dict[str, Any]:
    """``analyze_trace``, or, when this point's trace cannot be used (missing, unreadable, corrupt: exit 3; no steps
    or what the analyses need: exit 4), ``{"dropped": the one-sentence reason, "exit_code": …}``: one bad point
    does not end the sweep, and the sweep counts and names it (``analyze``). Usage errors, a bad annotation and
    tracekit's own bugs still end it."""
    try:
        return analyze_trace(path, opts)
    except (InputError, MissingDataError) as exc:
        return {"dropped": shown_text(str(exc)), "exit_code": exc.exit_code}


def run_sweep(
    refs: list[TraceRef],
    opts: SweepOptions,
    *,
    jobs: int = 1,
    dask: str | None = None,
    dask_timeout: float | None = None,
    progress=None,
) -> list[dict]:
    """``analyze_point`` on every trace, in ``refs`` order (serial, a process pool, or a Dask cluster): a result
    dict per trace, ``{"dropped": reason, …}`` for one that could not be used. ``progress(done, total)`` is called as
    traces finish."""
    return map_points(
        analyze_point,
        [str(r.path) for r in refs],
        opts,
        jobs=jobs,
        dask=dask,
        dask_timeout=dask_timeout,
        progress=progress,
    )


@options_as_objects
def analyze(
    root: str | Path,
    *,
    annotation: str | None = None,
    rank: str | None = "TP-0",
    point_pattern: str = DEFAULT_POINT_PATTERN,
    jobs: int = 1,
    dask: str | None = None,
    dask_timeout: float | None = None,
    cache: bool = True,
    progress=None,
    steps: StepOptions | None = None,
    ag: AllGatherOptions | None = None,
) -> Result:
    """`tracekit analyze`: the sweep tables of one deployment, one row per operating point (bs, context).

    Nothing leaves the sweep unsaid. A point whose trace cannot be used (missing, unreadable, empty, corrupt: what
    would be exit 3 alone; or lacking what the analyses need: exit 4) is dropped: a warning names it and says how
    many points were analysed, ``tables.skipped`` lists it (reason "point dropped (POINT): …") and
    ``summary.points_dropped`` counts it; the other points are analysed and the exit is 0. A folder or file that
    cannot be read, a broken link, another rank's file, tracekit's own output are skipped the same way (a warning,
    a ``skipped`` row, ``summary.skipped``). With no point left the sweep ends in one sentence naming the first
    reasons: exit 3, or 4 when every point lacked what the analyses need.

    ``steps``: the StepOptions of every point (None: the annotation's); ``ag``: the AllGather options, over the
    annotation's at every point."""
    check_argument(root, "root", TAKES_FOLDER, paths=True)
    if steps is not None and not isinstance(steps, StepOptions):
        raise UsageError(
            f"analyze(steps=…) takes StepOptions (each point finds its own steps), not {type(steps).__name__}"
        )
    refs, skipped = discover_all(root, point_pattern=point_pattern, rank=rank)
    opts = SweepOptions(annotation=annotation, steps=steps, cache=cache, ag=AllGatherOptions.of(ag))
    results = run_sweep(refs, opts, jobs=jobs, dask=dask, dask_timeout=dask_timeout, progress=progress)
    dropped = [(ref, res) for ref, res in zip(refs, results) if "dropped" in res]
    kept = [(ref, res) for ref, res in zip(refs, results) if "dropped" not in res]
    if not kept:
        raise _nothing_left(root, dropped)
    tables, warnings = sweep_tables([r for r, _ in kept], [res for _, res in kept])
    # a dropped point is a row of tables.skipped (its reason says "point dropped") and a warning naming it
    skipped = [
        (shown_path(ref.path), f"point dropped ({ref.point}): {res['dropped']}") for ref, res in dropped
    ] + skipped
    tables["skipped"] = pd.DataFrame(skipped, columns=["path", "reason"])
    warnings = [
        f"point {ref.point} dropped from the sweep ({len(kept)} of {len(refs)} analysed): {res['dropped']}"
        for ref, res in dropped
    ] + warnings
    warnings += skip_warnings(root, skipped[len(dropped) :]) + duplicate_point_warnings([r for r, _ in kept])
    summary = {
        "traces": len(kept),
        "annotation": annotation,
        "rank": rank,
        "points": [r.point for r, _ in kept],
        "points_dropped": len(dropped),
        "skipped": len(skipped),
    }
    return Result(
        command="analyze",
        inputs=[{"path": shown_path(root)}],
        params={
            "annotation": annotation,
            "rank": rank,
            "point_pattern": point_pattern,
            **StepOptions.given_params(steps, annotation),
        },
        summary=summary,
        tables=tables,
        warnings=warnings,
    )


def _nothing_left(root, dropped: list[tuple[TraceRef, dict]]) -> Exception:
    """Every point was dropped: the sweep has nothing to say (exit 4 when each lacked what the analyses need, else
    exit 3), naming the first few and why."""
    why = "; ".join(res["dropped"] for _, res in dropped[:3]) + (
        f"; … and {len(dropped) - 3} more" if len(dropped) > 3 else ""
    )
    cls = (
        MissingDataError
        if all(res.get("exit_code") == MissingDataError.exit_code for _, res in dropped)
        else InputError
    )
    return cls(
        f"{shown_path(root)}: none of its {len(dropped)} operating point(s) could be analysed ({why}); fix or"
        " remove those traces"
    )


def skip_warnings(root, skipped: list[tuple[str, str]]) -> list[str]:
    """What a sweep left out, in a few lines: other ranks counted, everything else named."""
    other_rank = [p for p, r in skipped if r.startswith("another rank")]
    rest = [(p, r) for p, r in skipped if not r.startswith("another rank")]
    root = shown_path(root)
    out = [f"{root}: skipped {p}: {r}" for p, r in rest[:10]]
    if len(rest) > 10:
        out.append(f"{root}: … and {len(rest) - 10} more skipped (tables.skipped lists them all)")
    if other_rank:
        out.append(f"{root}: {len(other_rank)} trace(s) of other ranks were not analysed (--rank picks one per point)")
    return out


def duplicate_point_warnings(refs: list[TraceRef]) -> list[str]:
    seen: dict[tuple, list[str]] = {}
    for r in refs:
        if r.bs is not None:
            seen.setdefault((r.bs, r.context, r.rank_label), []).append(shown_path(r.path))
    return [
        f"{len(paths)} traces for the point bs {bs}" + (f", context {ctx}" if ctx else "") + f" ({label}):"
        f" {', '.join(paths[:3])}; each is a row of the sweep, and compare uses the first"
        for (bs, ctx, label), paths in seen.items()
        if len(paths) > 1
    ]


def default_jobs(n_traces: int) -> int:
    return max(1, min(os.cpu_count() or 1, n_traces))


def load_side(
    ref: str | Path,
    *,
    label: str,
    dp: int,
    annotation: str | None = None,
    rank: str | None = "TP-0",
    graph_bs: tuple[int, ...] = (),
    jobs: int = 1,
) -> Side:
    """An analyze output (a directory with manifest.json) or a trace directory to analyse now."""
    check_argument(ref, "ref", TAKES_SIDE, paths=True)
    return _side(ref, label=label, dp=dp, annotation=annotation, rank=rank, graph_bs=graph_bs, jobs=jobs)[0]


def _side(
    ref: str | Path,
    *,
    label: str,
    dp: int,
    annotation: str | None,
    rank: str | None,
    graph_bs: tuple[int, ...],
    jobs: int,
) -> tuple[Side, list[str]]:
    """``load_side``, and the warnings of the sweep it ran (a dropped point, a skipped file), each prefixed with the
    side's label: compare passes them on."""
    p = Path(ref)
    warnings: list[str] = []
    if (p / "manifest.json").exists():
        tables = {}
        for name in ("sweep", "block_types", "exposure_types"):
            f = p / f"{name}.parquet"
            if not f.exists():
                raise InputError(f"{p} has a manifest but no {f.name}; rerun tracekit analyze -o {p}")
            tables[name] = pd.read_parquet(f)
        if (p / "skipped.parquet").exists():  # points the analyze run dropped: said again, not lost
            sk = pd.read_parquet(p / "skipped.parquet")
            gone = sk[sk["reason"].astype(str).str.startswith("point dropped")] if "reason" in sk else sk.iloc[:0]
            warnings = (
                [
                    f"{label}: {len(gone)} point(s) were dropped when {shown_path(p)} was analysed (its"
                    f" skipped table): {'; '.join(gone['reason'].astype(str).head(3))}"
                ]
                if len(gone)
                else []
            )
    else:
        res = analyze(p, annotation=annotation, rank=rank, jobs=jobs)
        tables = res.tables
        warnings = [f"{label}: {w}" for w in res.warnings]
    return Side(
        label=label,
        sweep=tables["sweep"],
        block_types=tables["block_types"],
        exposure_types=tables["exposure_types"],
        dp=dp,
        graph_bs=tuple(sorted(graph_bs)),
    ), warnings


def _dp(given: int | None, conf: dict) -> int:
    if given is not None:
        return given
    try:
        return int(conf.get("--dp-size") or conf.get("--dp") or 1)
    except ValueError:
        return 1


def _graph_sizes(text) -> tuple[int, ...]:
    if not text:
        return ()
    if isinstance(text, (list, tuple)):
        return tuple(int(x) for x in text)
    try:
        return tuple(int(x) for x in str(text).strip("[]").replace(" ", ",").split(",") if x)
    except ValueError:
        raise UsageError(f"{text!r} is not a list of batch sizes like 1,2,4,8,16,24") from None


def compare_deployments(
    a,
    b,
    *,
    dp_a: int | None = None,
    dp_b: int | None = None,
    annotation_a: str | None = None,
    annotation_b: str | None = None,
    accept_len: float | None = None,
    cuda_graph_bs_a=None,
    cuda_graph_bs_b=None,
    bench=None,
    config_a=None,
    config_b=None,
    log_a=None,
    log_b=None,
    rank: str | None = "TP-0",
    jobs: int | None = None,
) -> Result:
    """`tracekit compare`: two deployments (analyze outputs or trace directories), with their launch scripts or
    logs when given (server-argument difference, dp and captured CUDA-graph sizes, the ledger difference).

    ``accept_len`` (tokens accepted per request per step) given applies to both; else each side's comes from its
    launch log (:func:`tracekit.analyses.fleet.deployment_compare.accept_len_of`), and the summary says where from."""
    from .ingest.sglang_log import read_log

    check_argument(a, "a", TAKES_SIDE, paths=True)
    check_argument(b, "b", TAKES_SIDE, paths=True)
    conf_a = launch_config(config_a or log_a) if (config_a or log_a) else {}
    conf_b = launch_config(config_b or log_b) if (config_b or log_b) else {}
    logs = (read_log(log_a) if log_a else None, read_log(log_b) if log_b else None)
    sides, warnings = [], []
    for ref, dp, ann, gbs, conf, log in (
        (a, dp_a, annotation_a, cuda_graph_bs_a, conf_a, logs[0]),
        (b, dp_b, annotation_b, cuda_graph_bs_b, conf_b, logs[1]),
    ):
        label = shown_text(Path(ref).name)
        if accept_len is None:
            acc, src, warn = accept_len_of(log, label)
            warnings += [warn] if warn else []
        else:
            acc, src = float(accept_len), "option"
        side, side_warnings = _side(
            ref,
            label=label,
            dp=_dp(dp, conf),
            annotation=ann,
            rank=rank,
            graph_bs=_graph_sizes(gbs) or _graph_sizes(conf.get("--cuda-graph-bs")),
            jobs=jobs or 1,
        )
        warnings += side_warnings  # a point dropped from a side's sweep is said, not lost
        sides.append(replace(side, accept_len=acc, accept_len_source=src))
    cfg = config_diff(conf_a, conf_b) if conf_a and conf_b else None
    ledger_rows = None
    if logs[0] is not None and logs[1] is not None:
        from .analyses.memory.launch_log import ledger

        ledger_rows = ledger(logs[0], logs[1]).tables["rows"]
    res = compare(
        sides[0],
        sides[1],
        accept_len=accept_len if accept_len is not None else sides[0].accept_len,
        bench=read_bench(bench) if bench else None,
        config=cfg,
        ledger=ledger_rows,
    )
    warnings += _pair_findings(res, sides, annotation_a, annotation_b, conf_a, conf_b)
    # the options as given, so that the page's "how obtained" command repeats them: each side's annotation, and
    # --accept-len only when the user gave it (each side's own, from its log, is in the summary)
    res.params.update(
        {k: str(v) for k, v in (("annotation_a", annotation_a), ("annotation_b", annotation_b)) if v is not None}
    )
    res.params["accept_len"] = accept_len
    res.warnings[:0] = [w for w in warnings if w not in res.warnings]
    return res


def _pair_findings(res: Result, sides: list[Side], annotation_a, annotation_b, conf_a: dict, conf_b: dict) -> list[str]:
    """The findings of the two traces at the highest instance concurrency both deployments ran (tables.findings),
    when both traces are at hand (an analyze output keeps only its tables)."""
    from .analyses.findings.op_compare import compare_findings
    from .annotation import load_annotation

    m = res.tables["matched"]
    if m.empty:
        return []
    conc, ctx = m.sort_values("concurrency").iloc[-1][["concurrency", "context"]]
    paths, paths_seen = [], []
    for side, col in ((sides[0], "bs_a"), (sides[1], "bs_b")):
        bs = m.loc[(m["concurrency"] == conc) & same_point(m["context"], ctx), col].iloc[0]
        rows = side.sweep[(side.sweep["bs"] == bs) & same_point(side.sweep["context"], ctx)]
        p = rows["path"].iloc[0] if "path" in rows and len(rows) else None
        paths_seen.append(p)
        paths.append(p if p and Path(str(p)).is_file() else None)
    if None in paths:
        odd = any(p and "\\x" in str(p) and not Path(str(p)).is_file() for p in paths_seen)
        return [
            f"no findings section: the traces at concurrency {int(conc)} are not at hand (an analyze output keeps"
            " only its tables"
            + ("; a trace whose name is not UTF-8 is listed by its shown name, \\xNN" if odd else "")
            + "); run tracekit findings --compare A B on two traces"
        ]
    f = compare_findings(
        load(paths[0]),
        load(paths[1]),
        ann_a=load_annotation(annotation_a) if annotation_a else None,
        ann_b=load_annotation(annotation_b) if annotation_b else None,
        config_a=conf_a or None,
        config_b=conf_b or None,
        labels=(sides[0].label, sides[1].label),
    )
    res.tables["findings"] = f.tables["findings"]
    res.summary["findings_at_concurrency"] = int(conc)
    res.summary["top_finding"] = f.summary["top"]
    return [w for w in f.warnings if w not in res.warnings]


@options_as_objects
def imbalance(
    root,
    *,
    jobs: int | None = None,
    dask=None,
    dask_timeout: float | None = None,
    gpus_per_node: int | None = None,
    world_size: int | None = None,
    steps: StepOptions | None = None,
    cache: bool = True,
    progress=None,
) -> Result:
    """`tracekit imbalance`: every rank of one run on the reference rank's clock (the lowest rank id), its
    collectives matched across ranks, and per step who waited for whom (contract ``tracekit.imbalance/2``,
    docs/multirank.md).

    ``root``: a run directory (rank files, per-rank folders, sglang's per-stage files) or a list of files. Each
    file is reduced to small tables in a worker — ``jobs`` processes (default: one per file, at most the cores) or
    the Dask cluster at ``dask`` (an address or a ``distributed.Client``; ``dask_timeout`` seconds to reach it,
    default 10) — and this process aligns and attributes them. ``gpus_per_node``: ranks r and r' share a node (a clock) when r // n == r' // n; default: the hosts in
    the file names when every rank's has one, else 8. ``steps``: StepOptions as every command's (its phase aside:
    every phase is kept). ``root`` may be a :class:`Run` (``tracekit.load_run``); ``world_size``: the ranks the run
    had (default: the traces' distributedInfo, else the highest rank + 1): the ranks without a file are named and the
    imbalance marked a lower bound."""
    if not isinstance(root, Run):  # a tracekit.load_run Run: its ranks found once, not searched again
        check_items(root, "root", TAKES_RUN, paths=True)
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise UsageError(f"--jobs must be a whole number of at least 1, not {jobs!r}")
    if steps is not None and not isinstance(steps, StepOptions):
        raise UsageError(
            f"imbalance(steps=…) takes StepOptions (each rank finds its own steps), not {type(steps).__name__}"
        )
    given = StepOptions.given_params(steps)
    plan = plan_run(
        root,
        gpus_per_node=gpus_per_node,
        world_size=world_size,
        step_name=given["step_name"],
        min_step_ns=given["min_step_ns"],
        step_source=given["step_source"] or "auto",
        steps_file=given["steps_file"],
        cache=cache,
    )
    paths = [str(f) for _, f in plan.files]
    n_jobs = jobs if jobs is not None else max(1, min(os.cpu_count() or 1, len(paths)))
    arriving = ArrivingReductions(plan)  # each rank merged as its files' reductions arrive, not all at the end
    map_points(
        reduce_point,
        paths,
        plan.opts,
        jobs=n_jobs,
        dask=dask,
        dask_timeout=dask_timeout,
        progress=progress,
        on_result=arriving.add,
        keep=False,
    )
    return arriving.result()


DEFAULT_DASK_TIMEOUT_S = 10.0  # how long a --dask scheduler may take to answer before the run ends in one sentence
DASK_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx", "inproc")
STOP_WAIT_S = 1.0  # how long stopped workers get to end on SIGTERM before SIGKILL


def map_points(
    fn, paths: list[str], opts, *, jobs: int = 1, dask=None, dask_timeout=None, progress=None, on_result=None, keep=True
) -> list:
    """``fn(path, opts)`` for every path, results in order: serially, in ``jobs`` worker processes (not daemonic:
    the ingest may start its decode helper in them), or on the Dask cluster at ``dask`` (an address, or a
    ``distributed.Client``; ``dask_timeout`` seconds to reach it, default DEFAULT_DASK_TIMEOUT_S).
    ``progress(done, total)`` as they finish; ``on_result(index, result)`` as each result arrives, in the order they
    arrive (a streamed reduce: ``ArrivingReductions``), and with ``keep=False`` the results are not also kept here
    (the list returned holds None).

    Workers live only in this call: they die with this process (``mapper.start_worker``), are stopped when it is
    interrupted or fails, and a worker that dies (killed, out of memory) ends the run in one sentence naming the
    file it was analysing (WorkerError, exit 3). Dask tasks are cancelled when this process is interrupted."""
    tick = progress or (lambda done, total: None)
    out: list = [None] * len(paths)

    def arrived(i: int, res) -> None:
        if on_result is not None:
            on_result(i, res)
        if keep:
            out[i] = res

    if dask:
        _on_dask(fn, paths, opts, dask, dask_timeout, arrived)
        tick(len(paths), len(paths))
        return out
    if jobs > 1 and len(paths) > 1:
        _in_processes(fn, paths, opts, min(jobs, len(paths)), tick, arrived)
        return out
    for i, p in enumerate(paths):
        arrived(i, fn(p, opts))
        tick(i + 1, len(paths))
    return out


def _in_processes(fn, paths: list[str], opts, jobs: int, tick, arrived) -> None:
    """``map_points`` in a pool of ``jobs`` processes, each result to ``arrived(index, result)`` as it comes (the
    largest files first, so that the last to finish is a small one); none outlives the call."""
    import multiprocessing

    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context()
    taken = ctx.RawArray("q", len(paths))  # the pid of the worker that took each path
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(
        max_workers=jobs, mp_context=ctx, initializer=start_worker, initargs=(os.getpid(), taken)
    )
    procs: list = []
    done = False
    try:
        order = sorted(range(len(paths)), key=lambda i: -_size(paths[i]))
        futures = [None] * len(paths)
        for i in order:
            futures[i] = pool.submit(in_worker, fn, i, paths[i], opts)
        index_of = {f: i for i, f in enumerate(futures)}
        procs = [p for p in multiprocessing.active_children() if p not in before]
        try:
            for n, f in enumerate(as_completed(futures), 1):
                arrived(index_of[f], f.result())
                tick(n, len(paths))
        except BrokenProcessPool:
            raise WorkerError(_death_sentence(paths, futures, taken, procs)) from None
        done = True
    finally:
        if done:
            pool.shutdown(wait=True)
        else:  # failed, interrupted or terminated: the workers are stopped now, not waited for
            pool.shutdown(wait=False, cancel_futures=True)
            stop_processes(procs or [p for p in multiprocessing.active_children() if p not in before])


def _size(path: str) -> int:
    """A file's size on disk (0 when it cannot be read: its worker says why)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def stop_processes(procs) -> None:
    """SIGTERM to every process still running, SIGKILL to any still there after STOP_WAIT_S; all reaped."""
    import time

    for p in procs:
        if p.exitcode is None:
            p.terminate()
    deadline = time.monotonic() + STOP_WAIT_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.exitcode is None:
            p.kill()
            p.join(STOP_WAIT_S)


def _death_sentence(paths: list[str], futures, taken, procs) -> str:
    """Which file the worker that died was analysing, and how it died, in one sentence."""
    import signal

    import time
    from multiprocessing.connection import wait

    deadline = time.monotonic() + STOP_WAIT_S  # a dead worker's status: the pool's thread reaps it too, and until
    for p in procs:  # it has set it, our own waitpid finds no child and the status reads as None (still running)
        while p.exitcode is None and wait([p.sentinel], 0) and time.monotonic() < deadline:
            time.sleep(0.01)
    codes = {p.pid: p.exitcode for p in procs}
    open_ = [i for i, f in enumerate(futures) if not (f.done() and f.exception() is None)]
    running = [i for i in open_ if taken[i]]
    # the worker that died is not one the pool stopped afterwards (SIGTERM) and is gone already
    dead = [i for i in running if codes.get(taken[i]) not in (None, 0, -signal.SIGTERM)] or running
    how = "died"
    if dead:
        code = codes.get(taken[dead[0]])
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            how = f"was killed by {name}" + (
                " (the system's out-of-memory killer sends it when memory runs out)" if -code == signal.SIGKILL else ""
            )
        elif code:
            how = f"exited with status {code}"
    what = (
        f"the worker process analysing {shown_path(paths[dead[0]])} {how}"
        if dead
        else f"a worker process {how} before it started a file"
    )
    return (
        f"{what}; nothing was written — free memory or pass fewer --jobs (--jobs 1 analyses in this process), then"
        " run the command again"
    )


def dask_address(address: str) -> str:
    """A Dask scheduler address as ``distributed`` takes it, checked: SCHEME://HOST:PORT or HOST:PORT, with a known
    scheme and a port of 1 to 65535; anything else is one sentence (UsageError, exit 2)."""
    import re

    hint = "pass the scheduler's address as tcp://HOST:PORT (the scheduler prints it, e.g. tcp://10.0.0.5:8786)"
    try:
        m = re.fullmatch(r"(?:(?P<scheme>[A-Za-z][\w+.-]*)://)?(?P<loc>.*)", str(address), re.S)
        scheme, loc = (m["scheme"] or "tcp").lower(), m["loc"]
        if scheme not in DASK_SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r} (known: {', '.join(DASK_SCHEMES)})")
        if scheme == "inproc":
            if not loc:
                raise ValueError("no address after inproc://")
        else:
            hp = re.fullmatch(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^\s:/\[\]]*))(?::(?P<port>[^:]*))?", loc)
            if hp is None:
                raise ValueError(f"{loc!r} is not HOST:PORT")
            if hp["port"] is None:
                raise ValueError(f"missing port number in address {loc!r}")
            if not (hp["v6"] or hp["host"]):
                raise ValueError("no host")
            if not hp["port"].isdigit() or not 1 <= int(hp["port"]) <= 65535:
                raise ValueError(f"port {hp['port']} is not between 1 and 65535")
    except (ValueError, TypeError) as exc:
        raise UsageError(
            f"--dask {shown_text(str(address))!s} is not a Dask scheduler address ({exc}); {hint}"
        ) from None
    return str(address)


def dask_client(address: str, timeout):
    """A ``distributed.Client`` connected to ``address`` within ``timeout`` seconds, or one sentence: a malformed
    address is a UsageError (exit 2), a scheduler that does not answer a WorkerError (exit 3)."""
    from dask.distributed import Client

    t = float(DEFAULT_DASK_TIMEOUT_S if timeout is None else timeout)
    if not (t > 0 and t != float("inf")):
        raise UsageError(f"--dask-timeout must be a positive number of seconds, not {timeout!r}")
    address = dask_address(address)
    try:
        return Client(address, timeout=t)
    except (OSError, TimeoutError) as exc:
        raise WorkerError(
            f"no Dask scheduler answered at {shown_text(address)} within {t:g} s ({shown_text(str(exc))}); start one"
            " (dask scheduler), check the address, or wait longer with --dask-timeout SECONDS"
        ) from None


def _on_dask(fn, paths: list[str], opts, dask, timeout, arrived) -> None:
    """``map_points`` on a Dask cluster: the tasks are cancelled when this process is interrupted or fails, and a
    client made here is closed (the scheduler also drops the tasks of a client that vanished)."""
    try:
        from dask.distributed import Client
    except ImportError as exc:
        raise UsageError("--dask needs dask.distributed; install it with pip install 'tracekit[dask]'") from exc
    own = not isinstance(dask, Client)
    client = dask_client(dask, timeout) if own else dask
    futures = []
    try:
        from dask.distributed import as_completed as dask_completed

        futures = client.map(fn, paths, [opts] * len(paths), pure=False)
        index_of = {f.key: i for i, f in enumerate(futures)}
        for f in dask_completed(futures):
            res = f.result()
            f.release()
            arrived(index_of[f.key], res)
        futures = []
    finally:
        if futures:
            try:
                client.cancel(futures)
            except Exception:  # noqa: BLE001 - a cluster gone away: nothing is left to cancel
                pass
        if own:
            client.close()


def benchmark_table(files, *, accept_len: float = DEFAULT_ACCEPT_LEN) -> Result:
    """`tracekit bench`: benchmark result files as the performance table, with est_throughput."""
    files = [
        Path(f)
        for f in check_items(files, "files", "a path (str or Path) of a benchmark file or a list of them", paths=True)
    ]
    df, warnings = bench_table(read_bench(files), accept_len=accept_len)
    return Result(
        command="bench",
        inputs=[{"path": str(f)} for f in files],
        params={"accept_len": accept_len},
        summary={
            "records": int(len(df)),
            "invalid": int((~df["valid"]).sum()),
            "deployments": sorted(df["deployment"].dropna().unique().tolist()),
        },
        tables={"results": df},
        warnings=warnings,
    )
