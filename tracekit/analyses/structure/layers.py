"""Automatic layers: cut each step into a head, decoder layers and a tail, with no annotation (docs/layers.md).

How (per trace, the same for every step):

1. **Segments.** The main stream's kernels of each step (the stream with the most kernel time) are cut at every
   occurrence of one *boundary kernel*; each segment is labelled by its exact sequence of kernel names.
2. **Phases.** Labels that recur within a step are linked when they follow each other. A layer of ``k`` segments
   (attention half, FFN half: ``k = 2``) makes every cycle of that graph a multiple of ``k``, so ``k`` is the gcd
   of the cycle lengths of each connected part, and each label gets a phase ``0..k-1``. The phase whose segments
   hold the mixer kernels (attention, linear attention, state space: ``layer_role`` in the categories) opens a
   layer. Between two linked segments up to ``k-1`` segments of a unique label (a one-off dense layer among MoE
   layers) belong to the layer whose phases they complete; a unique segment similar to an expected one (edit
   distance within a quarter of its length) does too.
3. **Runs and their edges.** A run is a maximal chain of linked segments. A run whose first layer lacks its first
   segment(s) (the first layer's input norm missing or a different kernel) takes them from the end of the
   segment before it when that end aligns with the missing label within the edit budget; a run whose last layer
   lacks its last segment takes the next segment when it starts with the missing label (kernels added at the
   end, such as a draft model's final norm and lm_head). A later run (draft layers after the target model) takes
   the embedding kernels right before it. Runs of fewer than two layers are not layers.
4. **The boundary kernel** is the candidate (a kernel occurring at least three times in a step) whose layers form a
   *decoder stack* and agree best with the *structure*. The structure is counted without any boundary kernel:
   every mixer -> FFN transition of the step (an attention / linear-attention / state-space kernel, then an MLP or
   MoE kernel, other kernels skipped); a decoder layer holds exactly one. A decoder stack has a layer holding a
   mixer kernel, every layer type holding a mixer or an FFN kernel (a kernel repeating inside a layer leaves
   pieces with neither), at most max(3, a quarter of the layers) types and at least 3 kernels per layer. Among the
   candidates whose share of layers holding one transition is within 5 % of the best: norm kernels covering at
   least 90 % of the best coverage, then the most main-stream kernels covered, the fewest types, the kernel closest
   after the last GEMM before it (a decomposed norm's first kernel), the rarest. Norms are tried first: one
   covering 90 % of all main-stream kernels with one transition per layer ends the search. No mixer kernel, or no
   candidate left: **no decoder stack** (``layers`` raises MissingDataError, exit 4, in one sentence).
5. **Types.** A layer's type is its sequence of main-stream kernel names, communication kernels left out (a layer
   that ends with a collective keeps its type). Names come from the categories: the mixer labels (``attn``,
   ``mla``, ``kda``, ...) and the FFN label (``moe`` before ``mlp``), ``draft:`` for the types that never share a
   run with the target model's types (those of the longest run of any step) and follow such a run in some step,
   and the most expensive distinctive kernel when two types would share a name. A type whose layers differ only
   in durations is split into ``/fast`` and ``/slow`` when the durations of one of its mixer kernels form two
   clear clusters (sliding-window vs full attention; expert GEMMs, whose time varies with routing, never split a
   type).
6. **The check.** ``check`` compares the layers with the structure: ``agrees`` when every step has as many layers
   as transitions and every layer holds exactly one; otherwise a warning says the layers are not confirmed.

Side-stream work belongs to the window it starts in, as in the annotation engine. The cost is linear in the
main-stream kernels per candidate boundary kernel (numpy over kernels, Python over segments and over the few
segments at a run's edges), and the candidates are the distinct main-stream names occurring three times or more.
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...errors import MissingDataError
from ...events import categorical_at
from ...result import Result, trace_input
from ...trace import Trace
from ..categories import resolve_categories, trace_categories
from ..time.onestep import one_step_tables
from ..steps.resolve import median_step
from ..steps.resolve import Steps, get_steps, median_ns, merge_warnings, step_params

MIN_COUNT = 3  # a boundary candidate occurs at least this often in some step
MIN_RUN_LAYERS = 2  # a run of fewer layers is not a stack of layers
MIN_LAYER_KERNELS = 3  # a layer has at least this many main-stream kernels on average
K_MAX = 16  # at most this many segments per layer
NORM_PREFERENCE = 0.9  # a norm boundary wins when it covers at least this share of the best coverage
EDIT_FRACTION = 0.25  # edit budget of a first/last/unique segment, as a share of its length (at least 1)
SUB_SAME, SUB_OTHER, INDEL = 0.5, 1.2, 1.0  # edit costs: substitution within a category / across, gap
SPLIT_MIN_RATIO = 1.3  # duration clusters: the slow one at least this much slower ...
SPLIT_SEPARATION = 3.0  # ... with a gap this many times the larger cluster's spread (in log time)
SPLIT_MIN_SHARE = 0.15  # ... and each cluster at least this share of the type's layers (and 2)
MAX_TYPES_FLOOR, MAX_TYPES_SHARE = 3, 0.25  # a stack of layers: at most this many distinct types (_stack_like)
NORM_FAMILY = "norm"
COMM_FAMILY = "comm"
GEMM_FAMILY = "gemm"
STRUCTURE_SLACK = 0.05  # a boundary whose layers agree with the structure this much less than the best is out
EMBEDDING_FAMILY = "embedding"
HEAD, TAIL, BETWEEN = "head", "tail", "between"
LAYER_COLUMNS = ["step", "layer", "layer_type", "start_ns", "end_ns", "kernels", "kernel_ns"]
TYPE_COLUMNS = ["step", "layer_type", "layers", "kernel_ns", "wall_ns"]


# --------------------------------------------------------------------------------------------------
# the per-step kernel sequences
# --------------------------------------------------------------------------------------------------

@dataclass
class _Seq:
    step: int
    start_ns: int
    end_ns: int
    rows: np.ndarray  # positions (in the events) of the step's main-stream kernels, in start order
    codes: np.ndarray  # their name codes
    starts: np.ndarray
    durs: np.ndarray
    # the structure, counted independently of any boundary kernel: every mixer -> FFN transition of the step (the
    # last mixer kernel before an FFN kernel, and that FFN kernel; kernels of no layer role in between are skipped)
    trans_mixer: np.ndarray = None
    trans_ffn: np.ndarray = None
    mixer_cumsum: list = None  # running sum of the mixer kernels' durations (0 first), made on first use


@dataclass
class _Ctx:
    seqs: list[_Seq]
    names: list[str]  # name code -> name
    cat_of_code: np.ndarray  # name code -> category index (of the main-stream kernels)
    cat_names: list[str]
    mixer_cat: np.ndarray  # category index -> is a mixer
    family_of_cat: list[str]
    ffn_cat: np.ndarray = None  # category index -> is an FFN part
    comm_code: np.ndarray = None  # name code -> is a communication kernel (family comm)


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


# --------------------------------------------------------------------------------------------------
# edit distances (small sequences: a segment is tens of kernels)
# --------------------------------------------------------------------------------------------------

def _sub_cost(a: int, b: int, cat: np.ndarray) -> float:
    if a == b:
        return 0.0
    return SUB_SAME if cat[a] == cat[b] else SUB_OTHER


def _budget(n: int) -> float:
    return max(1.0, EDIT_FRACTION * n)


def _edit(a: tuple, b: tuple, cat: np.ndarray) -> float:
    """Global edit distance with the costs above."""
    if min(len(a), len(b)) >= _DP_NUMPY_MIN:
        return float(_dp_last_row(a, b, cat)[-1])
    prev = [j * INDEL for j in range(len(b) + 1)]
    for i in range(1, len(a) + 1):
        cur = [i * INDEL] + [0.0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j - 1] + _sub_cost(a[i - 1], b[j - 1], cat), prev[j] + INDEL, cur[j - 1] + INDEL)
        prev = cur
    return prev[-1]


def _align_suffix(expected: tuple, seq: tuple, cat: np.ndarray) -> tuple[float, int]:
    """Align all of ``expected`` with a suffix of ``seq`` (a free prefix): (cost, index in ``seq`` where the
    aligned part starts). Ties go to the later start."""
    m, n = len(expected), len(seq)
    if min(m, n) >= _DP_NUMPY_MIN:  # D[i][j] = F[m - i][n - j] of the forward DP over both sequences reversed
        nxt = _dp_last_row(expected[::-1], seq[::-1], cat)[::-1].tolist()
    else:
        # D[i][j]: cost of aligning expected[i:] with seq[j:]
        nxt = [(n - j) * INDEL for j in range(n + 1)]  # row i = m
        for i in range(m - 1, -1, -1):
            cur = [0.0] * (n + 1)
            cur[n] = (m - i) * INDEL
            for j in range(n - 1, -1, -1):
                cur[j] = min(nxt[j + 1] + _sub_cost(expected[i], seq[j], cat), nxt[j] + INDEL, cur[j + 1] + INDEL)
            nxt = cur
    best_j = min(range(n + 1), key=lambda j: (round(nxt[j], 6), -j))
    return nxt[best_j], best_j


_DP_NUMPY_MIN = 12  # both sequences at least this long: the DP runs in numpy, one anti-diagonal at a time


def _dp_last_row(a, b, cat: np.ndarray) -> np.ndarray:
    """The last row F[len(a)][:] of the forward edit DP (F[0][q] = q, F[p][0] = p, F[p][q] = min(F[p-1][q-1] +
    sub, F[p-1][q] + INDEL, F[p][q-1] + INDEL)), computed one anti-diagonal at a time in numpy. Every cell is the
    same IEEE additions and minimum of the same operands as the Python loops above, so the floats are identical;
    an anti-diagonal's cells depend only on the two before it. F is stored row-major with rows of n + 1, so the
    cells of anti-diagonal t (p + q = t) are the positions p * n + t: one strided slice."""
    m, n = len(a), len(b)
    x = np.asarray(a, dtype=np.int64)
    y = np.asarray(b, dtype=np.int64)
    F = np.empty((m + 1) * (n + 1), dtype=np.float64)
    F2 = F.reshape(m + 1, n + 1)
    F2[0, :] = np.arange(n + 1) * INDEL
    F2[:, 0] = np.arange(m + 1) * INDEL
    S = np.zeros((m + 1) * (n + 1), dtype=np.float64)
    S2 = S.reshape(m + 1, n + 1)
    S2[1:, 1:] = np.where(x[:, None] == y[None, :], 0.0,
                          np.where(cat[x][:, None] == cat[y][None, :], SUB_SAME, SUB_OTHER))
    d1, d2 = n + 1, n + 2
    for t in range(2, m + n + 1):
        lo, hi = max(1, t - n), min(m, t - 1)
        s, e = lo * n + t, hi * n + t + 1
        cell = np.minimum(F[s - d2:e - d2:n] + S[s:e:n], F[s - d1:e - d1:n] + INDEL)
        np.minimum(cell, F[s - 1:e - 1:n] + INDEL, out=cell)
        F[s:e:n] = cell
    return F2[m].copy()


# --------------------------------------------------------------------------------------------------
# phases from the label graph
# --------------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------------
# assembling layers for one boundary kernel
# --------------------------------------------------------------------------------------------------

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


def _cost_floor(expected: tuple, seq: tuple) -> float:
    """A lower bound of _align_suffix's cost, and so of _edit's (a global alignment is one of a suffix): every
    element of ``expected`` beyond the length of ``seq`` is a gap (INDEL), and every one not matched by an equal code
    costs at least the cheapest substitution, SUB_SAME."""
    m, n = len(expected), len(seq)
    if m > n and (m - n) * INDEL > _budget(m) + 1e-6:
        return (m - n) * INDEL
    common = sum((Counter(expected) & Counter(seq)).values())
    return max((m - n) * INDEL, SUB_SAME * (m - common), 0.0)


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


# --------------------------------------------------------------------------------------------------
# the trace-level finder
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerFinding:
    """The automatic layers of a trace: one row per window of each step (head, layers, between, tail)."""

    windows: pd.DataFrame  # step, index, kind (head|layer|between|tail), layer, layer_type, start_ns, end_ns, ...
    steps: Steps
    main_stream: tuple[int, int]
    boundary: str | None  # the boundary kernel's name
    segments_per_layer: int | None
    types: pd.DataFrame  # layer_type, signature (main-stream kernel names), label, run, layers
    warnings: list[str]
    check: dict = field(default_factory=dict)  # the independent structure check (_structure_check)

    @property
    def layers(self) -> pd.DataFrame:
        w = self.windows[self.windows["kind"] == "layer"]
        return w[LAYER_COLUMNS].reset_index(drop=True)


def _context(trace: Trace, st: Steps, main: tuple[int, int], rules) -> _Ctx:
    ev = trace.events
    is_kernel = (ev["kind"] == "kernel").to_numpy()  # on the categorical's codes: no string column
    dev, stream = ev["device"].to_numpy(), ev["stream"].to_numpy()
    sel = np.flatnonzero(is_kernel & (dev == main[0]) & (stream == main[1]))
    starts = ev["start_ns"].to_numpy(np.int64)[sel]
    step = st.step_of(starts)
    codes_all = ev["name"].cat.codes.to_numpy().astype(np.int64)
    names = [str(n) for n in ev["name"].cat.categories]
    cr = resolve_categories(rules)
    cats = trace_categories(trace, cr)[sel]
    cat_names = list(cats.categories)
    cat_of_code = np.zeros(len(names) + 1, dtype=np.int64)
    cat_of_code[codes_all[sel]] = np.asarray(cats.codes, dtype=np.int64)
    mixer = np.array([cr.info(c).layer_role == "mixer" for c in cat_names], dtype=bool)
    ffn = np.array([cr.info(c).layer_role == "ffn" for c in cat_names], dtype=bool)
    fam = [cr.family(c) for c in cat_names]
    comm_cat = np.array([f == COMM_FAMILY for f in fam], dtype=bool)
    seqs = []
    dur = ev["dur_ns"].to_numpy(np.int64)[sel]
    codes_sel = codes_all[sel]
    # each step's kernels as one slice of the kernels sorted by step (stable: start order within a step), not a mask
    # over every kernel per step (O(steps x kernels))
    order = np.argsort(step, kind="stable")
    by_step = step[order]
    sid = st.table["step"].to_numpy()
    lo_all = np.searchsorted(by_step, sid, side="left")
    hi_all = np.searchsorted(by_step, sid, side="right")
    # the mixer -> FFN transitions of every step at once (_transitions over the kernels sorted by step, a pair counted
    # only within one step), then each step's share as positions in its own sequence
    cats_sorted = cat_of_code[codes_sel[order]]
    role = np.where(mixer[cats_sorted], 1, np.where(ffn[cats_sorted], 2, 0)).astype(np.int8) if order.size else \
        np.zeros(0, np.int8)
    pos = np.flatnonzero(role)
    r, ps = role[pos], by_step[pos]
    hit = np.flatnonzero((r[1:] == 2) & (r[:-1] == 1) & (ps[1:] == ps[:-1]))
    t_mix, t_ffn = pos[hit].astype(np.int64), pos[hit + 1].astype(np.int64)
    t_lo = np.searchsorted(t_ffn, lo_all, side="left")
    t_hi = np.searchsorted(t_ffn, hi_all, side="left")
    table = st.table
    for step_id, s0, s1, lo, hi, a, b in zip(table["step"].tolist(), table["start_ns"].tolist(),
                                             table["end_ns"].tolist(), lo_all.tolist(), hi_all.tolist(),
                                             t_lo.tolist(), t_hi.tolist()):
        m = order[lo:hi]
        seq = _Seq(int(step_id), int(s0), int(s1), sel[m], codes_sel[m], starts[m], dur[m])
        seq.trans_mixer, seq.trans_ffn = t_mix[a:b] - lo, t_ffn[a:b] - lo
        seqs.append(seq)
    comm_code = comm_cat[cat_of_code] if comm_cat.size else np.zeros(len(names) + 1, dtype=bool)
    return _Ctx(seqs, names, cat_of_code, cat_names, mixer, fam, ffn, comm_code)


def _transitions(is_mixer: np.ndarray, is_ffn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every mixer -> FFN transition of a kernel sequence: (position of the last mixer kernel, position of the FFN
    kernel after it), kernels of neither role skipped. A decoder layer holds exactly one (its attention, then its
    MLP or MoE), whatever kernel repeats inside it: the count per step is the independent check of the layers."""
    role = np.where(is_mixer, 1, np.where(is_ffn, 2, 0)).astype(np.int8)
    pos = np.flatnonzero(role)
    r = role[pos]
    hit = np.flatnonzero((r[1:] == 2) & (r[:-1] == 1))
    return pos[hit].astype(np.int64), pos[hit + 1].astype(np.int64)


def _stack_like(asm: _Assembly) -> bool:
    """A stack of decoder layers repeats a few layer types many times: at most max(3, a quarter of the layers per
    step) distinct types (a CNN's training step repeats, but with a new shape at every stage), of at least
    MIN_LAYER_KERNELS main-stream kernels each on average."""
    n_steps = max(len(asm.layers), 1)
    n_layers = sum(len(v) for v in asm.layers.values()) / n_steps
    n_types = len({l.sig for v in asm.layers.values() for l in v})
    kernels = [l.hi - l.lo for v in asm.layers.values() for l in v]
    if not kernels or float(np.mean(kernels)) < MIN_LAYER_KERNELS:
        return False  # one GEMM three times in a row is no stack of layers
    return n_types <= max(MAX_TYPES_FLOOR, MAX_TYPES_SHARE * n_layers)


def _measure(ctx: _Ctx, asm: _Assembly) -> _Assembly:
    """The structure of an assembly's layers: how many hold exactly one mixer -> FFN transition, and whether they
    form a decoder stack (some layer holds an attention / linear-attention / state-space kernel, and every layer
    type holds a mixer or an FFN kernel: a cut inside a layer leaves types with neither)."""
    seq_of = {s.step: s for s in ctx.seqs}
    has_mixer, has_part = {}, {}
    n = agree = 0
    for step, lays in asm.layers.items():
        seq = seq_of[step]
        lo = np.fromiter((l.lo for l in lays), dtype=np.int64, count=len(lays))
        hi = np.fromiter((l.hi for l in lays), dtype=np.int64, count=len(lays))
        inside = np.searchsorted(seq.trans_ffn, hi, side="left") - np.searchsorted(seq.trans_mixer, lo, side="left")
        n += len(lays)
        agree += int((inside == 1).sum())
        for l in lays:
            if l.sig not in has_mixer:
                cats = ctx.cat_of_code[seq.codes[l.lo:l.hi]]
                has_mixer[l.sig] = bool(ctx.mixer_cat[cats].any())
                has_part[l.sig] = has_mixer[l.sig] or bool(ctx.ffn_cat[cats].any())
    asm.layers_n, asm.agree, asm.n_types = n, agree, len(has_mixer)
    asm.decoder = bool(has_mixer) and any(has_mixer.values()) and all(has_part.values())
    return asm


def _share(asm: _Assembly) -> float:
    return asm.agree / asm.layers_n if asm.layers_n else 0.0


def _choose(ctx: _Ctx) -> _Assembly | None:
    """The boundary kernel whose layers are a decoder stack that agrees best with the structure (one mixer -> FFN
    transition per layer, counted without any boundary kernel), then (within STRUCTURE_SLACK of that agreement) a
    norm kernel covering NORM_PREFERENCE of the best coverage, then the most main-stream kernels covered, the fewest
    layer types, the kernel closest after the last GEMM before it (a decomposed norm's first kernel, not one inside
    it), the rarest kernel. A kernel that repeats inside a layer (an elementwise kernel three times per
    layer) cuts layers without an attention or an FFN part, or with no transition in most of them: it loses."""
    counts: Counter = Counter()
    for seq in ctx.seqs:
        c = Counter(seq.codes.tolist())
        for code, v in c.items():
            if v >= MIN_COUNT:
                counts[code] = max(counts[code], v)
    if not counts or not any(ctx.mixer_cat[ctx.cat_of_code[s.codes]].any() for s in ctx.seqs if s.codes.size):
        return None  # no attention, linear-attention or state-space kernel: no decoder stack
    is_norm = {tok: ctx.family_of_cat[ctx.cat_of_code[tok]] == NORM_FAMILY for tok in counts}
    total = sum(seq.codes.size for seq in ctx.seqs)

    def build(tokens) -> list[_Assembly]:
        out = []
        for tok in tokens:
            a = _assemble(ctx, tok)
            if a.covered and _stack_like(a) and _measure(ctx, a).decoder:
                out.append(a)
        return out

    results = build(tok for tok in sorted(counts) if is_norm[tok])
    # a norm boundary covering 90 % of all main-stream kernels, every layer holding one transition, wins whatever
    # the others cover: skip them
    if not any(a.covered >= NORM_PREFERENCE * total and _share(a) >= 1.0 - STRUCTURE_SLACK for a in results):
        results += build(tok for tok in sorted(counts) if not is_norm[tok])
    if not results:
        return None
    top = max(_share(a) for a in results)
    results = [a for a in results if _share(a) >= top - STRUCTURE_SLACK]

    gemm_cat = np.array([f == GEMM_FAMILY for f in ctx.family_of_cat], dtype=bool)
    gemm_pos = {s.step: np.flatnonzero(gemm_cat[ctx.cat_of_code[s.codes]]) if gemm_cat.size else
                np.zeros(0, np.int64) for s in ctx.seqs}

    def after_gemm(a: _Assembly) -> float:
        """Median main-stream kernels between a layer's first kernel and the last GEMM before it: a layer starts
        right after the previous layer's last GEMM (and its residual add), not inside its own input norm."""
        d = []
        for step, lays in a.layers.items():
            g = gemm_pos[step]
            lo = np.array([l.lo for l in lays], dtype=np.int64)
            k = np.searchsorted(g, lo) - 1
            d.extend((lo - g[np.clip(k, 0, None)])[k >= 0].tolist() if g.size else [])
        return float(np.median(d)) if d else math.inf

    def key(a: _Assembly):
        return (a.covered, -a.n_types, -after_gemm(a), -counts[a.token], -a.token)

    best = max(results, key=key)
    norms = [a for a in results if is_norm[a.token] and a.covered >= NORM_PREFERENCE * best.covered]
    if norms:
        best = max(norms, key=key)
    return best


CHECK_COMPARED = "layers vs attention -> MLP/MoE transitions per step, one in every layer"


def no_stack_message(trace: Trace, main: tuple[int, int]) -> str:
    return (f"{trace.path}: no decoder stack on the main stream (device {main[0]}, stream {main[1]}): no kernel"
            " sequence repeats as a few layer types that hold attention, linear-attention or state-space kernels"
            " (attention run as plain matmul and softmax kernels is not recognised)")


def _structure_check(ctx: _Ctx, asm: _Assembly | None) -> dict:
    """The layers against the structure counted without them: per step the mixer -> FFN transitions on the main
    stream (one per decoder layer) and the layers found; ``agrees`` when every step has as many layers as
    transitions and every layer holds exactly one."""
    trans = np.array([s.trans_mixer.size for s in ctx.seqs], dtype=np.int64)
    found = np.array([len(asm.layers.get(s.step, [])) if asm is not None else 0 for s in ctx.seqs], dtype=np.int64)
    one = asm.agree if asm is not None else 0
    total = int(found.sum())
    agrees = bool(total > 0 and np.array_equal(trans, found) and one == total)
    return {"compared": CHECK_COMPARED,
            "layers_per_step": median_ns(found) if found.size else 0,
            "transitions_per_step": median_ns(trans) if trans.size else 0,
            "layers_with_one_transition": one, "layers": total,
            "steps_disagreeing": int((trans != found).sum()),
            "agrees": agrees}


def find_layers(trace: Trace, *, steps=None, step_name: str | None = None, min_step_ns: int | None = None,
                categories=None, main: tuple[int, int] | None = None) -> LayerFinding:
    """The automatic layers of every step (see the module docstring); raises MissingDataError without kernels."""
    st = get_steps(trace, steps, step_name=step_name, min_step_ns=min_step_ns)
    ev = trace.events
    if main is None:
        from ...annotation import Annotation
        from ...annotation.blocks import resolve_main_stream

        main = resolve_main_stream(ev, Annotation(name="auto"))
    cr = resolve_categories(categories)
    # once per trace, steps, main stream and categories (report, findings and suggest may each ask)
    key = ("find_layers", id(st), main, cr.sources)
    hit = trace.derived.get(key)
    if hit is not None and hit[0] is st and hit[1] == len(ev):  # the entry holds st, so its id is not reused
        return hit[2]
    found = _find_layers(trace, st, main, cr)
    trace.derived[key] = (st, len(ev), found)
    return found


def _find_layers(trace: Trace, st: Steps, main: tuple[int, int], cr) -> LayerFinding:
    ctx = _context(trace, st, main, cr)
    asm = _choose(ctx)
    warnings = list(st.warnings)
    if asm is None:
        warnings.append(no_stack_message(trace, main))
    windows, types = _windows(trace, ctx, asm, cr)
    k = None
    if asm is not None and asm.k:
        ks = [v for v in asm.k.values() if v]
        k = Counter(ks).most_common(1)[0][0] if ks else None
    boundary = ctx.names[asm.token] if asm is not None else None
    check = _structure_check(ctx, asm)
    if asm is not None and not check["agrees"]:
        warnings.append(f"{trace.path}: the automatic layers ({check['layers_per_step']} per step) are not confirmed"
                        f" by the structure ({check['transitions_per_step']} attention -> MLP/MoE transitions per"
                        " step on the main stream); check them before you rely on them")
    return LayerFinding(windows, st, main, boundary, k, types, warnings, check)


def _windows(trace: Trace, ctx: _Ctx, asm: _Assembly | None, cr) -> tuple[pd.DataFrame, pd.DataFrame]:
    ev = trace.events
    ks = np.flatnonzero((ev["kind"] == "kernel").to_numpy())
    k_start = ev["start_ns"].to_numpy(np.int64)[ks]
    k_dur = ev["dur_ns"].to_numpy(np.int64)[ks]
    rows = []
    sigs: dict[tuple, int] = {}
    inst: dict[int, list] = defaultdict(list)
    for seq in ctx.seqs:
        layers = asm.layers.get(seq.step, []) if asm is not None else []
        n = seq.codes.size

        def at(i: int, seq=seq, n=n) -> int:
            return int(seq.starts[i]) if i < n else seq.end_ns

        def row_at(i: int, seq=seq, n=n) -> int:
            return int(seq.rows[i]) if i < n else -1

        cursor, pos = seq.start_ns, 0
        for li, lay in enumerate(layers):
            s = at(lay.lo)
            if lay.lo > pos or (li == 0 and s > cursor):
                kind_w = HEAD if li == 0 else BETWEEN
                rows.append([seq.step, kind_w, -1, kind_w, cursor, s, None, row_at(pos)])
            e = at(lay.hi)
            tid = sigs.setdefault(_type_key(ctx, asm, lay.sig), len(sigs))
            rows.append([seq.step, "layer", li, tid, s, e, lay, row_at(lay.lo)])
            inst[tid].append((seq, lay))
            cursor, pos = e, lay.hi
        if not layers:
            rows.append([seq.step, HEAD, -1, HEAD, seq.start_ns, seq.end_ns, None, row_at(0)])
        elif pos < n or cursor < seq.end_ns:
            rows.append([seq.step, TAIL, -1, TAIL, cursor, seq.end_ns, None, row_at(pos)])
    names = _type_names(ctx, sigs, inst, asm, cr)
    split = _duration_split(ctx, inst, names)
    out = pd.DataFrame(rows, columns=["step", "kind", "layer", "type_id", "start_ns", "end_ns", "obj",
                                      "first_kernel"])
    lt = []
    for r in out.itertuples(index=False):
        if r.kind != "layer":
            lt.append(r.kind)
        else:
            lt.append(split.get(id(r.obj), names[r.type_id]))
    out["layer_type"] = lt
    # kernels of any stream that start in each window (the annotation engine's rule)
    ws, we = out["start_ns"].to_numpy(np.int64), out["end_ns"].to_numpy(np.int64)
    order = np.argsort(ws, kind="stable")
    w_of = iv.window_of(k_start, ws[order], we[order])
    inside = w_of >= 0
    idx = order[w_of[inside]]
    out["kernels"] = np.bincount(idx, minlength=len(out)).astype(np.int64)
    out["kernel_ns"] = np.bincount(idx, weights=k_dur[inside], minlength=len(out)).astype(np.int64)
    out["base_type"] = [names[t] if k == "layer" else k for k, t in zip(out["kind"], out["type_id"])]
    out["exact"] = [bool(o.exact) if o is not None else True for o in out["obj"]]
    out["note"] = [o.note if o is not None else "" for o in out["obj"]]
    out["main_kernels"] = [o.hi - o.lo if o is not None else 0 for o in out["obj"]]
    out = out.drop(columns=["obj", "type_id"])
    types = _type_table(ctx, sigs, inst, names, split)
    return out[["step", "kind", "layer", "layer_type", "base_type", "start_ns", "end_ns", "kernels", "kernel_ns",
                "main_kernels", "exact", "note", "first_kernel"]], types


# --------------------------------------------------------------------------------------------------
# names and duration clusters
# --------------------------------------------------------------------------------------------------

def _type_key(ctx: _Ctx, asm: _Assembly, sig: tuple) -> tuple:
    """What makes a layer type: the layer's main-stream kernel names (its segment labels in order), communication
    kernels left out — a layer that ends with a collective (the last layer before the logits AllGather, a TP
    all-reduce one layer has and another not) keeps the type of the layers it otherwise equals."""
    return tuple(c for lid in sig for c in asm.label_seq[lid] if not ctx.comm_code[c])


def _identifier(name: str) -> str:
    """The function's last identifier in a kernel name (demangled when it is an Itanium-mangled name), without
    template arguments or parameters."""
    s = name.strip()
    if s.startswith("_Z"):
        parts, i = [], 3 if s.startswith("_ZN") else 2
        while i < len(s) and s[i].isdigit():
            j = i
            while j < len(s) and s[j].isdigit():
                j += 1
            n = int(s[i:j])
            parts.append(s[j:j + n])
            i = j + n
        if parts and parts[-1]:
            return parts[-1]
    s = re.sub(r"^(void|static|__global__)\s+", "", s)
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):
        if ch == "<":
            if depth == 0:
                cut = min(cut, i)
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0:
            cut = min(cut, i)
            break
    return s[:cut].split("::")[-1] or name


def short_name(name: str, width: int = 32) -> str:
    """A readable stem of a kernel name (see _identifier), at most ``width`` characters."""
    return _identifier(name)[:width]


def _tokens(ident: str) -> list[str]:
    return [t for t in re.findall(r"[A-Z]+[a-z0-9]*|[a-z0-9]+", ident) if t]


def _distinct_labels(kernels: list[str], width: int = 32) -> list[str]:
    """Labels that tell kernels apart: their short names, or, where those collide or are cut, the tokens of each
    identifier that the others lack ('' when it has none)."""
    shorts = [short_name(k, width) for k in kernels]
    if len(set(shorts)) == len(shorts) and all(len(_identifier(k)) <= width for k in kernels):
        return shorts
    toks = [_tokens(_identifier(k)) for k in kernels]
    out = []
    for i, t in enumerate(toks):
        others = set().union(*(set(x) for j, x in enumerate(toks) if j != i))
        out.append("".join(x for x in t if x not in others)[:width])
    return out


def _type_names(ctx: _Ctx, sigs: dict, inst: dict, asm: _Assembly | None, cr) -> dict[int, str]:
    if not sigs:
        return {}
    rank = {c: i for i, c in enumerate(cr.order)}
    parts_of: dict[int, list[str]] = {}
    kernels_of: dict[int, dict[str, float]] = {}
    for tid in sigs.values():
        seq, lay = inst[tid][0]
        cats = [ctx.cat_names[c] for c in ctx.cat_of_code[seq.codes[lay.lo:lay.hi]]]
        mixers = sorted({c for c in cats if cr.info(c).layer_role == "mixer" and cr.info(c).layer_label},
                        key=lambda c: rank.get(c, 1 << 30))
        mix_labels = list(dict.fromkeys(cr.info(c).layer_label for c in mixers))
        ffn = sorted({c for c in cats if cr.info(c).layer_role == "ffn" and cr.info(c).layer_label},
                     key=lambda c: rank.get(c, 1 << 30))
        parts_of[tid] = ["&".join(mix_labels) if mix_labels else "", cr.info(ffn[0]).layer_label if ffn else ""]
        mean: dict[str, list] = defaultdict(list)
        for s2, l2 in inst[tid]:
            for code, d in zip(s2.codes[l2.lo:l2.hi].tolist(), s2.durs[l2.lo:l2.hi].tolist()):
                mean[ctx.names[code]].append(d)
        kernels_of[tid] = {n: float(np.mean(v)) for n, v in mean.items()}

    def join(parts: list[str]) -> str:
        return "+".join(p for p in parts if p) or "layer"

    draft = _draft_types(inst)
    prefix = {tid: ("draft:" if tid in draft else "") for tid in inst}
    base = {tid: prefix[tid] + join(parts_of[tid]) for tid in sigs.values()}
    names = dict(base)
    by_name: dict[str, list[int]] = defaultdict(list)
    for tid, n in base.items():
        by_name[n].append(tid)
    for tids in by_name.values():
        if len(tids) < 2:
            continue
        tops = []
        for tid in tids:  # the most expensive kernel this type has and another type of the same name lacks
            others = set().union(*(set(kernels_of[o]) for o in tids if o != tid))
            own = {k: v for k, v in kernels_of[tid].items() if k not in others}
            tops.append(max(own, key=own.get) if own else "")
        labels = _distinct_labels([t for t in tops if t])
        it = iter(labels)
        for tid, top in zip(tids, tops):
            label = next(it) if top else ""
            if not label:
                continue
            role = cr.info(ctx.cat_names[ctx.cat_of_code[ctx.names.index(top)]]).layer_role
            parts = list(parts_of[tid])
            slot = 0 if role == "mixer" or not parts[1] else 1 if role == "ffn" else None
            if slot is None:
                names[tid] = f"{base[tid]}:{label}"
            else:
                parts[slot] = f"{parts[slot] or 'layer'}:{label}"
                names[tid] = prefix[tid] + join(parts)
        seen: Counter = Counter()
        for tid in sorted(tids):
            seen[names[tid]] += 1
            if seen[names[tid]] > 1:
                names[tid] = f"{names[tid]}#{seen[names[tid]]}"
    return names


def _draft_types(inst: dict) -> set[int]:
    """Types of a draft model's layers, decided over the whole trace: the target model's types are those of the
    longest run of layers of any step; a draft type never shares a run with one of them and follows a run of them in
    some step. A step whose target layers went unrecorded (only the draft run left) types its draft layers as the
    other steps do."""
    run_types: dict[tuple, set] = defaultdict(set)
    run_size: Counter = Counter()
    for tid, lst in inst.items():
        for seq, lay in lst:
            run_types[(seq.step, lay.run)].add(tid)
            run_size[(seq.step, lay.run)] += 1
    if not run_size:
        return set()
    target = run_types[max(run_size, key=lambda r: (run_size[r], -r[0], -r[1]))]
    with_target = set().union(*(t for t in run_types.values() if t & target))
    target_runs = [r for r, t in run_types.items() if t & target]
    later = set().union(*(t for (step, run), t in run_types.items()
                          if any(s == step and r < run for s, r in target_runs)))
    return {tid for tid in inst if tid not in with_target and tid in later}


def _duration_split(ctx: _Ctx, inst: dict, names: dict[int, str]) -> dict[int, str]:
    """Layer object id -> split type name, for types whose layers form two clear duration clusters."""
    out: dict[int, str] = {}
    for tid, lst in inst.items():
        exact = [(s, l) for s, l in lst if l.exact]
        n = len(exact)
        if n < 4:
            continue
        lens = Counter(l.hi - l.lo for _, l in exact)
        width = lens.most_common(1)[0][0]
        rows = [(s, l) for s, l in exact if l.hi - l.lo == width]
        if len(rows) < 4:
            continue
        mat = np.log(np.maximum(np.array([s.durs[l.lo:l.hi] for s, l in rows], dtype=np.float64), 1.0))
        best = None
        ref_seq, ref_lay = rows[0]
        mixer_pos = ctx.mixer_cat[ctx.cat_of_code[ref_seq.codes[ref_lay.lo:ref_lay.hi]]]
        for p in range(width):
            if not mixer_pos[p]:  # only attention-like kernels: a sliding window changes their time, while
                continue          # expert GEMMs vary with routing and are no type of their own
            x = np.sort(mat[:, p])
            gaps = np.diff(x)
            i = int(np.argmax(gaps))
            lo, hi = x[:i + 1], x[i + 1:]
            need = max(2, int(math.ceil(SPLIT_MIN_SHARE * len(x))))
            if lo.size < need or hi.size < need or gaps[i] < math.log(SPLIT_MIN_RATIO):
                continue
            spread = max(float(np.ptp(lo)), float(np.ptp(hi)), 0.01)
            score = gaps[i] / spread
            if score >= SPLIT_SEPARATION and (best is None or score > best[0]):
                best = (score, p, float((x[i] + x[i + 1]) / 2))
        if best is None:
            continue
        _, p, thr = best
        code = rows[0][0].codes[rows[0][1].lo + p]
        for s, l in lst:
            d = _duration_at(s, l, code, p, rows[0])
            if d is None:
                continue
            out[id(l)] = f"{names[tid]}/{'fast' if math.log(max(d, 1)) <= thr else 'slow'}"
    return out


def _duration_at(seq: _Seq, lay: _Layer, code: int, pos: int, ref) -> int | None:
    """The duration of the kernel at the split position in a layer (by position, else the same name's
    occurrence with the same ordinal)."""
    if lay.hi - lay.lo == ref[1].hi - ref[1].lo and seq.codes[lay.lo + pos] == code:
        return int(seq.durs[lay.lo + pos])
    rseq, rlay = ref
    ordinal = int((rseq.codes[rlay.lo:rlay.lo + pos] == code).sum())
    hits = np.flatnonzero(seq.codes[lay.lo:lay.hi] == code)
    return int(seq.durs[lay.lo + hits[ordinal]]) if ordinal < hits.size else None


def _type_table(ctx: _Ctx, sigs: dict, inst: dict, names: dict[int, str], split: dict[int, str]) -> pd.DataFrame:
    """One row per layer type: its name, its main-stream kernel names (of its first layer), runs and layer count."""
    rows = []
    for tid in sigs.values():
        lst = inst[tid]
        split_names = sorted({split.get(id(l), names[tid]) for _, l in lst})
        seq, lay = lst[0]
        for t in split_names:
            mine = [l for _, l in lst if split.get(id(l), names[tid]) == t]
            rows.append({"layer_type": t, "base_type": names[tid], "layers": len(mine),
                         "runs": sorted({l.run for l in mine}),
                         "signature": [ctx.names[c] for c in seq.codes[lay.lo:lay.hi].tolist()]})
    return pd.DataFrame(rows, columns=["layer_type", "base_type", "layers", "runs", "signature"])


# --------------------------------------------------------------------------------------------------
# `tracekit layers`
# --------------------------------------------------------------------------------------------------

def layer_windows_by_event(events: pd.DataFrame, windows: pd.DataFrame) -> pd.Series:
    """Each event's window type (a layer type, head, between, tail) by its start, <NA> outside every window."""
    w = windows.sort_values("start_ns", kind="stable")
    k = iv.window_of(events["start_ns"].to_numpy(np.int64), w["start_ns"].to_numpy(np.int64),
                     w["end_ns"].to_numpy(np.int64))
    return pd.Series(categorical_at(w["layer_type"].to_numpy(dtype=object), k), index=events.index)


def automatic_note(result: Result) -> str:
    """What `report` says when it used the automatic layers (no annotation)."""
    s = result.summary
    return (f"layers found automatically ({s['layers_per_step']} per step; types {', '.join(s['types']) or 'none'})"
            " — `tracekit suggest` writes an annotation to name them")


def layers(trace: Trace, *, steps=None, step_name: str | None = None, min_step_ns: int | None = None,
           categories=None, missing_ok: bool = False) -> Result:
    """`tracekit layers`: per step the decoder layers found automatically, their types, and the one-step table.

    ``tables.layers``: one row per layer (LAYER_COLUMNS); ``tables.layer_types``: per step and type the layer
    count, the kernel time of its layers (all streams, exceeding the wall where streams overlap) and their wall
    time (the windows' durations; head, between and tail rows make the wall add up to the step's);
    ``tables.one_step``: every ns of each step charged to one category and to one layer type
    (tracekit.analyses.time.onestep); ``tables.windows``: every window of each step. ``summary.check``: the layers
    against the structure counted without them (_structure_check).

    A trace without a decoder stack (a CNN, a recommender's training step) raises MissingDataError (exit 4) in one
    sentence; with ``missing_ok`` (``report`` on any trace) the Result has no layers and says so in a warning.
    """
    cr = resolve_categories(categories)
    found = find_layers(trace, steps=steps, step_name=step_name, min_step_ns=min_step_ns, categories=cr)
    if found.boundary is None and not missing_ok:
        raise MissingDataError(no_stack_message(trace, found.main_stream))
    st = found.steps
    win = found.windows
    lay = found.layers
    per_type = (win.assign(wall_ns=win["end_ns"] - win["start_ns"])
                .groupby(["step", "layer_type"], sort=True)
                .agg(layers=("kind", "size"), kernel_ns=("kernel_ns", "sum"), wall_ns=("wall_ns", "sum"))
                .reset_index())
    per_type = per_type[TYPE_COLUMNS].astype({"layers": np.int64, "kernel_ns": np.int64, "wall_ns": np.int64})
    ev = trace.events
    evc = ev.assign(category=trace_categories(trace, cr), layer_type=layer_windows_by_event(ev, win))
    one = one_step_tables(evc, st, by=("category", "layer_type"), main=found.main_stream)
    counts = lay.groupby("step").size()
    layer_types = sorted(set(lay["layer_type"]))
    types = {}
    for t in layer_types:
        per = lay[lay["layer_type"] == t].groupby("step").size().reindex(st.table["step"], fill_value=0)
        types[t] = median_ns(per.to_numpy())
    head = win[win["kind"] == HEAD].groupby("step")["kernels"].sum().reindex(st.table["step"], fill_value=0)
    tail = win[win["kind"] == TAIL].groupby("step")["kernels"].sum().reindex(st.table["step"], fill_value=0)
    between = win[win["kind"] == BETWEEN].groupby("step")["kernels"].sum().reindex(st.table["step"], fill_value=0)
    period = win.loc[win["kind"] == "layer", "main_kernels"].to_numpy()
    summary = {
        "steps": int(len(st.table)),
        "layers_per_step": median_ns(counts.reindex(st.table["step"], fill_value=0).to_numpy()) if len(st.table)
        else 0,
        "types": types,
        "head_kernels": median_ns(head.to_numpy()),
        "tail_kernels": median_ns(tail.to_numpy()),
        "period_kernels": median_ns(period) if period.size else None,
        "between_kernels": median_ns(between.to_numpy()),
        "boundary_kernel": found.boundary,
        "segments_per_layer": found.segments_per_layer,
        "main_stream": found.main_stream[1],
        "median_step": median_step(st),
        "inexact_layers": int((~win.loc[win["kind"] == "layer", "exact"]).sum()),
        "check": found.check,
    }
    warnings = merge_warnings(trace.report.warnings, found.warnings)
    return Result(command="layers", inputs=[trace_input(trace)],
                  params={**step_params(st), "categories": list(cr.sources[:-1]) or None},
                  summary=summary,
                  tables={"layers": lay, "layer_types": per_type, "one_step": one,
                          "windows": win.drop(columns=["first_kernel"])},
                  warnings=warnings)
