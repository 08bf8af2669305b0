"""The array paths of `tracekit imbalance`'s parent and its workers (issue 28) against the code they replaced, kept
here as oracles: the kind codes, the instance × rank matrix of ends, the category
rules' compiled patterns. The whole answer is pinned in tests/integration/test_multirank_pinned.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracekit.analyses.fleet.multirank.align import _end_matrix, _unique_inverse
from tracekit.analyses.fleet.multirank.numbering import kind_codes


@pytest.mark.parametrize("dtype", ["str", object])
def test_kind_codes_are_get_indexer(dtype):
    knames = pd.Index(["allreduce", "combine", "dispatch", "nan"], dtype="str")
    kind = pd.Series(["combine", "dispatch", None, "broadcast", "nan", "allreduce", "combine"], dtype=dtype)
    assert kind_codes(kind, knames).tolist() == knames.get_indexer(kind).tolist()
    assert kind_codes(kind.iloc[:0], knames).tolist() == []


@pytest.mark.parametrize("values", [[5, 3, 3, 0, 9], [7], [], [-2, 4, 4], [10**12, 3, 10**12]])
def test_unique_inverse_is_numpy_unique(values):
    v = np.array(values, dtype=np.int64)
    u, inv = _unique_inverse(v)
    nu, ninv = np.unique(v, return_inverse=True)
    assert u.tolist() == nu.tolist() and inv.tolist() == ninv.reshape(-1).tolist()


def _end_matrix_old(ends: pd.DataFrame, t0: int):
    inst, ii = np.unique(ends["inst"].to_numpy(np.int64), return_inverse=True)
    ranks, ri = np.unique(ends["rank"].to_numpy(np.int64), return_inverse=True)
    low = np.iinfo(np.int64).min
    M = np.full((len(inst), len(ranks)), low, dtype=np.int64)
    np.maximum.at(M, (ii.reshape(-1), ri.reshape(-1)), ends["end_ns"].to_numpy(np.int64) - np.int64(t0))
    seen = M != low
    keep = seen.sum(axis=1) > 1
    used = seen[keep].any(axis=0)
    X = np.where(seen, M, 0).astype(np.float64)[np.ix_(keep, used)]
    X[~seen[np.ix_(keep, used)]] = np.nan
    return X, ranks[used].tolist()


@pytest.mark.parametrize("dups", [False, True])
def test_the_end_matrix_is_the_reduced_one(dups):
    rng = np.random.default_rng(3)
    inst = np.repeat(np.arange(400), 6)
    rank = np.tile(np.array([0, 2, 3, 5, 8, 9]), 400)
    keep = rng.random(len(inst)) > 0.2
    inst, rank = inst[keep], rank[keep]
    if dups:  # a rank with two ends of one instance: the later one counts
        inst, rank = np.r_[inst, inst[:50]], np.r_[rank, rank[:50]]
    t0 = 1_761_743_580_000_000_000
    end = t0 + rng.integers(0, 10**10, len(inst))
    ends = pd.DataFrame({"rank": rank, "inst": inst, "end_ns": end})
    X, cols = _end_matrix(ends, t0)
    X0, cols0 = _end_matrix_old(ends, t0)
    assert cols == cols0 and X.shape == X0.shape and np.array_equal(X, X0, equal_nan=True)


@pytest.mark.parametrize(
    "keys,want",
    [
        ([3, 5, 9, 10], [0, 3, 4, 5, 9, 10, 11, 100, -5]),
        ([2, 2, 7], [2, 7, 1]),
        ([], [1, 2]),
        ([0, 10**9], [0, 10**9, 5]),
    ],
)
def test_find_keys_is_the_binary_search(keys, want):
    from tracekit.analyses.fleet.multirank.attribute import _find_keys

    k, w = np.array(keys, dtype=np.int64), np.array(want, dtype=np.int64)
    pos, hit = _find_keys(k, w)
    spos = np.clip(np.searchsorted(k, w), 0, max(len(k) - 1, 0))
    shit = (k[spos] == w) if len(k) else np.zeros(len(w), bool)
    assert hit.tolist() == shit.tolist() and pos[hit].tolist() == spos[shit].tolist()


@pytest.mark.parametrize("shape", ["equal", "ragged", "nan", "unsorted"])
def test_group_lower_median_equal_runs_and_the_sort(shape):
    from tracekit.analyses.fleet.multirank.medians import group_lower_median
    from tracekit.analyses.fleet.multirank.medians import runs_lower_median as _runs_lower_median
    from tracekit.analyses.fleet.multirank.numbering import lex_order

    rng = np.random.default_rng(5)
    n_g, m = 300, 16
    gid = np.repeat(np.arange(n_g), m)
    v = rng.integers(-50, 50, len(gid)).astype(np.float64)
    if shape == "ragged":
        gid, v = gid[3:], v[3:]
    elif shape == "nan":
        v[::17] = np.nan
    elif shape == "unsorted":
        p = rng.permutation(len(gid))
        gid, v = gid[p], v[p]
    ok = ~np.isnan(v)
    g, w = gid[ok], v[ok]
    order = lex_order(w, g)  # the general path: by group then value, the lower median of each
    count = np.bincount(g, minlength=n_g)
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    want = w[order[start + (count - 1) // 2]]
    assert group_lower_median(gid, v, n_g).tolist() == want.tolist()
    fast = _runs_lower_median(g, w, n_g)  # as group_lower_median calls it: the values that are not NaN
    assert (fast is not None) == (shape == "equal")
    if fast is not None:
        assert fast.tolist() == want.tolist()


def test_category_mask_is_isin_on_the_codes():
    from tracekit.analyses.fleet.multirank.mapper import category_mask

    cats = pd.Categorical(
        ["gemm", None, "attention", "optimizer", "gemm", None, "other"],
        categories=["attention", "gemm", "optimizer", "other"],
    )
    for wanted in (("optimizer",), ("gemm", "attention"), ("nothing",), ()):
        want = np.flatnonzero(np.isin(np.asarray(cats.categories, dtype=object), list(wanted)))
        assert category_mask(cats, wanted).tolist() == np.isin(np.asarray(cats.codes), want).tolist()


def test_the_kind_column_is_the_one_inferred_from_the_names():
    """collective_table's ``kind``: the column pandas infers from the kinds' texts (its dtype included), built from
    an Index of them; with no instance, the empty object column as before."""
    from tracekit.analyses.fleet.multirank.mapper import collective_table, load_collectives

    kinds = load_collectives().kinds
    names = [
        "void deep_ep::internode_ll::dispatch<true, 3, 10, 7168>(void*, float*)",
        "flash_fwd_kernel",
        "void deep_ep::internode_ll::combine<3, 10, 7168, 9>(void*, void*)",
    ]
    ev = pd.DataFrame(
        {
            "name": pd.Categorical([names[i % 3] for i in range(9)]),
            "kind": pd.Categorical(["kernel"] * 9),
            "start_ns": np.arange(9, dtype=np.int64) * 100,
            "end_ns": np.arange(9, dtype=np.int64) * 100 + 50,
        }
    )
    steps = pd.DataFrame({"start_ns": np.array([0], dtype=np.int64), "end_ns": np.array([10_000], dtype=np.int64)})
    for rows in (slice(None), [1, 4]):  # collectives, and none
        got = collective_table(ev.iloc[rows].reset_index(drop=True), steps)["kind"]
        ik = np.array([kinds.index(k) for k in got.tolist()], dtype=np.int64)
        old = pd.DataFrame({"kind": np.array(kinds, dtype=object)[ik]})["kind"]
        assert got.dtype == old.dtype and got.equals(old)
    assert got.empty


def test_the_shipped_patterns_deferred_compile_and_answer_as_compiled():
    """A shipped rule with a lower-cased twin keeps its own pattern uncompiled until a non-ASCII name needs it: every
    one compiles (a bad shipped pattern would otherwise surface only then), and answers as the compiled pattern."""
    import pickle
    import re

    from tracekit.analyses.categories import _Deferred, load_categories

    rules = load_categories().rules
    deferred = [r for r in rules if isinstance(r.pattern, _Deferred)]
    assert deferred and all(r.lowered is not None for r in deferred)
    names = ["ncclDevKernel_AllReduce", "İstanbul_gemm", "ÄRMSNORM", "flash_fwd_kernel", "x\\Wy", "Cijk_Alik_Bljk"]
    for r in deferred:
        rx = re.compile(r.pattern.pattern, re.ASCII)
        assert r.pattern == rx and r.pattern.compiled() is r.pattern.compiled()
        for n in names:
            assert bool(r.pattern.search(n)) == bool(rx.search(n)) == r.search(n, None), (r.where, n)
        assert pickle.loads(pickle.dumps(r.pattern)) == rx


@pytest.mark.parametrize("top", [9_000, 1 << 16, 10**12])
def test_group_of_sorts_as_the_int64_stable_sort(top):
    from tracekit.analyses.fleet.multirank.numbering import _group_of

    key = np.random.default_rng(7).integers(0, top, 5000).astype(np.int64)
    key[::3] = key[0]  # ties: the stable order matters
    order, gid, first, size = _group_of(key)
    want = np.argsort(key, kind="stable")
    assert order.tolist() == want.tolist()
    assert gid.tolist() == np.unique(key[want], return_inverse=True)[1].reshape(-1).tolist()
    assert (
        size.tolist() == np.unique(key, return_counts=True)[1].tolist()
        and first.tolist() == (np.cumsum(size) - size).tolist()
    )


def test_wait_sums_are_the_groupby_sums():
    from tracekit.analyses.fleet.multirank.attribute import _wait_sums

    rng = np.random.default_rng(11)
    step, rank = rng.integers(-1, 40, 4000), rng.integers(0, 16, 4000)
    wait = rng.integers(0, 10**9, 4000)
    got = _wait_sums(step, rank, wait)
    want = pd.DataFrame({"step": step, "rank": rank, "wait_ns": wait}).groupby(["step", "rank"])["wait_ns"].sum()
    assert got.index.tolist() == want.index.tolist() and got.tolist() == want.tolist()
