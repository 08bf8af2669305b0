"""Parquet export: the annotated events and every analysis table of one trace, one file per table.

:func:`collect` runs the analyses once (steps, decomposition, blocks, AllGathers, exposure,
communication) and returns an :class:`ExportTables`; :func:`write_parquet` writes it to a directory
with a ``manifest.json``. The tables and their columns are documented in docs/export.md; every column
is listed in :data:`TABLE_COLUMNS`, and every written table has exactly those columns, in that order,
with those dtypes, even when it is empty.

Categorical columns of the events table stay categorical (parquet dictionary columns: pandas reads them
back as ``category``, DuckDB as VARCHAR); the text columns of the other tables are plain strings.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._version import __version__
from ..analyses import allgathers, communication, decompose, exposure
from ..analyses.options import AllGatherOptions
from ..analyses.steps.keywords import options_as_objects
from ..analyses.steps.resolve import find_steps
from ..annotation import Annotation, annotate
from ..errors import MissingDataError, TracekitError, UsageError
from ..result import Result, trace_input
from ..schema import ANNOTATION_COLUMNS, EVENT_COLUMNS
from ..trace import Trace

EXPORT_FORMAT = "tracekit.export/2"  # 2: missing values are NULL, not -1
LEDGER_NOTE = "no launch log was given (--log LOG adds the ledger tables)"

LEDGER_COLUMNS: dict[str, dict[str, tuple[str, str, str]]] = {
    "ledger": {
        "row": ("str", "", "ledger row (usable_gib, load_peak_gib, cuda_graph_gib, kv_gib, request_slots, …)"),
        "value": ("float64", "GiB", "the row's value (GiB for *_gib rows; a count for kv_tokens, request_slots)"),
        "lines": ("str", "", "JSON list of the log line numbers it came from"),
        "how": ("str", "", "read from one line, or derived"),
        "note": ("str", "", "where the value comes from"),
    },
    "ledger_timeline": {
        "stage": ("str", "", "the stage of the launch (load_weight_begin, capture_end, …)"),
        "avail_gib": ("float64", "GiB", "free GPU memory the log reports at that stage"),
        "line": ("int64", "", "log line number"),
        "kind": ("str", "", "the record kind the reading came from"),
    },
}
TABLE_COLUMNS: dict[str, dict[str, tuple[str, str, str]]] = {
    "events": {**EVENT_COLUMNS, **ANNOTATION_COLUMNS},
    "steps": {
        "step": ("int64", "", "step index, in time order"),
        "name": ("str", "", "the step marker's name"),
        "start_ns": ("int64", "ns", "step window start"),
        "dur_ns": ("int64", "ns", "step window length: the wall"),
        "end_ns": ("int64", "ns", "step window end"),
        "bs": ("Int64", "", "batch size from the marker name (step[DECODE bs=N]); <NA> otherwise"),
        "source": ("str", "", "gpu_annotation, cpu_launch_window or whole_trace (docs/steps.md)"),
        "phase": ("str", "", "decode, prefill, verify, draft, mixed, idle or unknown (from the marker's name)"),
        "tokens": ("Int64", "", "tokens of the step from the marker name (toks=, vLLM's counts); <NA> otherwise"),
        "kernels": ("int64", "", "kernels starting in the step window"),
        "busy_ns": ("int64", "ns", "time any GPU activity other than the AllGather copies runs (as `wall`)"),
        "ag_only_ns": ("int64", "ns", "time only AllGather copies run (as `wall`)"),
        "idle_ns": ("int64", "ns", "time nothing runs; busy + ag_only + idle = dur"),
        "exposed_ns": ("int64", "ns", "exposed AllGather time inside the window (as `exposure`); 0 without AllGathers"),
    },
    "blocks": {
        "step": ("int64", "", "step"),
        "block": ("int64", "", "block index within the step"),
        "block_type": ("str", "", "block type"),
        "layer": ("int64", "", "= block"),
        "type_layer": ("int64", "", "index among the step's blocks of the same type"),
        "start_ns": ("int64", "ns", "block start (its boundary kernel, or the step start)"),
        "end_ns": ("int64", "ns", "block end (the next block's start, or the step end)"),
        "kernels": ("int64", "", "kernels of any stream starting in the block"),
        "kernel_ns": ("int64", "ns", "sum of those kernels' durations"),
    },
    "allgathers": {
        "ag": ("int64", "", "AllGather index, in time order"),
        "step": ("int64", "", "step it starts in; -1 outside every step"),
        "device": ("int64", "", "GPU"),
        "stream": ("int64", "", "side stream carrying it"),
        "type": ("str", "", "type matched by full size, or `unmatched`"),
        "start_ns": ("int64", "ns", "local copy start (first copy's without one)"),
        "end_ns": ("int64", "ns", "last copy end"),
        "copies": ("int64", "", "PtoP copies"),
        "local_copy": ("bool", "", "whether a local-copy kernel opens it"),
        "local_copy_ns": ("int64", "ns", "duration of the local copy"),
        "gaps_ns": ("int64", "ns", "span − time the stream spends copying"),
        "received_bytes": ("Int64", "B", "bytes of its PtoP copies; null when a copy has no bytes field"),
        "full_bytes": ("Int64", "B", "full weight bytes (received × G/(G−1) when complete); null when unknown"),
        "effective_gbps": ("float64", "GB/s", "received bytes ÷ span"),
        "complete": ("bool", "", "copies == G−1"),
        "exposed_ns": ("int64", "ns", "exposed time charged to it (as `exposure`)"),
    },
    "copies": {
        "ag": ("int64", "", "AllGather the copy belongs to"),
        "event_id": ("int64", "", "the copy's event_id in the events table"),
        "stream": ("int64", "", "stream"),
        "start_ns": ("int64", "ns", "start"),
        "dur_ns": ("int64", "ns", "duration"),
        "bytes": ("int64", "B", "bytes copied; -1 if unknown"),
        "gbps": ("float64", "GB/s", "bytes ÷ duration"),
        "overlaps_comm": ("bool", "", "overlaps a NCCL or DeepEP kernel on any stream"),
        "type": ("str", "", "its AllGather's type"),
        "step": ("int64", "", "its AllGather's step"),
    },
    "exposed": {
        "ag": ("int64", "", "AllGather the exposed time is charged to"),
        "step": ("int64", "", "that AllGather's step"),
        "type": ("str", "", "that AllGather's type"),
        "start_ns": ("int64", "ns", "exposed interval start"),
        "end_ns": ("int64", "ns", "exposed interval end"),
    },
    "kernels": {
        "row": ("int64", "", "the kernel's row in the events table"),
        "name": ("str", "", "kernel name"),
        "stream": ("int64", "", "GPU stream"),
        "step": ("int64", "", "step of the kernel's start (-1: outside every step)"),
        "start_ns": ("int64", "ns", "kernel start"),
        "dur_ns": ("int64", "ns", "kernel duration"),
        "category": ("str", "", "kernel category (tracekit/data/categories.json)"),
        "op": (
            "str",
            "",
            "the op it came from: its launch's, or for a graph-replayed kernel its capture's; null: unknown",
        ),
        "module": ("str", "", "that op's nn.Module path where a capture trace records it; null otherwise"),
        "attributed_by": ("str", "", "launch, capture or node_id (docs/replay.md); null: no op"),
        "layer": (
            "int64",
            "",
            "layer (= block) of the annotation it falls in; -1: no annotation with blocks, or outside",
        ),
        "op_tag": ("str", "", "op tag from the annotation; null: no annotation with blocks, or untagged"),
        "model": ("str", "", "the op's work model (tracekit/data/op_models.json); null: none fits"),
        "flops": ("float64", "FLOP", "FLOPs of the op call (on the kernel that carries it); null: unknown or none"),
        "bytes": ("float64", "B", "compulsory HBM bytes of the op call (on the kernel that carries it); null: unknown"),
    },
    "communication": {
        "step": ("int64", "", "step (-1: the whole trace when it has no steps)"),
        "class": ("str", "", "nccl, deepep, custom_all_reduce, all_to_all or weight_ag"),
        "name": ("str", "", "kernel (or copy) name"),
        "collective": ("str", "", "NCCL collective; null otherwise"),
        "algo": ("str", "", "NCCL algorithm; null otherwise"),
        "protocol": ("str", "", "NCCL protocol; null otherwise"),
        "critical_ns": ("int64", "ns", "union of its events on the main compute stream, in the step"),
        "side_ns": ("int64", "ns", "union of its events on other streams, in the step"),
        "count": ("int64", "", "events starting in the step"),
    },
}


@dataclass(frozen=True)
class ExportTables:
    """Everything tracekit exports for one trace: ``tables`` follows :data:`TABLE_COLUMNS`."""

    trace: Trace
    annotation: str | None
    params: dict[str, Any]
    tables: dict[str, pd.DataFrame]
    main_stream: tuple[int, int] | None
    warnings: list[str] = field(default_factory=list)
    empty_because: dict[str, str] = field(default_factory=dict)  # table -> why it is empty (the file's metadata)


@options_as_objects
def collect(
    trace: Trace,
    ann: Annotation | None = None,
    *,
    ag: str = "ptop",
    log: str | Path | None = None,
    steps=None,
    allgather: AllGatherOptions | None = None,
) -> ExportTables:
    """Run the analyses behind the export once: steps (with the decomposition and exposed time per step),
    annotated events and blocks (with ``ann``), AllGathers, their copies, exposed intervals and
    communication. A trace without PtoP copies gets empty AllGather tables and a warning; a trace without
    step markers is one whole-trace step (with a warning).

    ``ag``: which copies count as AllGather in the wall decomposition (``ptop`` or ``ptop+local``, as `tracekit
    wall`); ``allgather``: the :class:`AllGatherOptions` (over the annotation's; ``ag`` being taken, the one
    place they go by that name); ``steps``: StepOptions, Steps or a table (None: the annotation's)."""
    merged = (allgather or AllGatherOptions()).with_annotation(ann)
    kw = merged.as_keywords()
    steps = find_steps(trace, steps, ann=ann)
    warnings = list(trace.report.warnings)
    dec = decompose(trace, ag=ag, steps=steps)
    warnings += [w for w in dec.warnings if w not in warnings]
    main, empty_because = None, {}
    if ann is not None and ann.blocks is not None:
        a = annotate(trace, ann, steps.table)
        events, blocks, main = a.events, a.blocks, a.main_stream
        warnings += a.warnings
    else:
        events, blocks = _step_only(trace.events, steps), pd.DataFrame()
        why = "no annotation" if ann is None else f"annotation {ann.name} has no blocks section"
        empty_because["blocks"] = (
            f"{why}: blocks come from an annotation with blocks (-a ANN; tracekit suggest writes one)"
        )
        warnings.append(f"{trace.path}: {why}, so the events carry steps but no blocks or op tags")
    try:
        ag_res = allgathers(trace, ag=merged, steps=steps)
        ex_res = exposure(trace, ag=merged, steps=steps)
        warnings += [w for w in ag_res.warnings if w not in warnings]
        per_ag = ag_res.tables["per_ag"].merge(ex_res.tables["per_ag"][["ag", "exposed_ns"]], on="ag", how="left")
        copies, exposed = ag_res.tables["copies"], ex_res.tables["intervals"]
        per_step_exposed = ex_res.tables["per_step"]
    except MissingDataError as exc:
        warnings.append(f"{exc}; the allgathers, copies and exposed tables are empty")
        per_ag = copies = exposed = pd.DataFrame()
        per_step_exposed = pd.DataFrame({"step": steps.table["step"], "exposed_ns": 0})
    comm = communication(
        trace, main_stream=ann.main_stream if ann and isinstance(ann.main_stream, int) else None, ag=merged, steps=steps
    )
    step_table = steps.table.merge(
        dec.tables["per_step"][["step", "busy_ns", "ag_only_ns", "idle_ns"]], on="step"
    ).merge(per_step_exposed, on="step", how="left")
    step_table["exposed_ns"] = step_table["exposed_ns"].fillna(0)
    raw = {
        "events": events,
        "steps": step_table,
        "blocks": blocks,
        "allgathers": per_ag,
        "copies": copies,
        "exposed": exposed,
        "communication": comm.tables["per_step_class"],
        "kernels": kernel_table(trace, steps, events),
    }
    tables = {name: conform(df, TABLE_COLUMNS[name]) for name, df in raw.items()}
    if log is not None:
        tables.update(_ledger_tables(log, warnings))
    params = {
        "annotation": ann.ref if ann else None,
        "ag": ag,
        "group_size": kw["group_size"],
        "sizes": kw["sizes"],
        "local_copy": kw["local_copy_pattern"],
        **steps.options.as_params(),
    }
    return ExportTables(
        trace=trace,
        annotation=ann.name if ann else None,
        params=params,
        tables=tables,
        main_stream=main,
        warnings=warnings,
        empty_because=empty_because,
    )


def kernel_table(trace: Trace, steps, events: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per kernel: where and when it ran, its category and the op it came from (``kernel_ops``' decision,
    through :func:`tracekit.analyses.hardware.shapes.kernel_shapes`), its layer and op tag where ``events`` (the
    annotated events, row for row the trace's) give them, its module path, how it was attributed, and the op call's
    FLOPs and bytes where its model gives them."""
    from ..analyses.categories import trace_categories
    from ..analyses.hardware.shapes import kernel_shapes

    t = kernel_shapes(trace).table
    ev = trace.events
    rows = t["row"].to_numpy()
    start = ev["start_ns"].to_numpy()[rows]
    layer = np.full(len(rows), -1, dtype=np.int64)
    op_tag = np.full(len(rows), None, dtype=object)
    if events is not None and len(events) == len(ev) and "layer" in events:
        layer = events["layer"].to_numpy(dtype=np.int64)[rows]
        tags = events["op_tag"]
        op_tag = tags.astype(object).where(tags.notna(), None).to_numpy(dtype=object)[rows]
    return pd.DataFrame(
        {
            "row": rows,
            "name": ev["name"].to_numpy(dtype=object)[rows],
            "stream": ev["stream"].to_numpy()[rows],
            "step": steps.step_of(start),
            "start_ns": start,
            "dur_ns": ev["dur_ns"].to_numpy()[rows],
            "category": np.asarray(trace_categories(trace), dtype=object)[rows],
            "op": t["op"].to_numpy(dtype=object),
            "module": t["module"].to_numpy(dtype=object),
            "attributed_by": t["attributed_by"].to_numpy(dtype=object),
            "layer": layer,
            "op_tag": op_tag,
            "model": t["model"].to_numpy(dtype=object),
            "flops": t["flops"].to_numpy(dtype=float),
            "bytes": t["bytes"].to_numpy(dtype=float),
        }
    )


def _ledger_tables(log: str | Path, warnings: list[str]) -> dict[str, pd.DataFrame]:
    """The memory ledger of a launch log (its lowest rank), as the export's ledger tables."""
    from ..analyses.memory.launch_log import ledger
    from ..ingest.sglang_log import read_log

    res = ledger(read_log(log))
    warnings += [w for w in res.warnings if w not in warnings]
    rows = res.tables["rows"].assign(
        lines=lambda d: [json.dumps(list(v or [])) for v in d["lines"]],
        value=lambda d: pd.to_numeric(d["value"], errors="coerce"),
    )
    timeline = res.tables["timeline"].drop(columns=["log"], errors="ignore")
    return {
        "ledger": conform(rows, LEDGER_COLUMNS["ledger"]),
        "ledger_timeline": conform(timeline, LEDGER_COLUMNS["ledger_timeline"]),
    }


def _step_only(events: pd.DataFrame, steps) -> pd.DataFrame:
    none = np.full(len(events), -1, dtype=np.int64)
    empty_cat = pd.Categorical([None] * len(events), categories=pd.Index([], dtype=object))
    return events.assign(
        step=steps.step_of(events["start_ns"].to_numpy()),
        block=none,
        block_type=empty_cat,
        layer=none,
        type_layer=none,
        op_tag=empty_cat.copy(),
    )


def conform(df: pd.DataFrame, columns: dict[str, tuple[str, str, str]]) -> pd.DataFrame:
    """``df`` with exactly ``columns``, in order, cast to their dtypes (an empty table keeps its schema)."""
    missing = [c for c in columns if c not in df.columns]
    if missing and len(df):
        raise TracekitError(f"export table lacks column(s) {', '.join(missing)} (a tracekit bug)")
    out = {}
    for col, (dtype, _, _) in columns.items():
        s = df[col] if col in df.columns else pd.Series([], dtype=object)
        if dtype == "category":
            out[col] = s if isinstance(s.dtype, pd.CategoricalDtype) else s.astype("category")
        elif dtype == "str":
            out[col] = s.astype(object).where(s.notna(), None).astype(object)
        elif dtype == "Int64":
            out[col] = pd.array(s.astype(object).where(s.notna(), None).tolist(), dtype="Int64")
        else:
            out[col] = s.to_numpy().astype(dtype) if len(s) else np.empty(0, dtype=dtype)
    return pd.DataFrame(out, index=pd.RangeIndex(len(df) if len(df.columns) else 0))


# --------------------------------------------------------------------------- writing

_MINUS_ONE = re.compile(r"(?:^|[;(,] ?)-1\b")  # "…; -1 if unknown", "(-1: …)": the column's missing-value marker


def missing_as_null(table: str, df: pd.DataFrame) -> pd.DataFrame:
    """The file's view of a table: integer columns whose -1 means "unknown" or "none" become nullable Int64 with
    NULL there, so that DuckDB's avg(bytes) and pandas' mean() see only real values (export format 2)."""
    cols = {**TABLE_COLUMNS, **LEDGER_COLUMNS}[table]
    out = {}
    for name in df.columns:
        dtype, _, meaning = cols.get(name, ("", "", ""))
        s = df[name]
        if (name == "layer" or _MINUS_ONE.search(meaning)) and s.dtype.kind == "i":
            values = s.to_numpy()
            out[name] = pd.arrays.IntegerArray(values, values == -1)  # keeps the width: int32 → Int32
        else:
            out[name] = s
    return pd.DataFrame(out, index=df.index)


def _arrow_table(df: pd.DataFrame):
    import pyarrow as pa

    table = pa.Table.from_pandas(df, preserve_index=False)
    for i, f in enumerate(table.schema):
        # a categorical without categories (all null) has no typed values: arrow infers `null` values, which
        # read back as object; store it as the string dictionary its non-empty siblings are
        value_type = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
        if pa.types.is_null(value_type):
            typ = pa.dictionary(pa.int32(), pa.string()) if pa.types.is_dictionary(f.type) else pa.string()
            table = table.set_column(i, pa.field(f.name, typ), pa.array([None] * len(df), type=typ))
    return table


def write_parquet(export: ExportTables, out_dir: str | Path) -> Result:
    """Write each table to ``OUT_DIR/<table>.parquet`` (zstd) and ``OUT_DIR/manifest.json``.

    Returns a Result whose ``files`` table lists each file, its rows, columns and size."""
    import pyarrow.parquet as pq

    from ..render.outdir import OutputDir

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a directory; pass a directory for the parquet files")
    entries = []
    # whole or not at all: every file staged under a temporary name, the manifest last, renamed in one go with
    # interrupts held back; a second writer into the same directory is refused (tracekit/render/files.py)
    with OutputDir(out, what="export") as d:
        for name, df in export.tables.items():
            path = d.stage(f"{name}.parquet")
            df = missing_as_null(name, df)
            table = _arrow_table(df)
            if name in export.empty_because:  # an empty table says why in the file itself
                meta = {**(table.schema.metadata or {}), b"tracekit.empty_because": export.empty_because[name].encode()}
                table = table.replace_schema_metadata(meta)
            with open(path, "wb") as fh:  # a handle: pyarrow refuses a path whose name is not UTF-8
                pq.write_table(table, fh, compression="zstd")
            entries.append(
                {
                    "table": name,
                    "file": f"{name}.parquet",
                    "rows": len(df),
                    "bytes": path.stat().st_size,
                    "columns": [
                        {
                            "name": f.name,
                            "arrow_type": str(f.type),
                            "pandas_dtype": str(df[f.name].dtype),
                            "unit": {**TABLE_COLUMNS, **LEDGER_COLUMNS}[name][f.name][1],
                        }
                        for f in table.schema
                    ],
                }
            )
        manifest = {
            "tracekit": __version__,
            "format": EXPORT_FORMAT,
            "inputs": [trace_input(export.trace)],
            "annotation": export.annotation,
            "params": export.params,
            "main_stream": list(export.main_stream) if export.main_stream else None,
            "tables": entries,
            "not_exported": {} if "ledger" in export.tables else {"ledger": LEDGER_NOTE},
            "empty_because": export.empty_because,
            "warnings": export.warnings,
        }
        d.stage_bytes("manifest.json", json.dumps(manifest, indent=1, default=_json_default) + "\n")
        d.commit(remove=d.previous_files())
    files = pd.DataFrame(
        [
            {
                "table": e["table"],
                "file": str(out / e["file"]),
                "rows": e["rows"],
                "columns": len(e["columns"]),
                "bytes": e["bytes"],
            }
            for e in entries
        ],
        columns=["table", "file", "rows", "columns", "bytes"],
    )
    summary = {
        "out_dir": str(out),
        "manifest": str(out / "manifest.json"),
        "tables": len(entries),
        "total_bytes": int(files["bytes"].sum()),
        "annotation": export.annotation,
        **{f"{e['table']}_rows": e["rows"] for e in entries},
        "not_exported": [] if "ledger" in export.tables else ["ledger"],
    }
    return Result(
        command="export",
        inputs=[trace_input(export.trace)],
        params=export.params,
        summary=summary,
        tables={"files": files},
        warnings=list(export.warnings),
    )


def _json_default(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return str(v)


@options_as_objects
def export_parquet(
    trace: Trace,
    ann: Annotation | None,
    out_dir: str | Path,
    *,
    ag: str = "ptop",
    log: str | Path | None = None,
    steps=None,
    allgather: AllGatherOptions | None = None,
) -> Result:
    """`tracekit export`: :func:`collect` (its options) then :func:`write_parquet`."""
    return write_parquet(collect(trace, ann, ag=ag, log=log, steps=steps, allgather=allgather), out_dir)
