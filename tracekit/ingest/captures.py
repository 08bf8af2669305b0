"""Capture traces of CUDA/HIP graphs: found beside a replay trace or given by path, and read (docs/replay.md).

sglang (``--enable-profile-cuda-graph``, ``SGLANG_GRAPH_BATCH_CAPTURE=1``) and vLLM
(``--profiler-config.capture_torch_profiler``) write a profiler trace of each graph **capture** into a
``capture_traces/`` folder beside the replay trace, with an ``execution_details.json`` naming each file's
``batch_size`` and ``mode`` (FULL or PIECEWISE). A capture is a Kineto trace, read with :func:`tracekit.load`; what
the events table does not keep, the kernel each launch record names (``args.kernel``) and a graph node id where the
profiler wrote one, is read here by the record's index in ``traceEvents`` (the events table's ``event_id``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np

from ..errors import InputError
from ..trace import Trace
from .whole_text import read_text

CAPTURE_DIR = "capture_traces"
DETAILS = "execution_details.json"
TRACE_SUFFIXES = (".json", ".json.gz", ".json.zst")
RECORD_HINT = (
    "record the graph capture beside the trace: sglang --enable-profile-cuda-graph (with"
    " SGLANG_GRAPH_BATCH_CAPTURE=1), vLLM --profiler-config.capture_torch_profiler, or pass --capture PATH"
)


@dataclass(frozen=True)
class CaptureRef:
    """One capture trace file: its batch size and graph mode where ``execution_details.json`` names them."""

    path: Path
    batch_size: int | None = None
    mode: str | None = None  # "FULL", "PIECEWISE" or None (not named)
    source: str = "beside"  # "beside" (found next to the trace) or "given" (--capture)


@dataclass
class CaptureTrace:
    """A read capture: the trace, and per launch record that names a kernel its events row, kernel name and graph
    node id (-1: none written)."""

    ref: CaptureRef
    trace: Trace
    launch_rows: np.ndarray
    launch_kernel: np.ndarray  # object array of names
    launch_node: np.ndarray  # int64
    warnings: list[str] = field(default_factory=list)


class _LaunchArgs(msgspec.Struct, rename={"node": "graph node id"}):
    kernel: Union[str, None] = None
    node: Any = None


class _Record(msgspec.Struct):
    args: Union[_LaunchArgs, None] = None


class _Doc(msgspec.Struct):
    traceEvents: Union[list[_Record], None] = None


_DOC = msgspec.json.Decoder(_Doc)
_ARRAY = msgspec.json.Decoder(list[_Record])


def _is_trace_file(p: Path) -> bool:
    return p.is_file() and p.name.endswith(TRACE_SUFFIXES) and p.name != DETAILS


def _details(folder: Path) -> dict[str, dict[str, Any]]:
    """``execution_details.json`` of ``folder`` as {file name: entry}; {} when absent."""
    f = folder / DETAILS
    if not f.is_file():
        return {}
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
        entries = doc if isinstance(doc, list) else doc.get("captures", doc.get("files", []))
        return {str(e["file"]): e for e in entries if isinstance(e, dict) and "file" in e}
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        raise InputError(f"{f} is not a list of {{file, batch_size, mode}} entries ({exc}); fix or remove it") from exc


def _refs_in(folder: Path, source: str) -> list[CaptureRef]:
    det = _details(folder)
    out = []
    for p in sorted(q for q in folder.iterdir() if _is_trace_file(q)):
        e = det.get(p.name, {})
        bs = e.get("batch_size")
        mode = e.get("mode")
        out.append(
            CaptureRef(
                p,
                int(bs) if isinstance(bs, (int, float)) and not isinstance(bs, bool) else None,
                str(mode).upper() if mode else None,
                source,
            )
        )
    return out


def find_captures(trace_path: str | Path | None, given=()) -> list[CaptureRef]:
    """The capture traces of a replay trace: each ``given`` path (a file or a folder of them; ``--capture``), else
    the ``capture_traces/`` folder beside ``trace_path`` (or inside it, when it is a folder)."""
    if given:
        out: list[CaptureRef] = []
        for g in given:
            p = Path(g)
            if p.is_dir():
                found = _refs_in(p, "given")
                if not found:
                    raise InputError(f"{p} holds no trace files (.json, .json.gz, .json.zst); pass a capture trace")
                out += found
            elif p.is_file():
                det = _details(p.parent).get(p.name, {})
                bs = det.get("batch_size")
                out.append(CaptureRef(p, int(bs) if isinstance(bs, int) else None, (det.get("mode") or None), "given"))
            else:
                raise InputError(f"--capture {p}: no such file or folder; pass a capture trace or its folder")
        return out
    if trace_path is None:
        return []
    base = Path(trace_path)
    for folder in (base / CAPTURE_DIR, base.parent / CAPTURE_DIR):
        if folder.is_dir():
            return _refs_in(folder, "beside")
    return []


def files_read_beside(trace_path: str | Path) -> list[Path]:
    """The files a command reads beside a replay trace without being given them: its ``capture_traces/`` (each
    capture and ``execution_details.json``) and PyTorch's graph-annotation side files. They are the command's inputs
    as much as the trace (an ``-o`` there is refused: ``tracekit.cli.guard``)."""
    from .graph_annotations import find_annotations

    base = Path(trace_path)
    out = []
    for folder in (base / CAPTURE_DIR, base.parent / CAPTURE_DIR):
        if folder.is_dir():
            out += [q for q in sorted(folder.iterdir()) if _is_trace_file(q) or q.name == DETAILS]
            break
    try:
        out += find_annotations(base)
    except InputError:  # not this function's to judge: the command that reads them says so
        pass
    return out


def launch_args(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of the records of ``path`` that name a kernel in their args: (index in traceEvents, kernel name, graph node
    id or -1)."""
    text = read_text(path).data
    head = bytes(memoryview(text)[:64]).lstrip()
    try:
        recs = _ARRAY.decode(text) if head.startswith(b"[") else (_DOC.decode(text).traceEvents or [])
    except msgspec.DecodeError as exc:
        raise InputError(f"{path} is not a readable Kineto trace ({exc}); pass a capture trace") from exc
    idx, names, nodes = [], [], []
    for i, r in enumerate(recs):  # once per capture file (small: one step's launches), not per replayed kernel
        a = r.args
        if a is not None and a.kernel is not None:
            idx.append(i)
            names.append(a.kernel)
            nodes.append(a.node if isinstance(a.node, int) and not isinstance(a.node, bool) else -1)
    return np.asarray(idx, dtype=np.int64), np.asarray(names, dtype=object), np.asarray(nodes, dtype=np.int64)


def load_capture(ref: CaptureRef, *, cache: bool = True, cache_dir=None) -> CaptureTrace:
    """Read one capture: the trace (:func:`tracekit.load`) and its launch records' kernel names and node ids."""
    from . import load

    t = load(ref.path, cache=cache, cache_dir=cache_dir)
    idx, names, nodes = launch_args(ref.path)
    eid = t.events["event_id"].to_numpy()
    order = np.argsort(eid, kind="stable")
    pos = np.searchsorted(eid[order], idx)
    ok = (pos < eid.size) & (eid[order][np.clip(pos, 0, max(eid.size - 1, 0))] == idx) if eid.size else idx < 0
    rows = order[np.clip(pos[ok], 0, None)]
    by_row = np.argsort(rows, kind="stable")
    return CaptureTrace(ref, t, rows[by_row], names[ok][by_row], nodes[ok][by_row])


__all__ = ["CaptureRef", "CaptureTrace", "RECORD_HINT", "find_captures", "launch_args", "load_capture"]
