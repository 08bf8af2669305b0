"""A13 — one command per deployment: run the analyses on every operating point of a sweep.

``analyze_trace`` is a pure function of a file and plain parameters, so it runs the same serially, in a
process pool or on a Dask cluster; the sweep tables are assembled from its results in a fixed order, so
every way of running gives identical output.
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import intervals as iv
from ..errors import UsageError
from ..ingest import load
from ..ingest.discover import DEFAULT_POINT_PATTERN, TraceRef, discover
from ..result import Result
from .allgather import allgather_options, allgather_result, exposure
from .blocks import block_stats
from .decompose import decompose
from .steps import find_steps, median_ns, step_options

SWEEP_COLUMNS = ["point", "bs", "context", "rank", "steps", "median_wall_ns", "median_busy_ns", "median_ag_only_ns",
                 "median_idle_ns", "median_ag_only_local_ns", "median_idle_local_ns", "median_ptop_busy_ns",
                 "median_received_bytes", "median_exposed_ns", "allgathers_per_step", "path"]


@dataclass(frozen=True)
class SweepOptions:
    annotation: str | None = None
    step_name: str | None = None
    min_step_ns: int | None = None
    cache: bool = True
    phase: str | None = None
    step_source: str | None = None
    steps_file: str | None = None
    ag_sizes: tuple[str, ...] = ()
    group_size: int | None = None


def analyze_trace(path: str, opts: SweepOptions) -> dict[str, Any]:
    """Every per-trace analysis of one operating point, as plain tables (picklable)."""
    from ..annotate import load_annotation

    ann = load_annotation(opts.annotation) if opts.annotation else None
    trace = load(path, cache=opts.cache)
    steps = find_steps(trace, step_options(ann, step_name=opts.step_name, min_step_ns=opts.min_step_ns,
                                           phase=opts.phase, source=opts.step_source, steps_file=opts.steps_file))
    out: dict[str, Any] = {"path": path, "warnings": list(trace.report.warnings)}
    wall = decompose(trace, ag="ptop", steps=steps)
    wall_local = decompose(trace, ag="ptop+local", steps=steps)
    out["warnings"] += [w for w in wall.warnings if w not in out["warnings"]]
    per_step = wall.tables["per_step"].merge(
        wall_local.tables["per_step"][["step", "ag_only_ns", "idle_ns"]].rename(
            columns={"ag_only_ns": "ag_only_local_ns", "idle_ns": "idle_local_ns"}), on="step")
    out["per_step"] = per_step
    ev = trace.events
    ptop = (ev["copy_kind"] == "PtoP").to_numpy()
    ws = per_step["start_ns"].to_numpy()
    we = ws + per_step["wall_ns"].to_numpy()
    ptop_set = iv.normalize(ev["start_ns"].to_numpy()[ptop], ev["end_ns"].to_numpy()[ptop])
    per_step["ptop_busy_ns"] = iv.measure_in_windows(ptop_set, ws, we)
    out["blocks"] = pd.DataFrame(columns=["step", "block_type", "blocks", "kernel_ns", "kernels"])
    if ann is not None and ann.blocks is not None:
        b = block_stats(trace, ann, steps=steps)
        out["blocks"] = b.tables["per_step_type"]
        out["warnings"] += [w for w in b.warnings if w not in out["warnings"]]
    out["allgather"] = pd.DataFrame(columns=["step", "type", "count", "received_bytes", "full_bytes", "busy_ns"])
    out["exposure"] = pd.DataFrame(columns=["step", "type", "exposed_ns"])
    if ptop.any():
        kw = {**allgather_options(ann, group_size=opts.group_size, sizes=list(opts.ag_sizes)), "steps": steps}
        out["allgather"] = allgather_result(trace, **kw).tables["per_step_type"]
        out["exposure"] = exposure(trace, **kw).tables["per_step_type"]
    return out


def _row(ref: TraceRef, res: dict[str, Any]) -> dict[str, Any]:
    ps = res["per_step"]
    ag = res["allgather"]
    ex = res["exposure"]
    recv = ag.groupby("step")["received_bytes"].sum() if not ag.empty else pd.Series(dtype=np.int64)
    count = ag.groupby("step")["count"].sum() if not ag.empty else pd.Series(dtype=np.int64)
    exp = ex.groupby("step")["exposed_ns"].sum() if not ex.empty else pd.Series(dtype=np.int64)
    return {
        "point": ref.point, "bs": ref.bs, "context": ref.context, "rank": ref.rank_label, "steps": int(len(ps)),
        "median_wall_ns": median_ns(ps["wall_ns"]), "median_busy_ns": median_ns(ps["busy_ns"]),
        "median_ag_only_ns": median_ns(ps["ag_only_ns"]), "median_idle_ns": median_ns(ps["idle_ns"]),
        "median_ag_only_local_ns": median_ns(ps["ag_only_local_ns"]),
        "median_idle_local_ns": median_ns(ps["idle_local_ns"]),
        "median_ptop_busy_ns": median_ns(ps["ptop_busy_ns"]),
        "median_received_bytes": median_ns(recv.to_numpy()) if len(recv) else 0,
        "median_exposed_ns": median_ns(exp.reindex(ps["step"], fill_value=0).to_numpy()) if len(ps) else 0,
        "allgathers_per_step": median_ns(count.to_numpy()) if len(count) else 0,
        "path": str(ref.path),
    }


def run_sweep(refs: list[TraceRef], opts: SweepOptions, *, jobs: int = 1, dask: str | None = None,
              progress=None) -> list[dict]:
    """``analyze_trace`` on every trace, in ``refs`` order (serial, a process pool, or a Dask cluster).
    ``progress(done, total)`` is called as traces finish."""
    paths = [str(r.path) for r in refs]
    tick = progress or (lambda done, total: None)
    if dask:
        try:
            from dask.distributed import Client
        except ImportError as exc:
            raise UsageError("--dask needs dask.distributed; install it with pip install 'tracekit[dask]'") from exc
        with Client(dask) as client:
            futures = client.map(analyze_trace, paths, [opts] * len(paths), pure=False)
            results = client.gather(futures)
            tick(len(paths), len(paths))
            return results
    if jobs > 1 and len(paths) > 1:
        with ProcessPoolExecutor(max_workers=min(jobs, len(paths))) as pool:
            futures = [pool.submit(analyze_trace, p, opts) for p in paths]
            for i, _ in enumerate(as_completed(futures), 1):
                tick(i, len(paths))
            return [f.result() for f in futures]
    results = []
    for i, p in enumerate(paths, 1):
        results.append(analyze_trace(p, opts))
        tick(i, len(paths))
    return results


def analyze(root: str | Path, *, annotation: str | None = None, rank: str | None = "TP-0",
            point_pattern: str = DEFAULT_POINT_PATTERN, step_name: str | None = None,
            min_step_ns: int | None = None, jobs: int = 1, dask: str | None = None, cache: bool = True,
            progress=None, phase: str | None = None, step_source: str | None = None, steps_file: str | None = None,
            ag_size: list[str] | None = None, group_size: int | None = None) -> Result:
    """`tracekit analyze`: the sweep tables of one deployment, one row per operating point (bs, context)."""
    step_options(step_name=step_name, min_step_ns=min_step_ns, phase=phase, source=step_source)  # usage errors first
    refs = discover(root, point_pattern=point_pattern, rank=rank)
    opts = SweepOptions(annotation=annotation, step_name=step_name, min_step_ns=min_step_ns, cache=cache,
                        phase=phase, step_source=step_source, steps_file=str(steps_file) if steps_file else None,
                        ag_sizes=tuple(ag_size or ()), group_size=group_size)
    results = run_sweep(refs, opts, jobs=jobs, dask=dask, progress=progress)
    rows, per_step, blocks, ags, exps, warnings = [], [], [], [], [], []
    for ref, res in zip(refs, results):
        rows.append(_row(ref, res))
        tag = {"point": ref.point, "bs": ref.bs}
        per_step.append(res["per_step"].assign(**tag))
        for t, store in ((res["blocks"], blocks), (res["allgather"], ags), (res["exposure"], exps)):
            if not t.empty:
                store.append(t.assign(**tag))
        warnings += [w for w in res["warnings"] if w not in warnings]
    sweep = pd.DataFrame(rows, columns=SWEEP_COLUMNS)
    tables = {"sweep": sweep,
              "block_types": _long_medians(blocks, "block_type", ["kernel_ns", "blocks"]),
              "exposure_types": _long_medians(exps, "type", ["exposed_ns"]),
              "allgather_types": _long_medians(ags, "type", ["count", "received_bytes", "busy_ns"]),
              "per_step": pd.concat(per_step, ignore_index=True)}
    summary = {"traces": len(refs), "annotation": annotation, "rank": rank,
               "points": [r.point for r in refs]}
    return Result(command="analyze", inputs=[{"path": str(root)}],
                  params={"annotation": annotation, "rank": rank, "point_pattern": point_pattern,
                          "step_name": step_name, "min_step_ns": min_step_ns, "phase": phase,
                          "step_source": step_source, "steps_file": opts.steps_file},
                  summary=summary, tables=tables, warnings=warnings)


def _long_medians(parts: list[pd.DataFrame], key: str, cols: list[str]) -> pd.DataFrame:
    """Per point and key, the median over steps of each column (a key absent in a step counts 0)."""
    out_cols = ["point", "bs", key] + [f"median_{c}" for c in cols]
    if not parts:
        return pd.DataFrame(columns=out_cols)
    rows = []
    for part in parts:
        point, bs = part["point"].iloc[0], part["bs"].iloc[0]
        steps = sorted(part["step"].unique())
        for k, g in part.groupby(key, sort=True):
            g = g.set_index("step").reindex(steps, fill_value=0)
            rows.append({"point": point, "bs": bs, key: k, **{f"median_{c}": median_ns(g[c].to_numpy()) for c in cols}})
    return pd.DataFrame(rows, columns=out_cols)


def default_jobs(n_traces: int) -> int:
    return max(1, min(os.cpu_count() or 1, n_traces))

