"""Automatic layers, step 3 of docs/layers.md: the layers of every step for one boundary kernel (``assemble``).

From the phased segments (segments.py): runs of linked segments with their edges recovered (``_best_left`` at a
run's start, the next segment at its end, embedding kernels before a later run); each run cut into layers at phase 0.

Every candidate boundary kernel is assembled while the boundary is chosen, and all but one are dropped: their layers
stay arrays (``_LayerTable``: bounds, signature ids, runs, made run by run by ``_LayerPieces``) that the choice
measures in numpy passes; the ``Layer`` objects are made only for the chosen assembly (``Assembly.layers``). A
signature (the labels of a layer's segments) is a tuple made once per distinct signature, not once per layer."""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from itertools import chain

import numpy as np

from .alignment import align_suffix, cost_floor, edit_budget, edit_distance, edit_floor
from .segments import LabelSeqs, Phased, Segs, first_of, groups, phased_segments
from .sequences import Context, Seq

MIN_RUN_LAYERS = 2  # a run of fewer layers is not a stack of layers
EMBEDDING_FAMILY = "embedding"


@dataclass
class Assembly:
    token: int
    step_ids: list[int]  # the step of each of ctx.seqs
    k: dict[int, int]  # component -> segments per layer
    n_labels: int  # distinct segment labels
    label_seq: LabelSeqs  # label id -> codes
    covered: int = 0
    layers_n: int = 0  # layers over all steps
    agree: int = 0  # layers holding exactly one mixer -> FFN transition (the structure's period)
    decoder: bool = False  # a decoder stack: some layer holds a mixer, and every layer type a mixer or an FFN part
    n_types: int = 0
    table: _LayerTable = None  # every layer, as arrays (_LayerTable)
    _layers: dict = None

    @property
    def layers(self) -> dict[int, list[Layer]]:
        """step -> its layers (made from the table when first asked for: only the chosen assembly's are)."""
        if self._layers is None:
            self._layers = self.table.layers(self.step_ids)
        return self._layers


@dataclass
class Layer:
    lo: int  # first main-stream kernel (index into the step's sequence)
    hi: int  # one past the last
    sig: tuple  # the labels of its segments (phase 0 first)
    run: int
    exact: bool = True  # every segment has a recurring label
    note: str = ""


@dataclass
class _LayerTable:
    """Every layer of an assembly in order (by step, in the order of ctx.seqs, then by first kernel): the step (index
    into ctx.seqs), the kernel bounds within the step's sequence, the signature id (sigs[id] is the tuple), the run,
    whether it is exact and its note."""

    step: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    sig: np.ndarray
    run: np.ndarray
    exact: np.ndarray
    note: list[str]
    sigs: list[tuple]

    @cached_property
    def sig_first(self) -> np.ndarray:
        """The first layer of each distinct signature (one per layer type)."""
        return first_of(self.sig)

    def layers(self, step_ids: list[int]) -> dict[int, list[Layer]]:
        """step id -> its layers (every step, [] without layers)."""
        out: dict[int, list[Layer]] = {s: [] for s in step_ids}
        sigs = self.sigs
        for st, lo, hi, sg, run, ex, note in zip(
            self.step.tolist(),
            self.lo.tolist(),
            self.hi.tolist(),
            self.sig.tolist(),
            self.run.tolist(),
            self.exact.tolist(),
            self.note,
        ):
            out[step_ids[st]].append(Layer(lo, hi, sigs[sg], run, ex, note))
        return out


class _LayerPieces:
    """The layers of one assembly as they are cut, run by run (``add``), then one ``_LayerTable`` (``done``)."""

    def __init__(self):
        self.parts: list[tuple] = []
        self.sig_of: dict[tuple, int] = {}
        self.sigs: list[tuple] = []

    def _intern(self, sig: tuple) -> int:
        got = self.sig_of.get(sig)
        if got is None:
            got = self.sig_of[sig] = len(self.sigs)
            self.sigs.append(sig)
        return got

    def sig_ids(self, lab: np.ndarray, starts: np.ndarray, ends: np.ndarray, prefix: tuple) -> np.ndarray:
        """The signature ids of the layers lab[starts[i]:ends[i]] (the first one after ``prefix``): per length, the
        rows keyed by one integer (the labels as digits, when they fit in 62 bits; else numpy's row unique), and
        the distinct rows made into tuples once."""
        lens = ends - starts
        out = np.empty(lens.size, dtype=np.int64)
        base = int(lab.max(initial=0)) + 1
        for m in sorted(set(lens.tolist())):
            rows = np.flatnonzero(lens == m)
            mat = lab[starts[rows][:, None] + np.arange(m)]
            if base**m < 1 << 62:  # exact in int64
                key = mat @ (base ** np.arange(m - 1, -1, -1, dtype=np.int64))
                first, inv, _, _ = groups(key)
                uniq = mat[first]
            else:
                uniq, inv = np.unique(mat, axis=0, return_inverse=True)
            ids = np.array([self._intern(tuple(r)) for r in uniq.tolist()], dtype=np.int64)
            out[rows] = ids[inv.reshape(-1)]
        if prefix:
            out[0] = self._intern(tuple(prefix) + tuple(lab[starts[0] : ends[0]].tolist()))
        return out

    def add(
        self, step: int, lo: np.ndarray, hi: np.ndarray, sig: np.ndarray, run: int, exact: np.ndarray, note: str
    ) -> None:
        self.parts.append((step, lo, hi, sig, run, exact, note))

    def done(self) -> _LayerTable:
        """The table, sorted by step and first kernel (stable: a run's layers in order)."""
        if not self.parts:
            z = np.zeros(0, np.int64)
            return _LayerTable(z, z, z, z, z, np.zeros(0, bool), [], self.sigs)
        sizes = [p[1].size for p in self.parts]
        step = np.repeat(np.array([p[0] for p in self.parts], np.int64), sizes)
        lo = np.concatenate([p[1] for p in self.parts]).astype(np.int64)
        hi = np.concatenate([p[2] for p in self.parts]).astype(np.int64)
        sig = np.concatenate([p[3] for p in self.parts])
        run = np.repeat(np.array([p[4] for p in self.parts], np.int64), sizes)
        exact = np.concatenate([p[5] for p in self.parts]).astype(bool)
        note = np.full(lo.size, "", dtype=object)
        note[np.cumsum([0] + sizes[:-1])] = [p[6] for p in self.parts]
        order = np.lexsort((lo, step))
        return _LayerTable(
            step[order], lo[order], hi[order], sig[order], run[order], exact[order], note[order].tolist(), self.sigs
        )


def _top_labels(segs: Segs, comp_l: np.ndarray, phase_l: np.ndarray) -> dict[tuple[int, int], list[int]]:
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
        first, _, _, _ = groups(lids)
    counts = counts[present]
    order = np.lexsort((first, -counts, phase_l[present], comp_l[present]))
    top: dict[tuple[int, int], list[int]] = defaultdict(list)
    for lid, c, p in zip(present[order].tolist(), comp_l[present[order]].tolist(), phase_l[present[order]].tolist()):
        lst = top[(c, p)]
        if len(lst) < 4:
            lst.append(lid)
    return top


def assemble(ctx: Context, token: int, p: Phased | None = None) -> Assembly:
    """The layers of every step for one boundary kernel: segments and labels, phases (``p`` when already made),
    then runs cut into layers."""
    p = phased_segments(ctx, token) if p is None else p
    segs, label_seq = p.segs, p.label_seq
    asm = Assembly(token, [seq.step for seq in ctx.seqs], p.k_of, segs.n_labels, label_seq)
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

    def __init__(self, ctx: Context, segs: Segs, top: dict, label_seq: LabelSeqs, pieces: _LayerPieces):
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
                budget = edit_budget(len(lab))
                if edit_floor(mine, lab, budget) > budget + 1e-6:  # the edit distance cannot be within budget
                    continue
                d = edit_distance(mine, lab, self.cat)
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

    def _left(self, j0: int, seg_lo: int, used: _Used, c: int, phase: int, seq: Seq, base: int):
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
            budget = edit_budget(len(lab))
            if nxt[: len(lab)] == lab or (
                edit_floor(nxt, lab, budget) <= budget + 1e-6 and edit_distance(nxt, lab, self.cat) <= budget
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


def _best_left(expected: tuple, seq: Seq, seg: tuple[int, int], label_seq, cat):
    """The missing first phase(s) of a run's first layer, at the end of the segment before it: (start kernel,
    the labels used) when the end of that segment aligns with them within the edit budget."""
    a, b = seg
    best = None
    combos: list[tuple] = [()]
    for cands in expected:
        combos = [c + (x,) for c in combos for x in cands][:16]
    for combo in combos:
        exp = tuple(chain.from_iterable(map(label_seq.__getitem__, combo)))
        budget = edit_budget(len(exp))
        window = max(a, b - len(exp) - int(math.ceil(budget)) - 1)
        part = tuple(seq.codes[window:b].tolist())
        if cost_floor(exp, part) > budget + 1e-6:  # it cannot be within the budget: no need to align
            continue
        cost, j = align_suffix(exp, part, cat)
        if cost <= budget and j < b - window and (best is None or cost < best[0]):
            best = (cost, window + j, combo)
    return None if best is None else (best[1], best[2])
