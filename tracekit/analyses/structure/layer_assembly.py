"""Automatic layers: assemble the layers of every step for one boundary kernel (steps 1-3 of docs/layers.md).

Segments cut at the boundary kernel and labelled by their kernel names; phases from the label graph (``_phases``);
runs of linked segments with their edges recovered (``_best_left`` at a run's start, the next segment at its end,
embedding kernels before a later run); each run cut into layers at phase 0."""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass
from itertools import chain

import numpy as np

from .layer_align import _align_suffix, _budget, _cost_floor, _edit, _edit_floor
from .layer_context import _Ctx, _Flat, _Seq
from .layer_table import _first_of, _groups, _Layer, _LayerPieces, _LayerTable

MIN_RUN_LAYERS = 2  # a run of fewer layers is not a stack of layers
K_MAX = 16  # at most this many segments per layer
EMBEDDING_FAMILY = "embedding"
HASH_LENGTH = 0xD6E8FEB86659FD93  # a segment's length enters its hash times this (odd) constant


@dataclass
class _Assembly:
    token: int
    step_ids: list[int]  # the step of each of ctx.seqs
    k: dict[int, int]  # component -> segments per layer
    n_labels: int  # distinct segment labels
    label_seq: _LabelSeqs  # label id -> codes
    covered: int = 0
    layers_n: int = 0  # layers over all steps
    agree: int = 0  # layers holding exactly one mixer -> FFN transition (the structure's period)
    decoder: bool = False  # a decoder stack: some layer holds a mixer, and every layer type a mixer or an FFN part
    n_types: int = 0
    table: _LayerTable = None  # every layer, as arrays (layer_table)
    _layers: dict = None

    @property
    def layers(self) -> dict[int, list[_Layer]]:
        """step -> its layers (made from the table when first asked for: only the chosen assembly's are)."""
        if self._layers is None:
            self._layers = self.table.layers(self.step_ids)
        return self._layers


def _phases(edges: set[tuple[int, int]]) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """Per label: its component and its potential; per component: k (the gcd of the cycle lengths)."""
    adj: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for a, b in edges:
        adj[a].append((b, 1))
        adj[b].append((a, -1))
    comp: dict[int, int] = {}
    pot: dict[int, int] = {}
    gcds: dict[int, int] = {}
    for root in sorted(adj):
        if root in comp:
            continue
        cid = len(gcds)
        comp[root], pot[root] = cid, 0
        stack, g = [root], 0
        while stack:
            v = stack.pop()
            for w, d in adj[v]:
                if w not in comp:
                    comp[w], pot[w] = cid, pot[v] + d
                    stack.append(w)
                else:
                    g = math.gcd(g, abs(pot[v] + d - pot[w]))
        gcds[cid] = g
    return comp, pot, gcds


class _LabelSeqs:
    """Label id -> its kernel name codes (a tuple), read from the label's first segment when first asked for."""

    def __init__(self, codes: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        self._codes, self._lo, self._hi = codes, lo, hi
        self._got: dict[int, tuple] = {}

    def __getitem__(self, lid: int) -> tuple:
        got = self._got.get(lid)
        if got is None:
            got = self._got[lid] = tuple(self._codes[self._lo[lid] : self._hi[lid]].tolist())
        return got

    def __len__(self) -> int:
        return len(self._lo)


@dataclass
class _Segs:
    """The segments of every step for one boundary kernel, in order: kernel bounds a:b (positions in ctx.flat),
    the step (index into ctx.seqs), the label, whether the label recurs in the step, the phase (-1: none) and the
    component and its k (-1 and 0: none) of the label."""

    a: np.ndarray
    b: np.ndarray
    step: np.ndarray
    ids: np.ndarray
    rec: np.ndarray
    n_labels: int
    ph: np.ndarray = None
    comp: np.ndarray = None
    k: np.ndarray = None
    first: np.ndarray = None  # label id -> its first segment


def _segments(ctx: _Ctx, token: int) -> _Segs:
    """Every step cut at each occurrence of the token (and at its own ends), and each segment labelled by its exact
    sequence of kernel names: label ids in order of first appearance (_labels)."""
    fl = ctx.flat
    bounds = np.concatenate([fl.lo, fl.positions(token)])  # np.union1d of the two, without its unique's overhead
    bounds.sort(kind="stable")  # two sorted runs: merged in one pass (quicksort took 5-9x as long)
    bounds = bounds[np.concatenate([[True], bounds[1:] != bounds[:-1]])] if bounds.size else bounds
    a, b = bounds[:-1], bounds[1:]
    step = np.searchsorted(fl.lo, a, side="right") - 1
    ids, n_labels, first = _labels(fl, a, b)
    # a label recurs when it occurs at least twice in the step
    key = step * max(n_labels, 1) + ids
    if len(ctx.seqs) * n_labels <= 4 * key.size + 4096:  # few enough (step, label) pairs to count in one array
        rec = np.bincount(key, minlength=1)[key] >= 2
    else:
        _, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
        rec = counts[inv.reshape(-1)] >= 2
    return _Segs(a, b, step, ids, rec, n_labels, first=first)


def _labels(fl: _Flat, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """Label ids 0.. in order of first appearance of the segments a:b (which tile fl.codes), equal ids for equal
    name sequences: grouped by a hash of the codes and the length, then every segment checked against the one before it
    in its group (_Flat.equal); a hash collision (never seen) falls back to a dict of the code bytes. Also the first
    segment of each label."""
    if not a.size:
        return np.zeros(0, np.int64), 0, np.zeros(0, np.int64)
    size = (b - a).astype(np.uint64)
    # uint64 arrays wrap silently (no overflow check on integer arrays: no np.errstate needed)
    key = (fl.h_pre[b] - fl.h_pre[a]) * fl.h_pow[a] + size * np.uint64(HASH_LENGTH)
    first, inv, order, new = _groups(key)  # order: the segments grouped, in order within a group
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first)] = np.arange(first.size, dtype=np.int64)
    ids = rank[inv]
    if np.array_equal(size[first][inv], size):
        # every segment equals the one before it in its group (and so the group's first): grouped, in order
        later = np.flatnonzero(~new[1:]) + 1
        j, before = order[later], order[later - 1]
        if fl.equal(a[j], b[j] - a[j], a[j] - a[before]):
            return ids, int(first.size), np.sort(first)
    labels: dict[bytes, int] = {}
    raw, width = fl.raw, fl.codes.itemsize
    ids = np.fromiter(
        (labels.setdefault(raw[x * width : y * width], len(labels)) for x, y in zip(a.tolist(), b.tolist())),
        dtype=np.int64,
        count=a.size,
    )
    return ids, len(labels), np.unique(ids, return_index=True)[1]


def _label_seqs(ctx: _Ctx, segs: _Segs) -> _LabelSeqs:
    first = segs.first  # label ids are 0.. in order of first appearance
    return _LabelSeqs(ctx.flat.codes, segs.a[first], segs.b[first])


def _edges(segs: _Segs) -> set[tuple[int, int]]:
    """The label graph: consecutive recurring segments of a step, inserted in order of first occurrence (the set's
    iteration order, and so the components' numbering, is that of inserting every pair in segment order: a pair
    already in the set leaves it as it is, so every pair is inserted, repeats included)."""
    ids = segs.ids
    j = np.flatnonzero(segs.rec[:-1] & segs.rec[1:] & (segs.step[:-1] == segs.step[1:]))
    if j.size > 256:  # many pairs: their first occurrences only (the same set), found by one sort
        j = j[np.sort(_first_of(ids[j] * max(int(ids.max(initial=0)) + 1, 1) + ids[j + 1]))]
    return set(zip(ids[j].tolist(), ids[j + 1].tolist()))


def _label_phases(ctx: _Ctx, segs: _Segs, n_labels: int):
    """Per label its component, k and phase (-1, 0, -1 outside every component with a period): the phase holding
    the mixer kernels' time opens a layer (else the phase that comes first in most steps)."""
    comp, pot, gcds = _phases(_edges(segs))
    k_of = {c: (g if 1 <= g <= K_MAX else 0) for c, g in gcds.items()}
    comp_l, pot_l = np.full(n_labels, -1, np.int64), np.zeros(n_labels, np.int64)
    if comp:
        lids = np.fromiter(comp.keys(), dtype=np.int64, count=len(comp))
        comp_l[lids] = np.fromiter(comp.values(), dtype=np.int64, count=len(comp))
        pot_l[lids] = np.fromiter((pot[x] for x in comp), dtype=np.int64, count=len(comp))
    k_arr = np.array([k_of[c] for c in range(len(gcds))] + [0], dtype=np.int64)
    k_l = k_arr[comp_l]  # comp -1 reads the trailing 0
    ids = segs.ids
    v = np.flatnonzero(segs.rec & (k_l[ids] > 0))
    c_v, k_v = comp_l[ids[v]], k_l[ids[v]]
    key = c_v * K_MAX + pot_l[ids[v]] % k_v
    mixer = (ctx.flat.mixer_cumsum[segs.b[v]] - ctx.flat.mixer_cumsum[segs.a[v]]).astype(np.float64)
    mixer_time = np.bincount(key, weights=mixer, minlength=len(gcds) * K_MAX)  # summed in segment order
    first = _first_of(segs.step[v] * max(len(gcds), 1) + c_v)  # per step, each component's
    first_phase = np.bincount(key[first], minlength=len(gcds) * K_MAX)  # first segment
    start = np.zeros(len(gcds) + 1, dtype=np.int64)
    for c, k in k_of.items():
        if k:
            times = mixer_time[c * K_MAX : c * K_MAX + k]
            firsts = first_phase[c * K_MAX : c * K_MAX + k]
            start[c] = int(np.argmax(times)) if times.max() > 0 else int(np.argmax(firsts))
    phase_l = np.where(k_l > 0, (pot_l - start[comp_l]) % np.maximum(k_l, 1), -1)
    return comp_l, k_l, phase_l, k_of


def _top_labels(segs: _Segs, comp_l: np.ndarray, phase_l: np.ndarray) -> dict[tuple[int, int], list[int]]:
    """Per (component, phase) the four labels its recurring segments hold most often (ties: the first seen first),
    as Counter.most_common(4) of them in segment order."""
    phased = segs.ph >= 0
    lids = segs.ids[phased]
    counts = np.bincount(lids, minlength=segs.n_labels)  # label ids are 0 .. n_labels - 1
    present = np.flatnonzero(counts)
    # a label's first segment is its first phased one when that one is phased (ties are broken by the order of the
    # first phased segments, which segment positions keep); else their positions in lids, by a sort
    first = segs.first[present] if segs.first is not None else None
    if first is None or not phased[first].all():
        first, _, _, _ = _groups(lids)
    counts = counts[present]
    order = np.lexsort((first, -counts, phase_l[present], comp_l[present]))
    top: dict[tuple[int, int], list[int]] = defaultdict(list)
    for lid, c, p in zip(present[order].tolist(), comp_l[present[order]].tolist(), phase_l[present[order]].tolist()):
        lst = top[(c, p)]
        if len(lst) < 4:
            lst.append(lid)
    return top


@dataclass
class _Phased:
    """One boundary kernel's segments with their labels and phases (steps 1-2): what ``_cover_bound`` reads and
    ``_assemble`` goes on from."""

    token: int
    segs: _Segs
    label_seq: _LabelSeqs
    comp_l: np.ndarray
    phase_l: np.ndarray
    k_of: dict[int, int]


def _phased(ctx: _Ctx, token: int) -> _Phased:
    segs = _segments(ctx, token)
    label_seq = _label_seqs(ctx, segs)
    comp_l, k_l, phase_l, k_of = _label_phases(ctx, segs, segs.n_labels)
    segs.ph = np.where(segs.rec, phase_l[segs.ids], -1)
    segs.comp, segs.k = comp_l[segs.ids], k_l[segs.ids]
    return _Phased(token, segs, label_seq, comp_l, phase_l, k_of)


def _assemble(ctx: _Ctx, token: int, p: _Phased | None = None) -> _Assembly:
    """The layers of every step for one boundary kernel: segments and labels, phases (``p`` when already made),
    then runs cut into layers."""
    p = _phased(ctx, token) if p is None else p
    segs, label_seq = p.segs, p.label_seq
    asm = _Assembly(token, [seq.step for seq in ctx.seqs], p.k_of, segs.n_labels, label_seq)
    pieces = _LayerPieces()
    if segs.a.size:
        _Runs(ctx, segs, _top_labels(segs, p.comp_l, p.phase_l), label_seq, pieces).layers_into()
    asm.table = pieces.done()
    asm.covered = int((asm.table.hi - asm.table.lo).sum())
    return asm


class _Runs:
    """Runs of linked segments and their layers (step 3 of the module docstring), over every step at once: the links,
    the runs and each segment's phase are array passes; Python runs over the runs that can hold two layers and over
    the unique segments inside them."""

    def __init__(self, ctx: _Ctx, segs: _Segs, top: dict, label_seq: _LabelSeqs, pieces: _LayerPieces):
        self.ctx, self.segs, self.top, self.label_seq, self.pieces = ctx, segs, top, label_seq, pieces
        self.last_hi, self.last_run = None, -1  # the step's last layer cut so far: its end and run (None: none yet)
        self.cat = ctx.cat_of_code
        self._similar: dict[tuple[int, int, int], int | None] = {}

    def similar(self, j: int, c: int, p: int) -> int | None:
        """A unique segment close to a label expected at phase p of component c: that label (by the segment's label,
        remembered: the answer depends only on it)."""
        key = (int(self.segs.ids[j]), c, p)
        if key not in self._similar:
            mine = self.label_seq[key[0]]
            best = None
            for lid in self.top[(c, p)]:
                lab = self.label_seq[lid]
                budget = _budget(len(lab))
                if _edit_floor(mine, lab, budget) > budget + 1e-6:  # the edit distance cannot be within budget
                    continue
                d = _edit(mine, lab, self.cat)
                if d <= budget and (best is None or d < best[0]):
                    best = (d, lid)
            self._similar[key] = best[1] if best else None
        return self._similar[key]

    def links(self) -> tuple[np.ndarray, np.ndarray]:
        """The phased segments and, per consecutive pair of them in a step, whether they link: same component, the
        phases follow over the segments between, and those are at most k-1 or each similar to an expected label."""
        s = self.segs
        r = np.flatnonzero(s.ph >= 0)
        pa, pb = r[:-1], r[1:]
        w, k = pb - pa - 1, s.k[pa]
        follows = (s.ph[pa] + 1 + w) % np.maximum(k, 1) == s.ph[pb]
        cand = (s.step[pa] == s.step[pb]) & (s.comp[pa] == s.comp[pb]) & follows
        linked = cand & (w <= k - 1)
        for i in np.flatnonzero(cand & (w > k - 1)).tolist():
            a, c, kk, p0 = int(pa[i]), int(s.comp[pa[i]]), int(k[i]), int(s.ph[pa[i]])
            linked[i] = all(self.similar(j, c, (p0 + j - a) % kk) is not None for j in range(a + 1, int(pb[i])))
        return r, linked

    def layers_into(self) -> None:
        s = self.segs
        r, linked = self.links()
        if not r.size:
            return
        # each segment's phase in its run: a phased segment's own, a segment between two the one its position gives
        idx = np.where(s.ph >= 0, np.arange(s.ph.size), -1)
        prev = np.maximum.accumulate(idx)
        prev_c = np.maximum(prev, 0)
        self.cph = np.where(prev >= 0, (s.ph[prev_c] + np.arange(s.ph.size) - prev_c) % np.maximum(s.k[prev_c], 1), -1)
        starts = np.ones(r.size, dtype=bool)
        starts[1:] = ~linked
        first, last = r[starts], r[np.append(starts[1:], True)]
        zeros = np.concatenate([[0], np.cumsum(self.cph == 0)])
        n_zero = zeros[last + 1] - zeros[first]
        # a run cut into fewer than MIN_RUN_LAYERS layers is none: it needs that many phase-0 segments, or one fewer
        # and its first layer's missing start recovered (a run dropped this way changes nothing for the runs after
        # it: what it could mark as used lies before them)
        viable = np.where(self.cph[first] == 0, n_zero >= MIN_RUN_LAYERS, n_zero >= MIN_RUN_LAYERS - 1)
        step_seg = np.searchsorted(s.step, np.arange(len(self.ctx.seqs) + 1), side="left")
        cur, used = -1, _Used()
        for f, l in zip(first[viable].tolist(), last[viable].tolist()):
            st = int(s.step[f])
            if st != cur:
                cur, used, self.last_hi, self.last_run = st, _Used(), None, -1
            self._run(st, f, l, int(step_seg[st]), int(step_seg[st + 1]), used)

    def _run(self, st: int, f: int, l: int, seg_lo: int, seg_hi: int, used: _Used) -> None:
        """The layers of the run of segments f..l (added to the pieces): its edges recovered, then cut
        at phase 0 (layers_into skipped the runs that cannot hold MIN_RUN_LAYERS layers)."""
        s, ctx = self.segs, self.ctx
        seq, base = ctx.seqs[st], int(ctx.flat.lo[st])
        c, k = int(s.comp[f]), int(s.k[f])
        phase = self.cph[f : l + 2].copy()  # and the segment after the run, which the right edge may take
        lab = s.ids[f : l + 2].copy()
        for i in np.flatnonzero(s.ph[f : l + 1] < 0).tolist():  # a unique segment inside stands for the label it is
            sim = self.similar(f + i, c, int(phase[i]))  # similar to, else for itself
            if sim is not None:
                lab[i] = sim
        prefix: tuple = ()
        lo_seg, lo_kernel, note = f, int(s.a[f]) - base, ""
        if phase[0] != 0:  # left edge: the first layer lacks its first phase(s): from the segment before
            got = self._left(f, seg_lo, used, c, int(phase[0]), seq, base)
            if got is not None:
                lo_kernel, prefix = got
                note = "the first layer's first segment(s) recovered from the segment before it"
                used.add(f - 1, f - 1)
            else:  # the partial first layer is not a layer
                lo_seg = f + int(np.flatnonzero(phase[: l + 1 - f] == 0)[0])
                lo_kernel = int(s.a[lo_seg]) - base
        hi_seg = l
        ext = self._right(l, seg_hi, c, k, int(phase[l - f]))
        if ext is not None:
            hi_seg, phase[l + 1 - f], lab[l + 1 - f] = l + 1, k - 1, ext
        if self.last_hi is not None and not prefix:  # a later run takes the embedding kernels right before it
            j = lo_kernel  # (a draft's embedding)
            while j - 1 >= max(self.last_hi, 0) and ctx.family_of_cat[self.cat[seq.codes[j - 1]]] == EMBEDDING_FAMILY:
                j -= 1
            if j < lo_kernel:
                lo_kernel = j
                note = "the embedding kernel(s) before this run belong to its first layer"
        if self._cut(
            st,
            lo_seg,
            hi_seg,
            phase[lo_seg - f : hi_seg + 1 - f],
            lab[lo_seg - f : hi_seg + 1 - f],
            base,
            (lo_kernel, prefix, note),
        ):
            used.add(lo_seg, hi_seg)

    def _cut(
        self, st: int, lo_seg: int, hi_seg: int, phase: np.ndarray, lab: np.ndarray, base: int, first: tuple
    ) -> bool:
        """Cut segments lo_seg..hi_seg into layers at phase 0 (False, and no layers, when fewer than MIN_RUN_LAYERS):
        a layer's signature is its segments' labels, exact when all of them recur; the first layer starts at
        ``first``'s kernel, after its recovered labels."""
        s = self.segs
        starts = np.flatnonzero(phase == 0)  # and 0 (sorted, distinct: union1d([0], ...) without its sort)
        if not starts.size or starts[0]:
            starts = np.concatenate([np.zeros(1, np.int64), starts])
        if starts.size < MIN_RUN_LAYERS:
            return False
        ends = np.append(starts[1:], phase.size)
        unique = np.concatenate([[0], np.cumsum(s.ph[lo_seg : hi_seg + 1] < 0)])
        lo_kernel, prefix, note = first
        sig = self.pieces.sig_ids(lab, starts, ends, prefix)
        lo = s.a[lo_seg + starts] - base
        lo[0] = lo_kernel
        hi = s.b[lo_seg + ends - 1] - base
        exact = unique[ends] == unique[starts]
        exact[0] = exact[0] and not prefix
        run_id = self.last_run + 1  # runs are numbered in order within a step
        self.pieces.add(st, lo, hi, sig, run_id, exact, note)
        self.last_hi, self.last_run = int(hi[-1]), run_id
        return True

    def _left(self, j0: int, seg_lo: int, used: _Used, c: int, phase: int, seq: _Seq, base: int):
        """The first layer's missing phase(s) at the end of the unique segment before the run, or None."""
        before = j0 - 1
        if before < seg_lo or before in used or self.segs.ph[before] >= 0:
            return None
        cands = [self.top[(c, p)] for p in range(phase)]
        if not all(cands):
            return None
        seg = (int(self.segs.a[before]) - base, int(self.segs.b[before]) - base)
        return _best_left(cands, seq, seg, self.label_seq, self.cat)

    def _right(self, last: int, seg_hi: int, c: int, k: int, phase: int) -> int | None:
        """The label the segment after the run takes when the last layer lacks its last phase and that segment
        starts like it (kernels added at the end, such as a draft model's final norm and lm_head), or None."""
        if not (phase == k - 2 and last + 1 < seg_hi and self.segs.ph[last + 1] < 0 and k > 1):
            return None
        nxt = self.label_seq[int(self.segs.ids[last + 1])]
        for lid in self.top[(c, k - 1)]:
            lab = self.label_seq[lid]
            budget = _budget(len(lab))
            if nxt[: len(lab)] == lab or (
                _edit_floor(nxt, lab, budget) <= budget + 1e-6 and _edit(nxt, lab, self.cat) <= budget
            ):
                return lid
        return None


class _Used:
    """The segments of a step already taken by a run (or as a run's recovered start): disjoint ranges, added in
    order."""

    def __init__(self):
        self.lo: list[int] = []
        self.hi: list[int] = []

    def add(self, lo: int, hi: int) -> None:
        self.lo.append(lo)
        self.hi.append(hi)

    def __contains__(self, j: int) -> bool:
        i = bisect.bisect_right(self.lo, j) - 1
        return i >= 0 and j <= self.hi[i]


def _best_left(expected: tuple, seq: _Seq, seg: tuple[int, int], label_seq, cat):
    """The missing first phase(s) of a run's first layer, at the end of the segment before it: (start kernel,
    the labels used) when the end of that segment aligns with them within the edit budget."""
    a, b = seg
    best = None
    combos: list[tuple] = [()]
    for cands in expected:
        combos = [c + (x,) for c in combos for x in cands][:16]
    for combo in combos:
        exp = tuple(chain.from_iterable(map(label_seq.__getitem__, combo)))
        budget = _budget(len(exp))
        window = max(a, b - len(exp) - int(math.ceil(budget)) - 1)
        part = tuple(seq.codes[window:b].tolist())
        if _cost_floor(exp, part) > budget + 1e-6:  # it cannot be within the budget: no need to align
            continue
        cost, j = _align_suffix(exp, part, cat)
        if cost <= budget and j < b - window and (best is None or cost < best[0]):
            best = (cost, window + j, combo)
    return None if best is None else (best[1], best[2])
