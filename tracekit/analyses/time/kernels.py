"""`tracekit kernels`: per kernel name count, total, mean, median, min, max and share of GPU busy time."""

from __future__ import annotations


import numpy as np
import pandas as pd

from ...errors import MissingDataError, UsageError
from ...regexes import bounded
from ...result import Result, trace_input
from ...trace import Trace
from .info import gpu_span_and_busy
from ..steps.keywords import options_as_objects

KERNEL_COLUMNS = [
    "name",
    "count",
    "total_ns",
    "mean_ns",
    "median_ns",
    "min_ns",
    "max_ns",
    "share_of_busy_pct",
    "category",
]
BY_CHOICES = ("name", "category", "family")


@options_as_objects
def kernel_stats(
    trace: Trace, *, match: str | None = None, top: int | None = None, by: str = "name", categories=None
) -> Result:
    """Statistics per kernel name (or per kernel category or family: ``by``), sorted by total time.

    Categories come from tracekit/data/categories.json (``categories``: a user file tried first).

    ``share_of_busy_pct`` = the kernel's summed duration ÷ GPU busy time (the union of all
    kernels, memcpys and memsets) × 100; shares can add up to more than 100 when streams overlap.
    ``match`` keeps names that match the regular expression (re.search); ``top`` keeps the N
    largest by total after matching; the summary counts what was left out.
    """
    if by not in BY_CHOICES:
        raise UsageError(f"--by must be one of {', '.join(BY_CHOICES)}, not {by!r}")
    from ..categories import families, trace_categories

    ev = trace.events
    cats = trace_categories(trace, categories)
    is_kernel = (ev["kind"] == "kernel").to_numpy()
    kernels = ev.loc[is_kernel, ["name", "dur_ns"]].assign(category=cats[is_kernel])  # the columns used, not all
    kernels = kernels.assign(family=families(kernels["category"], categories))
    if kernels.empty:
        raise MissingDataError(
            f"{trace.path} has no kernel events; tracekit kernels needs a trace recorded with"
            " GPU activity (ProfilerActivity.CUDA)"
        )
    _, _, _, busy = gpu_span_and_busy(ev)
    if match is not None:
        pat = bounded(match, "--match")  # a user's pattern: time-bounded, one sentence if invalid
        names = kernels["name"].cat.categories
        keep = [n for n in names if pat.search(n)]
        kernels = kernels[kernels["name"].isin(keep)]
    key = by
    g = kernels.groupby(key, observed=True)["dur_ns"]
    table = pd.DataFrame(
        {
            "count": g.size(),
            "total_ns": g.sum(),
            "mean_ns": g.mean(),
            "median_ns": g.median(),
            "min_ns": g.min(),
            "max_ns": g.max(),
        }
    ).reset_index()
    table[key] = table[key].astype(str)
    table["share_of_busy_pct"] = table["total_ns"] / busy * 100.0 if busy else np.nan
    table = table.sort_values(["total_ns", key], ascending=[False, True], kind="stable").reset_index(drop=True)
    matched_names, matched_total = int(kernels["name"].nunique()), int(table["total_ns"].sum())
    groups = len(table)
    if top is not None:
        table = table.head(top)
    if by == "name":
        first = kernels.drop_duplicates("name")
        table["category"] = table["name"].map(dict(zip(first["name"].astype(str), first["category"].astype(str))))
        table = table[KERNEL_COLUMNS]
    else:
        names = kernels.groupby(key, observed=True)["name"].nunique()
        table["names"] = table[key].map({str(k): int(v) for k, v in names.items()}).astype(np.int64)
        table = table[[key, *KERNEL_COLUMNS[1:-1], "names"]]
    summary = {
        "kernels_total": int((ev["kind"] == "kernel").sum()),
        "names_total": int(ev.loc[ev["kind"] == "kernel", "name"].nunique()),
        "kernels_matched": int(len(kernels)),
        "names_matched": matched_names,
        "names_shown": int(len(table)) if by == "name" else int(table["names"].sum()),
        **({} if by == "name" else {f"{by}_groups": groups, f"{by}_groups_shown": int(len(table))}),
        "matched_total_ns": matched_total,
        "shown_total_ns": int(table["total_ns"].sum()),
        "gpu_busy_ns": busy,
    }
    return Result(
        command="kernels",
        inputs=[trace_input(trace)],
        params={
            "match": match,
            "top": top,
            "by": by,
            "categories": str(categories) if categories is not None else None,
        },
        summary=summary,
        tables={"kernels": table},
        warnings=list(trace.report.warnings),
    )
