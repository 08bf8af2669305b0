"""Raw columns → the events table (schema.py) and the drop counts.

Everything works on integer codes: phases, categories and names arrive as codes into small
dictionaries, and classification runs on the distinct names only, so its cost does not grow with
the number of events.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .. import schema
from ..data import load_classes
from .kineto import RawColumns

GPU_KINDS = ("kernel", "memcpy", "memset", "sync", "gpu_annotation")
# Records that are not events of the timeline. They are counted, never silently lost.
NON_EVENT_PHASES = {
    "M": "metadata",
    "s": "flow",
    "f": "flow",
    "t": "flow",
    "C": "counter",
}


def build_events(raw: RawColumns) -> tuple[pd.DataFrame, dict[str, int], dict[str, Any]]:
    """Return (events table sorted by start, dropped-by-reason counts, lane names).

    Consumes ``raw``: each raw column is released once it has been gathered, so the raw and the
    final columns are never all alive at once.
    """
    dropped: dict[str, int] = {}
    lanes = _lane_names(raw)

    def by_phase(values) -> np.ndarray:
        table = np.array([p in values for p in raw.ph_uniques] + [False])
        return table[raw.ph] if raw.n else np.zeros(0, dtype=bool)

    keep = np.ones(raw.n, dtype=bool)
    for phase, reason in NON_EVENT_PHASES.items():
        sel = by_phase((phase,))
        _count(dropped, f"{reason} record (ph '{phase}')", sel)
        keep &= ~sel
    unknown = keep & ~by_phase(("X", "i", "I", "B", "E", "b", "e", "n"))
    _count(dropped, "record with an unsupported or missing phase 'ph'", unknown)
    keep &= ~unknown
    paired = keep & by_phase(("B", "E", "b", "e", "n"))
    _count(dropped, "begin/end or async record (ph B/E/b/e/n) not paired by tracekit", paired)
    keep &= ~paired
    instant = by_phase(("i", "I"))

    bad_ts = keep & ~raw.ts_ok
    _count(dropped, "event without a usable 'ts'", bad_ts)
    keep &= ~bad_ts
    complete = keep & ~instant
    for state, reason in ((1, "complete event without 'dur'"), (2, "complete event with a non-finite 'dur'"),
                          (3, "complete event with a negative 'dur'")):
        sel = complete & (raw.dur_state == state)
        _count(dropped, reason, sel)
        keep &= ~sel

    idx = np.flatnonzero(keep)
    del keep, complete, bad_ts, unknown, paired
    start = raw.ts_ns[idx]
    order = np.argsort(start, kind="stable")  # ties keep file order
    idx = idx[order]
    start = start[order]
    del order
    raw.ts_ns = raw.ts_ok = raw.dur_state = None
    inst = instant[idx]
    del instant
    dur = np.where(inst, 0, raw.dur_ns[idx])
    raw.dur_ns = None

    classes = load_classes()
    cat_codes = raw.cat[idx]
    kind_by_cat = np.array([schema.KINDS.index(classes.kind_for_cat(c)) for c in raw.cat_uniques] + [0],
                           dtype=np.int8)
    kind_code = np.where(inst, schema.KINDS.index("instant"), kind_by_cat[cat_codes]).astype(np.int8)

    pid, tid = raw.pid[idx], raw.tid[idx]
    raw.pid = raw.tid = None
    args = {k: raw.ints.pop(k)[idx] for k in list(raw.ints)}
    is_gpu = np.isin(kind_code, [schema.KINDS.index(k) for k in GPU_KINDS])
    is_ann = kind_code == schema.KINDS.index("gpu_annotation")
    stream = np.where(is_gpu, np.where((args["stream"] >= 0) & ~is_ann, args["stream"], tid), -1)
    device = np.where(is_gpu, np.where(args["device"] >= 0, args["device"], pid), -1)

    name_codes = raw.name[idx]
    grid, block = raw.grid[idx], raw.block[idx]
    raw.grid = raw.block = None
    data = {
        "event_id": idx.astype(np.int64),
        "start_ns": start.astype(np.int64),
        "dur_ns": dur.astype(np.int64),
        "end_ns": (start + dur).astype(np.int64),
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
        "copy_kind": _classify_copies(raw, idx, name_codes, kind_code, classes),
        **_classify_comm(raw.name_uniques, name_codes, kind_code, classes),
        "grid_x": grid[:, 0], "grid_y": grid[:, 1], "grid_z": grid[:, 2],
        "block_x": block[:, 0], "block_y": block[:, 1], "block_z": block[:, 2],
        "registers": args["registers"].astype(np.int32),
        "shared_mem": args["shared_mem"].astype(np.int64),
    }
    return pd.DataFrame(data, copy=False), dropped, lanes


def _categorical(codes: np.ndarray, uniques: list) -> pd.Categorical:
    """Categorical of the values in use, categories in first-seen order."""
    used = np.zeros(len(uniques) + 1, dtype=bool)
    used[codes] = True
    keep = np.flatnonzero(used[:-1])
    remap = np.full(len(uniques) + 1, -1, dtype=np.int32)
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    return pd.Categorical.from_codes(remap[codes], categories=pd.Index([uniques[i] for i in keep]))


def _count(dropped: dict[str, int], reason: str, mask: np.ndarray) -> None:
    c = int(mask.sum())
    if c:
        dropped[reason] = dropped.get(reason, 0) + c


def _code(values: list, v) -> int:
    return values.index(v) if v in values else -1


def _classify_copies(raw: RawColumns, idx: np.ndarray, name_codes: np.ndarray, kind_code: np.ndarray,
                     classes) -> pd.Categorical:
    by_name = np.array([_code(schema.COPY_KINDS, classes.copy_kind_for(n)) for n in raw.name_uniques] + [-1],
                       dtype=np.int8)
    memset = schema.KINDS.index("memset")
    is_copy = np.isin(kind_code, [schema.KINDS.index("memcpy"), memset])
    out = np.where(is_copy, by_name[name_codes], -1).astype(np.int8)
    # AMD names some copies without the direction; its "kind" arg carries it.
    for i in np.flatnonzero(is_copy & (out < 0)).tolist():
        k = raw.kind_arg.get(int(idx[i]))
        fallback = "memset" if kind_code[i] == memset else "other"
        out[i] = schema.COPY_KINDS.index(k if k in schema.COPY_KINDS else fallback)
    return pd.Categorical.from_codes(out, categories=schema.COPY_KINDS)


def _classify_comm(names: list[str], codes: np.ndarray, kind_code: np.ndarray, classes) -> dict[str, pd.Categorical]:
    per_name = [classes.comm_for(n) for n in names]
    is_kernel = kind_code == schema.KINDS.index("kernel")
    out: dict[str, pd.Categorical] = {}
    for j, key in enumerate(("comm_class", "collective", "algo", "protocol")):
        values = [p[j] for p in per_name]
        cats = schema.COMM_CLASSES if key == "comm_class" else sorted({v for v in values if v is not None})
        table = np.array([_code(cats, v) for v in values] + [-1], dtype=np.int16)
        col = np.where(is_kernel, table[codes], -1)
        out[key] = pd.Categorical.from_codes(col, categories=pd.Index(cats) if cats else pd.Index([], dtype=object))
    return out


def _lane_names(raw: RawColumns) -> dict[str, Any]:
    """process_name / thread_name metadata records, keyed 'pid' and 'pid:tid'."""
    processes: dict[str, str] = {}
    threads: dict[str, str] = {}
    for row, label in raw.meta_name.items():
        if not isinstance(label, str):
            continue
        name = raw.name_uniques[raw.name[row]]
        if name == "process_name":
            processes[str(raw.pid[row])] = label
        elif name == "thread_name":
            threads[f"{raw.pid[row]}:{raw.tid[row]}"] = label
    return {"process_names": processes, "thread_names": threads}
