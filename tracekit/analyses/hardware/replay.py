"""`tracekit replay`: how the kernels replayed from CUDA/HIP graphs were attributed to ops (docs/replay.md).

The attribution itself is :mod:`.replay_attribution`'s (one decision, used by roofline, hbm and kernels); this
command shows it: how many replayed kernels and what share of their time got an op, by which source, from which
capture files, the ops and modules they came from, and what was not attributed and why.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ...data import record_hint
from ...errors import MissingDataError
from ...launch_apis import is_launch
from ...result import Result, trace_input
from ...trace import Trace
from ..steps.keywords import options_as_objects
from .kernel_ops import kernel_ops
from .replay_attribution import replay_counts, replayed_modules, use_replay_sources
from .shapes import names_at

CAPTURE_COLUMNS = ["file", "batch_size", "mode", "source", "launches", "graphs", "kernels", "total_ns"]
OP_COLUMNS = ["op", "module", "attributed_by", "kernels", "total_ns", "share_pct"]
MISSING_COLUMNS = ["why", "kernels", "total_ns", "names"]
KERNEL_COLUMNS = [
    "start_ns",
    "name",
    "stream",
    "launch_correlation",
    "graph_node_id",
    "op",
    "input_dims",
    "input_types",
    "module",
    "capture_file",
    "attributed_by",
    "score",
]


@options_as_objects
def replay_summary(trace: Trace, *, capture=None, eager_map=None) -> Result:
    """The attribution of ``trace``'s graph-replayed kernels: ``capture`` (a path or a list of capture traces or
    folders; default: ``capture_traces/`` beside the trace) and ``eager_map`` (an eager, graph-off trace of the same
    model) are the CLI's ``--capture`` and ``--eager-map``. Tables: ``by_op``, ``captures``, ``not_attributed`` and
    ``kernels`` (one row per replayed kernel, in time order)."""
    use_replay_sources(trace, capture, eager_map)
    ko = kernel_ops(trace)
    r = ko.replay
    if not r.pos.size and not _launches_recorded(trace):  # no launch call at all: graph launches are unknown
        raise MissingDataError(
            f"{trace.path} records no kernel or graph launch call, so whether any kernel was replayed from a"
            f" CUDA/HIP graph is unknown; record with {record_hint(trace.meta, 'launches')}"
        )
    if not r.pos.size:
        raise MissingDataError(
            f"{trace.path} has no kernels replayed from CUDA/HIP graphs (no cudaGraphLaunch/hipGraphLaunch launched"
            " a kernel); there is nothing to attribute"
        )
    if r.hint is not None:
        raise MissingDataError(f"{trace.path}: {r.pos.size:,} kernel(s) are replayed from CUDA/HIP graphs and {r.hint}")
    ev = trace.events
    rows = ko.krow[r.pos]
    dur = ev["dur_ns"].to_numpy()[rows]
    att = r.attributed
    counts = replay_counts(r, dur)
    op = np.full(r.pos.size, None, dtype=object)
    module = np.full(r.pos.size, None, dtype=object)
    dims = np.full(r.pos.size, None, dtype=object)
    types = np.full(r.pos.size, None, dtype=object)
    cap_file = np.full(r.pos.size, None, dtype=object)
    cap_rows = []
    for ci, cap in enumerate(r.captures):
        m = (r.capture == ci) & (r.op_row >= 0)
        cap_file[r.capture == ci] = _shown_path(cap.ref.path, trace.path)
        if m.any():
            op[m] = names_at(cap.trace.events, r.op_row[m])
            dims[m], types[m] = op_inputs(cap.trace.events, r.op_row[m])
        g = r.groups
        used = g[g["capture"] == cap.ref.path.name] if g is not None and len(g) else g
        cap_rows.append(
            {
                "file": cap.ref.path.name,
                "batch_size": cap.ref.batch_size,
                "mode": cap.ref.mode,
                "source": cap.ref.source,
                "launches": int(cap.launch_rows.size),
                "graphs": int(used["graph"].nunique()) if used is not None and len(used) else 0,
                "kernels": int((r.capture == ci).sum()),
                "total_ns": int(dur[r.capture == ci].sum()),
            }
        )
    module = replayed_modules(r)
    placed = att | (r.by == "annotation")  # an op, or (from the graph annotations) a module alone
    d = pd.DataFrame({"op": op, "module": module, "by": r.by, "dur": dur})[placed]
    total = int(dur.sum())
    by_op = (
        d.groupby(["op", "module", "by"], dropna=False)["dur"].agg(["size", "sum"]).reset_index()
        if len(d)
        else pd.DataFrame(columns=["op", "module", "by", "size", "sum"])
    )
    by_op.columns = ["op", "module", "attributed_by", "kernels", "total_ns"]
    by_op["share_pct"] = by_op["total_ns"] / total * 100.0 if total else np.nan
    by_op = by_op.sort_values(["total_ns", "op"], ascending=[False, True], kind="stable").reset_index(drop=True)
    by_op = by_op.astype({"kernels": np.int64, "total_ns": np.int64})
    for c in ("module", "op"):
        by_op[c] = by_op[c].astype(object).where(by_op[c].notna(), None)
    miss = pd.DataFrame({"why": r.why, "name": names_at(ev, rows), "dur": dur})[~placed]
    missing = (
        miss.groupby("why", dropna=False)
        .agg(kernels=("dur", "size"), total_ns=("dur", "sum"), names=("name", lambda x: ", ".join(sorted(set(x))[:3])))
        .reset_index()
        .sort_values("total_ns", ascending=False, kind="stable")
        .reset_index(drop=True)
        if len(miss)
        else pd.DataFrame(columns=MISSING_COLUMNS)
    )
    annotated = _annotated(r)
    refused = r.groups[r.groups["why"].notna()] if r.groups is not None and len(r.groups) else None
    summary = {
        **counts,
        "by_source": {k: int((r.by == k).sum()) for k in ("node_id", "capture", "eager_map", "annotation")},
        "annotated_kernels": int(annotated.sum()),
        "annotated_ns": int(dur[annotated].sum()),
        "annotations_file": _shown_path(r.annotations.paths[0], trace.path) if r.annotations is not None else None,
        "captures": len(r.captures),
        "captures_used": int(sum(1 for c in cap_rows if c["kernels"])),
        "replays": int(len(r.groups)) if r.groups is not None else 0,
        "replays_refused": int(len(refused)) if refused is not None else 0,
        "min_score": float(np.nanmin(r.score)) if np.isfinite(r.score).any() else None,
    }
    warnings = list(trace.report.warnings)
    if refused is not None and len(refused):
        w = refused["why"].mode().iloc[0]
        warnings.append(f"{len(refused):,} replay(s) not attributed: {w}")
    return Result(
        command="replay",
        inputs=[trace_input(trace)],
        params={
            "capture": [str(p) for p in (capture or [])] if not isinstance(capture, (str, Path)) else [str(capture)],
            **({"eager_map": str(eager_map)} if eager_map is not None else {}),
        },
        summary=summary,
        tables={
            "by_op": by_op[OP_COLUMNS],
            "captures": pd.DataFrame(cap_rows, columns=CAPTURE_COLUMNS),
            "not_attributed": missing[MISSING_COLUMNS],
            "kernels": _kernels(ev, rows, ko.launch[r.pos], r, op, dims, types, module, cap_file),
        },
        warnings=warnings,
    )


def _annotated(r) -> np.ndarray:
    """Per replayed kernel: whether PyTorch's graph kernel annotations gave its module."""
    return r.module != None if r.module is not None else np.zeros(r.pos.size, dtype=bool)  # noqa: E711


def _launches_recorded(trace: Trace) -> bool:
    """Whether the trace records any kernel or graph launch call (tracekit/data/launch_apis.json), per distinct
    name of its runtime records: without one, "no graph launch launched a kernel" is a claim it cannot support."""
    ev = trace.events
    codes = np.unique(ev["name"].cat.codes.to_numpy()[(ev["kind"] == "runtime").to_numpy()])
    return any(is_launch(n) for n in ev["name"].cat.categories[codes[codes >= 0]])


def _shown_path(path: Path, trace_path) -> str:
    """A source file as the kernels table names it: relative to the replay trace's folder where it lies inside it."""
    try:
        base = Path(trace_path).parent if trace_path is not None and not Path(trace_path).is_dir() else trace_path
        return Path(path).resolve().relative_to(Path(base).resolve()).as_posix()
    except (TypeError, ValueError):
        return str(path)


def op_inputs(ev: pd.DataFrame, op_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per op row its ``Input Dims`` and ``Input type`` as JSON text (None where not recorded), from the events
    table's ``shapes`` column, each distinct signature parsed once."""
    dims = np.full(op_rows.size, None, dtype=object)
    types = np.full(op_rows.size, None, dtype=object)
    if "shapes" not in ev.columns or not op_rows.size:
        return dims, types
    col = ev["shapes"]
    if not isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype("category")
    codes = col.cat.codes.to_numpy()[op_rows]
    cats = col.cat.categories
    for c in np.unique(codes[codes >= 0]).tolist():  # per distinct signature, not per kernel
        try:
            got = json.loads(str(cats[c]))
        except ValueError:
            continue
        if isinstance(got, list) and len(got) >= 2:
            m = codes == c
            dims[m] = json.dumps(got[0], separators=(",", ":"))
            types[m] = json.dumps(got[1], separators=(",", ":"))
    return dims, types


def _kernels(ev, rows, launch, r, op, dims, types, module, cap_file) -> pd.DataFrame:
    """One row per replayed kernel, in time order: where it ran, its graph launch, and what the attribution says."""
    node = ev["graph_node_id"].to_numpy()[rows] if "graph_node_id" in ev.columns else np.full(rows.size, -1)
    out = pd.DataFrame(
        {
            "start_ns": ev["start_ns"].to_numpy()[rows].astype(np.int64),
            "name": names_at(ev, rows),
            "stream": ev["stream"].to_numpy()[rows].astype(np.int64),
            "launch_correlation": np.where(launch >= 0, ev["correlation"].to_numpy()[np.clip(launch, 0, None)], -1),
            "graph_node_id": pd.array(np.where(node >= 0, node, 0), dtype="Int64"),
            "op": op,
            "input_dims": dims,
            "input_types": types,
            "module": module,
            "capture_file": cap_file,
            "attributed_by": r.by,
            "score": r.score,
        }
    )
    out.loc[node < 0, "graph_node_id"] = pd.NA
    return out.sort_values(["start_ns", "stream"], kind="stable").reset_index(drop=True)[KERNEL_COLUMNS]


__all__ = ["KERNEL_COLUMNS", "op_inputs", "replay_summary"]
