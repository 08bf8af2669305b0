"""Raw columns → the events table (schema.py) and an IngestReport.

Classification runs on the distinct names only and is mapped back through category codes, so
its cost does not grow with the number of events.
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


def _factorize(values: list) -> tuple[np.ndarray, list]:
    codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=False)
    return codes.astype(np.int32), list(uniques)


def build_events(raw: RawColumns) -> tuple[pd.DataFrame, dict[str, int], dict[str, Any]]:
    """Return (events table sorted by start, dropped-by-reason counts, lane names)."""
    n = raw.n
    ph = np.asarray(raw.ph, dtype=object)
    ph = np.where(pd.isna(ph), "", ph)
    dropped: dict[str, int] = {}
    lanes = _lane_names(raw, ph)

    keep = np.ones(n, dtype=bool)
    for phase, reason in NON_EVENT_PHASES.items():
        sel = ph == phase
        if sel.any():
            key = f"{reason} record (ph '{phase}')"
            dropped[key] = dropped.get(key, 0) + int(sel.sum())
            keep &= ~sel
    unknown = keep & ~np.isin(ph, ["X", "i", "I", "B", "E", "b", "e", "n"])
    _count(dropped, "record with an unsupported or missing phase 'ph'", unknown)
    keep &= ~unknown
    paired = keep & np.isin(ph, ["B", "E", "b", "e", "n"])
    _count(dropped, "begin/end or async record (ph B/E/b/e/n) not paired by tracekit", paired)
    keep &= ~paired
    instant = np.isin(ph, ["i", "I"])

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
    start = raw.ts_ns[idx]
    dur = np.where(instant[idx], 0, raw.dur_ns[idx])
    order = np.lexsort((idx, start))  # stable by file order within equal starts
    idx, start, dur = idx[order], start[order], dur[order]
    inst = instant[idx]

    cat_codes, cat_uniques = _factorize([raw.cat[i] for i in idx.tolist()])
    name_codes, name_uniques = _factorize([raw.name[i] for i in idx.tolist()])
    cat_uniques = ["" if c is None else str(c) for c in cat_uniques]
    name_uniques = ["" if c is None else str(c) for c in name_uniques]

    classes = load_classes()
    kind_by_cat = np.array([classes.kind_for_cat(c) for c in cat_uniques] or ["other"], dtype=object)
    kind = kind_by_cat[cat_codes] if len(idx) else np.array([], dtype=object)
    kind = np.where(inst, "instant", kind)

    pid = raw.pid[idx]
    tid = raw.tid[idx]
    args = {k: v[idx] for k, v in raw.ints.items()}
    is_gpu = np.isin(kind, GPU_KINDS)
    stream = np.where(is_gpu, np.where(args["stream"] >= 0, args["stream"], tid), -1)
    stream = np.where(is_gpu & (kind == "gpu_annotation"), tid, stream)
    device = np.where(is_gpu, np.where(args["device"] >= 0, args["device"], pid), -1)

    copy_kind = _classify_copies(name_uniques, name_codes, kind, [raw.kind_arg[i] for i in idx.tolist()], classes)
    comm = _classify_comm(name_uniques, name_codes, kind, classes)

    grid = raw.grid[idx]
    block = raw.block[idx]
    df = pd.DataFrame({
        "event_id": idx.astype(np.int64),
        "start_ns": start.astype(np.int64),
        "dur_ns": dur.astype(np.int64),
        "end_ns": (start + dur).astype(np.int64),
        "name": pd.Categorical.from_codes(name_codes, categories=_unique_categories(name_uniques, name_codes)),
        "cat": pd.Categorical.from_codes(cat_codes, categories=_unique_categories(cat_uniques, cat_codes)),
        "kind": pd.Categorical(kind, categories=schema.KINDS),
        "device": device.astype(np.int32),
        "stream": stream.astype(np.int64),
        "pid": pid,
        "tid": tid,
        "correlation": args["correlation"],
        "external_id": args["external_id"],
        "bytes": args["bytes"],
        "copy_kind": pd.Categorical(copy_kind, categories=schema.COPY_KINDS),
        "comm_class": pd.Categorical(comm["comm_class"], categories=schema.COMM_CLASSES),
        "collective": pd.Categorical(comm["collective"]),
        "algo": pd.Categorical(comm["algo"]),
        "protocol": pd.Categorical(comm["protocol"]),
        "grid_x": grid[:, 0], "grid_y": grid[:, 1], "grid_z": grid[:, 2],
        "block_x": block[:, 0], "block_y": block[:, 1], "block_z": block[:, 2],
        "registers": args["registers"].astype(np.int32),
        "shared_mem": args["shared_mem"].astype(np.int64),
    })
    return df, dropped, lanes


def _unique_categories(uniques: list, codes: np.ndarray) -> list:
    # distinct raw values can map to the same text (None vs ""): keep categories unique
    if len(set(uniques)) == len(uniques):
        return uniques
    seen: dict[str, int] = {}
    remap = np.empty(len(uniques), dtype=np.int32)
    cats: list[str] = []
    for i, u in enumerate(uniques):
        if u not in seen:
            seen[u] = len(cats)
            cats.append(u)
        remap[i] = seen[u]
    codes[:] = remap[codes]
    return cats


def _count(dropped: dict[str, int], reason: str, mask: np.ndarray) -> None:
    c = int(mask.sum())
    if c:
        dropped[reason] = dropped.get(reason, 0) + c


def _classify_copies(names: list[str], codes: np.ndarray, kind: np.ndarray, kind_args: list, classes) -> np.ndarray:
    by_name = np.array([classes.copy_kind_for(n) for n in names] or [None], dtype=object)
    out = by_name[codes] if len(codes) else np.array([], dtype=object)
    is_copy = np.isin(kind, ("memcpy", "memset"))
    out = np.where(is_copy, out, None)
    # AMD names copies without the direction in some builds; its "kind" arg carries it.
    for i in np.flatnonzero(is_copy & pd.isna(out)):
        k = kind_args[i]
        out[i] = k if k in schema.COPY_KINDS else ("memset" if kind[i] == "memset" else "other")
    return out


def _classify_comm(names: list[str], codes: np.ndarray, kind: np.ndarray, classes) -> dict[str, np.ndarray]:
    per_name = [classes.comm_for(n) for n in names]
    out: dict[str, np.ndarray] = {}
    is_kernel = kind == "kernel"
    for j, key in enumerate(("comm_class", "collective", "algo", "protocol")):
        table = np.array([p[j] for p in per_name] or [None], dtype=object)
        col = table[codes] if len(codes) else np.array([], dtype=object)
        out[key] = np.where(is_kernel, col, None)
    return out


def _lane_names(raw: RawColumns, ph: np.ndarray) -> dict[str, Any]:
    """process_name / thread_name metadata records, keyed 'pid' and 'pid:tid'."""
    processes: dict[str, str] = {}
    threads: dict[str, str] = {}
    for i in np.flatnonzero(ph == "M").tolist():
        label = raw.meta_name[i]
        if not isinstance(label, str):
            continue
        if raw.name[i] == "process_name":
            processes[str(raw.pid[i])] = label
        elif raw.name[i] == "thread_name":
            threads[f"{raw.pid[i]}:{raw.tid[i]}"] = label
    return {"process_names": processes, "thread_names": threads}

