"""sequences._stable_order is np.argsort(kind="stable") (issue 30: small integers sorted in 16 bits, by numpy's
radix sort), on steps and name codes of every range, ties and empties included."""

from __future__ import annotations

import numpy as np

from tracekit.analyses.structure.layers.sequences import _stable_order


def test_stable_order_is_the_stable_argsort():
    rng = np.random.default_rng(30)
    cases = [np.zeros(0, np.int64), np.array([5], np.int64), np.full(1000, 7, np.int64)]
    for lo, hi, n in [
        (0, 3, 50),
        (-1, 40, 10_000),
        (0, 2000, 200_000),
        (-(1 << 15), 1 << 15, 5000),
        (0, 1 << 16, 5000),
        (-(1 << 40), 1 << 40, 3000),
    ]:
        cases.append(rng.integers(lo, hi, n, dtype=np.int64))
    for x in cases:
        got = _stable_order(x)
        assert np.array_equal(got, np.argsort(x, kind="stable"))
        assert np.all(np.diff(x[got]) >= 0) if x.size else True
