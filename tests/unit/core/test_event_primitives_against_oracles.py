"""events.py's primitives made cheaper in issue 30 (round 3) against the code they replaced, kept here as oracles:
gpu_mask by a table per kind category (was ``isin``), main_stream's kernel time per lane summed on factorized codes
(was a groupby on two keys and ``idxmax``), weight_ag_mask's lanes of the local-copy candidates only (was every
row's lane and ``np.isin`` over the table), same_stream_overlaps' lane order by two stable sorts (was ``lexsort``)
— the same answers on random tables (ties, several devices and streams, rows out of time order, plain-string kinds,
float durations) and on the generated fixtures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracekit import schema
from tracekit.data import load_classes
from tracekit.events import gpu_mask, lane_key, main_stream, name_mask, same_stream_overlaps, weight_ag_mask

FIXTURES = sorted((Path(__file__).resolve().parents[3] / "fixtures" / "synthetic").glob("*.trace.json.gz"))


def _old_gpu_mask(ev):
    return ev["kind"].isin(schema.GPU_ACTIVITY_KINDS).to_numpy()


def _old_lane_key(ev):
    return ev["device"].to_numpy().astype(np.int64) * (1 << 32) + ev["stream"].to_numpy().astype(np.int64)


def _old_main_stream(ev):
    is_k = (ev["kind"] == "kernel").to_numpy()
    dev, st = ev["device"].to_numpy()[is_k], ev["stream"].to_numpy()[is_k]
    d, s = pd.Series(ev["dur_ns"].to_numpy()[is_k]).groupby([dev, st]).sum().idxmax()
    return int(d), int(s)


def _old_weight_ag_mask(ev, pattern):
    ptop = (ev["copy_kind"] == "PtoP").to_numpy()
    if not ptop.any():
        return ptop
    lane = _old_lane_key(ev)
    pattern = pattern if pattern else load_classes().ag_local_copy
    return ptop | (name_mask(ev, pattern, kind="kernel") & np.isin(lane, np.unique(lane[ptop])))


def _old_same_stream_overlaps(ev, tolerance_ns=0, fraction=0.0):
    out = np.zeros(len(ev), dtype=bool)
    rows = np.flatnonzero(_old_gpu_mask(ev))
    if rows.size == 0:
        return out
    lane = _old_lane_key(ev)[rows]
    s, e = ev["start_ns"].to_numpy()[rows], ev["end_ns"].to_numpy()[rows]
    order = np.lexsort((s, lane))
    ln, s, e, rows = lane[order], s[order], e[order], rows[order]
    same = np.concatenate([[False], ln[1:] == ln[:-1]])
    reach = np.empty_like(e)
    cuts = np.flatnonzero(~same).tolist() + [e.size]
    for a, b in zip(cuts[:-1], cuts[1:]):
        np.maximum.accumulate(e[a:b], out=reach[a:b])
    prev = np.concatenate([[np.iinfo(np.int64).min], reach[:-1]])
    allowed = np.maximum(tolerance_ns, (fraction * (e - s)).astype(np.int64))
    out[rows[same & (prev - s > allowed)]] = True
    return out


def _random_table(rng, n: int) -> pd.DataFrame:
    ev = pd.DataFrame(
        {
            "kind": pd.Categorical(rng.choice(["kernel", "memcpy", "cpu_op", "memset", "runtime"], n)),
            "device": rng.integers(0, 3, n).astype(np.int32),
            "stream": rng.integers(-1, 4, n).astype(np.int64),
            "start_ns": rng.integers(0, 60, n).astype(np.int64),
            "dur_ns": rng.integers(0, 12, n).astype(np.int64),
            "name": pd.Categorical(rng.choice(["local copy", "gemm", "nccl", "another copy"], n)),
            "copy_kind": pd.Categorical(rng.choice(["PtoP", "DtoD", None], n, p=[0.2, 0.4, 0.4])),
        }
    )
    ev["end_ns"] = ev["start_ns"] + ev["dur_ns"]
    return ev


def _same(ev):
    assert np.array_equal(gpu_mask(ev), _old_gpu_mask(ev))
    assert np.array_equal(lane_key(ev), _old_lane_key(ev))
    rows = np.flatnonzero(_old_gpu_mask(ev))
    assert np.array_equal(lane_key(ev, rows), _old_lane_key(ev)[rows])
    for pattern in ("copy", "nccl|gemm", None):
        assert np.array_equal(weight_ag_mask(ev, pattern), _old_weight_ag_mask(ev, pattern))
    for tol, frac in ((0, 0.0), (3, 0.5), (0, 0.5)):
        assert np.array_equal(
            same_stream_overlaps(ev, tolerance_ns=tol, fraction=frac), _old_same_stream_overlaps(ev, tol, frac)
        )
    if (ev["kind"] == "kernel").any():
        assert main_stream(ev) == _old_main_stream(ev)


@pytest.mark.parametrize("seed", range(40))
def test_primitives_are_the_old_answers_on_random_tables(seed):
    rng = np.random.default_rng(seed)
    ev = _random_table(rng, int(rng.integers(1, 80)))
    _same(ev)
    _same(ev.assign(kind=ev["kind"].astype(str)))  # a table built by hand: plain strings
    floats = ev.assign(dur_ns=ev["dur_ns"].astype(float))
    if (floats["kind"] == "kernel").any():
        assert main_stream(floats) == _old_main_stream(floats)


def test_main_stream_tie_goes_to_the_first_lane_in_device_stream_order():
    ev = pd.DataFrame(
        {
            "kind": pd.Categorical(["kernel"] * 4),
            "device": np.array([1, 0, 1, 0], dtype=np.int32),
            "stream": np.array([3, 9, 2, 7], dtype=np.int64),
            "dur_ns": np.array([5, 5, 5, 5]),
        }
    )
    assert main_stream(ev) == _old_main_stream(ev) == (0, 7)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_primitives_are_the_old_answers_on_the_fixtures(path):
    import tracekit

    ev = tracekit.load(path).events
    _same(ev)
    shuffled = ev.iloc[np.random.default_rng(0).permutation(len(ev))].reset_index(drop=True)  # out of time order
    assert np.array_equal(same_stream_overlaps(shuffled, fraction=0.5), _old_same_stream_overlaps(shuffled, 0, 0.5))
    assert main_stream(shuffled) == _old_main_stream(shuffled)


@pytest.mark.parametrize("kinds", [("kernel",), ("memcpy", "memset"), schema.GPU_ACTIVITY_KINDS, ("nothing",), ()])
def test_kinds_mask_is_isin(kinds):
    from tracekit.events import kinds_mask

    col = pd.Categorical(
        ["kernel", None, "memset", "cpu_op", "memcpy", "kernel", None],
        categories=["cpu_op", "kernel", "memcpy", "memset", "unused"],
    )
    ev = pd.DataFrame({"kind": col})
    want = ev["kind"].isin(list(kinds)).to_numpy()
    assert np.array_equal(kinds_mask(ev, kinds), want)
    assert np.array_equal(kinds_mask(ev.assign(kind=ev["kind"].astype(object)), kinds), want)


def _old_launch_index(gpu_start, gpu_corr, launch_corr, launch_start):
    n = gpu_start.size
    if launch_corr.size == 0 or n == 0:
        return np.full(n, -1, dtype=np.int64)
    acts = pd.DataFrame({"corr": gpu_corr, "t": gpu_start, "i": np.arange(n)}).sort_values("t", kind="stable")
    lau = pd.DataFrame({"corr": launch_corr, "t": launch_start, "j": np.arange(launch_corr.size)}).sort_values(
        "t", kind="stable"
    )
    m = pd.merge_asof(acts, lau, on="t", by="corr", direction="backward")
    out = np.full(n, -1, dtype=np.int64)
    j = m["j"].to_numpy(dtype=float)
    ok = ~np.isnan(j)
    out[m["i"].to_numpy()[ok]] = j[ok].astype(np.int64)
    first = lau.drop_duplicates("corr").set_index("corr")["j"]
    missing = np.flatnonzero((out < 0) & (gpu_corr >= 0))
    if missing.size:
        out[missing] = pd.Series(gpu_corr[missing]).map(first).fillna(-1).to_numpy(np.int64)
    return out


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("spread", [1, 10**9])  # ids in a small range (a table) or far apart (a sorted search)
def test_launch_index_is_the_merge_asof_answer(seed, spread):
    from tracekit.events import launch_index

    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(0, 40)), int(rng.integers(0, 30))
    ids = rng.integers(-2, 12, m).astype(np.int64) * spread  # reused, negative and missing ids
    gpu_corr = rng.integers(-2, 14, n).astype(np.int64) * spread
    gpu_start, launch_start = rng.integers(0, 40, n).astype(np.int64), rng.integers(0, 40, m).astype(np.int64)
    got = launch_index(gpu_start, gpu_corr, ids, launch_start)
    assert np.array_equal(got, _old_launch_index(gpu_start, gpu_corr, ids, launch_start))


@pytest.mark.parametrize("path", FIXTURES[:2], ids=[p.name for p in FIXTURES[:2]])
def test_launch_index_on_fixtures(path):
    import tracekit
    from tracekit.analyses.steps.activity import StepActivity
    from tracekit.analyses.steps.model import step_rules
    from tracekit.events import launch_index

    ctx = StepActivity(tracekit.load(path), step_rules())
    want = _old_launch_index(ctx.gs, ctx.gcorr, ctx.l_corr, ctx.l_start)
    assert (want >= 0).sum() > 100
    assert np.array_equal(launch_index(ctx.gs, ctx.gcorr, ctx.l_corr, ctx.l_start), want)


def test_values_mask_is_isin_on_any_categorical_column():
    from tracekit.events import values_mask

    ev = pd.DataFrame({"comm_class": pd.Categorical(["nccl", None, "deepep", "other", "nccl"])})
    for values in (("nccl", "deepep"), ("other",), ("absent",)):
        assert np.array_equal(values_mask(ev, "comm_class", values), ev["comm_class"].isin(values).to_numpy())


@pytest.mark.parametrize("seed", range(10))
def test_distinct_names_by_counts_are_np_unique(seed):
    """steps' names_at and the fit's _names_at: the distinct name codes by a count per category, not np.unique."""
    from tracekit.analyses.steps.activity import names_at
    from tracekit.analyses.structure.fit import _names_at

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    names = pd.Categorical(rng.choice(["b", "a", "c", None], n), categories=["c", "b", "a", "unused"])
    ev = pd.DataFrame({"name": names})
    rows = np.flatnonzero(rng.random(n) < 0.6)
    codes = ev["name"].cat.codes.to_numpy()[rows]
    cats = ev["name"].cat.categories
    assert _names_at(ev, np.isin(np.arange(n), rows)) == [str(cats[c]) for c in np.unique(codes[codes >= 0])]
    seen = []
    test = lambda t: seen.append(t) or t in ("a", "nan")  # noqa: E731
    got = names_at(ev, rows, test)
    want_order = [str(cats[c]) if c >= 0 else str(np.nan) for c in np.unique(codes).tolist()]
    assert seen == want_order
    assert np.array_equal(
        got, np.array([(str(cats[c]) if c >= 0 else "nan") in ("a", "nan") for c in codes], dtype=bool)
    )


@pytest.mark.parametrize("spread", [1, 10**12])
def test_reused_ids_is_the_np_unique_count(spread):
    from tracekit.analyses.steps.activity import _reused_ids

    rng = np.random.default_rng(spread % 97)
    for n in (0, 1, 5, 200):
        ids = rng.integers(0, 60, n).astype(np.int64) * spread
        _, per_id = np.unique(ids, return_counts=True)
        assert _reused_ids(ids) == int((per_id > 1).sum())
