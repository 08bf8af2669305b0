"""events.py's array versions against what they replaced (issue 30): same_stream_overlaps' running maximum per lane
instead of a groupby cummax, categorical_at's distinct indices by bincount instead of np.unique — the same answers
on random inputs. (launch_index by one packed sort was tried and was no faster than merge_asof on the 300 MB
benchmark's 228k activities and 153k launches, 0.053 s both; it stays merge_asof.)"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.events import categorical_at


@settings(max_examples=200, deadline=None)
@given(idx=st.lists(st.integers(-1, 5), max_size=50), names=st.lists(st.sampled_from("abc"), min_size=6, max_size=6))
def test_categorical_at_is_pd_categorical(idx, names):
    values = np.array(names, dtype=object)
    idx = np.array(idx, dtype=np.int64)
    want = pd.Categorical(np.array([values[i] if i >= 0 else None for i in idx.tolist()], dtype=object))
    got = categorical_at(values, idx)
    assert got.tolist() == want.tolist()
    assert list(got.categories) == list(want.categories)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 50), st.integers(0, 30)), max_size=40),
    tolerance=st.integers(0, 5),
    fraction=st.sampled_from([0.0, 0.5]),
)
def test_same_stream_overlaps_is_the_groupby_cummax_answer(rows, tolerance, fraction):
    from tracekit.events import gpu_mask, lane_key, same_stream_overlaps

    ev = pd.DataFrame(
        {
            "kind": pd.Categorical(["kernel"] * len(rows)),
            "device": [d for d, *_ in rows],
            "stream": [s for _, s, *_ in rows],
            "start_ns": [t for *_, t, _ in rows],
            "end_ns": [t + d for *_, t, d in rows],
        }
    ).astype({"start_ns": np.int64, "end_ns": np.int64})
    # the groupby version it replaced
    want = np.zeros(len(ev), dtype=bool)
    r = np.flatnonzero(gpu_mask(ev))
    if r.size:
        lane = lane_key(ev)[r]
        s, e = ev["start_ns"].to_numpy()[r], ev["end_ns"].to_numpy()[r]
        o = np.lexsort((s, lane))
        ln, s, e, r = lane[o], s[o], e[o], r[o]
        same = np.concatenate([[False], ln[1:] == ln[:-1]])
        reach = pd.Series(e).groupby(ln).cummax().to_numpy()
        prev = np.concatenate([[np.iinfo(np.int64).min], reach[:-1]])
        allowed = np.maximum(tolerance, (fraction * (e - s)).astype(np.int64))
        want[r[same & (prev - s > allowed)]] = True
    assert same_stream_overlaps(ev, tolerance_ns=tolerance, fraction=fraction).tolist() == want.tolist()
