"""Automatic layers: edit distances between kernel-name sequences (a segment is tens to hundreds of kernels).

The costs: a substitution within a category SUB_SAME, across categories SUB_OTHER, a gap INDEL. ``edit_distance`` is the
global distance, ``align_suffix`` aligns a whole expected sequence with a suffix of another, ``cost_floor`` is a
cheap lower bound of both that lets callers skip a DP that cannot come within the edit budget; long sequences run the
DP in numpy one anti-diagonal at a time (``_dp_last_row``) with the very floats of the plain loops."""

from __future__ import annotations

from collections import Counter

import numpy as np

EDIT_FRACTION = 0.25  # edit budget of a first/last/unique segment, as a share of its length (at least 1)
SUB_SAME, SUB_OTHER, INDEL = 0.5, 1.2, 1.0  # edit costs: substitution within a category / across, gap


def _sub_cost(a: int, b: int, cat: np.ndarray) -> float:
    if a == b:
        return 0.0
    return SUB_SAME if cat[a] == cat[b] else SUB_OTHER


def edit_budget(n: int) -> float:
    return max(1.0, EDIT_FRACTION * n)


def edit_distance(a: tuple, b: tuple, cat: np.ndarray) -> float:
    """Global edit distance with the costs above."""
    if min(len(a), len(b)) >= _DP_NUMPY_MIN:
        short, long = (a, b) if len(a) <= len(b) else (b, a)
        if _subsequence(short, long):  # gaps only: the cost is their count (see _subsequence)
            return (len(long) - len(short)) * INDEL
        return float(_dp_last_row(a, b, cat)[-1])
    prev = [j * INDEL for j in range(len(b) + 1)]
    for i in range(1, len(a) + 1):
        cur = [i * INDEL] + [0.0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j - 1] + _sub_cost(a[i - 1], b[j - 1], cat), prev[j] + INDEL, cur[j - 1] + INDEL)
        prev = cur
    return prev[-1]


def align_suffix(expected: tuple, seq: tuple, cat: np.ndarray) -> tuple[float, int]:
    """Align all of ``expected`` with a suffix of ``seq`` (a free prefix): (cost, index in ``seq`` where the
    aligned part starts). Ties go to the later start."""
    m, n = len(expected), len(seq)
    if min(m, n) >= _DP_NUMPY_MIN and m >= n and _subsequence(seq, expected):
        return (m - n) * INDEL, 0  # all of seq, with gaps for the rest of expected (see _subsequence)
    if min(m, n) >= _DP_NUMPY_MIN and m < n and seq[n - m :] == expected:
        return 0.0, n - m  # the only start of cost 0
    if min(m, n) >= _DP_NUMPY_MIN:  # D[i][j] = F[m - i][n - j] of the forward DP over both sequences reversed
        nxt = _dp_last_row(expected[::-1], seq[::-1], cat)[::-1].tolist()
    else:
        # D[i][j]: cost of aligning expected[i:] with seq[j:]
        nxt = [(n - j) * INDEL for j in range(n + 1)]  # row i = m
        for i in range(m - 1, -1, -1):
            cur = [0.0] * (n + 1)
            cur[n] = (m - i) * INDEL
            for j in range(n - 1, -1, -1):
                cur[j] = min(nxt[j + 1] + _sub_cost(expected[i], seq[j], cat), nxt[j] + INDEL, cur[j + 1] + INDEL)
            nxt = cur
    best_j = min(range(n + 1), key=lambda j: (round(nxt[j], 6), -j))
    return nxt[best_j], best_j


_DP_NUMPY_MIN = 12  # both sequences at least this long: the DP runs in numpy, one anti-diagonal at a time


def _dp_last_row(a, b, cat: np.ndarray) -> np.ndarray:
    """The last row F[len(a)][:] of the forward edit DP (F[0][q] = q, F[p][0] = p, F[p][q] = min(F[p-1][q-1] +
    sub, F[p-1][q] + INDEL, F[p][q-1] + INDEL)), computed one anti-diagonal at a time in numpy. Every cell is the
    same IEEE additions and minimum of the same operands as the Python loops above, so the floats are identical;
    an anti-diagonal's cells depend only on the two before it. F is stored row-major with rows of n + 1, so the
    cells of anti-diagonal t (p + q = t) are the positions p * n + t: one strided slice."""
    m, n = len(a), len(b)
    x = np.asarray(a, dtype=np.int64)
    y = np.asarray(b, dtype=np.int64)
    F = np.empty((m + 1) * (n + 1), dtype=np.float64)
    F2 = F.reshape(m + 1, n + 1)
    F2[0, :] = np.arange(n + 1) * INDEL
    F2[:, 0] = np.arange(m + 1) * INDEL
    S = np.zeros((m + 1) * (n + 1), dtype=np.float64)
    S2 = S.reshape(m + 1, n + 1)
    S2[1:, 1:] = np.where(
        x[:, None] == y[None, :], 0.0, np.where(cat[x][:, None] == cat[y][None, :], SUB_SAME, SUB_OTHER)
    )
    d1, d2 = n + 1, n + 2
    for t in range(2, m + n + 1):
        lo, hi = max(1, t - n), min(m, t - 1)
        s, e = lo * n + t, hi * n + t + 1
        cell = np.minimum(F[s - d2 : e - d2 : n] + S[s:e:n], F[s - d1 : e - d1 : n] + INDEL)
        np.minimum(cell, F[s - 1 : e - 1 : n] + INDEL, out=cell)
        F[s:e:n] = cell
    return F2[m].copy()


def cost_floor(expected: tuple, seq: tuple) -> float:
    """A lower bound of align_suffix's cost, and so of edit_distance's (a global alignment is one of a suffix): every
    element of ``expected`` beyond the length of ``seq`` is a gap (INDEL), and every one not matched by an equal code
    costs at least the cheapest substitution, SUB_SAME."""
    m, n = len(expected), len(seq)
    if m > n and (m - n) * INDEL > edit_budget(m) + 1e-6:
        return (m - n) * INDEL
    common = sum((Counter(expected) & Counter(seq)).values())
    return max((m - n) * INDEL, SUB_SAME * (m - common), 0.0)


def _subsequence(short: tuple, long: tuple) -> bool:
    """Whether ``short`` is ``long`` with elements left out. Then the edit distance of the two is exactly
    len(long) - len(short) gaps, in the DP's floats too: a path of matches and gaps sums whole numbers of INDEL
    exactly, and any path with a substitution costs at least SUB_SAME more (every alignment pays a gap per element one
    side has more); aligned against a suffix, every later start leaves more gaps. So a long DP can be skipped."""
    it = iter(long)
    return all(x in it for x in short)


def edit_floor(a: tuple, b: tuple, budget: float | None = None) -> float:
    """A lower bound of edit_distance's global distance, at least cost_floor: with u_a and u_b the elements of each
    side not matched by an equal code of the other (as multisets), an alignment pays a gap for each of the
    |len(a) - len(b)| elements one side has more and at least SUB_SAME for each of the min(u_a, u_b) others. With a
    ``budget``, the gaps alone when they already exceed it (the same answer to ``> budget + 1e-6``, without counting
    codes)."""
    m, n = len(a), len(b)
    if budget is not None and abs(m - n) * INDEL > budget + 1e-6:
        return abs(m - n) * INDEL
    common = sum((Counter(a) & Counter(b)).values())
    return abs(m - n) * INDEL + SUB_SAME * min(m - common, n - common)
