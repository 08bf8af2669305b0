"""Vectorised interval algebra over int64 nanosecond intervals.

An *interval set* is a pair ``(starts, ends)`` of equally shaped 1-D int64
numpy arrays describing half-open intervals ``[starts[i], ends[i])``.  A set is
*normalized* when its intervals are non-empty, sorted by start, pairwise
disjoint and non-touching (``ends[i] < starts[i + 1]``); every set-valued
function in this module returns a normalized set.

All functions accept any int-like array inputs (lists, pandas Series, other
integer dtypes), convert them with ``np.asarray(..., dtype=np.int64)``, raise
:class:`ValueError` when the two arrays of a pair differ in shape (or are not
1-D), never mutate their inputs and never return arrays that alias them.

Everything is implemented with whole-array numpy operations (sorting,
``np.maximum.accumulate``, cumulative sums, ``np.searchsorted``); there is no
Python-level loop over intervals, so the functions scale to millions of
intervals.
"""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np

__all__ = [
    "IntervalSet",
    "normalize",
    "union",
    "intersect",
    "subtract",
    "total",
    "clip",
    "measure_in_windows",
    "measure_by_group",
    "window_of",
    "split_by_windows",
    "coverage_count",
]

IntervalSet = Tuple[np.ndarray, np.ndarray]
"""``(starts, ends)``: two 1-D int64 arrays of half-open intervals."""

_I64 = np.int64


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _empty() -> IntervalSet:
    return np.empty(0, dtype=_I64), np.empty(0, dtype=_I64)


def _as_pair(starts: Any, ends: Any, what: str = "interval set") -> IntervalSet:
    """Convert to int64 arrays and validate shapes (no copy if already int64)."""
    s = np.asarray(starts, dtype=_I64)
    e = np.asarray(ends, dtype=_I64)
    if s.shape != e.shape:
        raise ValueError(f"{what}: starts and ends must have the same shape, got {s.shape} and {e.shape}")
    if s.ndim != 1:
        raise ValueError(f"{what}: starts and ends must be 1-D arrays, got ndim={s.ndim}")
    return s, e


def _unpack(interval_set: Any, what: str = "interval set") -> IntervalSet:
    try:
        starts, ends = interval_set
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a (starts, ends) pair") from None
    return _as_pair(starts, ends, what)


def _is_normalized(s: np.ndarray, e: np.ndarray) -> bool:
    """O(n) check: non-empty, sorted, disjoint and non-touching."""
    if s.size == 0:
        return True
    return bool(np.all(e > s)) and bool(np.all(s[1:] > e[:-1]))


def _normalize_arrays(s: np.ndarray, e: np.ndarray) -> IntervalSet:
    """Normalize validated int64 arrays; results never alias the inputs."""
    if _is_normalized(s, e):
        return s.copy(), e.copy()
    keep = e > s
    if not keep.all():
        s = s[keep]
        e = e[keep]
    n = s.size
    if n == 0:
        return _empty()
    if not bool(np.all(s[1:] >= s[:-1])):
        order = np.argsort(s)
        s = s[order]
        e = e[order]
    # Running maximum of ends: reach[i] is the furthest point covered by
    # intervals 0..i.  A new merged interval begins wherever the next start lies
    # strictly beyond that reach (touching intervals are merged).
    reach = np.maximum.accumulate(e)
    breaks = np.flatnonzero(s[1:] > reach[:-1]) + 1
    first = np.concatenate((np.zeros(1, dtype=np.intp), breaks))
    last = np.concatenate((breaks - 1, np.array([n - 1], dtype=np.intp)))
    return s[first], reach[last]


def _interleave(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``[s0, e0, s1, e1, ...]`` (strictly increasing for a normalized set)."""
    return np.stack((s, e), axis=1).reshape(-1)


def _sweep(pos: np.ndarray, delta: np.ndarray, stable: bool) -> Tuple[np.ndarray, np.ndarray]:
    """Sorted event sweep.

    Returns ``(bounds, counts)`` where ``bounds`` are the distinct event
    positions in increasing order and ``counts[i]`` is the cumulative sum of
    ``delta`` over all events at positions ``<= bounds[i]``, i.e. the value of
    the step function on ``[bounds[i], bounds[i + 1])``.
    """
    if pos.size == 0:
        return np.empty(0, dtype=_I64), np.empty(0, dtype=_I64)
    order = np.argsort(pos, kind="stable" if stable else None)
    p = pos[order]
    c = np.cumsum(delta[order], dtype=_I64)
    last = np.flatnonzero(p[1:] != p[:-1])
    last = np.concatenate((last, np.array([p.size - 1], dtype=np.intp)))
    return p[last], c[last]


def _runs(bounds: np.ndarray, mask: np.ndarray) -> IntervalSet:
    """Merge consecutive selected segments ``[bounds[i], bounds[i+1])``.

    ``mask`` has length ``len(bounds) - 1``; the result is normalized.
    """
    if mask.size == 0:
        return _empty()
    padded = np.zeros(mask.size + 2, dtype=np.int8)
    padded[1:-1] = mask
    d = np.diff(padded)
    return bounds[np.flatnonzero(d == 1)], bounds[np.flatnonzero(d == -1)]


def _weighted_sweep(a: IntervalSet, b: IntervalSet) -> Tuple[np.ndarray, np.ndarray]:
    """Sweep over normalized ``a`` (weight 1) and ``b`` (weight 2).

    Segment counts are 0 (neither), 1 (a only), 2 (b only) or 3 (both).
    """
    pa = _interleave(*a)
    pb = _interleave(*b)
    da = np.tile(np.array([1, -1], dtype=_I64), a[0].size)
    db = np.tile(np.array([2, -2], dtype=_I64), b[0].size)
    # Both position arrays are strictly increasing runs, so a stable
    # (timsort) argsort of their concatenation is a linear-time merge.
    return _sweep(np.concatenate((pa, pb)), np.concatenate((da, db)), stable=True)


# ---------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------


def normalize(starts: Any, ends: Any) -> IntervalSet:
    """Sort and merge intervals into a disjoint, sorted, non-touching set.

    Empty intervals (``end <= start``) are dropped; overlapping *and touching*
    intervals (``[0, 5)`` and ``[5, 9)``) are merged into one.  Implemented by
    sorting on start and taking ``np.maximum.accumulate`` of the ends to find
    the breaks between merged groups.  Already-normalized input is detected in
    O(n) and just copied.

    Returns a new ``(starts, ends)`` pair of int64 arrays.
    """
    s, e = _as_pair(starts, ends)
    return _normalize_arrays(s, e)


def union(*sets: Any) -> IntervalSet:
    """Union of any number of ``(starts, ends)`` sets, returned normalized.

    ``union()`` with no arguments returns the empty set.
    """
    if not sets:
        return _empty()
    pairs = [_unpack(x, f"union argument {i}") for i, x in enumerate(sets)]
    s = np.concatenate([p[0] for p in pairs])
    e = np.concatenate([p[1] for p in pairs])
    if len(pairs) > 1 and all(_is_normalized(*p) for p in pairs):
        # Concatenation of sorted runs: a stable sort merges them in O(n).
        order = np.argsort(s, kind="stable")
        s = s[order]
        e = e[order]
    return _normalize_arrays(s, e)


def intersect(a: Any, b: Any) -> IntervalSet:
    """Intersection ``a ∩ b`` of two sets (normalized or not), normalized.

    Implemented as an event sweep: after normalizing both inputs, boundary
    events of ``a`` carry ±1 and those of ``b`` carry ±2; the cumulative sum is
    3 exactly on the segments covered by both.
    """
    na = normalize(*_unpack(a, "intersect a"))
    nb = normalize(*_unpack(b, "intersect b"))
    if na[0].size == 0 or nb[0].size == 0:
        return _empty()
    bounds, counts = _weighted_sweep(na, nb)
    return _runs(bounds, counts[:-1] == 3)


def subtract(a: Any, b: Any) -> IntervalSet:
    """Difference ``a \\ b`` (the parts of ``a`` not covered by ``b``), normalized.

    Same weighted event sweep as :func:`intersect`; the result is where the
    cumulative count is exactly 1 (covered by ``a`` only).
    """
    na = normalize(*_unpack(a, "subtract a"))
    nb = normalize(*_unpack(b, "subtract b"))
    if na[0].size == 0 or nb[0].size == 0:
        return na
    bounds, counts = _weighted_sweep(na, nb)
    return _runs(bounds, counts[:-1] == 1)


def total(interval_set: Any) -> int:
    """Total covered length of a set, as a Python ``int``.

    Overlapping intervals are counted once (the set is normalized first), so
    this is the measure of the union of the intervals.
    """
    s, e = normalize(*_unpack(interval_set, "total"))
    return int((e - s).sum(dtype=_I64))


def clip(interval_set: Any, lo: int, hi: int) -> IntervalSet:
    """The part of a set inside ``[lo, hi)``, normalized (empty if ``hi <= lo``)."""
    lo = int(lo)
    hi = int(hi)
    s, e = normalize(*_unpack(interval_set, "clip"))
    if hi <= lo or s.size == 0:
        return _empty()
    # Intervals overlapping [lo, hi): ends > lo and starts < hi (a contiguous
    # index range because the set is sorted and disjoint).
    i0 = int(np.searchsorted(e, lo, side="right"))
    i1 = int(np.searchsorted(s, hi, side="left"))
    if i1 <= i0:
        return _empty()
    cs = s[i0:i1].copy()
    ce = e[i0:i1].copy()
    cs[0] = max(cs[0], lo)
    ce[-1] = min(ce[-1], hi)
    return cs, ce


def measure_in_windows(interval_set: Any, win_starts: Any, win_ends: Any) -> np.ndarray:
    """Covered length of the set inside each window ``[win_starts[j], win_ends[j])``.

    Windows may be unsorted and may overlap each other; empty or inverted
    windows measure 0.  Uses a prefix sum of interval lengths and
    ``np.searchsorted``: ``O((n + w) log n)`` for ``n`` intervals and ``w``
    windows.  Returns an int64 array of shape ``win_starts.shape``.
    """
    s, e = normalize(*_unpack(interval_set, "measure_in_windows"))
    ws, we = _as_pair(win_starts, win_ends, "windows")
    if s.size == 0 or ws.size == 0:
        return np.zeros(ws.shape, dtype=_I64)
    cum = np.concatenate((np.zeros(1, dtype=_I64), np.cumsum(e - s, dtype=_I64)))

    def covered_before(x: np.ndarray) -> np.ndarray:
        # Length of the set inside (-inf, x).  k = number of intervals that
        # start before x; all but the last of them end before x too.
        k = np.searchsorted(s, x, side="left")
        km1 = np.maximum(k - 1, 0)
        overhang = np.where(k > 0, np.maximum(e[km1] - x, 0), 0)
        return cum[k] - overhang

    out = covered_before(we) - covered_before(ws)
    out[we <= ws] = 0
    return out.astype(_I64, copy=False)


def window_of(times: Any, win_starts: Any, win_ends: Any) -> np.ndarray:
    """Index of the window ``[win_starts[j], win_ends[j])`` each time falls in, −1 outside every window.

    Windows are sorted by start; where they overlap, a time belongs to the latest-starting window."""
    t = np.asarray(times, dtype=_I64)
    ws, we = _as_pair(win_starts, win_ends, "windows")
    if ws.size == 0:
        return np.full(t.shape, -1, dtype=_I64)
    k = np.searchsorted(ws, t, side="right") - 1
    inside = (k >= 0) & (t < we[np.clip(k, 0, None)])
    return np.where(inside, k, -1).astype(_I64)


def measure_by_group(groups: Any, starts: Any, ends: Any, n_groups: int) -> np.ndarray:
    """Covered length of the union of each group's intervals: ``out[g]`` for ``g in range(n_groups)``.

    ``groups`` holds each interval's group (``0 <= g < n_groups``). Groups are shifted apart in time so
    one :func:`normalize` merges within groups only; int64 throughout.
    """
    g = np.asarray(groups, dtype=_I64)
    s, e = _as_pair(starts, ends, "measure_by_group")
    if g.shape != s.shape:
        raise ValueError("measure_by_group: groups must have the shape of the intervals")
    out = np.zeros(int(n_groups), dtype=_I64)
    keep = e > s
    g, s, e = g[keep], s[keep], e[keep]
    if g.size == 0:
        return out
    lo = int(s.min())
    span = int(e.max()) - lo + 1
    if span * int(n_groups) >= 2**62:  # too far apart to shift: one group at a time (never in practice)
        for k in np.unique(g).tolist():
            out[k] = total((s[g == k], e[g == k]))
        return out
    ns, ne = _normalize_arrays((s - lo) + g * span, (e - lo) + g * span)
    np.add.at(out, ns // span, ne - ns)
    return out


def split_by_windows(interval_set: Any, win_starts: Any, win_ends: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut a set into its pieces inside each window.

    Windows must be sorted and pairwise disjoint (touching is fine, and
    zero-length windows are allowed): ``win_starts[j] <= win_ends[j] <=
    win_starts[j + 1]``; otherwise :class:`ValueError` is raised.

    Returns ``(window_index, starts, ends)``: one row per non-empty piece
    ``set ∩ [win_starts[j], win_ends[j])``, ordered by window and then by
    start (hence globally sorted by start).  Pieces from different windows are
    not merged even when they touch.  Vectorised with ``np.searchsorted`` and
    ``np.repeat``: ``O(n + w log n + pieces)``.
    """
    s, e = normalize(*_unpack(interval_set, "split_by_windows"))
    ws, we = _as_pair(win_starts, win_ends, "windows")
    if np.any(we < ws):
        raise ValueError("split_by_windows: every window needs win_ends >= win_starts")
    if np.any(ws[1:] < we[:-1]):
        raise ValueError("split_by_windows: windows must be sorted and disjoint")
    idx_empty = np.empty(0, dtype=_I64)
    if s.size == 0 or ws.size == 0:
        return idx_empty, *_empty()
    # Intervals overlapping window j form the index range [lo[j], hi[j]).
    lo = np.searchsorted(e, ws, side="right")
    hi = np.searchsorted(s, we, side="left")
    counts = np.maximum(hi - lo, 0)
    n_pieces = int(counts.sum())
    if n_pieces == 0:
        return idx_empty, *_empty()
    win = np.repeat(np.arange(ws.size, dtype=_I64), counts)
    group_first = np.cumsum(counts) - counts  # offset of each window's first piece
    within = np.arange(n_pieces, dtype=_I64) - np.repeat(group_first, counts)
    iv = np.repeat(lo, counts) + within
    ps = np.maximum(s[iv], ws[win])
    pe = np.minimum(e[iv], we[win])
    keep = pe > ps  # only drops pieces of zero-length windows
    if not keep.all():
        win, ps, pe = win[keep], ps[keep], pe[keep]
    return win, ps, pe


def coverage_count(starts: Any, ends: Any) -> Tuple[np.ndarray, np.ndarray]:
    """Step function of how many raw (unmerged) intervals cover each point.

    Returns ``(boundaries, counts)`` with ``len(counts) == len(boundaries) - 1``
    (both empty when there are no non-empty intervals): ``counts[i]`` is the
    number of input intervals containing every point of
    ``[boundaries[i], boundaries[i + 1])``; the count is 0 before
    ``boundaries[0]`` and from ``boundaries[-1]`` on.  The representation is
    canonical: boundaries are strictly increasing and only placed where the
    count actually changes, so zero-count gaps appear as segments with
    ``counts == 0``.  Empty intervals are ignored; identical intervals count
    separately.

    Example use: ``counts == 1`` over a kernel stream's raw intervals gives the
    stretches where exactly one kernel is running.
    """
    s, e = _as_pair(starts, ends)
    keep = e > s
    s = s[keep]
    e = e[keep]
    if s.size == 0:
        return np.empty(0, dtype=_I64), np.empty(0, dtype=_I64)
    pos = np.concatenate((s, e))
    delta = np.concatenate((np.ones(s.size, dtype=_I64), np.full(e.size, -1, dtype=_I64)))
    bounds, cum = _sweep(pos, delta, stable=False)
    # Keep only boundaries where the count changes (the count before the first
    # boundary is 0, and the first boundary is always a start).
    prev = np.concatenate((np.zeros(1, dtype=_I64), cum[:-1]))
    change = cum != prev
    return bounds[change], cum[change][:-1]
