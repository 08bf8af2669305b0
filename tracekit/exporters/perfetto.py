"""Annotated Perfetto trace: the source trace, unchanged, plus tracks that show the analysis.

The source file's ``traceEvents`` are re-read with the standard json module, every number kept as the
text the file wrote (a µs timestamp like ``1712195495519689.047`` does not survive a float64), and the
extra tracks are appended on a process of their own (see docs/export.md): steps, blocks, AllGathers (one
thread per stream) and exposed AllGather time. The extra events have category ``tracekit``, which
``data/classes.json`` does not know, so tracekit ingests them as kind ``other``; they sit on a pid that is
no GPU; and their times are µs written exactly from integer ns. Re-ingesting the file therefore gives
the same analysis results as the source.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import secrets
from pathlib import Path
from typing import Any

import pandas as pd

from ..annotation import Annotation
from ..errors import InputError, MissingDataError
from ..ingest import resolve_trace_path
from ..ingest.repair import salvage_json
from ..ingest.whole_text import read_text
from ..result import Result, trace_input
from ..trace import Trace
from ..analyses.options import AllGatherOptions
from ..analyses.steps.keywords import options_as_objects
from .parquet import ExportTables, collect

CATEGORY = "tracekit"
TRACKS_PID = 1 << 30  # far above any OS pid (Linux pid_max ≤ 2^22) and any GPU index
TID_STEPS, TID_BLOCKS, TID_EXPOSED, TID_AG0 = 1, 2, 3, 100


def us_text(ns: int) -> str:
    """Exact µs text of integer ns: 5120216462 → '5120216.462' (what Kineto writes, with 3 decimals)."""
    ns = int(ns)
    sign, a = ("-", -ns) if ns < 0 else ("", ns)
    return f"{sign}{a // 1000}.{a % 1000:03d}"


class _Raw:
    """A JSON number kept as its text, written back verbatim."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _plain(v: Any) -> Any:
    """JSON-safe Python value for an args entry: ints stay ints, NaN and <NA> become null."""
    if v is None or v is pd.NA:
        return None
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else round(v, 3)
    return v


def _x(name: str, tid: int, pid: int, start_ns: int, end_ns: int, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": CATEGORY,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": _Raw(us_text(start_ns)),
        "dur": _Raw(us_text(int(end_ns) - int(start_ns))),
        "args": {k: _plain(v) for k, v in args.items()},
    }


def _meta(kind: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": args}


def _rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    return df.astype(object).where(df.notna(), None).to_dict("records") if len(df) else []


def track_events(export: ExportTables, *, pid: int = TRACKS_PID) -> tuple[list[dict[str, Any]], pd.DataFrame]:
    """The extra events (``M`` name records first) and a table of the tracks: tid, track, events."""
    t = export.tables
    label = f"tracekit analysis ({export.annotation})" if export.annotation else "tracekit analysis"
    tracks: list[tuple[int, str, list[dict[str, Any]]]] = []
    steps = [
        _x(
            f"step {r['step']}",
            TID_STEPS,
            pid,
            r["start_ns"],
            r["end_ns"],
            {k: r[k] for k in ("step", "bs", "dur_ns", "busy_ns", "ag_only_ns", "idle_ns", "exposed_ns")},
        )
        for r in _rows(t["steps"])
    ]
    tracks.append((TID_STEPS, "steps", steps))
    blocks = [
        _x(
            str(r["block_type"]),
            TID_BLOCKS,
            pid,
            r["start_ns"],
            r["end_ns"],
            {k: r[k] for k in ("step", "block", "block_type", "layer", "type_layer", "kernels", "kernel_ns")},
        )
        for r in _rows(t["blocks"])
    ]
    tracks.append((TID_BLOCKS, "blocks", blocks))
    exposed = [
        _x(
            f"exposed {r['type']}",
            TID_EXPOSED,
            pid,
            r["start_ns"],
            r["end_ns"],
            {"ag": r["ag"], "step": r["step"], "type": r["type"], "exposed_ns": r["end_ns"] - r["start_ns"]},
        )
        for r in _rows(t["exposed"])
    ]
    tracks.append((TID_EXPOSED, "exposed AllGather time", exposed))
    ags = t["allgathers"]
    for i, ((dev, stream), g) in enumerate(ags.groupby(["device", "stream"], sort=True)):
        tid = TID_AG0 + i
        evs = [
            _x(
                f"AllGather {r['type']}",
                tid,
                pid,
                r["start_ns"],
                r["end_ns"],
                {
                    k: r[k]
                    for k in (
                        "ag",
                        "step",
                        "type",
                        "device",
                        "stream",
                        "copies",
                        "local_copy",
                        "received_bytes",
                        "full_bytes",
                        "effective_gbps",
                        "complete",
                        "gaps_ns",
                        "exposed_ns",
                    )
                },
            )
            for r in _rows(g)
        ]
        tracks.append((tid, f"AllGathers (device {dev}, stream {stream})", evs))
    out = [_meta("process_name", pid, 0, {"name": label}), _meta("process_sort_index", pid, 0, {"sort_index": -1})]
    for order, (tid, name, _) in enumerate(tracks):
        out += [
            _meta("thread_name", pid, tid, {"name": name}),
            _meta("thread_sort_index", pid, tid, {"sort_index": order}),
        ]
    for _, _, evs in tracks:
        out += evs
    table = pd.DataFrame(
        [{"tid": tid, "track": name, "events": len(evs)} for tid, name, evs in tracks],
        columns=["tid", "track", "events"],
    )
    return out, table


def read_document(path: Path) -> tuple[Any, list[str]]:
    """The source trace as Python objects, numbers kept as text; a truncated file is salvaged."""
    raw = read_text(path)
    warnings = list(raw.warnings)
    try:
        doc = json.loads(raw.data, parse_float=_Raw)
    except ValueError as first:
        fixed = salvage_json(raw.data)
        if fixed is None:
            raise InputError(f"{path} is not valid JSON ({first}); pass a torch-profiler trace") from None
        text, lost = fixed
        doc = json.loads(bytes(text), parse_float=_Raw)
        warnings.append(
            f"{path}: the JSON is truncated or damaged; the annotated trace keeps the complete records"
            f" and lost the last {lost} bytes of text"
        )
    return doc, warnings


def _dumps(doc: Any) -> bytes:
    """Compact JSON in which every :class:`_Raw` number is written as its original text."""
    marker = f"\x00tk{secrets.token_hex(6)}:"

    def default(o: Any) -> Any:
        if isinstance(o, _Raw):
            return marker + o.text
        raise TypeError(f"{type(o).__name__} is not JSON serialisable")

    text = json.dumps(doc, default=default, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    pattern = re.compile('"' + re.escape(json.dumps(marker)[1:-1]) + '([^"]*)"')
    return pattern.sub(r"\1", text).encode("ascii")


def _write_bytes(data: bytes, out: Path) -> None:
    """The file whole or not at all: a temporary name beside ``out``, renamed into place (render/files.py)."""
    from ..render.files import write_file

    name = out.name.lower()
    if name.endswith(".gz"):

        def write(fh) -> None:  # mtime 0 and no name: the same input gives the same bytes
            with gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=6, mtime=0, filename="") as gz:
                gz.write(data)
    elif name.endswith((".zst", ".zstd")):
        import zstandard

        def write(fh) -> None:
            fh.write(zstandard.ZstdCompressor(level=6).compress(data))
    else:

        def write(fh) -> None:
            fh.write(data)

    write_file(out, write, what="annotated trace")


def write_annotated_trace(export: ExportTables, out: str | Path, *, source: str | Path | None = None) -> Result:
    """Write the source trace plus the analysis tracks to ``out`` (.json, .json.gz or .json.zst)."""
    src = resolve_trace_path(source if source is not None else export.trace.path)
    out = Path(out)
    from ..render.files import OutputError, check_file_target

    if out.is_dir():
        raise OutputError(f"{out} is a directory; pass a file name such as trace.annotated.json.gz")
    check_file_target(out, "annotated trace")  # before the work: no such folder, a read-only file
    if out.exists() and os.path.samefile(out, src):
        raise OutputError(
            f"{out} is the trace this annotate reads; writing there would replace it — choose another --out"
        )
    prof = export.trace.meta.get("profiler")
    if isinstance(prof, dict) and prof.get("name") not in (None, "kineto"):  # its tracks go into a Chrome-trace JSON
        raise MissingDataError(
            f"{src} was written by {prof.get('label') or prof.get('name')}, and annotate adds its tracks to the source's"
            " Chrome-trace JSON (a PyTorch-profiler trace); write its tables with tracekit export instead"
        )
    doc, warnings = read_document(src)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise InputError(f"{src} has no traceEvents list; pass a torch-profiler trace")
    pids = {e.get("pid") for e in events if isinstance(e, dict)}
    pid = TRACKS_PID
    while pid in pids:
        pid += 1
    extra, tracks = track_events(export, pid=pid)
    original = len(events)
    events.extend(extra)
    data = _dumps(doc)
    _write_bytes(data, out)
    added = sum(1 for e in extra if e["ph"] == "X")
    summary = {
        "out": str(out),
        "source": str(src),
        "annotation": export.annotation,
        "original_records": original,
        "added_events": added,
        "added_metadata": len(extra) - added,
        "pid": pid,
        "category": CATEGORY,
        "json_bytes": len(data),
        "file_bytes": out.stat().st_size,
    }
    return Result(
        command="annotate",
        inputs=[trace_input(export.trace)],
        params=export.params,
        summary=summary,
        tables={"tracks": tracks},
        warnings=list(export.warnings) + warnings,
    )


@options_as_objects
def annotate_trace(
    trace: Trace,
    ann: Annotation | None,
    out: str | Path,
    *,
    ag: str = "ptop",
    steps=None,
    allgather: AllGatherOptions | None = None,
) -> Result:
    """`tracekit annotate`: run the analyses (:func:`~tracekit.exporters.parquet.collect`, its options) and write
    the trace."""
    return write_annotated_trace(collect(trace, ann, ag=ag, steps=steps, allgather=allgather), out)
