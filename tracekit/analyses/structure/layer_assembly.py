"""Automatic layers: assemble the layers of every step for one boundary kernel (steps 1-3 of docs/layers.md).

Segments cut at the boundary kernel and labelled by their kernel names; phases from the label graph (``_phases``);
runs of linked segments with their edges recovered (``_best_left`` at a run's start, the next segment at its end,
embedding kernels before a later run); each run cut into layers at phase 0."""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from .layer_align import _align_suffix, _budget, _cost_floor, _edit
from .layer_context import _Ctx, _Seq

MIN_RUN_LAYERS = 2  # a run of fewer layers is not a stack of layers
K_MAX = 16  # at most this many segments per layer
EMBEDDING_FAMILY = "embedding"


@dataclass
class _Layer:
    lo: int  # first main-stream kernel (index into the step's sequence)
    hi: int  # one past the last
    sig: tuple  # the labels of its segments (phase 0 first)
    run: int
    exact: bool = True  # every segment has a recurring label
    note: str = ""


@dataclass
class _Assembly:
    token: int
    layers: dict[int, list[_Layer]]  # step -> layers
    k: dict[int, int]  # component -> segments per layer
    labels: dict[bytes, int]
    label_seq: dict[int, tuple]  # label id -> codes
    covered: int = 0
    layers_n: int = 0  # layers over all steps
    agree: int = 0  # layers holding exactly one mixer -> FFN transition (the structure's period)
    decoder: bool = False  # a decoder stack: some layer holds a mixer, and every layer type a mixer or an FFN part
    n_types: int = 0


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


def _segments(seq: _Seq, token: int) -> list[tuple[int, int]]:
    cuts = np.flatnonzero(seq.codes == token)
    n = seq.codes.size
    bounds = np.unique(np.concatenate([[0], cuts, [n]])).tolist()
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _mixer_ns(ctx: _Ctx, seq: _Seq, a: int, b: int) -> int:
    """The mixer kernels' time in seq[a:b] (int64 sums, exact: a difference of the step's running sum)."""
    cs = seq.mixer_cumsum
    if cs is None:
        d = np.where(ctx.mixer_cat[ctx.cat_of_code[seq.codes]], seq.durs, 0) if seq.codes.size else seq.durs
        cs = seq.mixer_cumsum = np.concatenate([[0], np.cumsum(d, dtype=np.int64)]).tolist()
    return cs[b] - cs[a]


def _assemble(ctx: _Ctx, token: int) -> _Assembly:
    labels: dict[bytes, int] = {}
    label_seq: dict[int, tuple] = {}
    per_step = []
    edges: set[tuple[int, int]] = set()
    for seq in ctx.seqs:
        segs = _segments(seq, token)
        ids = []
        raw, size = seq.codes.tobytes(), seq.codes.itemsize
        for a, b in segs:
            key = raw[a * size:b * size]  # the bytes of seq.codes[a:b]
            lid = labels.get(key)
            if lid is None:
                lid = labels[key] = len(labels)
                label_seq[lid] = tuple(seq.codes[a:b].tolist())
            ids.append(lid)
        counts = Counter(ids)
        rec = [counts[i] >= 2 for i in ids]
        for j in range(len(ids) - 1):
            if rec[j] and rec[j + 1]:
                edges.add((ids[j], ids[j + 1]))
        per_step.append((seq, segs, ids, rec))
    comp, pot, gcds = _phases(edges)
    k_of = {c: (g if 1 <= g <= K_MAX else 0) for c, g in gcds.items()}
    # which phase opens a layer: the one holding the mixer kernels (by time), per component
    mixer_time: dict[tuple[int, int], float] = defaultdict(float)
    first_phase: Counter = Counter()
    for seq, segs, ids, rec in per_step:
        seen_first: set[int] = set()
        for (a, b), lid, r in zip(segs, ids, rec):
            if not r or lid not in comp or not k_of[comp[lid]]:
                continue
            c = comp[lid]
            ph = pot[lid] % k_of[c]
            mixer_time[(c, ph)] += float(_mixer_ns(ctx, seq, a, b))
            if c not in seen_first:
                seen_first.add(c)
                first_phase[(c, ph)] += 1
    start_phase = {}
    for c, k in k_of.items():
        if not k:
            continue
        times = [mixer_time.get((c, p), 0.0) for p in range(k)]
        if max(times) > 0:
            start_phase[c] = int(np.argmax(times))
        else:
            firsts = [first_phase.get((c, p), 0) for p in range(k)]
            start_phase[c] = int(np.argmax(firsts))

    phase_of = {lid: (pot[lid] - start_phase[c]) % k_of[c] for lid, c in comp.items() if k_of.get(c)}
    phase = phase_of.get  # a label's phase, None outside every component with a period (looked up, not recomputed)

    phase_labels: dict[tuple[int, int], Counter] = defaultdict(Counter)
    for _, _, ids, rec in per_step:
        for lid, r in zip(ids, rec):
            p = phase(lid)
            if r and p is not None:
                phase_labels[(comp[lid], p)][lid] += 1
    asm = _Assembly(token, {}, k_of, labels, label_seq)
    for seq, segs, ids, rec in per_step:
        asm.layers[seq.step] = _step_layers(ctx, seq, segs, ids, rec, comp, phase, k_of, phase_labels, label_seq)
        asm.covered += sum(l.hi - l.lo for l in asm.layers[seq.step])
    return asm


def _step_layers(ctx, seq, segs, ids, rec, comp, phase, k_of, phase_labels, label_seq) -> list[_Layer]:
    cat = ctx.cat_of_code
    n = len(segs)
    ph = [phase(i) if r else None for i, r in zip(ids, rec)]

    def similar(j: int, c: int, p: int) -> int | None:
        """A unique segment close to a label expected at phase p of component c: that label."""
        mine = label_seq[ids[j]]
        best = None
        for lid, _ in phase_labels[(c, p)].most_common(4):
            budget = _budget(len(label_seq[lid]))
            if _cost_floor(mine, label_seq[lid]) > budget + 1e-6:  # the edit distance cannot be within budget
                continue
            d = _edit(mine, label_seq[lid], cat)
            if d <= budget and (best is None or d < best[0]):
                best = (d, lid)
        return best[1] if best else None

    # link consecutive recurring segments (with at most k-1 unique ones between, or similar ones)
    rec_idx = [j for j in range(n) if ph[j] is not None]
    link_next: dict[int, int] = {}
    fill: dict[int, int] = {}  # unique segment -> the label it stands for (or its own)
    for a, b in zip(rec_idx, rec_idx[1:]):
        c = comp[ids[a]]
        if comp[ids[b]] != c:
            continue
        k = k_of[c]
        w = b - a - 1
        if (ph[a] + 1 + w) % k != ph[b]:
            continue
        subs = {}
        ok = True
        for t, j in enumerate(range(a + 1, b)):
            s = similar(j, c, (ph[a] + 1 + t) % k)
            if s is None and w > k - 1:
                ok = False
                break
            subs[j] = s if s is not None else ids[j]
        if ok:
            link_next[a] = b
            fill.update(subs)
    # runs: chains of links
    linked_to = set(link_next.values())
    runs = []
    for a in rec_idx:
        if a in linked_to:
            continue
        chain = [a]
        while chain[-1] in link_next:
            chain.append(link_next[chain[-1]])
        runs.append(list(range(chain[0], chain[-1] + 1)))
    layers: list[_Layer] = []
    used: set[int] = set()
    for run in runs:
        c = comp[ids[run[0]]]
        k = k_of[c]
        seg_ph: dict[int, int] = {}
        seg_lab: dict[int, int] = {}
        prev_rec = run[0]
        for j in run:
            if ph[j] is not None:
                seg_ph[j], seg_lab[j], prev_rec = ph[j], ids[j], j
            else:  # a unique segment inside the run takes the phase its position gives
                seg_ph[j], seg_lab[j] = (ph[prev_rec] + (j - prev_rec)) % k, fill.get(j, ids[j])
        prefix: tuple = ()
        lo_kernel = segs[run[0]][0]
        note = ""
        # left edge: the first layer lacks its first phase(s): take them from the end of the segment before
        if seg_ph[run[0]] != 0:
            got = None
            before = run[0] - 1
            if before >= 0 and before not in used and ph[before] is None:
                cands = [[lid for lid, _ in phase_labels[(c, p)].most_common(4)] for p in range(seg_ph[run[0]])]
                if all(cands):
                    got = _best_left(cands, seq, segs[before], label_seq, cat)
            if got is not None:
                lo_kernel, prefix = got
                note = "the first layer's first segment(s) recovered from the segment before it"
                used.add(before)
            else:  # the partial first layer is not a layer
                while run and seg_ph[run[0]] != 0:
                    run = run[1:]
                if not run:
                    continue
                lo_kernel = segs[run[0]][0]
        # right edge: the last layer lacks its last phase: take the next segment when it starts like it
        last = run[-1]
        if seg_ph[last] == k - 2 and last + 1 < n and ph[last + 1] is None and k > 1:
            nxt = label_seq[ids[last + 1]]
            for lid, _ in phase_labels[(c, k - 1)].most_common(4):
                lab = label_seq[lid]
                if nxt[:len(lab)] == lab or (_cost_floor(nxt, lab) <= _budget(len(lab)) + 1e-6 and
                                             _edit(nxt, lab, cat) <= _budget(len(lab))):
                    run = run + [last + 1]
                    seg_ph[last + 1], seg_lab[last + 1] = k - 1, lid
                    break
        # a later run takes the embedding kernels right before it (a draft model's own embedding)
        if layers and not prefix:
            j = lo_kernel
            while j - 1 >= max(layers[-1].hi, 0) and ctx.family_of_cat[cat[seq.codes[j - 1]]] == EMBEDDING_FAMILY:
                j -= 1
            if j < lo_kernel:
                lo_kernel = j
                note = "the embedding kernel(s) before this run belong to its first layer"
        # cut the run into layers at phase 0
        groups: list[list[int]] = []
        for j in run:
            if seg_ph[j] == 0 or not groups:
                groups.append([j])
            else:
                groups[-1].append(j)
        if len(groups) < MIN_RUN_LAYERS:
            continue
        run_id = len({l.run for l in layers})
        for g_i, g in enumerate(groups):
            sig = tuple(seg_lab[j] for j in g)
            exact = all(ph[j] is not None for j in g)
            lo = segs[g[0]][0]
            if g_i == 0:
                sig, lo = tuple(prefix) + sig, lo_kernel
                exact = exact and not prefix
            layers.append(_Layer(lo, segs[g[-1]][1], sig, run_id, exact, note if g_i == 0 else ""))
        used.update(run)
    layers.sort(key=lambda l: l.lo)
    return layers


def _best_left(expected: tuple, seq: _Seq, seg: tuple[int, int], label_seq, cat):
    """The missing first phase(s) of a run's first layer, at the end of the segment before it: (start kernel,
    the labels used) when the end of that segment aligns with them within the edit budget."""
    a, b = seg
    best = None
    combos: list[tuple] = [()]
    for cands in expected:
        combos = [c + (x,) for c in combos for x in cands][:16]
    for combo in combos:
        exp = tuple(x for lid in combo for x in label_seq[lid])
        budget = _budget(len(exp))
        window = max(a, b - len(exp) - int(math.ceil(budget)) - 1)
        part = tuple(seq.codes[window:b].tolist())
        if _cost_floor(exp, part) > budget + 1e-6:  # it cannot be within the budget: no need to align
            continue
        cost, j = _align_suffix(exp, part, cat)
        if cost <= budget and j < b - window and (best is None or cost < best[0]):
            best = (cost, window + j, combo)
    return None if best is None else (best[1], best[2])
