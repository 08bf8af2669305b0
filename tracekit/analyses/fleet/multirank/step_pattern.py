"""Global steps from the pattern of collectives (docs/multirank.md, "Global steps").

Every rank of a run runs the same collectives in a step, in the same order: a step's **pattern** is the sequence of
its collective instances, each its kind and how many kernels it merged (DeepEP's notify + dispatch is two, a
low-latency dispatch one). Where a rank's step starts fit several clock shifts equally (steps of one length, a late
start on a clock more than a step period off), each candidate maps the rank's steps onto global steps; the one under
which its steps' patterns match the global steps' (a prefill step run in another DeepEP mode, a step with one more
all-gather) decides. Where every candidate matches as well (steps alike throughout), the pattern cannot say.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .numbering import kind_codes

UNKNOWN = -1  # a step whose pattern is not known (no collectives table, a step outside the pool)


def step_signatures(per_rank: dict[int, dict], knames: pd.Index) -> dict[int, np.ndarray]:
    """Per rank, each step's pattern as a small integer (equal integers: equal patterns across the run; 0: a step
    with no collective), in the order of the rank's steps table. Vectorised: a step's pattern is its count and two
    position-weighted sums of its instances' tokens (kind code into ``knames`` × 16 + kernels), exact in float64."""
    keys, owners = [], []
    for r, d in per_rank.items():  # a loop per rank
        steps, c = d["steps"], d["collectives"]
        local = steps["local_step"].to_numpy(np.int64)
        width = int(local.max()) + 1 if len(local) else 0
        ls = c["local_step"].to_numpy(np.int64) if len(c) else np.zeros(0, np.int64)
        inside = (ls >= 0) & (ls < width)
        o = np.flatnonzero(inside)
        o = o[np.lexsort((c["start_ns"].to_numpy(np.int64)[o], ls[o]))] if len(o) else o
        g = ls[o]
        token = (kind_codes(c["kind"], knames)[o] + 1) * 16 + np.minimum(c["kernels"].to_numpy(np.int64)[o], 15) + 1
        first = np.r_[0, np.flatnonzero(np.diff(g)) + 1] if len(g) else np.zeros(0, np.int64)
        pos = np.arange(len(g)) - np.repeat(first, np.diff(np.r_[first, len(g)]))
        w1, w2 = ((pos + 1) * 2_654_435_761) % (1 << 31), ((pos + 7) * 97_531 + 12_345) % (1 << 31)
        count = np.bincount(g, minlength=width)
        h1 = np.bincount(g, weights=token * w1.astype(np.float64), minlength=width)
        h2 = np.bincount(g, weights=token * w2.astype(np.float64), minlength=width)
        keys.append(np.column_stack([count, h1, h2])[local] if width else np.zeros((0, 3)))
        owners.append(r)
    allk = np.concatenate(keys) if keys else np.zeros((0, 3))
    # one integer per distinct (count, h1, h2); the pattern of none (all zero, the least row) is 0
    _, ids = np.unique(np.vstack([np.zeros((1, 3)), allk]), axis=0, return_inverse=True)
    ids = ids.reshape(-1).astype(np.int64)
    out, at = {}, 1
    for r, k in zip(owners, keys):
        out[r] = ids[at : at + len(k)]
        at += len(k)
    return out


def pool_patterns(points: np.ndarray, sigs: np.ndarray, pool: np.ndarray, tol: float) -> np.ndarray:
    """Each pool point's (global step's) pattern: the most common among the placed rank-steps within ``tol`` of it
    (``points`` their shifted starts, ``sigs`` their patterns); UNKNOWN where none is near."""
    out = np.full(len(pool), UNKNOWN, dtype=np.int64)
    if not len(pool) or not len(points):
        return out
    j = np.clip(np.searchsorted(pool, points), 1, max(len(pool) - 1, 1))
    left = np.abs(points - pool[j - 1]) <= np.abs(points - pool[np.minimum(j, len(pool) - 1)])
    near = np.minimum(np.where(left, j - 1, j), len(pool) - 1)
    ok = (np.abs(points - pool[near]) <= tol) & (sigs != UNKNOWN)
    if ok.any():
        votes = pd.DataFrame({"g": near[ok], "sig": sigs[ok]}).value_counts().reset_index(name="n")
        top = votes.sort_values(["g", "n", "sig"], ascending=[True, False, True]).drop_duplicates("g")
        out[top["g"].to_numpy(np.int64)] = top["sig"].to_numpy(np.int64)
    return out


def score(sig: np.ndarray, mapped: np.ndarray, pool_sig: np.ndarray) -> int:
    """How well a candidate mapping fits: the rank's steps whose pattern equals that of the global step they map to
    (``mapped``: a pool index per step, −1 for none), less those whose pattern differs; unknowns count neither."""
    m = mapped >= 0
    theirs = np.full(len(sig), UNKNOWN, dtype=np.int64)
    theirs[m] = pool_sig[mapped[m]]
    known = m & (theirs != UNKNOWN) & (sig != UNKNOWN)
    same = int((sig[known] == theirs[known]).sum())
    return same - (int(known.sum()) - same)


def choose(sig: np.ndarray | None, candidates: list[np.ndarray], pool_sig: np.ndarray | None) -> int | None:
    """The candidate (each a pool index per step) under which the rank's patterns match the global steps' best,
    where exactly one does; None where the pattern cannot say (no patterns, or the best tied)."""
    if sig is None or pool_sig is None or len(candidates) < 2:
        return None
    scores = np.array([score(sig, c, pool_sig) for c in candidates])
    best = np.flatnonzero(scores == scores.max())
    return int(best[0]) if len(best) == 1 else None
