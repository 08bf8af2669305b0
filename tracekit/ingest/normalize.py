"""Raw columns → the events table (schema.py) and the drop counts.

Everything works on integer codes: phases, categories and names arrive as codes into small
dictionaries, and classification runs on the distinct names only, so its cost does not grow with
the number of events.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pandas as pd

from .. import schema
from ..data import load_classes
from .kineto.columns import RawColumns, whole

GPU_KINDS = ("kernel", "memcpy", "memset", "sync", "gpu_annotation")


def build_events(raw: RawColumns) -> tuple[pd.DataFrame, dict[str, int], dict[str, Any]]:
    """Return (events table sorted by start, records not kept by reason, lane names).

    Consumes ``raw``: each raw column is released once it has been gathered, so the raw and the
    final columns are never all alive at once.
    """
    lanes = _lane_names(raw)
    ts = whole(raw.ts_ns)
    raw.ts_ns = None
    order = np.argsort(ts, kind="stable")  # ties keep file order
    start = ts[order]
    del ts
    event_id = _take(raw.row, order)
    dur = _take(raw.dur_ns, order)
    inst = _take(raw.instant, order)
    raw.row = raw.dur_ns = raw.instant = None
    end = start + dur
    isolated = isolated_events(start, end)
    jumped: dict[str, int] = {}
    if isolated.size:  # dropped and counted, so the span and the idle time are those of the timeline itself
        jumped = {_isolated_reason(raw, order, start, isolated): int(isolated.size)}
        keep = np.ones(len(start), dtype=bool)
        keep[isolated] = False
        order, start, end, event_id = order[keep], start[keep], end[keep], event_id[keep]
        dur, inst = dur[keep], inst[keep]

    classes = load_classes()
    cat_codes = _take(raw.cat, order)
    kind_by_cat = np.array([schema.KINDS.index(classes.kind_for_cat(c)) for c in raw.cat_uniques] + [0], dtype=np.int8)
    kind_code = np.where(inst, schema.KINDS.index("instant"), kind_by_cat[cat_codes]).astype(np.int8)

    pid, tid = _take(raw.pid, order), _take(raw.tid, order)
    raw.pid = raw.tid = None
    args = {k: _take(raw.ints.pop(k), order) for k in list(raw.ints)}
    is_gpu = np.isin(kind_code, [schema.KINDS.index(k) for k in GPU_KINDS])
    is_ann = kind_code == schema.KINDS.index("gpu_annotation")
    stream = np.where(is_gpu, np.where((args["stream"] >= 0) & ~is_ann, args["stream"], tid), -1)
    device = np.where(is_gpu, np.where(args["device"] >= 0, args["device"], pid), -1)

    name_codes = _take(raw.name, order)
    shape_codes = _take(raw.shapes, order)
    raw.shapes = None
    shape_codes[kind_code != schema.KINDS.index("cpu_op")] = -1  # the recorded inputs of cpu_ops only
    grid, block = _take(raw.grid, order), _take(raw.block, order)
    raw.grid = raw.block = None
    data = {
        "event_id": event_id,
        "start_ns": start,
        "dur_ns": dur,
        "end_ns": end,
        "name": _categorical(name_codes, raw.name_uniques),
        "cat": _categorical(cat_codes, raw.cat_uniques),
        "kind": pd.Categorical.from_codes(kind_code, categories=schema.KINDS),
        "device": device.astype(np.int32),
        "stream": stream.astype(np.int64),
        "pid": pid,
        "tid": tid,
        "correlation": args["correlation"],
        "external_id": args["external_id"],
        "bytes": args["bytes"],
        "copy_kind": _classify_copies(raw, event_id, name_codes, kind_code, classes),
        **_classify_comm(raw.name_uniques, name_codes, kind_code, classes),
        "grid_x": grid[:, 0],
        "grid_y": grid[:, 1],
        "grid_z": grid[:, 2],
        "block_x": block[:, 0],
        "block_y": block[:, 1],
        "block_z": block[:, 2],
        "registers": args["registers"].astype(np.int32),
        "shared_mem": args["shared_mem"].astype(np.int64),
        # a reader whose profiler writes no CUDA-graph ids (rocprofv3) leaves them out: -1, absent
        "graph_id": args.get("graph_id", np.full(len(start), -1, dtype=np.int64)),
        "graph_node_id": args.get("graph_node_id", np.full(len(start), -1, dtype=np.int64)),
        "shapes": _shapes_column(shape_codes, raw.shapes_uniques),
    }
    reasons = dict(raw.reasons)
    for reason, count in jumped.items():
        reasons[reason] = reasons.get(reason, 0) + count
    return pd.DataFrame(data, copy=False), reasons, lanes


def recorded(events: pd.DataFrame) -> list[str]:
    """What a trace recorded, as ``info`` names it (meta ``profiler.recorded``): the kinds of event present, in the
    schema's order, and ``shapes`` when cpu_ops carry their inputs."""
    codes = events["kind"].cat.codes.to_numpy()
    present = np.bincount(codes[codes >= 0], minlength=len(schema.KINDS))
    out = [k for k, n in zip(schema.KINDS, present.tolist()) if n]
    return out + (["shapes"] if events["shapes"].notna().any() else [])


# An event (or a handful) whose time lies far outside the dense body of the timeline — a clock that jumped, a
# stray timestamp — would make the span thousands of seconds and the idle time ~100 %. Such a group at either end
# is dropped (counted as dropped, with its name, so records_read still reconciles, and warned by every command):
# at most ISOLATED_MAX_GROUP events and one per ISOLATED_EVENTS_PER events (at least one), in a trace of at least
# ISOLATED_MIN_EVENTS events (fewer are no timeline to judge by), separated from the rest by a gap of at least
# ISOLATED_MIN_GAP_NS and ISOLATED_GAP_RATIO times the span of the rest (the range of its start times). A real
# trace's gaps are far below both. This is tracekit's one clock-outlier rule (issue 41): the analyses see the
# timeline without the group, and `temporal`'s summary.clock_outliers counts what was set aside here.
ISOLATED_MIN_EVENTS = 9
ISOLATED_EVENTS_PER = 64
ISOLATED_MAX_GROUP = 16
ISOLATED_MIN_GAP_NS = 10 * 10**9
ISOLATED_GAP_RATIO = 10
CLOCK_JUMP = "clock jump"


def clock_jumps(dropped: dict[str, int]) -> int:
    """How many events a load set aside as clock jumps (from its ``IngestReport.dropped`` counts by reason)."""
    return sum(n for reason, n in dropped.items() if reason.startswith(CLOCK_JUMP))


def isolated_events(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Indices (into ``start``, sorted ascending) of the events isolated far before or after the rest; see above."""
    n = len(start)
    if n < ISOLATED_MIN_EVENTS:
        return np.empty(0, dtype=np.int64)
    limit = max(1, min(ISOLATED_MAX_GROUP, n // ISOLATED_EVENTS_PER))

    def far(gap: int, span: int) -> bool:
        return gap >= ISOLATED_MIN_GAP_NS and gap >= ISOLATED_GAP_RATIO * span

    lo, hi = 0, n
    last = int(start[n - 1 - limit])  # the span of the rest leaves out the last few: they may be isolated too
    while lo < limit:  # leading groups
        k = next(
            (
                k
                for k in range(1, limit - lo + 1)
                if far(int(start[lo + k]) - int(end[lo : lo + k].max()), max(0, last - int(start[lo + k])))
            ),
            None,
        )
        if k is None:
            break
        lo += k
    base = int(end[lo : n - limit].max()) if n - limit > lo else None  # the body's latest end, but for the last few
    while n - hi < limit:  # trailing groups

        def body_end(k: int) -> int:
            tail = end[max(lo, n - limit) : hi - k]
            vals = ([base] if base is not None else []) + ([int(tail.max())] if tail.size else [])
            return max(vals)

        k = next(
            (
                k
                for k in range(1, limit - (n - hi) + 1)
                if hi - k - 1 > lo and far(int(start[hi - k]) - body_end(k), int(start[hi - k - 1]) - int(start[lo]))
            ),
            None,
        )
        if k is None:
            break
        hi -= k
    return np.concatenate([np.arange(0, lo), np.arange(hi, n)]).astype(np.int64)


def _isolated_reason(raw: RawColumns, order: np.ndarray, start: np.ndarray, idx: np.ndarray) -> str:
    """The drop reason, naming the first isolated event: its name, its time and how far it lies from the rest."""
    keep = np.ones(len(start), dtype=bool)
    keep[idx] = False
    body = start[keep]
    first = int(idx[0])
    code = int(np.take(whole(raw.name), order[first : first + 1])[0])
    name = raw.name_uniques[code] if 0 <= code < len(raw.name_uniques) else "?"
    t = int(start[first])
    gap = (int(body[0]) - t) if t < int(body[0]) else (t - int(body[-1]))
    more = f" and {idx.size - 1} more" if idx.size > 1 else ""
    return (
        f"{CLOCK_JUMP}: isolated {gap / 1e9:,.1f} s from the rest of the timeline, left out of the span and idle"
        f" time ('{str(name)[:80]}' at ts {t / 1000:.3f} µs{more})"
    )


def _take(column, order: np.ndarray) -> np.ndarray:
    """``column[order]`` (rows, for the 2-D grid and block), joining the column's pieces first: one column
    at a time, so the joined array is freed before the next is made."""
    return np.take(whole(column), order, axis=0)


def _categorical(codes: np.ndarray, uniques: list) -> pd.Categorical:
    """Categorical of the values in use, categories in first-seen order."""
    used = np.zeros(len(uniques) + 1, dtype=bool)
    used[codes] = True
    keep = np.flatnonzero(used[:-1])
    remap = np.full(len(uniques) + 1, -1, dtype=np.int32)
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    return pd.Categorical.from_codes(remap[codes], categories=pd.Index([uniques[i] for i in keep]))


def _shapes_column(codes: np.ndarray, uniques: list) -> pd.Categorical:
    """The cpu_ops' recorded inputs as a categorical of their JSON text (one category per distinct signature)."""
    if not uniques or not (codes >= 0).any():
        return pd.Categorical.from_codes(np.full(len(codes), -1, dtype=np.int32), categories=pd.Index([], dtype=object))
    texts = [shapes_text(u) for u in uniques]  # per distinct signature, not per event
    cats, first = np.unique(np.asarray(texts, dtype=object), return_inverse=True)  # equal once compacted: one
    table = np.append(first.astype(np.int32), np.int32(-1))
    return _categorical(table[codes], cats.tolist())


def shapes_text(key: bytes) -> str:
    """One cpu_op's inputs as ingest keeps them (Input Dims, Input type and Concrete Inputs as written, joined by NUL)
    → the JSON text ``[dims,types,concrete]`` without the file's indentation (a pretty-printed trace writes each
    dim on its own line); an absent part is ``null``."""
    parts = key.split(b"\0")
    try:
        return msgspec.json.encode([msgspec.json.decode(p) if p else None for p in parts]).decode()
    except (msgspec.DecodeError, UnicodeDecodeError):
        return "[" + ",".join(p.decode("utf-8", "replace") or "null" for p in parts) + "]"


def _code(values: list, v) -> int:
    return values.index(v) if v in values else -1


def _names_used(codes: np.ndarray, where: np.ndarray, n: int) -> list[bool]:
    """Per name code, whether an event selected by ``where`` carries it (a name no such event carries needs no
    classifying: an nsys export's thousands of distinct NVTX texts are never a copy's or a kernel's)."""
    used = np.zeros(n, dtype=bool)
    picked = codes[where]
    used[picked[(picked >= 0) & (picked < n)]] = True
    return used.tolist()


def _classify_copies(
    raw: RawColumns, event_id: np.ndarray, name_codes: np.ndarray, kind_code: np.ndarray, classes
) -> pd.Categorical:
    memset = schema.KINDS.index("memset")
    is_copy = np.isin(kind_code, [schema.KINDS.index("memcpy"), memset])
    used = _names_used(name_codes, is_copy, len(raw.name_uniques))  # only the copies' names are classified
    by_name = np.array(
        [_code(schema.COPY_KINDS, classes.copy_kind_for(n)) if u else -1 for n, u in zip(raw.name_uniques, used)]
        + [-1],
        dtype=np.int8,
    )
    out = np.where(is_copy, by_name[name_codes], -1).astype(np.int8)
    # AMD names some copies without the direction; its "kind" arg carries it.
    for i in np.flatnonzero(is_copy & (out < 0)).tolist():
        k = raw.kind_arg.get(int(event_id[i]))
        fallback = "memset" if kind_code[i] == memset else "other"
        out[i] = schema.COPY_KINDS.index(k if k in schema.COPY_KINDS else fallback)
    return pd.Categorical.from_codes(out, categories=schema.COPY_KINDS)


def _classify_comm(names: list[str], codes: np.ndarray, kind_code: np.ndarray, classes) -> dict[str, pd.Categorical]:
    is_kernel = kind_code == schema.KINDS.index("kernel")
    used = _names_used(codes, is_kernel, len(names))  # only the kernels' names are classified
    none = (None, None, None, None)
    per_name = [classes.comm_for(n) if u else none for n, u in zip(names, used)]
    # one gather per column: non-kernels point at the table's last entry, which is -1 (missing)
    kernel_codes = np.where(is_kernel, codes, len(names))
    out: dict[str, pd.Categorical] = {}
    for j, key in enumerate(("comm_class", "collective", "algo", "protocol")):
        values = [p[j] for p in per_name]
        cats = schema.COMM_CLASSES if key == "comm_class" else sorted({v for v in values if v is not None})
        table = np.array([_code(cats, v) for v in values] + [-1], dtype=np.int16)
        col = table[kernel_codes] if (table >= 0).any() else np.full(len(codes), -1, dtype=np.int16)
        out[key] = pd.Categorical.from_codes(col, categories=pd.Index(cats) if cats else pd.Index([], dtype=object))
    return out


def _lane_names(raw: RawColumns) -> dict[str, Any]:
    """process_name / thread_name metadata records, keyed 'pid' and 'pid:tid'."""
    processes: dict[str, str] = {}
    threads: dict[str, str] = {}
    for name, pid, tid, label in raw.meta:
        if name == "process_name":
            processes[str(pid)] = label
        elif name == "thread_name":
            threads[f"{pid}:{tid}"] = label
    return {"process_names": processes, "thread_names": threads}
