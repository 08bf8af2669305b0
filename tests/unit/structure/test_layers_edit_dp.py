"""The automatic layers' edit distances: the numpy DP (one anti-diagonal at a time) gives the very floats of the
plain Python loops it replaces for long sequences, so the layers found do not change (issue 30)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tracekit.analyses.structure.layers import alignment as L


def _edit_loops(a, b, cat):
    prev = [j * L.INDEL for j in range(len(b) + 1)]
    for i in range(1, len(a) + 1):
        cur = [i * L.INDEL] + [0.0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j - 1] + L._sub_cost(a[i - 1], b[j - 1], cat), prev[j] + L.INDEL, cur[j - 1] + L.INDEL)
        prev = cur
    return prev[-1]


def _align_loops(expected, seq, cat):
    m, n = len(expected), len(seq)
    nxt = [(n - j) * L.INDEL for j in range(n + 1)]
    for i in range(m - 1, -1, -1):
        cur = [0.0] * (n + 1)
        cur[n] = (m - i) * L.INDEL
        for j in range(n - 1, -1, -1):
            cur[j] = min(nxt[j + 1] + L._sub_cost(expected[i], seq[j], cat), nxt[j] + L.INDEL, cur[j + 1] + L.INDEL)
        nxt = cur
    best_j = min(range(n + 1), key=lambda j: (round(nxt[j], 6), -j))
    return nxt[best_j], best_j


@pytest.mark.slow
def test_numpy_dp_gives_the_loops_floats():
    rng = random.Random(30)
    numpy_runs = 0
    for _ in range(300):
        k = rng.choice([2, 3, 5, 12])
        cat = np.array([rng.randrange(3) for _ in range(k)])
        m, n = rng.randrange(0, 70), rng.randrange(0, 70)
        base = [rng.randrange(k) for _ in range(max(m, n))]
        a = tuple(base[:m])
        b = tuple(x if rng.random() < 0.7 else rng.randrange(k) for x in base[:n])
        numpy_runs += min(m, n) >= L._DP_NUMPY_MIN
        assert L.edit_distance(a, b, cat) == _edit_loops(a, b, cat)
        got = L.align_suffix(a, b, cat)
        assert got == _align_loops(a, b, cat) and type(got[0]) is float
    assert numpy_runs > 100


def test_the_cost_floor_is_below_the_alignment_cost():
    rng = random.Random(31)
    for _ in range(500):
        k = rng.choice([2, 4, 9])
        cat = np.array([rng.randrange(3) for _ in range(k)])
        a = tuple(rng.randrange(k) for _ in range(rng.randrange(0, 40)))
        b = tuple(rng.randrange(k) for _ in range(rng.randrange(0, 40)))
        assert L.cost_floor(a, b) <= _align_loops(a, b, cat)[0] + 1e-9


def test_the_cost_floor_is_below_the_edit_floor_and_that_below_the_edit_distance():
    rng = random.Random(32)
    for _ in range(500):
        k = rng.choice([2, 4, 9])
        cat = np.array([rng.randrange(3) for _ in range(k)])
        a = tuple(rng.randrange(k) for _ in range(rng.randrange(0, 40)))
        b = tuple(rng.randrange(k) for _ in range(rng.randrange(0, 40)))
        assert L.cost_floor(a, b) <= L.edit_floor(a, b) <= _edit_loops(a, b, cat) + 1e-9


def test_a_subsequence_skips_the_dp_with_the_loops_floats():
    """Sequences one of which is the other with elements left out (the usual case at a run's left edge):
    edit_distance and align_suffix answer without the DP, and with the very floats and start of the loops."""
    rng = random.Random(34)
    shortcuts = 0
    for _ in range(60):
        k = rng.choice([2, 3, 7])
        cat = np.array([rng.randrange(3) for _ in range(k)])
        long = tuple(rng.randrange(k) for _ in range(rng.randrange(L._DP_NUMPY_MIN, 60)))
        short = tuple(x for x in long if rng.random() < 0.8)
        if len(short) < L._DP_NUMPY_MIN:
            continue
        shortcuts += 1
        assert L._subsequence(short, long)
        assert L.edit_distance(short, long, cat) == _edit_loops(short, long, cat) == (len(long) - len(short)) * L.INDEL
        assert L.edit_distance(long, short, cat) == _edit_loops(long, short, cat)
        got = L.align_suffix(long, short, cat)
        assert got == _align_loops(long, short, cat) and type(got[0]) is float
        tail = tuple(rng.randrange(k) for _ in range(rng.randrange(1, 8))) + long  # long is a suffix of it
        got = L.align_suffix(long, tail, cat)
        assert got == _align_loops(long, tail, cat) == (0.0, len(tail) - len(long))
    assert shortcuts > 30
