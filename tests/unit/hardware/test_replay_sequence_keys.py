"""The replays of one distinct kernel sequence are aligned once (tracekit/analyses/hardware/replay_attribution.py):
the vectorised keying of graph launches by their sequence gives the groups that keying each by its bytes gives, also
when the hashes collide (issue 38's speed row)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from tracekit.analyses.hardware import replay_attribution as ra


def _rep(seqs: list[list[int]], hint: list[int], ordinal: list[int]) -> SimpleNamespace:
    """A _Replays-like object: group g's kernels are ``seqs[g]``, its kernels interleaved in row order."""
    group = np.concatenate([np.full(len(s), g) for g, s in enumerate(seqs)]).astype(np.int64)
    ids = np.concatenate([np.asarray(s) for s in seqs]).astype(np.int64)
    perm = np.random.default_rng(0).permutation(group.size)  # rows of different launches interleave
    group, ids = group[perm], ids[perm]
    group = pd.factorize(group)[0].astype(np.int64)  # groups numbered in order of first appearance, as _Replays does
    order = np.argsort(group, kind="stable")
    count = np.bincount(group).astype(np.int64)
    start = np.concatenate(([0], np.cumsum(count)[:-1])).astype(np.int64)
    within = np.empty(group.size, dtype=np.int64)
    within[order] = np.arange(group.size) - np.repeat(start, count)
    renum = pd.factorize(np.concatenate([np.full(len(s), g) for g, s in enumerate(seqs)])[perm])[1]
    rep = SimpleNamespace(ids=ids, group=group, order=order, count=count, start=start, within=within,
                          n_groups=count.size, hint=np.asarray(hint)[renum], ordinal=np.asarray(ordinal)[renum])  # fmt: skip
    rep.part = lambda gi: rep.order[rep.start[gi] : rep.start[gi] + rep.count[gi]]
    return rep


def _by_bytes(rep, left) -> list[list[int]]:
    seen: dict[tuple, list[int]] = {}
    for gi in np.flatnonzero(left).tolist():
        seen.setdefault((rep.ids[rep.part(gi)].tobytes(), int(rep.hint[gi]), int(rep.ordinal[gi])), []).append(gi)
    return list(seen.values())


def test_sequence_keys_match_keying_by_bytes_with_and_without_a_collision(monkeypatch):
    a, b = [3, 1, 4, 1, 5], [3, 1, 4, 1, 6]
    seqs = [a, b, a, [2, 7], a, b, [2, 7], a, [9], a]
    hint = [16, 16, 16, 16, 8, 16, 16, 16, 16, 16]
    ordinal = [0, 1, 0, 2, 0, 1, 2, 3, 0, 0]
    rep = _rep(seqs, hint, ordinal)
    left = np.ones(rep.n_groups, dtype=bool)
    left[3] = False  # a launch whose kernels were all joined by node id
    want = _by_bytes(rep, left)
    key, groups = ra._sequence_keys(rep, left)
    assert [g.tolist() for g in groups] == want
    assert key[3] == -1 and all((key[g] == k).all() for k, g in enumerate(groups))
    # every launch under one hash: the kernel-by-kernel check catches it and the bytes decide
    monkeypatch.setattr(ra.pd, "factorize", lambda h: (np.zeros(len(h), dtype=np.int64), None))
    key2, groups2 = ra._sequence_keys(rep, left)
    assert [g.tolist() for g in groups2] == want and np.array_equal(key, key2)
