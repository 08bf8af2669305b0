"""The automatic layers at array speed (issue 30) give the same layers as the code they replaced.

* Segment labels (a hash of the codes, checked kernel by kernel, the bytes dict on a collision) equal the bytes-dict
  labels of the old code, including when every hash collides.
* Layer signature ids (one integer per row, or numpy's row unique when the digits do not fit) name the same tuples.
* The measures of every candidate's assembly (_stack_like, _measure on the layer arrays) equal the plain Python over
  its Layer objects that they replaced.
* The automatic layers of the committed fixtures are pinned: a digest of find_layers' windows, types, check, warnings,
  boundary and segments per layer, taken with the code before issue 30's array passes (b0a525b).
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

from tracekit.analyses.structure.layers.assembly import _LayerPieces
from tracekit.analyses.structure.layers.segments import _labels
from tracekit.analyses.structure.layers.sequences import _flatten

ROOT = Path(__file__).resolve().parents[3]
SYN = ROOT / "fixtures" / "synthetic"

# find_layers on the committed fixtures with the code before the array passes (b0a525b): digest_of(...)
PINNED = {
    "dp16_bs24.trace.json.gz": "c7f1b14ee154370272e7905b4c226a1e958c8445d932aa67d4bd9b402fc8e618",
    "dp16_bs4.trace.json.gz": "03d8f7ced1cc1ab6ee6d613f78862db66f15f3866b630b67f3f87f80e609b293",
    "dp2dcp8_bs128.trace.json.gz": "c0aa8607d7ab2dbd91f65dd444b13ea92f2e696e1798687ef475c646d3b7c3cd",
    "dp2dcp8_bs64.trace.json.gz": "b21fe446a810bc4887cd4a628aa8f5efdffb98f7a6b598f4b85d11a757cadccd",
    "dsv3_bs32.trace.json.gz": "6237be78b723c2ac17c7cb46ecea011a14827df29e81e8009fd533c043c9b0fa",
}


def digest_of(windows, types, check, warnings, boundary, k) -> str:
    doc = {
        "windows": json.loads(windows.to_json(orient="split")),
        "types": json.loads(types.to_json(orient="split")),
        "check": check,
        "warnings": warnings,
        "boundary": boundary,
        "k": k,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def _flat_of(codes_per_step: list[list[int]], n_codes: int):
    from types import SimpleNamespace

    seqs = [SimpleNamespace(codes=np.array(c, np.int64), durs=np.ones(len(c), np.int64)) for c in codes_per_step]
    return _flatten(seqs, n_codes + 1, np.zeros(n_codes + 1, bool))


def _bytes_labels(fl, a: np.ndarray, b: np.ndarray) -> list[int]:
    """The old labelling: a dict of each segment's code bytes, ids in order of first appearance."""
    labels: dict[bytes, int] = {}
    raw, w = fl.codes.tobytes(), fl.codes.itemsize
    return [labels.setdefault(raw[x * w : y * w], len(labels)) for x, y in zip(a.tolist(), b.tolist())]


def _random_tiling(rng: random.Random):
    n_codes = rng.choice([2, 3, 6, 300])
    motif = [rng.randrange(n_codes) for _ in range(rng.randrange(1, 8))]
    steps = []
    for _ in range(rng.randrange(1, 4)):
        s = []
        for _ in range(rng.randrange(0, 12)):
            s += motif if rng.random() < 0.7 else [rng.randrange(n_codes) for _ in range(rng.randrange(1, 6))]
        steps.append(s)
    fl = _flat_of(steps, n_codes)
    n = fl.codes.size
    cuts = sorted({0, n} | set(fl.lo.tolist()) | {rng.randrange(n) for _ in range(rng.randrange(0, 20))} if n else {0})
    return fl, np.array(cuts[:-1], np.int64), np.array(cuts[1:], np.int64)


def test_labels_equal_the_bytes_dict():
    rng = random.Random(30)
    for _ in range(300):
        fl, a, b = _random_tiling(rng)
        ids, n, first = _labels(fl, a, b)
        want = _bytes_labels(fl, a, b)
        assert ids.tolist() == want
        assert n == len(set(want)) and first.tolist() == [want.index(i) for i in range(n)]


def test_labels_on_a_hash_collision_fall_back_to_the_bytes():
    rng = random.Random(31)
    for _ in range(100):
        fl, a, b = _random_tiling(rng)
        fl.h_pre = np.zeros_like(fl.h_pre)  # every segment of one length hashes alike: the check must catch it
        ids, n, first = _labels(fl, a, b)
        want = _bytes_labels(fl, a, b)
        assert ids.tolist() == want and n == len(set(want)) and first.tolist() == [want.index(i) for i in range(n)]


def test_equal_runs_at_a_shift():
    rng = random.Random(33)
    for _ in range(300):
        period = rng.randrange(1, 6)
        codes = [rng.randrange(3) for _ in range(period)] * rng.randrange(2, 30)
        for _ in range(rng.randrange(0, 4)):  # a few kernels that break the period
            if codes:
                codes[rng.randrange(len(codes))] = rng.randrange(4)
        fl = _flat_of([codes], 4)
        n = len(codes)
        runs = []
        for _ in range(rng.randrange(0, 8)):
            d = rng.choice([period, period, 2 * period, rng.randrange(1, n + 1)])
            if d < n:
                lo = rng.randrange(d, n)
                runs.append((lo, rng.randrange(0, n - lo + 1), d))
        lo, size, d = (np.array(x, np.int64) for x in zip(*runs)) if runs else (np.zeros(0, np.int64),) * 3
        want = all(codes[x : x + m] == codes[x - e : x - e + m] for x, m, e in runs)
        assert fl.equal(lo, size, d) == want
        assert fl.equal(lo, size, d) == want  # again, with the shifts' mismatch positions remembered


@pytest.mark.parametrize("big", [False, True])
def test_signature_ids_name_the_tuples(big):
    rng = random.Random(32 + big)
    for _ in range(200):
        pieces = _LayerPieces()
        scale = 1 << 40 if big else 1  # big labels: the digits do not fit in 62 bits, numpy's row unique runs
        lab = np.array([rng.randrange(4) * scale + rng.randrange(2) for _ in range(rng.randrange(1, 40))], np.int64)
        starts = np.array(sorted({0} | {rng.randrange(lab.size) for _ in range(rng.randrange(0, 10))}), np.int64)
        ends = np.append(starts[1:], lab.size)
        prefix = tuple(rng.randrange(5) for _ in range(rng.choice([0, 0, 2])))
        ids = pieces.sig_ids(lab, starts, ends, prefix)
        want = [tuple(lab[s:e].tolist()) for s, e in zip(starts.tolist(), ends.tolist())]
        want[0] = prefix + want[0]
        assert [pieces.sigs[i] for i in ids.tolist()] == want
        assert len(set(ids.tolist())) == len(set(want))


def _context_of(path):
    import tracekit
    from tracekit.analyses.categories import resolve_categories
    from tracekit.analyses.steps.resolve import find_steps
    from tracekit.analyses.structure.layers.sequences import read_context
    from tracekit.annotation import Annotation
    from tracekit.annotation.blocks import resolve_main_stream

    trace = tracekit.load(path, cache=False)
    main = resolve_main_stream(trace.events, Annotation(name="auto"))
    return trace, read_context(trace, find_steps(trace, None), main, resolve_categories(None))


def _measure_by_objects(ctx, asm):
    """The old _stack_like and _measure, over the Layer objects."""
    seq_of = {s.step: s for s in ctx.seqs}
    kernels = [l.hi - l.lo for v in asm.layers.values() for l in v]
    n_layers = sum(len(v) for v in asm.layers.values()) / max(len(asm.layers), 1)
    n_types = len({l.sig for v in asm.layers.values() for l in v})
    stack = bool(kernels) and float(np.mean(kernels)) >= 3 and n_types <= max(3, 0.25 * n_layers)
    has_mixer, has_part, n, agree = {}, {}, 0, 0
    for step, lays in asm.layers.items():
        seq = seq_of[step]
        for l in lays:
            inside = np.searchsorted(seq.trans_ffn, l.hi) - np.searchsorted(seq.trans_mixer, l.lo)
            n, agree = n + 1, agree + int(inside == 1)
            if l.sig not in has_mixer:
                cats = ctx.cat_of_code[seq.codes[l.lo : l.hi]]
                has_mixer[l.sig] = bool(ctx.mixer_cat[cats].any())
                has_part[l.sig] = has_mixer[l.sig] or bool(ctx.ffn_cat[cats].any())
    decoder = bool(has_mixer) and any(has_mixer.values()) and all(has_part.values())
    return stack, n, agree, len(has_mixer), decoder


@pytest.mark.parametrize("name", sorted(PINNED))
def test_measures_on_arrays_equal_the_objects(name):
    from tracekit.analyses.structure.layers.assembly import assemble
    from tracekit.analyses.structure.layers.boundary import _candidates, _measure, _stack_like

    _, ctx = _context_of(SYN / name)
    for tok in sorted(_candidates(ctx)):
        asm = assemble(ctx, tok)
        stack = _stack_like(asm)
        _measure(ctx, asm)
        assert (stack, asm.layers_n, asm.agree, asm.n_types, asm.decoder) == _measure_by_objects(ctx, asm)
        assert asm.covered == sum(l.hi - l.lo for v in asm.layers.values() for l in v)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_fixture_layers_are_pinned(name):
    from tracekit.analyses.structure.layers import find_layers

    trace, _ = _context_of(SYN / name)
    f = find_layers(trace)
    assert digest_of(f.windows, f.types, f.check, f.warnings, f.boundary, f.segments_per_layer) == PINNED[name]


# ---------------------------------------------------------------------------------------------------------------
# round 2 (issue 30): fewer numpy calls per candidate, the annotation fit's regexes once per pattern
# ---------------------------------------------------------------------------------------------------------------

# best_fit on the committed fixtures with the code before round 2 (0b1735e)
BEST_FIT = {
    "dp16_bs24.trace.json.gz": ("k3_dp16", 0.9987),
    "dp16_bs4.trace.json.gz": ("k3_dp16", 0.9987),
    "dp2dcp8_bs128.trace.json.gz": ("k3_dp2_dcp8", 0.9988),
    "dp2dcp8_bs64.trace.json.gz": ("k3_dp2_dcp8", 0.9988),
    "dsv3_bs32.trace.json.gz": ("deepseek_v3", 0.9981),
}


def test_groups_equal_numpy_unique():
    from tracekit.analyses.structure.layers.segments import first_of, groups

    rng = np.random.default_rng(34)
    for n in [0, 1, 2, 5, 50, 3000]:
        for hi, dtype in [(3, np.int64), (1 << 40, np.int64), (1 << 63, np.uint64)]:
            key = (
                rng.integers(0, hi, n, dtype=dtype)
                if hi < 1 << 63
                else rng.integers(0, 1 << 62, n, dtype=np.int64).astype(np.uint64) * np.uint64(3)
            )
            uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
            f, i, order, new = groups(key)
            assert f.tolist() == first.tolist() and i.tolist() == inv.reshape(-1).tolist()
            assert key[order][new].tolist() == uniq.tolist()
            assert order.tolist() == np.argsort(inv.reshape(-1), kind="stable").tolist()
            assert first_of(key).tolist() == first.tolist()


def _edges_by_unique(segs):
    """The label graph as round 1 made it: the first occurrence of each pair by np.unique, inserted in order."""
    ids = segs.ids
    j = np.flatnonzero(segs.rec[:-1] & segs.rec[1:] & (segs.step[:-1] == segs.step[1:]))
    _, first = np.unique(ids[j] * max(int(ids.max(initial=0)) + 1, 1) + ids[j + 1], return_index=True)
    j = j[np.sort(first)]
    return set(zip(ids[j].tolist(), ids[j + 1].tolist()))


def test_edges_keep_the_set_and_its_order():
    """Every pair inserted (repeats included) or only the first occurrences: the same set, iterated alike (the
    components' numbering follows it)."""
    from types import SimpleNamespace

    from tracekit.analyses.structure.layers.segments import _edges

    rng = np.random.default_rng(35)
    for n, labels in [(10, 3), (500, 40), (5000, 300), (5000, 5000)]:  # 5000: the sorted path (> 2048 pairs)
        segs = SimpleNamespace(
            ids=rng.integers(0, labels, n),
            rec=rng.random(n) < 0.9,
            step=np.repeat(np.arange(3), [n // 3, n // 3, n - 2 * (n // 3)]),
        )
        got, want = _edges(segs), _edges_by_unique(segs)
        assert got == want and list(got) == list(want)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_candidates_and_edges_on_fixtures(name):
    from collections import Counter

    from tracekit.analyses.structure.layers.assembly import _top_labels
    from tracekit.analyses.structure.layers.segments import _edges, _label_phases, _segments
    from tracekit.analyses.structure.layers.boundary import MIN_COUNT, _candidates

    _, ctx = _context_of(SYN / name)
    fl, n_codes = ctx.flat, len(ctx.names) + 1
    step_of = np.repeat(np.arange(len(ctx.seqs), dtype=np.int64), np.diff(fl.lo))
    keys, per_step = np.unique(step_of * n_codes + fl.codes, return_counts=True)  # round 1's count
    most = np.zeros(n_codes, dtype=np.int64)
    np.maximum.at(most, keys[per_step >= MIN_COUNT] % n_codes, per_step[per_step >= MIN_COUNT])
    want = Counter({int(c): int(most[c]) for c in np.flatnonzero(most)})
    got = _candidates(ctx)
    assert list(got.items()) == list(want.items())
    for tok in got:
        segs = _segments(ctx, tok)
        assert list(_edges(segs)) == list(_edges_by_unique(segs))
        comp_l, _, phase_l, _ = _label_phases(ctx, segs, segs.n_labels)
        segs.ph = np.where(segs.rec, phase_l[segs.ids], -1)
        assert _top_labels(segs, comp_l, phase_l) == _top_labels_by_unique(segs, comp_l, phase_l)
        segs.ph[segs.first[: segs.n_labels // 2]] = -1  # first segments unphased: the first phased ones are sorted
        assert _top_labels(segs, comp_l, phase_l) == _top_labels_by_unique(segs, comp_l, phase_l)


def _top_labels_by_unique(segs, comp_l, phase_l):
    """Round 1's _top_labels: the labels' first phased segments and counts by np.unique."""
    from collections import defaultdict

    lids = segs.ids[segs.ph >= 0]
    present, first, counts = np.unique(lids, return_index=True, return_counts=True)
    order = np.lexsort((first, -counts, phase_l[present], comp_l[present]))
    top = defaultdict(list)
    for lid, c, p in zip(present[order].tolist(), comp_l[present[order]].tolist(), phase_l[present[order]].tolist()):
        if len(top[(c, p)]) < 4:
            top[(c, p)].append(lid)
    return top


@pytest.mark.parametrize("name", sorted(BEST_FIT))
def test_fixture_best_fit_is_pinned(name):
    from tracekit.analyses.structure.fit import best_fit

    trace, _ = _context_of(SYN / name)
    assert best_fit(trace) == BEST_FIT[name]


def test_fit_table_equals_a_regex_run_per_call(monkeypatch):
    """The annotation fit with each kernel-name regex answered once per pattern equals it with every call running
    its regex over the names again (round 1's _any_name), and the remembered main stream equals a fresh one."""
    import pandas as pd

    from tracekit.analyses.structure import fit
    from tracekit.analyses.structure.layers import auto_main_stream
    from tracekit.annotation import Annotation
    from tracekit.annotation.blocks import resolve_main_stream
    from tracekit.regexes import bounded

    trace, _ = _context_of(SYN / "dsv3_bs32.trace.json.gz")
    assert (
        auto_main_stream(trace) == resolve_main_stream(trace.events, Annotation(name="auto")) == auto_main_stream(trace)
    )
    # what best_fit runs: the annotations that cannot fit (by _ceiling, on the kernel names) are not judged
    got = fit._fit_table(trace, fit._candidates(None), None, None, only_fitting=True)[0]
    calls = []

    def every_time(tr, pattern, where):
        calls.append(pattern)
        rx = bounded(pattern, where)
        return any(rx.search(n) for n in fit._names_of_kind(tr, "kernel"))

    monkeypatch.setattr(fit, "_any_name", every_time)
    trace2, _ = _context_of(SYN / "dsv3_bs32.trace.json.gz")
    want = fit._fit_table(trace2, fit._candidates(None), None, None, only_fitting=True)[0]
    assert len(calls) > len(set(calls))  # patterns repeat across annotations: what the memo saves
    assert want["reason"].str.startswith("cannot fit").any()  # _ceiling ruled some out
    pd.testing.assert_frame_equal(got, want, check_exact=True)
