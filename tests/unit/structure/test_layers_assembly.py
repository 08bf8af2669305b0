"""The automatic layers' vectorised assembly (issue 30): its pieces against the plain Python they replaced (the layers
found are compared whole on the presets and the corpus in tests/integration/test_auto_layers.py)."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np

from tracekit.analyses.structure.layers.assembly import _top_labels, _Used
from tracekit.analyses.structure.layers.segments import Segs


def test_top_labels_are_counter_most_common_in_segment_order():
    rng = random.Random(40)
    for _ in range(100):
        n_labels = rng.randrange(1, 30)
        comp = np.array([rng.randrange(-1, 3) for _ in range(n_labels)], dtype=np.int64)
        phase = np.where(comp >= 0, [rng.randrange(0, 3) for _ in range(n_labels)], -1)
        ids = np.array([rng.randrange(n_labels) for _ in range(rng.randrange(0, 200))], dtype=np.int64)
        rec = np.array([rng.random() < 0.8 for _ in ids], dtype=bool)
        segs = Segs(ids, ids, ids, ids, rec, n_labels, ph=np.where(rec, phase[ids], -1))
        want: dict = {}
        for lid, r in zip(ids.tolist(), rec.tolist()):
            if r and phase[lid] >= 0:
                want.setdefault((int(comp[lid]), int(phase[lid])), Counter())[lid] += 1
        got = _top_labels(segs, comp, phase)
        assert {key: [lid for lid, _ in c.most_common(4)] for key, c in want.items()} == dict(got)


def test_used_ranges():
    used = _Used()
    used.add(3, 3)
    used.add(5, 9)
    assert [j for j in range(12) if j in used] == [3, 5, 6, 7, 8, 9]
    assert 0 not in _Used()


def test_boundary_candidates_are_the_names_three_times_in_a_step():
    from types import SimpleNamespace

    from tracekit.analyses.structure.layers.boundary import _candidates
    from tracekit.analyses.structure.layers.sequences import _flatten

    rng = random.Random(41)
    for _ in range(50):
        seqs = [
            SimpleNamespace(
                codes=np.array([rng.randrange(6) for _ in range(rng.randrange(0, 30))], np.int64),
                durs=np.ones(0, np.int64),
            )
            for _ in range(rng.randrange(1, 5))
        ]
        for s in seqs:
            s.durs = np.ones(s.codes.size, np.int64)
        ctx = SimpleNamespace(seqs=seqs, names=[str(i) for i in range(6)], flat=_flatten(seqs, 7, np.zeros(7, bool)))
        want = Counter()
        for s in seqs:
            for code, v in Counter(s.codes.tolist()).items():
                if v >= 3:
                    want[code] = max(want[code], v)
        assert _candidates(ctx) == want
