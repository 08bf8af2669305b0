"""Global steps and clock alignment of a run's ranks (docs/multirank.md).

1. **Coarse offsets from step starts.** Each rank's step starts are compared with those of the ranks already placed
   (the reference first): the shift that brings the most starts within a third of a step period of one wins; where
   several tie (steps of equal length, a late start) the one nearest its node-mates' shift, else the smallest (and
   that is said); where some starts fit no step (a clock that stepped mid-run) the rank's steps are taken as
   consecutive global steps, each start with its own shift. The placed starts, clustered, are the global steps,
   numbered from 0 in time order; a rank that started late or stopped early simply has no row for the steps it
   missed.
2. **Instances.** Within a global step the k-th collective of a kind is the same instance on every rank (``seq`` k).
   A rank whose count of a kind in a step differs from the other ranks' (its profile started or stopped inside the
   step) is partial: its collectives are matched to the instances by time, once the clocks are aligned.
3. **Fine offsets from the ends of blocking collectives**, which end together in true time: per rank, the offset is
   the median of (its end − the instance's consensus end), iterated; a drift (offset + slope) is kept where it cuts
   the residual; the residual (90th percentile of the misfit) is reported and sets which margins are ties. A clock
   that steps mid-run is cut into segments at the change point (:mod:`.clock_model`), each rank's clock status
   (aligned, stepped, suspect) is told, and every time converted by its own segment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import clock_model, step_pattern
from .numbering import collectives_table, dense_ids, kind_names, match_by_shift, match_by_time, numbered_collectives

FIRST_STEPS = 64  # a rank's steps compared for its coarse offset
MIN_TOL_NS = 1_000
LOOSE_NS = 100_000  # a residual beyond this is said: the ends used for the clocks do not end together


def _period(starts: list[np.ndarray]) -> float:
    d = np.concatenate([np.diff(np.sort(s)) for s in starts if len(s) > 1] or [np.zeros(0)])
    d = d[d > 0]
    return float(np.median(d)) if d.size else 0.0


def _cluster(points: np.ndarray, tol: float) -> np.ndarray:
    """Cluster centres (medians) of sorted points split where consecutive points are more than ``tol`` apart."""
    if points.size == 0:
        return points
    p = np.sort(points)
    brk = np.concatenate([[True], np.diff(p) > tol])
    first = np.flatnonzero(brk)
    size = np.diff(np.r_[first, len(p)])
    return (p[first + (size - 1) // 2] + p[first + size // 2]) / 2.0  # each cluster's median (p is sorted)


def _best_shift(
    s: np.ndarray, pool: np.ndarray, tol: float, prefer: float | None = None, pick=None
) -> tuple[float, int, list]:
    """The shift d (rank clock − pool clock) bringing most of ``s`` within ``tol`` of a pool point. Where several
    shifts tie (steps of equal length, a late start), the one nearest ``prefer`` (the node-mates' shift), else the
    smallest |d|; ``pick`` first (the collectives' pattern: given each tied shift's mapping, a pool index per start
    or −1, the one it chooses or None). Returns (d, how many starts it matched, the tied shifts: more than one where
    it was a choice)."""
    diffs = np.sort((s[:FIRST_STEPS, None] - pool[None, :]).ravel())
    lo = np.searchsorted(diffs, diffs - tol, side="left")
    hi = np.searchsorted(diffs, diffs + tol, side="right")
    count = hi - lo
    best = count.max()
    cand = np.flatnonzero(count == best)
    tied = _cluster(diffs[cand], tol)
    target = prefer or 0.0
    if pick is not None and len(tied) > 1:
        maps = []
        for c in tied:  # a loop per tied shift
            j = _near(s - c, pool)
            maps.append(np.where(np.abs(s - c - pool[j]) <= tol, j, -1))
        chosen = pick(maps, tied.tolist())
        target = float(tied[chosen]) if chosen is not None else target
    i = cand[np.argmin(np.abs(diffs[cand] - target))]
    near = diffs[lo[i] : hi[i]]
    return float(np.median(near)), int(best), tied.tolist()


def _near(placed: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Each placed point's nearest pool point (its index; the pool sorted, not empty)."""
    j = np.clip(np.searchsorted(pool, placed), 1, max(len(pool) - 1, 1))
    near = np.where(np.abs(placed - pool[j - 1]) <= np.abs(placed - pool[np.minimum(j, len(pool) - 1)]), j - 1, j)
    return np.minimum(near, len(pool) - 1)


def _consecutive_shift(
    s: np.ndarray, pool: np.ndarray, tol: float, prefer: float | None, pick=None
) -> tuple[float, np.ndarray, list]:
    """A rank's steps are consecutive global steps: its local step i is the pool's step k + i. For each k, the
    shifts s_i − pool[k + i]; the k whose shifts agree (within ``tol`` of their median) most often wins — a clock
    that stepped mid-run leaves two runs of agreeing shifts, the longer decides — and where k's tie, the one whose
    shift is nearest ``prefer`` (the node-mates'), else the smallest. Returns (the shift, each start's shift: its
    own difference, the nearest one's beyond the pool's ends, the tied shifts). ``pick``: given each tied k's
    mapping (a pool index per start, −1 beyond the pool), the one it chooses or None (the collectives' pattern)."""
    m = min(len(s), FIRST_STEPS)
    ks = np.arange(-(m - 1), len(pool))
    idx = ks[:, None] + np.arange(m)[None, :]
    valid = (idx >= 0) & (idx < len(pool))
    D = np.where(valid, s[None, :m] - pool[np.clip(idx, 0, len(pool) - 1)], np.nan)

    # each k's largest group of agreeing shifts (within ``tol`` of one of them; of equal groups, the one nearest
    # ``prefer``): its size is k's score, its median k's shift — a clock that stepped after half the steps leaves
    # two groups of one size, which a median of all would fall between
    def agree(rows: np.ndarray) -> np.ndarray:  # NaN agrees with nothing
        return np.abs(D[rows, :, None] - D[rows, None, :]) <= tol

    chunk = max(1, 2**22 // max(m * m, 1))  # rows of k at a time: a few MB however many steps the run has
    score = np.concatenate(
        [agree(np.arange(i, min(i + chunk, len(ks)))).sum(axis=2).max(axis=1) for i in range(0, len(ks), chunk)]
    )
    cand = np.flatnonzero(score == score.max())
    med = np.full(len(ks), np.nan)
    for i in range(0, len(cand), chunk):  # the tied k's shifts only
        rows = cand[i : i + chunk]
        A = agree(rows)
        size = A.sum(axis=2)
        near = np.where(size == score[rows, None], np.abs(np.nan_to_num(D[rows], nan=np.inf) - (prefer or 0.0)), np.inf)
        anchor = np.argmin(near, axis=1)
        med[rows] = [np.median(D[k][A[j, anchor[j]]]) if score[k] else np.nan for j, k in enumerate(rows)]
    best = cand[np.argmin(np.abs(med[cand] - (prefer or 0.0)))]
    if pick is not None and len(cand) > 1:
        maps = [
            np.where(
                (ks[c] + np.arange(len(s)) >= 0) & (ks[c] + np.arange(len(s)) < len(pool)),
                ks[c] + np.arange(len(s)),
                -1,
            )
            for c in cand
        ]
        chosen = pick(maps, med[cand].tolist())
        best = cand[chosen] if chosen is not None else best
    g = ks[best] + np.arange(len(s))
    inr = (g >= 0) & (g < len(pool))
    di = pd.Series(np.where(inr, s - pool[np.clip(g, 0, len(pool) - 1)], np.nan)).ffill().bfill()
    return float(med[best]), di.to_numpy(np.float64), sorted(med[cand].tolist())


def coarse_offsets(
    step_starts: dict[int, np.ndarray], ref: int, nodes: dict[int, int] | None = None
) -> tuple[dict[int, float], np.ndarray, float, list[str]]:
    """Per rank the coarse offset (its clock − the reference's) from step starts, the global step centres (on the
    reference's clock, sorted) and the matching tolerance (:func:`coarse_steps` without the per-step shifts)."""
    offsets, _, centres, tol, warnings = coarse_steps(step_starts, ref, nodes)
    return offsets, centres, tol, warnings


def coarse_steps(
    step_starts: dict[int, np.ndarray],
    ref: int,
    nodes: dict[int, int] | None = None,
    patterns: dict[int, np.ndarray] | None = None,
) -> tuple[dict[int, float], dict[int, np.ndarray], np.ndarray, float, list[str]]:
    """Per rank the coarse offset (its clock − the reference's) from step starts, each start's own shift (in the
    rank's sorted order: they differ where its clock stepped by more than a third of a step), the global step
    centres (on the reference's clock, sorted) and the matching tolerance. Ranks of one node share a clock: where
    several shifts fit a rank's starts equally (steps of one length, a late start on a node whose clock is more
    than a step period off), the one under which its steps' collective patterns (``patterns``: per rank, each
    step's, in the order of its starts; :mod:`.step_pattern`) match the global steps' wins where one does; else the
    one nearest its node-mates'; with no node-mate placed, the smallest, said. Which evidence decided is said where
    it was not the starts alone or the node-mates."""
    period = _period(list(step_starts.values()))
    tol = max(period / 3.0, MIN_TOL_NS) if period else float("inf")
    nodes = nodes or {}
    offsets: dict[int, float] = {ref: 0.0}
    pool = np.sort(step_starts[ref].astype(np.float64))
    per_step = {ref: np.zeros(len(pool))}
    placed = [pool]
    placed_sig = [_sorted_patterns(step_starts, patterns, ref)]
    warnings = []
    order = [ref] + sorted((r for r in step_starts if r != ref), key=lambda r: -len(step_starts[r]))
    for r in order[1:]:
        s = np.sort(step_starts[r].astype(np.float64))
        if s.size == 0:
            offsets[r] = 0.0
            per_step[r] = np.zeros(0)
            continue
        mates = [offsets[q] for q in offsets if q != r and nodes.get(q, q) == nodes.get(r, r)]
        prefer = float(np.median(mates)) if mates else None
        sig = _sorted_patterns(step_starts, patterns, r)
        by = _PatternPick(sig, np.concatenate(placed), np.concatenate(placed_sig), pool, tol) if patterns else None
        if pool.size == 0 or not np.isfinite(tol):
            d, n, tied = (float(s[0] - pool[0]) if pool.size else 0.0), 1, []
        else:
            d, n, tied = _best_shift(s, pool, tol, prefer, by)
        per_step[r] = np.full(len(s), d)
        if n and pool.size > 1 and np.isfinite(tol) and (np.abs(s - d - pool[_near(s - d, pool)]) > tol).any():
            # some starts fit no step once shifted: its clock stepped mid-run, or it ran steps the pool has not
            if by is not None:
                by.said = None
            d, per_step[r], tied = _consecutive_shift(s, pool, tol, prefer, by)
        if n == 0:
            warnings.append(f"rank {r}: none of its steps lines up with another rank's; its clock is taken as recorded")
            d = 0.0
            per_step[r] = np.zeros(len(s))
        elif len(tied) > 1:
            warnings += _tie_sentences(r, d, tied, tol, prefer, by.said if by is not None else None)
        offsets[r] = d
        placed.append(s - per_step[r])
        placed_sig.append(sig)
        pool = _cluster(np.concatenate(placed), tol)
    return offsets, per_step, _cluster(np.concatenate(placed), tol) if placed else np.zeros(0), tol, warnings


def _sorted_patterns(starts: dict[int, np.ndarray], patterns: dict[int, np.ndarray] | None, r: int) -> np.ndarray:
    """Rank r's steps' patterns in the order of its sorted starts (UNKNOWN where there are none)."""
    s = starts[r]
    if not patterns or r not in patterns or len(patterns[r]) != len(s):
        return np.full(len(s), step_pattern.UNKNOWN, dtype=np.int64)
    return np.asarray(patterns[r], dtype=np.int64)[np.argsort(s, kind="stable")]


class _PatternPick:
    """The chooser :func:`_best_shift` and :func:`_consecutive_shift` call where shifts tie: the candidate under
    which the rank's patterns match the global steps' (those of the placed rank-steps, computed once asked).
    ``said``: after a call, "pattern" (it chose) or "alike" (it could not)."""

    def __init__(self, sig: np.ndarray, points: np.ndarray, sigs: np.ndarray, pool: np.ndarray, tol: float):
        self.sig, self.points, self.sigs, self.pool, self.tol = sig, points, sigs, pool, tol
        self.said: str | None = None

    def __call__(self, maps: list[np.ndarray], shifts: list[float]) -> int | None:
        pool_sig = step_pattern.pool_patterns(self.points, self.sigs, self.pool, self.tol)
        k = step_pattern.choose(self.sig, maps, pool_sig)
        self.said = "alike" if k is None else "pattern"
        return k


def _tie_sentences(r: int, d: float, tied: list, tol: float, prefer: float | None, said: str | None) -> list[str]:
    """What is said of a rank whose step starts fit several shifts equally: which evidence chose ``d`` (the
    collectives' pattern, its node-mates' shift: said only where the pattern overrode them), or that nothing did."""
    other = min((t for t in tied if abs(t - d) > tol), key=lambda t: abs(t), default=None)
    if other is None:
        return []
    fit = f"rank {r}: its step starts fit a clock {d / 1e6:,.3f} ms or {other / 1e6:,.3f} ms off equally"
    if said == "pattern":
        if prefer is not None and abs(prefer - d) <= tol:
            return []
        mates = (
            "no rank of its node says which"
            if prefer is None
            else f"its node-mates' clock is {prefer / 1e6:,.3f} ms off (check --gpus-per-node)"
        )
        return [
            f"{fit} (steps of one length) and {mates}; the pattern of its collectives in each step (their kinds,"
            f" order and kernels) matches the other ranks' only at {d / 1e6:,.3f} ms: its global steps are those"
        ]
    if prefer is not None:
        return []
    alike = (
        "; its collectives do not tell the steps apart either (every step runs the same ones): recording every"
        " rank from the same step, or steps numbered alike on every rank (ProfilerStep#N), would say which"
        if said == "alike"
        else ""
    )
    return [
        f"{fit} (steps of one length) and no rank of its node says which; its global steps are those of the"
        f" smaller shift ({d / 1e6:,.3f} ms) and may be off by a step{alike}"
    ]


def robust_fit(x: np.ndarray, d: np.ndarray) -> tuple[float, float, float, int]:
    """d ≈ a + b·x, robustly: the median (b = 0), or a line through the inliers where it cuts the residual by a
    fifth and more than 100 ns. Returns (a, b, residual = 90th percentile of |misfit| over the inliers, outliers)."""
    med = float(np.median(d))
    dev = np.abs(d - med)
    mad = float(np.median(dev))
    inl = dev <= max(10 * mad, 1000.0)
    r0 = float(np.percentile(dev[inl], 90)) if inl.any() else 0.0
    a, b, res = med, 0.0, r0
    if inl.sum() >= 6 and np.ptp(x[inl]) > 0:
        xm = float(np.mean(x[inl]))
        slope = float(np.polyfit(x[inl] - xm, d[inl], 1)[0])
        icpt = float(np.median(d[inl] - slope * x[inl]))
        r1 = float(np.percentile(np.abs(d[inl] - icpt - slope * x[inl]), 90))
        if r1 < 0.8 * r0 and r0 - r1 > 100:
            a, b, res = icpt, slope, r1
    return a, b, res, int((~inl).sum())


@dataclass
class Clock:
    """Each rank's clock model: local = t0 + a + (1 + b)·T, T the consensus time after t0."""

    t0: int
    ref: int
    a: dict[int, float]
    b: dict[int, float]
    residual: dict[int, int | None]
    aligned: bool
    warnings: list[str] = field(default_factory=list)
    segments: dict = field(default_factory=dict)  # rank -> clock_model.Segments, for the ranks whose clock stepped
    status: dict = field(default_factory=dict)  # rank -> aligned | stepped | suspect
    bound: dict = field(default_factory=dict)  # rank -> the residual (ns) beyond which its clock is suspect
    base: int = 0  # the tables' time origin (the reference file's baseTimeNanoseconds), for the steps' times
    # rank -> the set-backs of its clock undone in its reduction (set_back.py: local_ns, shift_ns): the step found
    # there is the set-back plus the shift
    set_back: dict = field(default_factory=dict)

    def steps_of(self, rank: int) -> list[dict]:
        """The steps of ``rank``'s clock: ``at_ns`` (on the reference's clock, the tables' time base; the step
        happened within ``within_ns`` of it), ``within_ns``, ``size_ns`` (integers; negative: set back)."""
        seg = self.segments.get(rank)
        steps = list(seg.steps) if seg is not None else []
        size = [float(st["size_ns"]) for st in steps]
        for b in self.set_back.get(rank, []):  # a loop per set-back: the step found nearest its boundary
            if steps:
                x = float(b["local_ns"] - self.t0)
                k = int(np.argmin([abs((st["local_lo"] + st["local_hi"]) / 2.0 - x) for st in steps]))
                size[k] -= b["shift_ns"]
        return [
            {
                "at_ns": int(round(st["at_ns"])) + self.t0 - self.base,
                "within_ns": int(np.ceil(st["within_ns"])),
                "size_ns": int(round(sz)),
            }
            for st, sz in zip(steps, size)
        ]

    def summary(self) -> str:
        """The run's clock in a word: ``suspect`` where a rank's clock is, else ``stepped`` where one stepped (and
        was repaired), else ``aligned``."""
        kinds = set(self.status.values())
        return "suspect" if "suspect" in kinds else "stepped" if "stepped" in kinds else "aligned"

    def ranks_summary(self) -> dict:
        """``stepped``: each stepped rank with its steps; ``suspect``: each suspect rank, its residual and bound."""
        return {
            "stepped": [
                {"rank": int(r), "steps": self.steps_of(r)} for r in sorted(self.status) if self.status[r] == "stepped"
            ],
            "suspect": [
                {"rank": int(r), "residual_ns": self.residual.get(r), "bound_ns": self.bound.get(r)}
                for r in sorted(self.status)
                if self.status[r] == "suspect"
            ],
        }

    def to_ref(self, rank, local) -> np.ndarray:
        """Local times of ``rank`` (one rank, or each time's rank) on the reference's clock (int64 ns); a rank whose
        clock stepped by the segment each time falls in (never across a step unrepaired)."""
        x = (np.asarray(local, dtype=np.int64) - self.t0).astype(np.float64)
        if np.ndim(rank):
            rk = np.asarray(rank, dtype=np.int64)
            ranks = np.array(sorted(self.a), dtype=np.int64)
            pos = np.searchsorted(ranks, rk)
            a = np.array([self.a[int(r)] for r in ranks])[pos]
            b = np.array([self.b[int(r)] for r in ranks])[pos]
        else:
            a, b = self.a[rank], self.b[rank]
        T = (x - a) / (1.0 + b)
        for r, seg in self.segments.items():  # a loop per stepped rank
            m = (rk == r) if np.ndim(rank) else (slice(None) if rank == r else None)
            if m is not None:
                T[m] = seg.to_true(x[m])
        out = self.a[self.ref] + (1.0 + self.b[self.ref]) * T
        return np.rint(out).astype(np.int64) + self.t0

    def offset_ns(self, rank: int) -> int:
        return int(round(self.a[rank] - self.a[self.ref]))


def fine_clock(
    ends: pd.DataFrame, coarse: dict[int, float], ref: int, t0: int, nodes: dict[int, int], own: frozenset = frozenset()
) -> Clock:
    """Offsets from instance ends. ``ends``: rank, inst (an instance id), end_ns (local) of the blocking instances
    seen whole on every rank that ran them.

    Each instance's true end is read on the reference's clock where the reference ran it, else on the ranks already
    placed (the median of their ends, converted); a rank's offset is fitted to (its end − that) over the instances
    it shares. Shifting one rank's (or node's) clock by Δ shifts its fitted offset by exactly Δ and nothing else."""
    ranks = sorted(coarse)
    a = {r: float(coarse[r]) for r in ranks}
    b = {r: 0.0 for r in ranks}
    res: dict[int, int | None] = {r: None for r in ranks}
    X, cols = _end_matrix(ends, t0)
    if not len(X):
        return Clock(
            t0,
            ref,
            {r: 0.0 for r in ranks},
            b,
            res,
            False,
            ["no collective instance is seen on two ranks: the clocks are taken as recorded"],
        )
    fits, D, segs = _place_ranks(X, cols, ref, a, b)
    # a rank whose ends do not coincide with the reference's (a residual beyond LOOSE_NS: its fit says little) but
    # that shares the reference's node shares its host clock
    shared = set()
    for r in list(fits):
        if r != ref and nodes.get(r, r) == nodes.get(ref, ref) and (fits[r][2] > LOOSE_NS or hasattr(nodes[r], "one")):
            shared.add(r)
            a[r], b[r] = 0.0, 0.0
            fits[r] = (0.0, 0.0, fits[r][2], fits[r][3])
            segs.pop(r, None)
    warnings = _node_disagreements(fits, a, nodes)
    if fits:  # the reference's residual: how far the others' ends are from its own
        devs = [np.abs(D[r][1] - _model(r, a, b, segs, D[r][0])) for r in D]
        fits[ref] = (0.0, 0.0, float(np.percentile(np.concatenate(devs), 90)) if devs else 0.0, 0)
    warnings += _residuals(ranks, fits, D, res)
    clock_model.reference_step(segs, ref, len([r for r in fits if r != ref]), own)
    status, bounds, said = clock_model.statuses(res, {r: seg.steps for r, seg in segs.items()}, nodes, ref, shared)
    return Clock(t0, ref, a, b, res, True, warnings + said, segs, status, bounds)


def _model(r: int, a: dict, b: dict, segs: dict, T: np.ndarray) -> np.ndarray:
    """Rank r's modelled local − true at true times ``T`` (sorted): its line, or its segments' where it stepped."""
    if r not in segs:
        return a[r] + b[r] * T
    seg = segs[r]
    k = np.searchsorted(seg.first, np.arange(len(T)), side="right") - 1  # D's ends are sorted as the fit's were
    return seg.a[k] + seg.b[k] * T


def _end_matrix(ends: pd.DataFrame, t0: int) -> tuple[np.ndarray, list[int]]:
    """The instances seen on two ranks or more × the ranks that ran them (both sorted): each one's latest local end
    after t0 (subtracted in int64: epoch ns are beyond float64's exact range), NaN where the rank did not run it."""
    inst, ii = _unique_inverse(ends["inst"].to_numpy(np.int64))
    ranks, ri = _unique_inverse(ends["rank"].to_numpy(np.int64))
    low = np.iinfo(np.int64).min
    M = np.full((len(inst), len(ranks)), low, dtype=np.int64)
    cell = ii * len(ranks) + ri
    end = ends["end_ns"].to_numpy(np.int64) - np.int64(t0)
    if np.bincount(cell, minlength=M.size).max(initial=0) <= 1:  # one end a cell (the rule): written, not reduced
        M.reshape(-1)[cell] = end
    else:
        np.maximum.at(M, (ii, ri), end)
    seen = M != low
    keep = seen.sum(axis=1) > 1
    used = seen[keep].any(axis=0)
    X = np.where(seen, M, 0).astype(np.float64)[np.ix_(keep, used)]
    X[~seen[np.ix_(keep, used)]] = np.nan
    return X, ranks[used].tolist()


def _unique_inverse(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(v, return_inverse=True)`` of int64 values, without a sort where they are ≥ 0 and not far above
    their count (instance ids, rank ids)."""
    if len(v) and int(v.min()) >= 0 and int(v.max()) <= 4 * len(v) + 1024:
        present = np.zeros(int(v.max()) + 1, dtype=bool)
        present[v] = True
        return np.flatnonzero(present).astype(np.int64), (np.cumsum(present) - 1)[v]
    u, inv = np.unique(v, return_inverse=True)
    return u, inv.reshape(-1)


def _place_ranks(
    X: np.ndarray, cols: list, ref: int, a: dict[int, float], b: dict[int, float]
) -> tuple[dict[int, tuple], dict[int, tuple], dict]:
    """Fit the ranks (the columns of ``X``: each instance's local end after t0) one by one, the rank sharing the most
    instances with the placed ones next, setting their offset ``a`` and drift ``b`` (of their first segment) in
    place. Returns each placed rank's fit (a, b, residual, outliers), the (true end, its end − true end) it was
    fitted to (sorted by true end), and the segments of the ranks whose clock stepped (clock_model)."""
    fits: dict[int, tuple] = {}
    segs: dict = {}
    placed = [ref] if ref in cols else []
    if placed:
        fits[ref] = (0.0, 0.0, 0.0, 0)
    a[ref], b[ref] = 0.0, 0.0
    todo = [r for r in cols if r not in placed]
    if not placed:  # the reference ran no shared instance: anchor on the rank that ran the most
        anchor = max(cols, key=lambda r: np.isfinite(X[:, cols.index(r)]).sum())
        placed, fits[anchor] = [anchor], (a[anchor], 0.0, 0.0, 0)
        todo.remove(anchor)
    D = {}
    seen = np.isfinite(X)
    while todo:
        T = _true_ends(X, cols, ref, placed, a, b, segs)
        shared = seen[:, [cols.index(q) for q in todo]] & np.isfinite(T)[:, None]
        j = int(np.argmax(shared.sum(axis=0)))  # the first of the most shared, in todo's order
        r, m = todo[j], shared[:, j]
        if not m.any():
            break
        o = np.argsort(T[m], kind="stable")
        Tm, local = T[m][o], X[m, cols.index(r)][o]
        d = local - Tm
        seg = clock_model.fit_segments(Tm, d, local, robust_fit)
        if len(seg.first) > 1:
            segs[r] = seg
        fits[r] = (float(seg.a[0]), float(seg.b[0]), seg.residual, seg.outliers)
        D[r] = (Tm, d)
        a[r], b[r] = fits[r][0], fits[r][1]
        placed.append(r)
        todo.remove(r)
    return fits, D, segs


def _true_ends(
    X: np.ndarray, cols: list, ref: int, placed: list, a: dict[int, float], b: dict[int, float], segs: dict
) -> np.ndarray:
    """Each instance's true end: where the reference ran the instance, its own end; elsewhere the median of the
    placed ranks' ends, converted (computed only there: the reference runs nearly every instance)."""
    xref = X[:, cols.index(ref)] if ref in placed else None
    need = ~np.isfinite(xref) if xref is not None else np.ones(len(X), dtype=bool)
    T = np.full(len(X), np.nan)
    if need.any():
        conv = np.column_stack(
            [
                segs[r].to_true(X[need, cols.index(r)]) if r in segs else (X[need, cols.index(r)] - a[r]) / (1.0 + b[r])
                for r in placed
            ]
        )
        seen = np.isfinite(conv).any(axis=1)
        sub = np.full(len(conv), np.nan)
        if seen.any():
            sub[seen] = np.nanmedian(conv[seen], axis=1)
        T[need] = sub
    if xref is not None:
        T = np.where(np.isfinite(xref), xref, T)
    return T


def _node_disagreements(fits: dict[int, tuple], a: dict[int, float], nodes: dict[int, int]) -> list[str]:
    """Ranks of one node share a host clock: their offsets, each fitted on its own, must agree; where not, said."""
    warnings = []
    by_node: dict[int, list[int]] = {}
    for r in fits:
        by_node.setdefault(nodes.get(r, r), []).append(r)
    for node, members in sorted(by_node.items()):
        if len(members) < 2:
            continue
        offs = {r: a[r] for r in members}
        lo, hi = min(offs, key=offs.get), max(offs, key=offs.get)
        tol = max(4 * max(fits[r][2] for r in members), 2000.0)
        if offs[hi] - offs[lo] > tol:
            spread = (offs[hi] - offs[lo]) / 1e3
            warnings.append(
                f"ranks of node {node} disagree on the clock by up to {spread:,.1f} µs"
                f" (rank {lo} against rank {hi}), though ranks of one node share a host clock: each keeps"
                " its own offset; check --gpus-per-node"
            )
    return warnings


def _residuals(ranks: list[int], fits: dict[int, tuple], D: dict[int, tuple], res: dict[int, int | None]) -> list[str]:
    """Each rank's residual (ns, rounded up; set in ``res``), and what is said of ranks with many outliers, no shared
    collective, or a residual beyond LOOSE_NS."""
    warnings = []
    for r in ranks:
        if r in fits:
            res[r] = int(np.ceil(fits[r][2]))
            n_r = len(D[r][1]) if r in D else 0
            if n_r and fits[r][3] > 0.1 * n_r:
                warnings.append(
                    f"rank {r}: {fits[r][3]} of its {n_r} collective ends do not end with the other"
                    " ranks' (left out of its clock offset)"
                )
        else:
            warnings.append(f"rank {r}: no collective shared with another rank; its offset is the step starts' only")
    loose = {r: v for r, v in res.items() if v is not None and v > LOOSE_NS}
    if loose:
        worst = max(loose, key=loose.get)
        warnings.append(
            f"the collectives' ends do not coincide across ranks (rank {worst}: within"
            f" {loose[worst] / 1e6:,.3f} ms of its fitted clock; {len(loose)} rank(s) beyond"
            f" {LOOSE_NS / 1e3:,.0f} µs): point-to-point or non-blocking collectives, or clocks that jump;"
            " margins within that residual are ties"
        )
    return warnings


@dataclass
class Aligned:
    """A run on the reference's clock: its rank-steps and collective instances numbered globally."""

    clock: Clock
    steps: pd.DataFrame  # step, rank, local_step, phase, bs, tokens, start_ns, end_ns, partial
    collectives: pd.DataFrame  # step, kind, seq, rank, start_ns, end_ns, work_ns, attention_ns, expert_ns, partial
    n_steps: int
    partial_steps: int
    unmatched: int
    partial_step_ids: list
    warnings: list[str]


def _global_steps(steps: dict[int, pd.DataFrame], shift: dict[int, np.ndarray], tol: float) -> dict[int, np.ndarray]:
    """Each rank-step's global step (−1: none). Starts within ``tol`` are one step (each shifted by its own coarse
    shift, in the rank's table order); a cluster that few ranks start in (a step whose start the rank did not
    record) joins the well-supported step its window overlaps most."""
    rows = [
        (r, i, float(s) - shift[r][i], float(e) - shift[r][i])
        for r, df in steps.items()
        for i, (s, e) in enumerate(zip(df["start_ns"], df["end_ns"]))
    ]
    out = {r: np.full(len(df), -1, dtype=np.int64) for r, df in steps.items()}
    if not rows:
        return out
    rk = np.array([x[0] for x in rows])
    li = np.array([x[1] for x in rows])
    s = np.array([x[2] for x in rows])
    e = np.array([x[3] for x in rows])
    order = np.argsort(s, kind="stable")
    brk = np.concatenate([[True], np.diff(s[order]) > tol if np.isfinite(tol) else np.zeros(len(s) - 1, bool)])
    cid = np.empty(len(s), dtype=np.int64)
    cid[order] = np.cumsum(brk) - 1
    n = int(cid.max()) + 1
    pairs = np.unique(np.column_stack([cid, rk]), axis=0)
    support = np.bincount(pairs[:, 0], minlength=n)
    strong = support >= max(2, 0.5 * np.median(support)) if len(steps) > 1 else np.ones(n, bool)
    if strong.any() and not strong.all():
        cs = pd.Series(s).groupby(cid).median().reindex(range(n)).to_numpy()
        ce = pd.Series(e).groupby(cid).median().reindex(range(n)).to_numpy()
        sc = np.flatnonzero(strong)
        for c in np.flatnonzero(~strong):
            for j in np.flatnonzero(cid == c):
                ov = np.minimum(e[j], ce[sc]) - np.maximum(s[j], cs[sc])
                k = int(np.argmax(ov))
                if ov[k] > 0 and not np.any((rk == rk[j]) & (cid == sc[k])):
                    cid[j] = sc[k]
    # renumber in time order
    used = np.unique(cid)
    lo = np.full(int(cid.max()) + 1, np.inf)
    np.minimum.at(lo, cid, s)
    first = lo[used]
    new = {int(c): i for i, c in enumerate(used[np.argsort(first, kind="stable")])}
    for j in range(len(rows)):
        out[int(rk[j])][int(li[j])] = new[int(cid[j])]
    return out


def align_run(per_rank: dict[int, dict], nodes: dict[int, int], blocking: frozenset, base_ns: int = 0) -> Aligned:
    """``per_rank[r]``: ``{"steps", "collectives"}`` of rank r on its own clock (mapper tables, stage files merged).
    The reference is the lowest rank; ``base_ns`` the tables' time origin (what the steps of a clock are told on)."""
    ref = min(per_rank)
    steps = {r: d["steps"] for r, d in per_rank.items()}
    anchor = ref if len(steps[ref]) else max(steps, key=lambda r: len(steps[r]))
    # step times after a common origin, in int64 (epoch ns are beyond float64's exact range)
    origin = min((int(df["start_ns"].min()) for df in steps.values() if len(df)), default=0)
    rel = {
        r: pd.DataFrame(
            {"start_ns": df["start_ns"].to_numpy(np.int64) - origin, "end_ns": df["end_ns"].to_numpy(np.int64) - origin}
        )
        for r, df in steps.items()
    }
    knames = kind_names(per_rank)
    coarse, sorted_shift, _, tol, warnings = coarse_steps(
        {r: df["start_ns"].to_numpy(np.int64) for r, df in rel.items()},
        anchor,
        nodes,
        step_pattern.step_signatures(per_rank, knames),
    )
    if anchor != ref:
        warnings.append(f"rank {ref} (the reference) has no step; the step starts are matched against rank {anchor}")
    shift = {}  # each rank-step's coarse shift, in the rank's table order
    for r, df in rel.items():
        o = np.argsort(df["start_ns"].to_numpy(np.int64), kind="stable")
        shift[r] = np.empty(len(o))
        shift[r][o] = sorted_shift[r]
    g_of = _global_steps(rel, shift, tol)
    coll = numbered_collectives(per_rank, g_of, knames)
    coll["shifted"] = match_by_shift(coll, ref)
    t0_src = steps[ref]["start_ns"] if len(steps[ref]) else coll["start_ns"]
    t0 = int(t0_src.min()) if len(t0_src) else 0
    own = frozenset(r for r, d in per_rank.items() if d.get("set_back"))  # set back in their own trace
    clock = fine_clock(_blocking_ends(coll, knames, blocking), coarse, ref, t0, nodes, own)
    clock.base = int(base_ns)
    clock.set_back = {r: d["set_back"] for r, d in per_rank.items() if d.get("set_back")}
    warnings += clock.warnings
    warnings += clock_model.step_sentences({r: clock.steps_of(r) for r in clock.segments}, nodes, own)
    said, coll["clock_uncertain"] = _across_steps(clock, coll, knames)
    warnings += said
    # everything on the reference's clock
    crank = coll["rank"].to_numpy(np.int64)
    coll["start_ref"] = clock.to_ref(crank, coll["start_ns"].to_numpy(np.int64))
    coll["end_ref"] = clock.to_ref(crank, coll["end_ns"].to_numpy(np.int64))
    st_rows = []
    for r in per_rank:
        df = steps[r]
        st_rows.append(
            pd.DataFrame(
                {
                    "step": g_of[r],
                    "rank": r,
                    "local_step": df["local_step"].to_numpy(np.int64),
                    "phase": df["phase"].to_numpy(),
                    "bs": df["bs"].to_numpy(),
                    "tokens": df["tokens"].to_numpy(),
                    "start_ns": clock.to_ref(r, df["start_ns"].to_numpy(np.int64)),
                    "end_ns": clock.to_ref(r, df["end_ns"].to_numpy(np.int64)),
                }
            )
        )
    st = pd.concat(st_rows, ignore_index=True) if st_rows else pd.DataFrame()
    matched = match_by_time(coll, st)
    partial_keys = set(
        zip(
            coll.loc[~coll["full"] & (coll["step"] >= 0), "rank"], coll.loc[~coll["full"] & (coll["step"] >= 0), "step"]
        )
    )
    unmatched = int((~matched).sum())
    if len(st):
        st["partial"] = [(r, g) in partial_keys for r, g in zip(st["rank"], st["step"])]
        st = st.sort_values(["step", "rank", "local_step"], kind="stable").reset_index(drop=True)
    n_steps = int(st.loc[st["step"] >= 0, "step"].nunique()) if len(st) else 0
    # a global step not seen whole on every rank: missing on one, or partial on one
    seen = st[st["step"] >= 0].groupby("step")["rank"].nunique() if len(st) else pd.Series(dtype=int)
    part_steps = {g for _, g in partial_keys} | set(seen.index[seen < len(per_rank)])
    if unmatched:
        warnings.append(
            f"{unmatched} collective kernel(s) matched no instance of the other ranks (outside every step,"
            " or more of a kind in a step than the other ranks ran) and are left out"
        )
    return Aligned(
        clock,
        st,
        collectives_table(coll, matched, knames),
        n_steps,
        len(part_steps),
        unmatched,
        sorted(part_steps),
        warnings,
    )


def _across_steps(clock: Clock, coll: pd.DataFrame, knames: pd.Index) -> tuple[list[str], np.ndarray]:
    """What is said of the collectives of a stepped rank that began between the two ends its clock step fell
    between, where either side of the step fits their time (a step smaller than that gap): their arrival is known
    only within the step's size. Returns the sentences and which rows of ``coll`` those are (``clock_uncertain``:
    attribute.py leaves their instances out of every wait, imbalance and straggler). A loop per step of a clock."""
    out = []
    uncertain = np.zeros(len(coll), dtype=bool)
    for r, seg in clock.segments.items():
        m = (coll["rank"] == r).to_numpy()
        x = (coll["start_ns"].to_numpy(np.int64)[m] - clock.t0).astype(np.float64)
        for k, st in enumerate(seg.steps, start=1):
            # either side of the step fits a time between (its ends' local times, each moved by the step)
            band = (x > st["local_lo"] + st["size_ns"]) & (x < st["local_hi"] - st["size_ns"])
            if band.any():
                uncertain[np.flatnonzero(m)[band]] = True
                rows = coll[m][band]
                which = ", ".join(
                    f"step {int(g)} {knames[int(kd)]} {int(q)}"
                    for g, kd, q in zip(rows["step"], rows["kind"], rows["seq"])
                )
                out.append(
                    f"rank {r}: {int(band.sum())} collective(s) began while its clock stepped ({which}): which side of"
                    f" the step they began on is unknown, so their wait is known only within {abs(st['size_ns']) / 1e3:,.1f} µs:"
                    " they are left out of waits, imbalance and stragglers (clock_uncertain)"
                )
    return out, uncertain


def _blocking_ends(coll: pd.DataFrame, knames: pd.Index, blocking: frozenset) -> pd.DataFrame:
    """rank, inst (an instance: (step, kind, seq), numbered in that order), end_ns of the placed collectives of a
    blocking kind: what :func:`fine_clock` fits the clocks to."""
    codes = [i for i, k in enumerate(knames) if k in blocking]
    m = (coll["full"] | coll["shifted"]).to_numpy(bool) & np.isin(coll["kind"].to_numpy(np.int64), codes)
    step, kind, seq = (coll[c].to_numpy(np.int64)[m] for c in ("step", "kind", "seq"))
    span_k, span_q = len(knames) + 1, int(seq.max()) + 1 if len(seq) else 1
    key = ((step + 1) * span_k + kind) * span_q + seq
    return pd.DataFrame(
        {
            "rank": coll["rank"].to_numpy(np.int64)[m],
            "inst": dense_ids(key),
            "end_ns": coll["end_ns"].to_numpy(np.int64)[m],
        }
    )
