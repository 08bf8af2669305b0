"""The one-step table: for each step, every nanosecond of its wall clock charged to exactly one name.

The question users ask most: "for one decode step, kernel by kernel, wall clock and %, how long did MoE take".
Kernel time sums exceed the wall (streams overlap); this table does not: at each instant of the step the time is
charged to one activity, by this priority (documented in docs/layers.md):

1. a kernel on the main stream;
2. a copy or memset on the main stream;
3. a kernel on a side stream;
4. a memcpy on a side stream;
5. a memset on a side stream;
6. nothing runs: ``idle``.

Within one level the activity that started first wins (then the lower stream, then the earlier event). The
activity's name in the table is the value of the ``by`` column (``category`` by default, computed from the
shipped categories when the column is absent; any column works: ``block_type``, ``op_tag``, ``layer_type``,
``name``). So per (step, group_by) ``wall_ns`` sums exactly to the step's wall, and ``overlapped_ns`` is the time
the name ran while the wall was charged to another name (hidden under it). Activity on other devices than the
main stream's is left out. Everything is whole-array numpy over sorted intervals (tracekit.intervals).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...events import kinds_mask, main_stream
from ... import schema
from ...errors import MissingDataError, UsageError
from ...errors import check_argument

IDLE = "idle"
NONE = "(none)"
ONE_STEP_COLUMNS = ["step", "group_by", "name", "wall_ns", "wall_pct", "overlapped_ns"]
PRIORITY = (
    "main-stream kernel",
    "main-stream copy or memset",
    "side-stream kernel",
    "side-stream memcpy",
    "side-stream memset",
    IDLE,
)


def _step_windows(steps) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    table = getattr(steps, "table", steps)
    if not isinstance(table, pd.DataFrame) or not {"start_ns", "end_ns"} <= set(table.columns):
        raise UsageError("one_step_table needs steps: a Steps or a table with step, start_ns and end_ns")
    t = table.sort_values("start_ns", kind="stable")
    sid = t["step"].to_numpy(np.int64) if "step" in t else np.arange(len(t), dtype=np.int64)
    return sid, t["start_ns"].to_numpy(np.int64), t["end_ns"].to_numpy(np.int64)


def clip_to_windows(
    idx: np.ndarray, s: np.ndarray, e: np.ndarray, ws: np.ndarray, we: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pieces of labelled intervals ``[s, e)`` (any overlap among them) inside sorted, disjoint windows.

    Returns ``(window, idx, start, end)`` per non-empty piece; labels are kept (unlike intervals.split_by_windows,
    which merges)."""
    lo = np.searchsorted(we, s, side="right")
    hi = np.searchsorted(ws, e, side="left")
    cnt = np.maximum(hi - lo, 0)
    n = int(cnt.sum())
    if n == 0:
        z = np.empty(0, dtype=np.int64)
        return z, z, z, z
    if n == s.size and ws.size == 1:  # every interval in the one window (a whole-trace step): no gathers
        ps, pe = np.maximum(s, ws[0]), np.minimum(e, we[0])
        keep = pe > ps
        return np.zeros(int(np.count_nonzero(keep)), dtype=np.int64), idx[keep], ps[keep], pe[keep]
    if n == np.count_nonzero(cnt):  # each interval in one window at most (the usual case): no repeats
        rep = np.flatnonzero(cnt)
        win = lo[rep]
    else:
        rep = np.repeat(np.arange(s.size), cnt)
        first = np.cumsum(cnt) - cnt
        win = np.repeat(lo, cnt) + (np.arange(n) - np.repeat(first, cnt))
    ps = np.maximum(s[rep], ws[win])
    pe = np.minimum(e[rep], we[win])
    keep = pe > ps
    return win[keep].astype(np.int64), idx[rep][keep], ps[keep], pe[keep]


def _earliest_start_pieces(idx, s, e):
    """Intervals sorted by priority within one level (start first): each owns what earlier ones do not cover."""
    if s.size == 0:
        return idx, s, e
    reach = np.maximum.accumulate(e)
    prev = np.concatenate([[np.iinfo(np.int64).min], reach[:-1]])
    ps = np.maximum(s, prev)
    keep = e > ps
    return idx[keep], ps[keep], e[keep]


def _minus(idx, ps, pe, covered: iv.IntervalSet):
    """Labelled disjoint pieces minus a normalised set."""
    cs, ce = covered
    if cs.size == 0 or ps.size == 0:
        return idx, ps, pe
    lo, hi = min(int(ps.min()), int(cs.min())) - 1, max(int(pe.max()), int(ce.max())) + 1
    gs = np.concatenate([[lo], ce])
    ge = np.concatenate([cs, [hi]])
    ok = ge > gs
    _, i2, s2, e2 = clip_to_windows(idx, ps, pe, gs[ok], ge[ok])
    order = np.argsort(s2, kind="stable")
    return i2[order], s2[order], e2[order]


def charge(events: pd.DataFrame, main: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row positions (into ``events``) and the disjoint pieces of time each one is charged with, by PRIORITY."""
    gpu = kinds_mask(events, schema.GPU_ACTIVITY_KINDS)
    is_kernel = kinds_mask(events, ("kernel",))
    is_memcpy = kinds_mask(events, ("memcpy",))
    dev = events["device"].to_numpy()
    stream = events["stream"].to_numpy().astype(np.int64, copy=False)
    s_all = events["start_ns"].to_numpy(np.int64)
    e_all = events["end_ns"].to_numpy(np.int64)
    sel = np.flatnonzero(gpu & (dev == main[0]) & (e_all > s_all))
    on_main = stream[sel] == main[1]
    kern, mcpy = is_kernel[sel], is_memcpy[sel]
    tier = np.where(on_main, np.where(kern, 0, 1), np.where(kern, 2, np.where(mcpy, 3, 4)))
    out_i, out_s, out_e = [], [], []
    covered = (np.empty(0, np.int64), np.empty(0, np.int64))
    for t in range(5):
        rows = sel[tier == t]
        if rows.size == 0:
            continue
        st = stream[rows]
        if st.size and (st == st[0]).all():  # one stream (the main one): start, then event order (rows ascend)
            order = np.argsort(s_all[rows], kind="stable")
        else:
            order = np.lexsort((rows, st, s_all[rows]))  # start, then stream, then event order
        rows = rows[order]
        i, ps, pe = _earliest_start_pieces(rows, s_all[rows], e_all[rows])
        i, ps, pe = _minus(i, ps, pe, covered)
        out_i.append(i)
        out_s.append(ps)
        out_e.append(pe)
        covered = iv.union(covered, (s_all[rows], e_all[rows]))
    if not out_i:
        z = np.empty(0, dtype=np.int64)
        return z, z, z
    return np.concatenate(out_i), np.concatenate(out_s), np.concatenate(out_e)


def _labels(events: pd.DataFrame, by: str, rules) -> tuple[np.ndarray, list[str]]:
    if by not in events.columns:
        if by != "category":
            raise MissingDataError(f"one_step_table(by={by!r}) needs a {by!r} column, which the events lack")
        from ..categories import categorize

        col = pd.Series(categorize(events, rules), index=events.index)
    else:
        col = events[by]
    if isinstance(col.dtype, pd.CategoricalDtype):  # codes as they are (3M rows of astype(str) took seconds)
        names = [str(c) for c in col.cat.categories]
        codes = col.cat.codes.to_numpy().astype(np.int64)
        if (codes < 0).any():
            if NONE not in names:
                names.append(NONE)
            codes[codes < 0] = names.index(NONE)
        uniq = sorted(set(names))  # the same names, sorted as pd.Categorical of the strings would sort them
        remap = np.array([uniq.index(n) for n in names], dtype=np.int64)
        return remap[codes] if codes.size else codes, uniq
    cat = pd.Categorical(col.astype(object).where(col.notna(), NONE).astype(str))
    return np.asarray(cat.codes, dtype=np.int64), [str(c) for c in cat.categories]


def _rows(sid, by: str, names: list[str], wall: np.ndarray, ran: np.ndarray, step_wall: np.ndarray) -> pd.DataFrame:
    """The table's rows, steps by id: per step the names that ran (most wall first, then by code), then ``idle``.
    Whole-array numpy over (step, name) pairs, not a Python loop per step (10^5 steps)."""
    cols = ["step", "group_by", "name", "wall_ns", "overlapped_ns"]
    if sid.size == 0:
        return pd.DataFrame([], columns=cols)
    jorder = np.argsort(sid, kind="stable")
    r, c = np.nonzero(ran[jorder] > 0)  # step rank, name code
    j = jorder[r]
    w = wall[j, c]
    o = np.lexsort((c, -w, r))
    r, c, j, w = r[o], c[o], j[o], w[o]
    n_steps = jorder.size
    per = np.bincount(r, minlength=n_steps)
    idle_at = np.cumsum(per + 1) - 1  # each step's idle row comes after its names
    total = r.size + n_steps
    is_idle = np.zeros(total, dtype=bool)
    is_idle[idle_at] = True
    step_col = np.empty(total, dtype=np.int64)
    step_col[idle_at] = sid[jorder]
    step_col[~is_idle] = sid[j]
    name_col = np.empty(total, dtype=object)
    name_col[idle_at] = IDLE
    name_col[~is_idle] = np.asarray(names, dtype=object)[c] if c.size else []
    wall_col = np.empty(total, dtype=np.int64)
    wall_col[idle_at] = step_wall[jorder] - wall[jorder].sum(axis=1)
    wall_col[~is_idle] = w
    over_col = np.zeros(total, dtype=np.int64)
    over_col[~is_idle] = ran[j, c] - w
    group = np.empty(total, dtype=object)
    group[:] = by
    return pd.DataFrame(
        {
            "step": step_col,
            "group_by": group.tolist(),
            "name": name_col.tolist(),
            "wall_ns": wall_col,
            "overlapped_ns": over_col,
        },
        columns=cols,
    )


def one_step_table(
    events: pd.DataFrame, steps, *, by: str = "category", main: tuple[int, int] | None = None, rules=None
) -> pd.DataFrame:
    """Per step, each ``by`` value's share of the wall clock (ONE_STEP_COLUMNS), summing exactly to the wall.

    ``steps``: a Steps or a table with step, start_ns, end_ns. ``main``: the (device, stream) of the main stream
    (default: :func:`tracekit.events.main_stream`). ``rules``: categories for ``by="category"`` when the events
    have no ``category`` column. ``overlapped_ns``: the part of the name's running time (the union of its
    intervals in the step) during which the wall was charged to another name.
    """
    check_argument(events, "events", "a DataFrame of events (trace.events)", pd.DataFrame)
    schema.require_columns(events, ["kind", "device", "stream", "start_ns", "end_ns"], "one_step_table")
    sid, ws, we = _step_windows(steps)
    if main is None:
        main = main_stream(events)
    codes, names = _labels(events, by, rules)
    return _table(_Charged(events, main, sid, ws, we), by, codes, names)


class _Charged:
    """What every ``by`` of one step set shares: the pieces of wall each activity is charged with and the pieces of
    what ran, cut by the step windows (computed once for all the ``by`` columns of :func:`one_step_tables`)."""

    def __init__(self, events: pd.DataFrame, main: tuple[int, int], sid: np.ndarray, ws: np.ndarray, we: np.ndarray):
        self.sid, self.ws, self.we = sid, ws, we
        rows, ps, pe = charge(events, main)
        disjoint = bool(np.all(ws[1:] >= we[:-1])) if ws.size > 1 else True
        windows = (
            [(np.arange(ws.size), ws, we)]
            if disjoint
            else [(np.array([j]), ws[j : j + 1], we[j : j + 1]) for j in range(ws.size)]
        )
        # what each name ran (raw intervals), for overlapped_ns
        gpu = kinds_mask(events, schema.GPU_ACTIVITY_KINDS)
        dev = events["device"].to_numpy()
        s_all, e_all = events["start_ns"].to_numpy(np.int64), events["end_ns"].to_numpy(np.int64)
        act = np.flatnonzero(gpu & (dev == main[0]) & (e_all > s_all))
        self.wall_pieces, self.ran_pieces = [], []
        for wid, a, b in windows:
            w, i, s, e = clip_to_windows(rows, ps, pe, a, b)
            self.wall_pieces.append((wid[w], i, e - s))
            w2, i2, s2, e2 = clip_to_windows(act, s_all[act], e_all[act], a, b)
            o = np.argsort(s2, kind="stable")  # by start: each name's union is then one running maximum
            self.ran_pieces.append((wid[w2][o], i2[o], s2[o], e2[o]))


def _union_by_group(grp: np.ndarray, s: np.ndarray, e: np.ndarray, n: int) -> np.ndarray:
    """intervals.measure_by_group for intervals already sorted by start: a stable sort by group keeps each group's
    starts in order, so one running maximum of the ends (groups shifted apart in time) gives every union."""
    out = np.zeros(n, dtype=np.int64)
    if grp.size == 0:
        return out
    o = np.argsort(grp.astype(np.int16) if n <= 2**15 else grp, kind="stable")  # a radix sort of small ints
    g, s, e = grp[o], s[o], e[o]
    lo = int(s.min())
    span = int(e.max()) - lo + 1
    if span * n >= 2**62:  # too far apart to shift (never in practice)
        return iv.measure_by_group(g, s, e, n)
    ss, ee = (s - lo) + g * span, (e - lo) + g * span
    reach = np.maximum.accumulate(ee)
    prev = np.empty_like(reach)
    prev[0] = np.iinfo(np.int64).min
    prev[1:] = reach[:-1]
    np.add.at(out, g, np.maximum(ee - np.maximum(ss, prev), 0))
    return out


def _table(ch: _Charged, by: str, codes: np.ndarray, names: list[str]) -> pd.DataFrame:
    """The one-step table of one ``by`` column (its codes per event row and names) from the shared pieces."""
    sid, ws, we = ch.sid, ch.ws, ch.we
    n_names = len(names)
    wall = np.zeros((ws.size, n_names), dtype=np.int64)
    ran = np.zeros((ws.size, n_names), dtype=np.int64)
    for (w, i, d), (w2, i2, s2, e2) in zip(ch.wall_pieces, ch.ran_pieces):
        np.add.at(wall.reshape(-1), w * n_names + codes[i], d)  # flat indices: cheaper than a pair of them
        ran += _union_by_group(w2 * n_names + codes[i2], s2, e2, ws.size * n_names).reshape(ws.size, n_names)
    step_wall = we - ws
    table = _rows(sid, by, names, wall, ran, step_wall)
    walls = dict(zip(sid.tolist(), step_wall.tolist()))
    denom = table["step"].map(walls).to_numpy(np.float64)
    table["wall_pct"] = np.where(denom > 0, 100.0 * table["wall_ns"].to_numpy(np.float64) / np.maximum(denom, 1), 0.0)
    table = table.astype({"step": np.int64, "wall_ns": np.int64, "overlapped_ns": np.int64})
    check = table.groupby("step")["wall_ns"].sum()
    bad = [s for s, v in check.items() if v != walls[s]]
    if bad:  # an invariant, not an assert: it must hold under -O too
        raise RuntimeError(f"one_step_table: the rows of step(s) {bad[:5]} do not sum to the wall (a tracekit bug)")
    return table[ONE_STEP_COLUMNS].reset_index(drop=True)


def one_step_tables(
    events: pd.DataFrame, steps, *, by=("category",), main: tuple[int, int] | None = None, rules=None
) -> pd.DataFrame:
    """:func:`one_step_table` for several ``by`` columns, one after the other (``group_by`` tells them apart);
    columns the events lack are skipped, except ``category``, which is computed. The time is charged once for
    all of them."""
    check_argument(events, "events", "a DataFrame of events (trace.events)", pd.DataFrame)
    by = [b for b in by if b in events.columns or b == "category"]
    if not by:
        return pd.DataFrame(columns=ONE_STEP_COLUMNS)
    schema.require_columns(events, ["kind", "device", "stream", "start_ns", "end_ns"], "one_step_table")
    sid, ws, we = _step_windows(steps)
    if main is None:
        main = main_stream(events)
    labels = [_labels(events, b, rules) for b in by]
    ch = _Charged(events, main, sid, ws, we)
    return pd.concat([_table(ch, b, codes, names) for b, (codes, names) in zip(by, labels)], ignore_index=True)
