"""Each rank's clock as segments, and whether it can be trusted (docs/multirank.md, "The clock model").

A rank's clock is fitted to the ends of the blocking collectives it shares with the ranks already placed: ``d`` =
its local end − the instance's true end (on the reference's clock), against the true end ``T``. A clean clock is one
line (offset + drift). A clock that **steps** (an NTP correction: +1..+5 ms, or 50 µs) is a jump of ``d`` that stays:
it is found as a change point — the median of the next few ends minus the median of the previous few, beyond a
bound that scales with how well the ends fit — and each side is a segment with its own offset and drift. A jump is
kept only where each segment fits within an eighth of the jump (a clock that wanders, or two ranks whose ends do
not coincide, are not cut into steps: the first is ``suspect``). Each rank's status: ``aligned``, ``stepped`` (when, within how much, by how much) or ``suspect``
(its residual beyond ``SUSPECT_FACTOR`` × the residual of its node-mates, at least ``SUSPECT_FLOOR_NS``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STEP_FLOOR_NS = 5_000  # a clock step below this is not told from the ends' noise
STEP_NOISE = 8.0  # a step must exceed this many times the ends' noise (consecutive misfits)...
STEP_FIT = 8.0  # ...and this many times the misfit of either segment it leaves (ends that wander do not step)
SUSPECT_FACTOR = 10.0  # a residual this many times its node-mates' (median) is suspect...
SUSPECT_FLOOR_NS = 10_000  # ...and at least this


@dataclass
class Segments:
    """One rank's clock: segment k holds the ends from ``first[k]`` (an index into the sorted ends) on, and maps
    true time T to local ``T + a[k] + b[k]·T``; ``bounds[k]`` is its first local time (−inf for the first)."""

    first: np.ndarray
    a: np.ndarray
    b: np.ndarray
    bounds: np.ndarray
    residual: float
    outliers: int
    steps: list  # [{"at_ns" (true, after t0), "within_ns", "size_ns", "local_lo", "local_hi" (the local ends it
    # fell between)}]

    def to_true(self, x: np.ndarray) -> np.ndarray:
        """Local times (after t0, float) to true time, each by the segment it falls in."""
        k = np.searchsorted(self.bounds, x, side="right") - 1
        return (x - self.a[k]) / (1.0 + self.b[k])


def window(n: int) -> int:
    """Ends compared on each side of a candidate step: 3 to 8, fewer where a rank has few."""
    return int(min(8, max(3, n // 8)))


def noise_of(d: np.ndarray) -> float:
    """The ends' noise: a robust spread of consecutive misfits (a step or a drift moves few of them)."""
    if len(d) < 3:
        return 0.0
    dd = np.diff(d)
    return float(1.4826 * np.median(np.abs(dd - np.median(dd))) / np.sqrt(2.0))


def _jumps(d: np.ndarray, w: int) -> np.ndarray:
    """For each k in [w, n − w]: the median of d[k : k+w] − the median of d[k−w : k] (index k − w)."""
    win = np.lib.stride_tricks.sliding_window_view(d, w)
    med = np.median(win, axis=1)  # med[i] = median of d[i : i+w]
    return med[w:] - med[: len(med) - w]


def _split_at(d: np.ndarray, k: int, w: int) -> int:
    """The best split near k (ends before it on one level, from it on the other), by the least absolute misfit."""
    lo, hi = max(1, k - w), min(len(d) - 1, k + w)
    cand = np.arange(lo, hi + 1)
    seg = d[max(0, lo - w) : min(len(d), hi + w)]
    base = max(0, lo - w)
    left = np.median(d[max(0, k - 2 * w) : max(1, k - w)]) if k - w > 0 else np.median(d[:k])
    right = np.median(d[min(len(d) - 1, k + w) : k + 2 * w]) if k + w < len(d) else np.median(d[k:])
    idx = np.arange(len(seg))[None, :] + base
    cost = np.where(idx < cand[:, None], np.abs(seg[None, :] - left), np.abs(seg[None, :] - right)).sum(axis=1)
    return int(cand[np.argmin(cost)])


def find_steps(T: np.ndarray, d: np.ndarray, fit) -> list[int]:
    """The change points of ``d`` (against sorted ``T``): indices where a segment begins. ``fit(T, d)`` is the
    one-segment fit (a, b, residual, outliers). A loop per segment, not per end."""
    n = len(d)
    w = window(n)
    if n < 2 * w:
        return []
    floor = max(STEP_FLOOR_NS, STEP_NOISE * noise_of(d))
    cuts: list[int] = []
    todo = [(0, n)]
    while todo:
        lo, hi = todo.pop()
        if hi - lo < 2 * w:
            continue
        J = _jumps(d[lo:hi], w)
        k = int(np.argmax(np.abs(J)))
        if abs(J[k]) < floor:
            continue
        c = lo + _split_at(d[lo:hi], k + w, w)
        if c - lo < 2 or hi - c < 2:
            continue
        r_left = fit(T[lo:c], d[lo:c])[2] if c - lo >= 2 else 0.0
        r_right = fit(T[c:hi], d[c:hi])[2] if hi - c >= 2 else 0.0
        if max(r_left, r_right) * STEP_FIT > abs(J[k]):  # the jump does not explain the misfit: not a step
            continue
        cuts.append(c)
        todo += [(lo, c), (c, hi)]
    return sorted(cuts)


def fit_segments(T: np.ndarray, d: np.ndarray, local: np.ndarray, fit) -> Segments:
    """The rank's clock by segments: ``T`` true ends (sorted), ``d`` local − true, ``local`` its local ends (all
    after t0); ``fit`` the one-segment fit (``align.robust_fit``)."""
    o = np.argsort(T, kind="stable")
    T, d, local = T[o], d[o], local[o]
    cuts = find_steps(T, d, fit)
    first = np.array([0, *cuts], dtype=np.int64)
    last = np.r_[first[1:], len(T)]
    fits = [fit(T[s:e], d[s:e]) for s, e in zip(first, last)]
    a = np.array([f[0] for f in fits])
    b = np.array([f[1] for f in fits])
    bounds = np.full(len(first), -np.inf)
    steps = []
    for k, c in enumerate(cuts, start=1):
        # the step happened between the last end of one segment and the first of the next: in local time, between
        # those two ends (a point between them is the segment of the nearer)
        bounds[k] = (local[c - 1] + local[c]) / 2.0
        at = (T[c - 1] + T[c]) / 2.0
        size = (a[k] + b[k] * at) - (a[k - 1] + b[k - 1] * at)
        steps.append(
            {
                "at_ns": at,
                "within_ns": (T[c] - T[c - 1]) / 2.0,
                "size_ns": size,
                "local_lo": float(local[c - 1]),
                "local_hi": float(local[c]),
            }
        )
    res = max(f[2] for f in fits)
    return Segments(first, a, b, bounds, float(res), int(sum(f[3] for f in fits)), steps)


def statuses(residual: dict, steps: dict, nodes: dict, ref: int, shared: set = frozenset()) -> tuple[dict, dict, list]:
    """Each rank's clock status (``aligned`` | ``stepped`` | ``suspect``) from its residual (ns; None: not fitted),
    its steps and its node-mates' residuals (the median of theirs; of every other rank's where it has none; the
    reference's where there is no other); the
    bound each rank's residual was held to; and the sentences for the suspect ranks. ``shared``: ranks that took the
    reference's clock as its node-mates (their ends say little of their clock): not suspect."""
    out, bounds, warnings = {}, {}, []
    fitted = {r: v for r, v in residual.items() if v is not None and r != ref}
    for r in residual:
        mates = [fitted[q] for q in fitted if q != r and nodes.get(q, q) == nodes.get(r, r)]
        whose = "its node-mates'"
        if not mates:
            mates, whose = [fitted[q] for q in fitted if q != r], "the other ranks'"
        if not mates and residual.get(ref) is not None:  # two ranks: the reference's residual is the other's misfit
            mates, whose = [residual[ref]], "the reference's"
        scale = float(np.median(mates)) if mates else 0.0
        bound = max(SUSPECT_FACTOR * scale, SUSPECT_FLOOR_NS)
        bounds[r] = int(np.ceil(bound))
        if r in fitted and r not in shared and fitted[r] > bound:
            out[r] = "suspect"
            than = f" ({whose} within {scale / 1e3:,.1f} µs)" if mates else ""
            warnings.append(
                f"rank {r}: its clock fits its collective ends only within {fitted[r] / 1e3:,.1f} µs{than}, beyond"
                f" {bound / 1e3:,.1f} µs: its clock is suspect and its waits uncertain by that much"
            )
        elif steps.get(r):
            out[r] = "stepped"
        else:
            out[r] = "aligned"
    return out, bounds, warnings


def step_sentences(steps: dict, nodes: dict, set_back: frozenset = frozenset()) -> list[str]:
    """What is said of each stepped rank (``steps``: rank -> its steps, ``at_ns`` on the tables' time base): when
    its clock stepped and by how much, and whether its node-mates' clocks stepped with it (ranks of one node share a
    host clock). ``set_back``: ranks whose clock was set back and undone in their own trace (set_back.py), said so
    once: their steps and times were repaired before anything was read of them."""
    out = []
    for r, st in sorted(steps.items()):
        if not st:
            continue
        mates = [q for q in steps if q != r and nodes.get(q, q) == nodes.get(r, r)]
        alone = mates and not any(steps.get(q) for q in mates)
        told = "; ".join(
            f"by {s['size_ns'] / 1e3:+,.1f} µs at {s['at_ns'] / 1e6:,.3f} ms (±{s['within_ns'] / 1e3:,.1f} µs)"
            for s in st
        )
        how = (
            ": set back, found from the order of its own events and undone before its steps were read (its"
            " ProfilerStep windows and kernels as recorded on one clock)"
            if r in set_back
            else ""
        )
        out.append(
            f"rank {r}: its clock stepped {told} (reference clock){how}: each segment of its clock is fitted on its"
            " own and its times repaired"
            + (" (its node-mates' clocks did not step: a clock of its own)" if alone else "")
        )
    return out


def reference_step(segs: dict, ref: int, fitted: int, own: frozenset = frozenset()) -> dict:
    """The reference's own clock stepping looks like every other rank's stepping back by as much at once. Where at
    least half the fitted ranks (and two) have a step at one time (within their windows) and of one size (within
    2 µs and 2 %), it is the reference's: that step is taken off each of them (its two segments are one, read from
    the first) and given to the reference as a segment of its own, its times after the step moved back onto the
    clock it began with. ``segs`` is changed in place; returns it. ``own``: ranks whose clock was set back in their
    own trace (set_back.py) count for none: a whole node set back is not the reference's."""
    steps = [(r, k, st) for r, seg in segs.items() if r != ref and r not in own for k, st in enumerate(seg.steps)]
    for r0, k0, s0 in steps:
        group = {
            r: k
            for r, k, st in steps
            if abs(st["at_ns"] - s0["at_ns"]) <= s0["within_ns"] + st["within_ns"]
            and abs(st["size_ns"] - s0["size_ns"]) <= max(2_000.0, 0.02 * abs(s0["size_ns"]))
        }
        if len(group) < max(2, (fitted + 1) // 2):
            continue
        size = -float(np.median([segs[r].steps[k]["size_ns"] for r, k in group.items()]))
        lo, hi = s0["at_ns"] - s0["within_ns"], s0["at_ns"] + s0["within_ns"]  # the reference's own two ends
        for r, k in group.items():
            seg = segs[r]
            keep = np.ones(len(seg.first), dtype=bool)
            keep[k + 1] = False
            segs[r] = Segments(
                seg.first[keep], seg.a[keep], seg.b[keep], seg.bounds[keep], seg.residual, seg.outliers,
                [st for j, st in enumerate(seg.steps) if j != k],
            )  # fmt: skip
            if len(segs[r].first) == 1:
                del segs[r]
        at = (lo + hi - size) / 2.0  # on the clock it began with
        step = {"at_ns": at, "within_ns": (hi - size - lo) / 2.0, "size_ns": size, "local_lo": lo, "local_hi": hi}
        segs[ref] = Segments(
            np.array([0, 0]), np.array([0.0, size]), np.zeros(2), np.array([-np.inf, (lo + hi) / 2.0]), 0.0, 0, [step]
        )
        return segs
    return segs
