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

FIXTURES = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "synthetic").glob("*.trace.json.gz"))


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
    ev = pd.DataFrame({
        "kind": pd.Categorical(rng.choice(["kernel", "memcpy", "cpu_op", "memset", "runtime"], n)),
        "device": rng.integers(0, 3, n).astype(np.int32), "stream": rng.integers(-1, 4, n).astype(np.int64),
        "start_ns": rng.integers(0, 60, n).astype(np.int64), "dur_ns": rng.integers(0, 12, n).astype(np.int64),
        "name": pd.Categorical(rng.choice(["local copy", "gemm", "nccl", "another copy"], n)),
        "copy_kind": pd.Categorical(rng.choice(["PtoP", "DtoD", None], n, p=[0.2, 0.4, 0.4])),
    })
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
        assert np.array_equal(same_stream_overlaps(ev, tolerance_ns=tol, fraction=frac),
                              _old_same_stream_overlaps(ev, tol, frac))
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
    ev = pd.DataFrame({"kind": pd.Categorical(["kernel"] * 4), "device": np.array([1, 0, 1, 0], dtype=np.int32),
                       "stream": np.array([3, 9, 2, 7], dtype=np.int64), "dur_ns": np.array([5, 5, 5, 5])})
    assert main_stream(ev) == _old_main_stream(ev) == (0, 7)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_primitives_are_the_old_answers_on_the_fixtures(path):
    import tracekit

    ev = tracekit.load(path).events
    _same(ev)
    shuffled = ev.iloc[np.random.default_rng(0).permutation(len(ev))].reset_index(drop=True)  # out of time order
    assert np.array_equal(same_stream_overlaps(shuffled, fraction=0.5), _old_same_stream_overlaps(shuffled, 0, 0.5))
    assert main_stream(shuffled) == _old_main_stream(shuffled)
