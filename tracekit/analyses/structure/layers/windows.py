"""Automatic layers: the windows of every step (head, layers, between, tail) and each event's window.

``step_windows`` turns the chosen assembly into one row per window with its type name, the kernels of any stream that
start in it (the annotation engine's rule) and their time; ``layer_windows_by_event`` gives each event its window's
type."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from .... import intervals as iv
from ....events import categorical_at
from ....trace import Trace
from .assembly import Assembly
from .sequences import Context
from .type_names import duration_split, name_types, type_key, type_table

HEAD, TAIL, BETWEEN = "head", "tail", "between"


def step_windows(trace: Trace, ctx: Context, asm: Assembly | None, cr) -> tuple[pd.DataFrame, pd.DataFrame]:
    ev = trace.events
    ks = np.flatnonzero((ev["kind"] == "kernel").to_numpy())
    k_start = ev["start_ns"].to_numpy(np.int64)[ks]
    k_dur = ev["dur_ns"].to_numpy(np.int64)[ks]
    rows = []
    sigs: dict[tuple, int] = {}
    key_of: dict[tuple, tuple] = {}  # a layer's segment labels -> its type key (type_key), made once per labels
    inst: dict[int, list] = defaultdict(list)
    for seq in ctx.seqs:
        layers = asm.layers.get(seq.step, []) if asm is not None else []
        n = seq.codes.size

        def at(i: int, seq=seq, n=n) -> int:
            return int(seq.starts[i]) if i < n else seq.end_ns

        def row_at(i: int, seq=seq, n=n) -> int:
            return int(seq.rows[i]) if i < n else -1

        cursor, pos = seq.start_ns, 0
        for li, lay in enumerate(layers):
            s = at(lay.lo)
            if lay.lo > pos or (li == 0 and s > cursor):
                kind_w = HEAD if li == 0 else BETWEEN
                rows.append([seq.step, kind_w, -1, kind_w, cursor, s, None, row_at(pos)])
            e = at(lay.hi)
            key = key_of.get(lay.sig)
            if key is None:
                key = key_of[lay.sig] = type_key(ctx, asm, lay.sig)
            tid = sigs.setdefault(key, len(sigs))
            rows.append([seq.step, "layer", li, tid, s, e, lay, row_at(lay.lo)])
            inst[tid].append((seq, lay))
            cursor, pos = e, lay.hi
        if not layers:
            rows.append([seq.step, HEAD, -1, HEAD, seq.start_ns, seq.end_ns, None, row_at(0)])
        elif pos < n or cursor < seq.end_ns:
            rows.append([seq.step, TAIL, -1, TAIL, cursor, seq.end_ns, None, row_at(pos)])
    names = name_types(ctx, sigs, inst, asm, cr)
    split = duration_split(ctx, inst, names)
    out = pd.DataFrame(rows, columns=["step", "kind", "layer", "type_id", "start_ns", "end_ns", "obj", "first_kernel"])
    lt = []
    for r in out.itertuples(index=False):
        if r.kind != "layer":
            lt.append(r.kind)
        else:
            lt.append(split.get(id(r.obj), names[r.type_id]))
    out["layer_type"] = lt
    # kernels of any stream that start in each window (the annotation engine's rule)
    ws, we = out["start_ns"].to_numpy(np.int64), out["end_ns"].to_numpy(np.int64)
    order = np.argsort(ws, kind="stable")
    w_of = iv.window_of(k_start, ws[order], we[order])
    inside = w_of >= 0
    idx = order[w_of[inside]]
    out["kernels"] = np.bincount(idx, minlength=len(out)).astype(np.int64)
    out["kernel_ns"] = np.bincount(idx, weights=k_dur[inside], minlength=len(out)).astype(np.int64)
    out["base_type"] = [names[t] if k == "layer" else k for k, t in zip(out["kind"], out["type_id"])]
    out["exact"] = [bool(o.exact) if o is not None else True for o in out["obj"]]
    out["note"] = [o.note if o is not None else "" for o in out["obj"]]
    out["main_kernels"] = [o.hi - o.lo if o is not None else 0 for o in out["obj"]]
    out = out.drop(columns=["obj", "type_id"])
    types = type_table(ctx, sigs, inst, names, split)
    return out[
        [
            "step",
            "kind",
            "layer",
            "layer_type",
            "base_type",
            "start_ns",
            "end_ns",
            "kernels",
            "kernel_ns",
            "main_kernels",
            "exact",
            "note",
            "first_kernel",
        ]
    ], types


def layer_windows_by_event(events: pd.DataFrame, windows: pd.DataFrame) -> pd.Series:
    """Each event's window type (a layer type, head, between, tail) by its start, <NA> outside every window."""
    w = windows.sort_values("start_ns", kind="stable")
    k = iv.window_of(
        events["start_ns"].to_numpy(np.int64), w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)
    )
    return pd.Series(categorical_at(w["layer_type"].to_numpy(dtype=object), k), index=events.index)
