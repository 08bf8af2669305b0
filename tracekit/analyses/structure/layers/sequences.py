"""Automatic layers: the per-step kernel sequences of the main stream, read once per trace (``read_context``).

Each step's main-stream kernels in start order (positions, name codes, starts, durations), the name -> category
tables the other steps of the finder look up, and the structure counted without any boundary kernel: every mixer ->
FFN transition of the step (the last attention-like kernel before an MLP/MoE kernel)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....trace import Trace
from ...categories import resolve_categories, trace_categories
from ...steps.resolve import Steps

COMM_FAMILY = "comm"
HASH_BASE = 0x9E3779B97F4A7C15  # odd: invertible mod 2**64
MISMATCH_RUNS = 16  # a shift holding at least 1/16 of the kernels compared gets its mismatch positions (at most 16)
MISMATCH_DENSE = 8  # ... kept only when at most 1/8 of the positions mismatch
MISMATCH_KEPT = 32  # shifts remembered per trace, at most (each at most n/8 positions)


@dataclass
class Seq:
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


@dataclass
class Flat:
    """Every step's main-stream kernels end to end (step i holds positions lo[i]:lo[i + 1]), for the assembly's
    vectorised passes: their name codes (and those codes' bytes, to label segments), the running sum of the mixer
    kernels' durations (0 first: a segment's mixer time is one difference) and each name's positions."""

    codes: np.ndarray
    lo: np.ndarray  # len(seqs) + 1 offsets
    raw: bytes  # codes.tobytes()
    mixer_cumsum: np.ndarray
    by_code: np.ndarray  # positions sorted by name code (stable: in order within a code)
    code_lo: np.ndarray  # by_code[code_lo[c]:code_lo[c + 1]] are the positions of code c
    # a polynomial hash of every run of codes (mod 2**64): the hash of codes[a:b] is (h_pre[b] - h_pre[a]) * h_pow[a]
    h_pre: np.ndarray = None  # uint64, n + 1: running sum of (code + 1) * HASH_BASE**-i
    h_pow: np.ndarray = None  # uint64, n + 1: HASH_BASE**i
    index: np.ndarray = None  # arange(n): each kernel's own position
    small_codes: np.ndarray = None  # the codes in the narrowest integer type that holds them (compared faster)
    roles: object = None  # the transitions and role counts in flat positions (boundary._roles), when made
    mismatch: dict = None  # shift d -> the positions x where codes[x] != codes[x + d] (Flat.equal), None: dense

    def equal(self, lo: np.ndarray, size: np.ndarray, d: np.ndarray) -> bool:
        """Whether every run codes[lo:lo + size] equals codes[lo - d:lo - d + size] (d > 0). Runs at a common shift
        (a repeating layer's period: a few shifts cover most runs) count the shift's mismatches between two searches
        in its mismatch positions, made once per trace and shift; the others compare kernel by kernel."""
        if not lo.size:
            return True
        if d.min() == d.max():  # one shift (a step of identical layers, or one step): no grouping
            mis = self._mismatch(int(d[0])) if int(size.sum()) * MISMATCH_RUNS >= self.codes.size else None
            if mis is not None:
                x = lo - int(d[0])
                return not (np.searchsorted(mis, x + size) != np.searchsorted(mis, x)).any()
        shifts, inv = np.unique(d, return_inverse=True)
        inv = inv.reshape(-1)
        weight = np.bincount(inv, weights=size)
        rest = np.ones(lo.size, dtype=bool)
        for i in np.flatnonzero(weight * MISMATCH_RUNS >= self.codes.size)[:MISMATCH_RUNS].tolist():
            mis = self._mismatch(int(shifts[i]))
            if mis is None:
                continue
            sel = np.flatnonzero(inv == i)
            x = lo[sel] - int(shifts[i])
            if (np.searchsorted(mis, x + size[sel]) != np.searchsorted(mis, x)).any():
                return False
            rest[sel] = False
        lo, size, d = lo[rest], size[rest], d[rest]
        if not lo.size:
            return True
        total = int(size.sum())  # at most n for disjoint runs (segments)
        step = self.index[:total] if total <= self.index.size else np.arange(total, dtype=np.int64)
        at = np.repeat(lo - np.cumsum(size) + size, size) + step  # each kernel of the runs
        small = self.small_codes
        return bool(np.array_equal(small.take(at), small.take(at - np.repeat(d, size))))

    def _mismatch(self, d: int):
        if self.mismatch is None:
            self.mismatch = {}
        if d not in self.mismatch:
            if len(self.mismatch) >= MISMATCH_KEPT:
                return None
            c = self.small_codes
            mis = np.flatnonzero(c[d:] != c[:-d]) if d < c.size else np.zeros(0, np.int64)
            self.mismatch[d] = mis if mis.size * MISMATCH_DENSE <= c.size else None
        return self.mismatch[d]

    def positions(self, code: int) -> np.ndarray:
        return self.by_code[self.code_lo[code] : self.code_lo[code + 1]]


@dataclass
class Context:
    seqs: list[Seq]
    names: list[str]  # name code -> name
    cat_of_code: np.ndarray  # name code -> category index (of the main-stream kernels)
    cat_names: list[str]
    mixer_cat: np.ndarray  # category index -> is a mixer
    family_of_cat: list[str]
    ffn_cat: np.ndarray = None  # category index -> is an FFN part
    comm_code: np.ndarray = None  # name code -> is a communication kernel (family comm)
    flat: Flat = None
    modules: np.ndarray = None  # event row -> the nn.Module path of its op ("/"-joined Class_i), None: unknown


def read_context(trace: Trace, st: Steps, main: tuple[int, int], rules) -> Context:
    ev = trace.events
    is_kernel = (ev["kind"] == "kernel").to_numpy()  # on the categorical's codes: no string column
    dev, stream = ev["device"].to_numpy(), ev["stream"].to_numpy()
    sel = np.flatnonzero(is_kernel & (dev == main[0]) & (stream == main[1]))
    starts = ev["start_ns"].to_numpy(np.int64)[sel]
    step = st.step_of(starts)
    codes_sel = ev["name"].cat.codes.to_numpy()[sel].astype(np.int64)  # the main stream's only
    names = [str(n) for n in ev["name"].cat.categories]
    cr = resolve_categories(rules)
    cats = trace_categories(trace, cr)[sel]
    cat_names = list(cats.categories)
    cat_of_code = np.zeros(len(names) + 1, dtype=np.int64)
    cat_of_code[codes_sel] = np.asarray(cats.codes, dtype=np.int64)
    mixer = np.array([cr.info(c).layer_role == "mixer" for c in cat_names], dtype=bool)
    ffn = np.array([cr.info(c).layer_role == "ffn" for c in cat_names], dtype=bool)
    fam = [cr.family(c) for c in cat_names]
    comm_cat = np.array([f == COMM_FAMILY for f in fam], dtype=bool)
    seqs = []
    dur = ev["dur_ns"].to_numpy(np.int64)[sel]
    # each step's kernels as one slice of the kernels sorted by step (stable: start order within a step), not a mask
    # over every kernel per step (O(steps x kernels))
    order = _stable_order(step)
    by_step = step[order]
    sid = st.table["step"].to_numpy()
    lo_all = np.searchsorted(by_step, sid, side="left")
    hi_all = np.searchsorted(by_step, sid, side="right")
    # the mixer -> FFN transitions of every step at once (the last mixer kernel before an FFN kernel, kernels of
    # neither role skipped, over the kernels sorted by step, a pair counted only within one step), then each step's
    # share as positions in its own sequence
    cats_sorted = cat_of_code[codes_sel[order]]
    role = (
        np.where(mixer[cats_sorted], 1, np.where(ffn[cats_sorted], 2, 0)).astype(np.int8)
        if order.size
        else np.zeros(0, np.int8)
    )
    pos = np.flatnonzero(role)
    r, ps = role[pos], by_step[pos]
    hit = np.flatnonzero((r[1:] == 2) & (r[:-1] == 1) & (ps[1:] == ps[:-1]))
    t_mix, t_ffn = pos[hit].astype(np.int64), pos[hit + 1].astype(np.int64)
    t_lo = np.searchsorted(t_ffn, lo_all, side="left")
    t_hi = np.searchsorted(t_ffn, hi_all, side="left")
    table = st.table
    for step_id, s0, s1, lo, hi, a, b in zip(
        table["step"].tolist(),
        table["start_ns"].tolist(),
        table["end_ns"].tolist(),
        lo_all.tolist(),
        hi_all.tolist(),
        t_lo.tolist(),
        t_hi.tolist(),
    ):
        m = order[lo:hi]
        seq = Seq(int(step_id), int(s0), int(s1), sel[m], codes_sel[m], starts[m], dur[m])
        seq.trans_mixer, seq.trans_ffn = t_mix[a:b] - lo, t_ffn[a:b] - lo
        seqs.append(seq)
    comm_code = comm_cat[cat_of_code] if comm_cat.size else np.zeros(len(names) + 1, dtype=bool)
    flat = _flatten(seqs, len(names) + 1, mixer[cat_of_code] if mixer.size else np.zeros(len(names) + 1, bool))
    ctx = Context(seqs, names, cat_of_code, cat_names, mixer, fam, ffn, comm_code, flat)
    ctx.modules = kernel_modules(trace)
    return ctx


def kernel_modules(trace: Trace) -> np.ndarray | None:
    """Event row -> the module path of its kernel where the graph-replay attribution knows one (a capture's
    ``nn.Module`` scopes, a graph-annotation side file: docs/replay.md); None when no kernel of the trace has one."""
    from ...hardware.kernel_ops import kernel_ops
    from ...hardware.replay_attribution import replayed_modules

    ko = kernel_ops(trace)
    if not ko.replay.pos.size:
        return None
    mods = replayed_modules(ko.replay)
    if not any(m is not None for m in mods):
        return None
    out = np.full(len(trace.events), None, dtype=object)
    out[ko.krow[ko.replay.pos]] = mods
    return out


def _flatten(seqs: list[Seq], n_codes: int, mixer_code: np.ndarray) -> Flat:
    """The steps' sequences end to end (Flat)."""
    sizes = np.array([s.codes.size for s in seqs], dtype=np.int64)
    lo = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    codes = np.concatenate([s.codes for s in seqs]).astype(np.int64) if seqs else np.zeros(0, np.int64)
    durs = np.concatenate([s.durs for s in seqs]).astype(np.int64) if seqs else np.zeros(0, np.int64)
    mixer_cumsum = np.concatenate([[0], np.cumsum(np.where(mixer_code[codes], durs, 0), dtype=np.int64)])
    by_code = _stable_order(codes)
    code_lo = np.searchsorted(codes[by_code], np.arange(n_codes + 1), side="left")
    h_pre, h_pow = _prefix_hash(codes)
    return Flat(
        codes,
        lo,
        codes.tobytes(),
        mixer_cumsum.astype(np.int64),
        by_code,
        code_lo,
        h_pre,
        h_pow,
        np.arange(codes.size, dtype=np.int64),
        codes.astype(np.min_scalar_type(-n_codes)),
    )


def _stable_order(x: np.ndarray) -> np.ndarray:
    """``np.argsort(x, kind="stable")`` of small integers: taken in the narrowest type that holds them (the same
    order; numpy sorts 16-bit integers by a radix sort, wider ones by a merge sort)."""
    if x.size and -(1 << 15) <= int(x.min()) and int(x.max()) < 1 << 15:
        return np.argsort(x.astype(np.int16), kind="stable")
    return np.argsort(x, kind="stable")


def _prefix_hash(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The running sums that hash any slice of ``codes`` in O(1) (Flat.h_pre, h_pow), in uint64 arithmetic that
    wraps mod 2**64 (numpy's integer arrays wrap silently)."""
    n = codes.size
    one = np.ones(1, np.uint64)
    h_pow = np.cumprod(np.concatenate([one, np.full(n, HASH_BASE, np.uint64)]), dtype=np.uint64)
    inv = np.cumprod(
        np.concatenate([one, np.full(max(n - 1, 0), pow(HASH_BASE, -1, 1 << 64), np.uint64)]), dtype=np.uint64
    )
    terms = (codes.astype(np.uint64) + np.uint64(1)) * inv[:n]
    h_pre = np.concatenate([np.zeros(1, np.uint64), np.cumsum(terms, dtype=np.uint64)])
    return h_pre, h_pow
