"""The medians of a run's analysis, and the one convention every median of arrivals and waits follows.

Medians of an even count are lower medians (so every ``*_ns`` stays an integer). An instance's ranks in arrival
order (start on the reference clock, then rank) are a_0 ≤ … ≤ a_{n−1}; its **median rank** is the one at position
⌊(n − 1)/2⌋ (:func:`median_rows`) — the lower median of the arrivals, which for an even n is the *upper* median of
the waits (waits fall as arrivals rise). Everything said about an instance's median arrival or wait is that rank's:
the imbalance's term (last − median arrival), the ``median_wait_ns`` column (the median rank's wait) and the rank the
causes' shares are measured against. So, for a collective (every rank's kernel runs until the last arrives), the
median rank's wait = last − median arrival, and Σ ``median_wait_ns`` over a step's instances = its ``imbalance_ns``;
an eager point-to-point send that ended before its peer arrived waited 0 (docs/multirank.md, *Who waits for whom*).
"""

from __future__ import annotations

import numpy as np

from .numbering import lex_order


def median_position(size):
    """The position, in arrival order, of the median rank of an instance of ``size`` ranks (an int or an int
    array): ⌊(size − 1)/2⌋, the lower median of the arrivals."""
    return (np.asarray(size, dtype=np.int64) - 1) // 2 if np.ndim(size) else (int(size) - 1) // 2


def median_rows(first: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The row of each instance's median rank, where each instance's ``size`` rows are consecutive from ``first``
    in arrival order: what the imbalance, ``median_wait_ns`` and the causes' shares all read."""
    return np.asarray(first, dtype=np.int64) + median_position(np.asarray(size, dtype=np.int64))


def lower_median(values) -> int | None:
    """The lower median of int64 ns values (None with none): of the steps' imbalances, say — not of an instance's
    arrivals, whose median is its median rank's (:func:`median_rows`)."""
    v = np.sort(np.asarray(values, dtype=np.int64))
    return int(v[median_position(len(v))]) if len(v) else None


def group_lower_median(gid: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group (0 ≤ gid < n_groups) the lower median of its values that are not NaN; NaN for a group with none.
    One sort for all groups."""
    v = np.asarray(values, dtype=np.float64)
    g = np.asarray(gid)
    ok = ~np.isnan(v)
    if not ok.all():
        g, v = g[ok], v[ok]
    fast = runs_lower_median(g, v, n_groups)
    if fast is not None:
        return fast
    order = lex_order(v, g)  # by group, then value: each group's values in order, read through ``order``
    count = np.bincount(g, minlength=n_groups)
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    out = np.full(n_groups, np.nan)
    has = count > 0
    out[has] = v[order[start[has] + (count[has] - 1) // 2]]
    return out


def runs_lower_median(gid: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray | None:
    """Per group the lower median of its values, where the rows are the groups one after another, each of the same
    size (every rank ran every instance): one partition per row of a groups × size matrix, no sort of all rows.
    None where the groups are not like that."""
    n = len(gid)
    m = n // n_groups if n_groups else 0
    if not m or m * n_groups != n or not (gid.reshape(n_groups, m) == np.arange(n_groups)[:, None]).all():
        return None
    k = (m - 1) // 2
    return np.partition(values.reshape(n_groups, m), k, axis=1)[:, k]
