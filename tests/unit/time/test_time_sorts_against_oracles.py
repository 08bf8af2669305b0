"""The timeline's and the one-step table's cheaper sorts and cuts (issue 30, round 3) against the code they replaced,
kept here as oracles: lexsort((start, codes)) as a stable sort by start and a radix sort of the codes, the lanes'
texts by a hash of the lane keys instead of np.unique, clip_to_windows without repeats when each interval lies in
one window at most, the main-stream tier of ``charge`` sorted by start alone — on random inputs with ties."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracekit.analyses.time import onestep as O
from tracekit.analyses.time import timeline as T


def _old_clip(idx, s, e, ws, we):
    lo = np.searchsorted(we, s, side="right")
    hi = np.searchsorted(ws, e, side="left")
    cnt = np.maximum(hi - lo, 0)
    n = int(cnt.sum())
    if n == 0:
        z = np.empty(0, dtype=np.int64)
        return z, z, z, z
    rep = np.repeat(np.arange(s.size), cnt)
    first = np.cumsum(cnt) - cnt
    win = np.repeat(lo, cnt) + (np.arange(n) - np.repeat(first, cnt))
    ps = np.maximum(s[rep], ws[win])
    pe = np.minimum(e[rep], we[win])
    keep = pe > ps
    return win[keep].astype(np.int64), idx[rep][keep], ps[keep], pe[keep]


def _old_lane_codes(ev, rows):
    dev, stream = ev["device"].to_numpy()[rows], ev["stream"].to_numpy()[rows]
    key = dev.astype(np.int64) * (1 << 32) + stream.astype(np.int64)
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return T._texts([f"stream {d}:{t}" for d, t in zip(dev[first].tolist(), stream[first].tolist())], inv.reshape(-1))


@pytest.mark.parametrize("seed", range(30))
def test_sorts_and_cuts_are_the_old_ones(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    start = rng.integers(0, 100, n).astype(np.int64)
    if seed % 2:
        start = np.sort(start)  # nearly in start order, as the events come
    key = rng.integers(0, 7, n).astype(np.int64)
    assert np.array_equal(T._by_codes_then_start(key, start), np.lexsort((start, key)))
    wide = key * 10**6
    assert np.array_equal(T._by_codes_then_start(wide, start), np.lexsort((start, wide)))
    lane, label = rng.integers(0, 3, n), rng.integers(-1 if seed % 3 == 0 else 0, 5, n)
    end = start + rng.integers(0, 20, n)
    for gap in (1, 10):
        got, want = T._merge_codes(lane, label, start, end, gap), _old_merge_codes(lane, label, start, end, gap)
        for a, b in zip(got, want):
            assert np.array_equal(a, b)
    ev = pd.DataFrame({"device": rng.integers(0, 3, n).astype(np.int32), "stream": rng.integers(-1, 9, n)})
    rows = np.flatnonzero(rng.random(n) < 0.7)
    for a, b in zip(T._lane_codes(ev, rows), _old_lane_codes(ev, rows)):
        assert np.array_equal(a, b)
    cuts = np.sort(rng.choice(np.arange(0, 130), size=int(rng.integers(1, 9)) * 2, replace=False))
    for ws, we in ((cuts[0::2], cuts[1::2]), (cuts[:1], cuts[-1:])):  # several windows, and one
        idx = np.arange(n) * 3
        for a, b in zip(O.clip_to_windows(idx, start, end, ws, we), _old_clip(idx, start, end, ws, we)):
            assert a.dtype == b.dtype and np.array_equal(a, b)


def _old_merge_codes(lane, label, start, end, gap_ns):
    o = np.lexsort((start, label, lane))
    lane, label, start, end = lane[o], label[o], start[o], end[o]
    same = np.zeros(o.size, dtype=bool)
    same[1:] = (lane[1:] == lane[:-1]) & (label[1:] == label[:-1])
    prev_end = np.zeros(o.size, dtype=float)
    prev_end[1:] = end[:-1]
    first = np.flatnonzero(~same | (start - prev_end > gap_ns))
    return lane[first], label[first], np.minimum.reduceat(start, first), np.maximum.reduceat(end, first)


@pytest.mark.parametrize("seed", range(20))
def test_charge_is_the_lexsort_answer(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    s = rng.integers(0, 300, n).astype(np.int64)
    ev = pd.DataFrame(
        {
            "kind": pd.Categorical(rng.choice(["kernel", "memcpy", "memset", "cpu_op"], n)),
            "device": rng.integers(0, 2, n).astype(np.int32),
            "stream": rng.choice([7, 7, 7, 9, 11], n).astype(np.int64),
            "start_ns": s,
            "end_ns": s + rng.integers(0, 40, n),
        }
    )
    got = O.charge(ev, (0, 7))
    real = O._earliest_start_pieces, O._minus
    want = _old_charge(ev, (0, 7), *real)
    for a, b in zip(got, want):
        assert np.array_equal(a, b)


def _old_charge(events, main, earliest, minus):
    from tracekit import intervals as iv
    from tracekit import schema
    from tracekit.events import kinds_mask

    gpu = kinds_mask(events, schema.GPU_ACTIVITY_KINDS)
    is_kernel, is_memcpy = kinds_mask(events, ("kernel",)), kinds_mask(events, ("memcpy",))
    dev = events["device"].to_numpy().astype(np.int64)
    stream = events["stream"].to_numpy().astype(np.int64)
    s_all, e_all = events["start_ns"].to_numpy(np.int64), events["end_ns"].to_numpy(np.int64)
    sel = np.flatnonzero(gpu & (dev == main[0]) & (e_all > s_all))
    on_main = stream[sel] == main[1]
    kern, mcpy = is_kernel[sel], is_memcpy[sel]
    tier = np.where(on_main, np.where(kern, 0, 1), np.where(kern, 2, np.where(mcpy, 3, 4)))
    out_i, out_s, out_e = [], [], []
    covered = (np.empty(0, np.int64), np.empty(0, np.int64))
    for t in range(5):
        rows = sel[tier == t]
        if rows.size == 0:
            continue
        rows = rows[np.lexsort((rows, stream[rows], s_all[rows]))]
        i, ps, pe = earliest(rows, s_all[rows], e_all[rows])
        i, ps, pe = minus(i, ps, pe, covered)
        out_i.append(i)
        out_s.append(ps)
        out_e.append(pe)
        covered = iv.union(covered, (s_all[rows], e_all[rows]))
    if not out_i:
        z = np.empty(0, dtype=np.int64)
        return z, z, z
    return np.concatenate(out_i), np.concatenate(out_s), np.concatenate(out_e)
