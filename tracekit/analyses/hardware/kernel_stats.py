"""`tracekit kernels`: per kernel name (or category, family, launching op, module path) count, total, mean, median,
min, max and share of GPU busy time.

It sits in the ``hardware`` room because ``--by op`` and ``--by module`` group by the op each kernel came from, which
:func:`.kernel_ops.kernel_ops` decides once for every analysis (a graph-replayed kernel: the op of the graph's
capture, docs/replay.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ...data import record_hint
from ...errors import MissingDataError, UsageError
from ...regexes import bounded
from ...result import Result, trace_input
from ...trace import Trace
from ..steps.finder import one_device
from ..time.info import gpu_span_and_busy
from .replay_attribution import use_replay_sources
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
BY_CHOICES = ("name", "category", "family", "op", "module")
NO_OP = "(no op)"  # the group of kernels whose op is unknown (--by op), or whose op has no module path (--by module)
NO_MODULE = "(no module)"


@options_as_objects
def kernel_stats(
    trace: Trace,
    *,
    match: str | None = None,
    top: int | None = None,
    by: str = "name",
    categories=None,
    capture=None,
    eager_map=None,
) -> Result:
    """Statistics per kernel name (or per kernel category or family: ``by``), sorted by total time.

    Categories come from tracekit/data/categories.json (``categories``: a user file tried first).

    ``share_of_busy_pct`` = the kernel's summed duration ÷ GPU busy time (the union of all
    kernels, memcpys and memsets) × 100; shares can add up to more than 100 when streams overlap.
    ``match`` keeps names that match the regular expression (re.search); ``top`` keeps the N
    largest by total after matching; the summary counts what was left out.

    ``by="op"`` groups by the op that launched each kernel (for a graph-replayed kernel, the op of the graph's capture
    trace: ``capture`` paths, default the ``capture_traces/`` beside the trace; docs/replay.md), ``by="module"`` by
    that op's ``nn.Module`` path where a capture records it; kernels without one form the group ``(no op)`` /
    ``(no module)``, and the summary's ``attributed_pct`` is the share of kernel time with an op (``op``) or a module
    path (``module``).
    """
    if by not in BY_CHOICES:
        raise UsageError(f"--by must be one of {', '.join(BY_CHOICES)}, not {by!r}")
    from ..categories import families, trace_categories

    one_device(trace)  # shares of one GPU's busy time: the rule `report` follows
    ev = trace.events
    cats = trace_categories(trace, categories)
    is_kernel = (ev["kind"] == "kernel").to_numpy()
    kernels = ev.loc[is_kernel, ["name", "dur_ns"]].assign(category=cats[is_kernel])  # the columns used, not all
    kernels = kernels.assign(family=families(kernels["category"], categories))
    if by in ("op", "module"):
        kernels = _with_ops(trace, kernels, by, capture, eager_map)
    if kernels.empty:
        raise MissingDataError(
            f"{trace.path} has no kernel events; tracekit kernels needs a trace recorded with"
            f" GPU activity ({record_hint(trace.meta, 'gpu')})"
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
        **(_attributed(kernels, by) if by in ("op", "module") else {}),
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
            **({"capture": [str(p) for p in _paths(capture)] or None} if by in ("op", "module") else {}),
        },
        summary=summary,
        tables={"kernels": table},
        warnings=list(trace.report.warnings) + _hint(trace, by),
    )


def _paths(capture) -> list:
    """``capture`` as given (a path, a list of them, or None) as a list."""
    if capture is None:
        return []
    return [capture] if isinstance(capture, (str, Path)) else list(capture)


def _with_ops(trace: Trace, kernels: pd.DataFrame, by: str, capture, eager_map) -> pd.DataFrame:
    """``kernels`` (the trace's kernel rows, in row order) with the column ``by``: each kernel's op or module path
    (:func:`.shapes.kernel_shapes`, whose ops are :func:`.kernel_ops.kernel_ops`'s), the missing ones named."""
    from .shapes import kernel_shapes

    use_replay_sources(trace, capture, eager_map)
    tbl = kernel_shapes(trace).table  # one row per kernel event: its events row and its op / module
    at = pd.Series(tbl[by].to_numpy(dtype=object), index=tbl["row"].to_numpy(), dtype=object)
    rows = np.flatnonzero((trace.events["kind"] == "kernel").to_numpy())
    vals = pd.Series(at.reindex(rows).to_numpy(dtype=object), index=kernels.index, dtype=object)
    return kernels.assign(**{by: vals.fillna(NO_OP if by == "op" else NO_MODULE)})


def _attributed(kernels: pd.DataFrame, by: str) -> dict:
    """The share of the matched kernel time whose op (or module path) is known."""
    total = int(kernels["dur_ns"].sum())
    known = int(kernels.loc[kernels[by] != (NO_OP if by == "op" else NO_MODULE), "dur_ns"].sum())
    return {"attributed_ns": known, "attributed_pct": 100.0 * known / total if total else None}


def _hint(trace: Trace, by: str) -> list[str]:
    """Why replayed kernels have no op, one sentence (what to record), for ``--by op|module``."""
    if by not in ("op", "module"):
        return []
    from .shapes import kernel_shapes

    ks = kernel_shapes(trace)
    if ks.kernels and not ks.with_op and not ks.graph_kernels:  # no op at all: what records them, per profiler
        return [
            f"{trace.path}: no kernel has a launching CPU op, so all are {NO_OP}; record with {record_hint(trace.meta, 'ops')}"
        ]
    return list(ks.warnings)
