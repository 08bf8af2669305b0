"""A rank's clock set back mid-run, found in its own trace from the order of its events and undone before its
steps and collectives are read (docs/multirank.md, "A clock set back").

A clock set back by more than the gap between two collective ends (an NTP correction of −3 ms, collectives every
~0.3 ms) records the same local times twice: a step window overlaps the next, and no time alone says which side of
the set-back an event is on. The order of the events says it. On one GPU stream the kernels run in the order they
were launched (their correlation ids), each after the previous one has ended; on one CPU thread the launches start
in correlation order and the operations in the order of their ``External id``. Where that order runs back in time by
more than ``FLOOR_NS`` on a GPU stream and a CPU thread alike (one clock), the clock was set back there: every event
of such a lane from there on is after it. An event of neither kind of lane (a GPU
annotation) goes by its ``External id`` against the first id after the set-back; one with no id (a Python
function) goes with the placed event nearest it in time.

The events after it are moved forward by ``shift_ns``: the largest run-back seen (a lower bound of the set-back)
plus the trace's span, so that the rank's clock, seen from the other ranks, steps **forward** by more than any gap
between two of its collective ends — a step the clock model (:mod:`.clock_model`) finds, fits on each side and
repairs like any other, with no doubt on which side an end lies. The alignment takes ``shift_ns`` off the step it
finds there, and reports the set-back with its negative size.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ....schema import GPU_ACTIVITY_KINDS

FLOOR_NS = 20_000  # a lane that runs back by less than this is noise (two kernels' timestamps), not a set-back
MARGIN_NS = 1_000_000  # added to the trace's span in the shift


def _breaks(lane: np.ndarray, key: np.ndarray, start: np.ndarray, prev_t: np.ndarray, rows: np.ndarray, end=None):
    """The rows of one kind of lane in order (lane, key, start): each lane's position where its time runs back by
    more than FLOOR_NS (the largest there, one per lane). Returns (rows in order, lane of each, back-run at each
    sorted row: prev_t of the row before − start, 0 at a lane's first row).

    With ``end`` (a lane whose events nest: a thread's operations), a row that starts inside the latest end so far
    of its lane and ends past it (crossing it, which nesting forbids) runs back by that end − its start too: a
    ProfilerStep that begins, after the set-back, inside the previous one's recorded window and ends beyond it."""
    if not len(rows):
        return rows, rows, np.zeros(0)
    o = rows[np.lexsort((start[rows], key[rows], lane[rows]))]
    ln = lane[o]
    back = np.zeros(len(o))
    same = ln[1:] == ln[:-1]
    back[1:] = np.where(same, prev_t[o[:-1]] - start[o[1:]], 0)
    if end is not None and len(o) > 1:
        reach = pd.Series(end[o]).groupby(ln).cummax().to_numpy(np.int64)  # the latest end so far, per lane
        e_prev, s, e = reach[:-1], start[o[1:]], end[o[1:]]
        back[1:] = np.maximum(back[1:], np.where(same & (s < e_prev) & (e > e_prev), e_prev - s, 0))
    return o, ln, back


def _nearest(points: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Each x's distance to the nearest of ``points`` (inf where there are none)."""
    if not len(points):
        return np.full(len(x), np.inf)
    p = np.sort(points)
    j = np.searchsorted(p, x)
    lo, hi = p[np.clip(j - 1, 0, len(p) - 1)], p[np.clip(j, 0, len(p) - 1)]
    return np.minimum(np.abs(x - lo), np.abs(x - hi)).astype(np.float64)


def _stream_runs_back(lane: np.ndarray, corr: np.ndarray, start: np.ndarray, rows: np.ndarray) -> bool:
    """Whether on some GPU stream a kernel launched later starts earlier (the rows in time order, taken lane by lane
    with a stable sort of small lane codes: no sort by id). A set-back always shows so; most traces never do."""
    if len(rows) < 2:
        return False
    s = rows if (np.diff(start[rows]) >= 0).all() else rows[np.argsort(start[rows], kind="stable")]
    codes = pd.factorize(lane[s])[0]
    o = s[np.argsort(codes.astype(np.uint16) if codes.max() < 1 << 16 else codes, kind="stable")]
    same = lane[o[1:]] == lane[o[:-1]]
    return bool((same & (corr[o[1:]] < corr[o[:-1]])).any())


def _by_launch(after, decided, gpu_kind, cpu, corr, start) -> None:
    """Place, in ``after``, the events of a lane that did not run back themselves by their launch (in place).

    A runtime call of a thread that did not run back goes by its correlation id, which counts up in time: after
    where it is at least the first id after the set-back on a thread that ran back. A GPU activity of a stream that
    did not run back (an NCCL stream idle across the set-back: its gap longer than the set-back) goes with its
    launch, a runtime call placed above: launched after the set-back, it ran after it; launched before, it ran
    before unless it starts before its launch (no kernel does: it ran after). Nearest in time (the default) is
    wrong there: the stream that did run back has events of both sides at every local time of the set-back's
    span."""
    launch = cpu & (corr >= 0)
    placed = launch & decided
    first = corr[placed & after].min() if (placed & after).any() else None
    if first is not None:
        free = launch & ~decided
        after[free] = corr[free] >= first
    if not launch.any():
        return
    k = ~decided & gpu_kind & (corr >= 0)
    if not k.any():
        return
    lc = pd.Series(np.flatnonzero(launch), index=corr[launch])
    lc = lc[~lc.index.duplicated()]
    j = lc.reindex(corr[k]).to_numpy()
    has = ~np.isnan(j)
    rows, j = np.flatnonzero(k)[has], j[has].astype(np.int64)
    after[rows] = after[j] | (start[rows] < start[j])


def find(ev: pd.DataFrame) -> tuple[np.ndarray, int, int, int] | None:
    """Which events are after a set-back of the clock (a mask), the run-back seen (ns, a lower bound of its size),
    the boundary (local time, in the moved times) and the shift to move them by; None where the clock never ran
    back. One set-back per trace: the largest."""
    if not len(ev):
        return None
    start, end = ev["start_ns"].to_numpy(np.int64), ev["end_ns"].to_numpy(np.int64)
    kind = ev["kind"].astype(str).to_numpy() if not isinstance(ev["kind"].dtype, pd.CategoricalDtype) else None
    gpu_kind = ev["kind"].isin(GPU_ACTIVITY_KINDS).to_numpy() if kind is None else np.isin(kind, GPU_ACTIVITY_KINDS)
    corr, ext = ev["correlation"].to_numpy(np.int64), ev["external_id"].to_numpy(np.int64)
    dev = ev["device"].to_numpy(np.int64)
    gpu_lane = dev * (1 << 40) + ev["stream"].to_numpy(np.int64)
    cpu_lane = ev["pid"].to_numpy(np.int64) * (1 << 32) + ev["tid"].to_numpy(np.int64)
    if not _stream_runs_back(gpu_lane, corr, start, np.flatnonzero(gpu_kind & (corr >= 0))):
        return None  # the common case, found without sorting the lanes by id
    cpu = dev < 0
    lanes = [
        _breaks(gpu_lane, corr, start, end, np.flatnonzero(gpu_kind & (corr >= 0))),  # a stream: each after the last
        # a thread: its runtime calls in correlation order, each after the previous one ended (they do not nest:
        # never on the corpus's Kineto traces), its operations in External id order, nested (two id spaces: a
        # launch's External id may be its correlation)
        _breaks(cpu_lane, corr, start, end, np.flatnonzero(cpu & (corr >= 0))),
        _breaks(cpu_lane, ext, start, start, np.flatnonzero(cpu & (corr < 0) & (ext >= 0)), end),
    ]
    seen = max((float(b.max()) for _, _, b in lanes if len(b)), default=0.0)
    if seen <= FLOOR_NS:
        return None
    big = [bool(len(b)) and float(b.max()) >= max(FLOOR_NS, 0.5 * seen) for _, _, b in lanes]
    if not (big[0] and (big[1] or big[2])):  # one clock: a GPU stream and a CPU thread both run back, by as much
        return None
    after = np.zeros(len(ev), dtype=bool)
    decided = np.zeros(len(ev), dtype=bool)
    last_before, first_after = [], []
    for o, ln, back in lanes:  # three kinds of lane
        at = np.flatnonzero(back >= max(FLOOR_NS, 0.5 * seen))
        brk = pd.Series(at).groupby(ln[at]).first().to_numpy(np.int64) if len(at) else at  # one per lane
        split_lanes = ln[brk]
        in_split = np.isin(ln, split_lanes)
        decided[o[in_split]] = True
        pos_break = pd.Series(brk, index=split_lanes).reindex(ln).to_numpy()
        is_after = in_split & (np.arange(len(o)) >= np.nan_to_num(pos_break, nan=np.inf))
        after[o[is_after]] = True
        if len(brk):
            last_before.append(start[o[brk - 1]])
            first_after.append(start[o[brk]])
    if not last_before:
        return None
    lb, fa = np.concatenate(last_before), np.concatenate(first_after)
    und = ~decided  # events of no order: the side of the placed event nearest in time
    after[und] = _nearest(start[decided & after], start[und]) < _nearest(start[decided & ~after], start[und])
    _by_launch(after, decided, gpu_kind, cpu, corr, start)
    cpu_after = after & decided & cpu & (corr < 0) & (ext >= 0)
    if cpu_after.any():  # External ids count up in time: an event of no lane (a GPU annotation) goes by its id
        by_id = ~decided & (ext >= 0) & (corr < 0)
        after[by_id] = ext[by_id] >= ext[cpu_after].min()
    shift = int(seen) + int(end.max() - start.min()) + MARGIN_NS
    boundary = int((float(lb.max()) + float(fa.min()) + shift) / 2.0)
    return after, int(seen), boundary, shift


def undo(trace):
    """The trace with the events after a set-back of its clock moved forward (``find``), sorted by start again,
    and what was moved: ``[{"local_ns", "seen_ns", "shift_ns"}]`` (times on the file's clock, before its base), or
    the trace as it is and ``[]``."""
    found = find(trace.events)
    if found is None:
        return trace, []
    after, seen, boundary, shift = found
    ev = trace.events.copy()
    for c in ("start_ns", "end_ns"):
        v = ev[c].to_numpy(np.int64).copy()
        v[after] += shift
        ev[c] = v
    ev = ev.sort_values("start_ns", kind="stable").reset_index(drop=True)
    moved = type(trace)(ev, dict(trace.meta), trace.report)
    return moved, [{"local_ns": boundary, "seen_ns": seen, "shift_ns": shift}]
