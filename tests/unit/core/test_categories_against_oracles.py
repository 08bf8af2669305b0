"""categorize with fewer whole-table arrays (issue 30: on the 1 GB trace fresh memory cost more than the
arithmetic): the distinct combinations by a hash table, not a sort of every row, and a lane's copy kinds keyed only
where needed — the same categories as before (checked on 21 traces in the change; pinned here by hand)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analyses.categories import _sorted_factorize, categorize


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**40), 2**40), max_size=60))
def test_sorted_factorize_is_np_unique(values):
    key = np.array(values, dtype=np.int64)
    u, inv = _sorted_factorize(key)
    want_u, want_inv = np.unique(key, return_inverse=True)
    assert u.tolist() == want_u.tolist() and inv.tolist() == want_inv.reshape(-1).tolist()


def _events(rows):
    cols = ["kind", "name", "device", "stream", "copy_kind"]
    ev = pd.DataFrame(rows, columns=cols)
    for c in ("kind", "name", "copy_kind"):
        ev[c] = ev[c].astype("category")
    return ev


def test_a_lane_that_carries_ptop_copies_is_known_by_its_gpu_rows_and_other_rows_stay_missing():
    ev = _events(
        [
            ("kernel", "memcpy128", 0, 7, None),  # on the lane that carries PtoP copies: the AllGather's local copy
            ("memcpy", "Memcpy PtoP (Device -> Device)", 0, 7, "PtoP"),
            ("kernel", "memcpy128", 0, 9, None),  # the same kernel on another lane: not that
            ("runtime", "cudaLaunchKernel", 0, 7, None),  # not GPU activity: no category
            ("cpu_op", "aten::mm", 0, 7, None),
        ]
    )
    cats = categorize(ev)
    assert cats.isna().tolist() == [False, False, False, True, True]
    assert isinstance(cats, pd.Categorical) and cats.codes.dtype.itemsize <= 4
    assert list(cats.categories)[-1] == "other"
    assert cats[0] == "weight_ag_local_copy" and cats[2] != "weight_ag_local_copy"
    without = categorize(ev.drop(columns=["copy_kind"]))  # no copy kinds at all: still one category per GPU row
    assert without.isna().tolist() == [False, False, False, True, True]
    assert "weight_ag_local_copy" not in set(without.dropna())  # no copies known: no lane carries PtoP
