"""Every rank of a run, aligned on one clock, and who waits for whom (issue 28; contract ``tracekit.imbalance/2``,
docs/json-contract.md; how, docs/multirank.md).

Map, then reduce: :func:`plan_run` finds the ranks and their files; each file is reduced by :func:`reduce_point`
to a few small tables (:mod:`.mapper`) — in a worker: ``tracekit.fan_out.imbalance`` fans the files out to worker
processes or a Dask cluster, as it does a sweep's points (analyses start no process); :func:`imbalance_of_run`
only aligns and attributes those tables, so the parent never holds two ranks' events.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ....errors import InputError, MissingDataError, UsageError
from ....result import Result, shown_path, shown_ranks, shown_text
from ...steps.resolve import step_options
from .align import align_run
from .attribute import attribute, most_often_last
from .medians import lower_median
from .discover import missing_of, nodes_of, settle, world_size_of
from .processes import export_of
from .mapper import MapOptions, forget_exports, load_collectives, reduce_file
from .run import Run, load_run, run_with
from .per_step import per_step_summary

RANK_COLS = ["rank", "file", "node", "clock_offset_ns", "residual_ns", "steps", "times_last", "total_wait_ns"]


@dataclass(frozen=True)
class RunPlan:
    """What one run's imbalance needs mapped: its ranks, the files to reduce (rank index, path), the options."""

    source: object
    ranks: list
    skipped: list
    files: list
    opts: MapOptions
    gpus_per_node: int | None
    run: Run | None = None  # the ranks as tracekit.load_run found them (once)


def reduce_point(path: str, opts: MapOptions) -> dict:
    """:func:`reduce_file` (one rank's file to small tables: what a worker runs), or ``{"dropped": the one-sentence
    reason, "exit_code"}`` for a file that cannot be used (missing, unreadable, corrupt: exit 3; lacking what is
    needed: exit 4)."""
    try:
        return reduce_file(path, opts)
    except (InputError, MissingDataError) as exc:
        return {"path": path, "dropped": shown_text(str(exc)), "exit_code": exc.exit_code}


def plan_run(
    paths_or_dir,
    *,
    gpus_per_node: int | None = None,
    world_size: int | None = None,
    step_name: str | None = None,
    min_step_ns: int | None = None,
    step_source: str | None = None,
    steps_file=None,
    cache: bool = True,
) -> RunPlan:
    """The ranks of one run and the files to reduce (usage errors before any file is read). ``paths_or_dir``: a
    run directory, its files, or a :class:`~.run.Run` (``tracekit.load_run``: not searched again)."""
    if gpus_per_node is not None and (
        isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, (int, np.integer)) or gpus_per_node < 1
    ):
        raise UsageError(f"--gpus-per-node must be a whole number of at least 1, not {gpus_per_node!r}")
    step_options(step_name=step_name, min_step_ns=min_step_ns, phase="all", source=step_source, steps_file=steps_file)
    if isinstance(paths_or_dir, Run):
        run = run_with(paths_or_dir, world_size=world_size, gpus_per_node=gpus_per_node)
    else:
        run = load_run(paths_or_dir, world_size=world_size, gpus_per_node=gpus_per_node)
    ranks, skipped = run.ranks, run.skipped
    files = [(i, f) for i, rf in enumerate(ranks) for f in rf.files]
    opts = MapOptions(
        step_name=step_name,
        min_step_ns=min_step_ns,
        step_source=step_source,
        steps_file=str(steps_file) if steps_file else None,
        cache=cache,
    )
    return RunPlan(run.source, ranks, skipped, files, opts, run.gpus_per_node, run)


def _shown(f: Path, root: Path | None) -> str:
    """A rank's file as the user knows it: relative to the run directory given, else as given."""
    if root is not None:
        try:
            return shown_path(Path(f).relative_to(root))
        except ValueError:
            pass
    return shown_path(f)


def _merge(parts: list[dict]) -> dict:
    """The reduced tables of one rank's files (sglang's per-stage files) as one, local steps renumbered in time."""
    if len(parts) == 1:  # one file: its tables as they are (read only from here on), not a copy
        return {"steps": parts[0]["steps"], "collectives": parts[0]["collectives"]}
    steps, colls, shift = [], [], 0
    for p in parts:
        s, c = p["steps"].copy(), p["collectives"].copy()
        s["local_step"] += shift
        c.loc[c["local_step"] >= 0, "local_step"] += shift
        shift += len(s)
        steps.append(s)
        colls.append(c)
    s = pd.concat(steps, ignore_index=True).sort_values("start_ns", kind="stable").reset_index(drop=True)
    new = np.full(shift + 1, -1, dtype=np.int64)  # old local step (−1: none) → its place in time
    new[s["local_step"].to_numpy(np.int64)] = np.arange(len(s), dtype=np.int64)
    s["local_step"] = np.arange(len(s), dtype=np.int64)
    c = pd.concat(colls, ignore_index=True).sort_values("start_ns", kind="stable").reset_index(drop=True)
    c["local_step"] = new[c["local_step"].to_numpy(np.int64)]
    return {"steps": s, "collectives": c}


class ArrivingReductions:
    """The workers' reductions of one run taken as they arrive, in any order (``add(index, result)``, ``index`` into
    ``plan.files``): a rank whose files are all in is merged (:func:`_merge`) at once, while the other workers still
    run; :meth:`result` is :func:`imbalance_of_run` of them all — the same document whatever the order of arrival
    (tests/unit/fleet/test_streamed_reduce.py)."""

    def __init__(self, plan: RunPlan):
        self.plan = plan
        self.results: list = [None] * len(plan.files)
        self.left = [0] * len(plan.ranks)  # files of each rank not yet in
        for i, _ in plan.files:
            self.left[i] += 1
        self.merged: dict[int, dict] = {}  # rank index in plan.ranks → its files' tables merged

    def add(self, index: int, res: dict) -> None:
        if self.results[index] is not None:
            raise ValueError(f"the reduction of {shown_path(self.plan.files[index][1])} arrived twice")
        self.results[index] = res
        i = self.plan.files[index][0]
        self.left[i] -= 1
        if self.left[i] == 0:
            parts = [self.results[k] for k, (j, _) in enumerate(self.plan.files) if j == i]
            if not any("dropped" in p for p in parts):
                self.merged[i] = _merge(parts)

    def result(self) -> Result:
        missing = [shown_path(f) for (_, f), r in zip(self.plan.files, self.results) if r is None]
        if missing:
            raise ValueError(f"no reduction arrived for {', '.join(missing[:3])}")
        results, self.results = self.results, []
        merged, self.merged = self.merged, {}
        return imbalance_of_run(self.plan, results, merged=merged)


def imbalance_of_run(plan: RunPlan, results: list, *, merged: dict | None = None) -> Result:
    """`tracekit imbalance`'s analysis, from each file's reduced tables (``results``, in ``plan.files`` order; what
    :func:`reduce_point` returned in the workers): every rank on the reference rank's clock (the lowest rank id),
    its collectives matched across ranks, and per step who waited for whom (contract ``tracekit.imbalance/2``).
    The parent holds only these small tables, never two ranks' events. ``merged``: ranks (by index in
    ``plan.ranks``) whose files' tables were merged already as they arrived (:class:`ArrivingReductions`)."""
    opts, gpus_per_node = plan.opts, plan.gpus_per_node
    forget_exports()  # an export reduced here, process by process (jobs=1), is not held past its reductions
    warnings: list[str] = [f"skipped {p}: {r}" for p, r in plan.skipped[:10]]
    by_rank, keep = _readable_ranks(plan, results, warnings)
    del results  # the reductions live on in by_rank, then per_rank, until the alignment has read them (below)
    # a trace of world_size 1 says it was the only rank of its own run: its distributedInfo.rank (0) says nothing of
    # which rank of this run it is, so the name decides (a single-process recording per GPU, or a generated one)
    kept_ranks, settle_warn = settle(
        [plan.ranks[i] for i in keep],
        [[p["meta"].get("rank") if p["meta"].get("world_size") != 1 else None for p in by_rank[i]] for i in keep],
    )
    warnings += settle_warn
    world = _world(plan, kept_ranks, by_rank, keep, warnings)
    per_rank, files_of, base_of = _per_rank_tables(plan, by_rank, keep, kept_ranks, warnings, merged or {})
    merged = None
    del by_rank
    nodes, node_src = nodes_of(kept_ranks, gpus_per_node)
    al = align_run(per_rank, nodes, load_collectives().blocking, base_of[min(per_rank)])
    rank_ids = list(per_rank)
    del per_rank  # aligned: the ranks' own tables are not read again (a caller that passed a temporary list of
    # reductions, as tracekit.imbalance does, gets their memory back here)
    warnings += al.warnings
    # times relative to the reference file's baseTimeNanoseconds: tracekit's start_ns of that file
    ref = min(rank_ids)
    ref_base = base_of[ref]
    for df in (al.collectives, al.steps):
        for col in ("start_ns", "end_ns"):
            df[col] = df[col].to_numpy(np.int64) - ref_base
    t = attribute(al.collectives, al.steps, al.clock.residual)
    for name in ("steps", "collectives", "per_collective", "by_step"):  # a partial step flagged in every table
        t[name] = t[name].assign(partial=t[name]["step"].isin(al.partial_step_ids).to_numpy(bool))
    per = t["per_collective"]
    imb = t["imbalance"]
    # the straggler claim: from the steps recorded whole, none left uncertain by a clock step
    unsure = t["by_step"].loc[t["by_step"]["clock_uncertain"], "step"]
    whole = imb[~imb["step"].isin(al.partial_step_ids) & ~imb["step"].isin(unsure)]
    imb = whole if len(whole) else imb
    last_counts = imb[~imb["tie"]]["last_rank"].value_counts()
    ranks_tbl = _ranks_table(rank_ids, files_of, nodes, al, t, last_counts)  # times_last: the summary's rows
    top = most_often_last(imb)
    straggler = (
        None
        if top is None
        else {"rank": top, "times_last": int(last_counts.get(top, 0)), "of": int((~imb["tie"]).sum())}
    )
    if top is not None and (last_counts == last_counts.get(top)).sum() > 1:
        tied = sorted(int(r) for r in last_counts.index[last_counts == last_counts.get(top)])
        warnings.append(
            f"ranks {tied} are last equally often ({int(last_counts.get(top))} times each); the summary"
            f" names rank {top}, whose lateness cost the most"
        )
    by = t["by_step"]
    complete = by[~by["step"].isin(al.partial_step_ids) & ~by["clock_uncertain"]]["imbalance_ns"]
    summary = {
        "ranks": len(rank_ids),
        "reference_rank": ref,
        "clock": al.clock.summary() if al.clock.aligned else "as recorded",
        "steps": al.n_steps,
        "partial_steps": al.partial_steps,
        "collectives": int(len(per)),
        "unmatched": al.unmatched,
        "imbalance_ns_per_step": lower_median(complete if len(complete) else by["imbalance_ns"]),
        "straggler": straggler,
        **world,
        "clock_ranks": al.clock.ranks_summary() if al.clock.aligned else {"stepped": [], "suspect": []},
        **per_step_summary(by),
    }
    if world["missing_ranks"]:
        warnings.append(lower_bound_sentence(world))
    if len(per) == 0:
        warnings.append(
            "no collective kernel (tracekit/data/collectives.json) runs on two ranks: no wait can be attributed"
        )
    tables = {
        "ranks": ranks_tbl,
        "steps": t["steps"],
        "collectives": t["collectives"],
        "per_collective": per,
        "by_step": t["by_step"],
    }
    inputs = [{"path": shown_path(f), "rank": rf.rank} for rf in kept_ranks for f in rf.files]
    params = {
        "gpus_per_node": None if gpus_per_node is None else int(gpus_per_node),
        "world_size": None if plan.run is None else plan.run.world_size_given,
        "nodes_from": node_src,
        "step_name": opts.step_name,
        "min_step_ns": opts.min_step_ns,
        "step_source": opts.step_source,
        "steps_file": opts.steps_file,
        "phase": "all",
    }
    return Result(command="imbalance", inputs=inputs, params=params, summary=summary, tables=tables, warnings=warnings)


def _world(plan: RunPlan, kept_ranks: list, by_rank: dict, keep: list[int], warnings: list[str]) -> dict:
    """The summary's world: ``world_size``, ``world_size_from``, ``missing_ranks`` (ranks of the world whose file
    is absent or could not be read) and ``imbalance_is_lower_bound``; the world size decided by
    :func:`~.discover.world_size_of` from the settled ranks and what each reduced trace's distributedInfo says."""
    said = {Path(p["path"]): p["meta"].get("world_size") for i in keep for p in by_rank[i]}
    given = plan.run.world_size_given if plan.run is not None else None
    ws, ws_from, said_warn = world_size_of(kept_ranks, said, given)
    warnings += [w for w in said_warn if w not in warnings]
    missing = missing_of(kept_ranks, ws)
    return {
        "world_size": ws,
        "world_size_from": ws_from,
        "missing_ranks": missing,
        "imbalance_is_lower_bound": bool(missing),
    }


def lower_bound_sentence(world: dict) -> str:
    """What a run with missing ranks says (imbalance, report and findings): which ranks, why the imbalance is a lower
    bound, and what to record."""
    miss = world["missing_ranks"]
    shown = shown_ranks(miss)  # consecutive ranks as one span: "ranks 3–63", "ranks 2, 5–7"
    return (
        f"rank{'s' if len(miss) > 1 else ''} {shown} of the world of {world['world_size']}"
        f" ({world['world_size_from']}) {'have' if len(miss) > 1 else 'has'} no readable trace: the imbalance is a"
        " lower bound (a missing rank may be the one the others waited for); record every rank's trace"
    )


def _readable_ranks(plan: RunPlan, results: list, warnings: list[str]) -> tuple[dict[int, list[dict]], list[int]]:
    """Each rank's reduced tables (by its index in ``plan.ranks``) and the ranks all of whose files could be read;
    a file left out is said in ``warnings``. Fewer than two ranks left because files were dropped: the error of
    those files (exit 4 when each lacked what is needed, else 3)."""
    by_rank: dict[int, list[dict]] = {}
    dropped = []
    for (i, f), res in zip(plan.files, results):
        if "dropped" in res:
            dropped.append((i, f, res))
            continue
        by_rank.setdefault(i, []).append(res)
    for i, f, res in dropped:
        warnings.append(f"{shown_path(f)} left out: {res['dropped']}")
    keep = [i for i in range(len(plan.ranks)) if i in by_rank and not any(d[0] == i for d in dropped)]
    if len(keep) < 2 and dropped:
        why = "; ".join(d[2]["dropped"] for d in dropped[:3])
        cls = MissingDataError if all(d[2].get("exit_code") == 4 for d in dropped) else InputError
        raise cls(f"fewer than two ranks of the run could be read ({why})")
    return by_rank, keep


def _per_rank_tables(
    plan: RunPlan,
    by_rank: dict[int, list[dict]],
    keep: list[int],
    kept_ranks: list,
    warnings: list[str],
    merged: dict[int, dict],
) -> tuple[dict, dict, dict]:
    """Per rank id of the settled ranks: its files' tables merged (:func:`_merge`, or as merged on arrival in
    ``merged``), its files as the user knows them, and its earliest baseTimeNanoseconds; the first warnings of each
    file's reduction go to ``warnings``."""
    idx_of = {id(rf): i for i, rf in zip(keep, [plan.ranks[i] for i in keep])}
    per_rank, files_of, base_of = {}, {}, {}
    src = plan.source
    root = Path(src) if isinstance(src, (str, Path)) and Path(src).is_dir() else None
    for rf in kept_ranks:
        parts = by_rank[idx_of[id(rf)]]
        per_rank[rf.rank] = merged.pop(idx_of[id(rf)], None) or _merge(parts)
        backs = [x for p in parts for x in p["meta"].get("clock_set_back", [])]
        if backs:  # a clock set back mid-run, undone in the file's reduction (set_back.py): told by the alignment
            per_rank[rf.rank] = {**per_rank[rf.rank], "set_back": backs}
        base_of[rf.rank] = min(int(p["meta"].get("base_time_ns") or 0) for p in parts)
        shown = sorted(_shown(f, root) for f in rf.files)
        files_of[rf.rank] = shown[0] if len(shown) == 1 else shown
        for p in parts:
            warnings += [f"rank {rf.rank}: {w}" for w in p.get("warnings", [])][:3]
    return per_rank, files_of, base_of


def _ranks_table(ranks: list[int], files_of: dict, nodes: dict, al, t: dict, last_counts: pd.Series) -> pd.DataFrame:
    """One row per rank (RANK_COLS): its file(s), node, clock offset and residual, steps, times last, total wait."""
    wait_tot = t["collectives"].groupby("rank")["wait_ns"].sum()
    steps_per = t["steps"].groupby("rank").size()
    return pd.DataFrame(
        {
            "rank": ranks,
            "file": [files_of[r] for r in ranks],
            "node": [nodes[r] for r in ranks],
            "clock_offset_ns": [al.clock.offset_ns(r) if al.clock.aligned else 0 for r in ranks],
            "residual_ns": pd.array([al.clock.residual.get(r) for r in ranks], dtype="Int64"),
            "steps": [int(steps_per.get(r, 0)) for r in ranks],
            "times_last": [int(last_counts.get(r, 0)) for r in ranks],
            "total_wait_ns": [int(wait_tot.get(r, 0)) for r in ranks],
        },
        columns=RANK_COLS,
    )


def reference_files(paths_or_dir, imb: Result) -> list[Path]:
    """The files of the reference rank (the lowest rank id) of the run ``imb`` (a ``tracekit.imbalance`` result of
    ``paths_or_dir``: a run directory, its files or a ``tracekit.load_run`` Run), as found on disk: what `tracekit
    report RUN_DIR` reports on. Several for sglang's per-stage files (the decode stage first). Kept for callers of
    old; ``tracekit.load_run(RUN_DIR).reference_files()`` is the public way."""
    if getattr(imb, "command", None) != "imbalance":
        raise UsageError("reference_files takes the result of tracekit.imbalance(RUN_DIR)")
    ref = imb.summary["reference_rank"]
    mine = {str(i["path"]) for i in imb.inputs if i.get("rank") == ref}
    ranks = load_run(paths_or_dir).ranks
    files = list({export_of(f): 0 for rf in ranks for f in rf.files if shown_path(f) in mine})  # a part: its export
    if not files:
        raise InputError(f"the files of rank {ref} are no longer where tracekit imbalance found them; rerun it")
    return sorted(files, key=lambda f: ("DECODE" not in f.name.upper(), str(f)))


def imbalance_in_process(run, *, steps=None, cache: bool = True) -> Result:
    """``tracekit.imbalance`` of ``run`` (a Run, a run directory or its files) in this process, one file after
    another: what ``tracekit.report(run)`` and ``tracekit.findings(run)`` compute when not given ``ranks=`` (pass
    ``ranks=tracekit.imbalance(run, jobs=N)`` for the files read in parallel)."""
    from ...steps.resolve import StepOptions

    given = StepOptions.given_params(steps if isinstance(steps, StepOptions) else None)
    plan = plan_run(
        run,
        step_name=given["step_name"],
        min_step_ns=given["min_step_ns"],
        step_source=given["step_source"] or "auto",
        steps_file=given["steps_file"],
        cache=cache,
    )
    return imbalance_of_run(plan, [reduce_point(str(f), plan.opts) for _, f in plan.files])
