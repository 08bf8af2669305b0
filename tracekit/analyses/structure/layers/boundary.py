"""Automatic layers: choose the boundary kernel (step 4 of docs/layers.md) and check the layers against the structure.

Every candidate's assembly is measured (``_measure``: layers holding one mixer -> FFN transition, a decoder stack or
not); ``choose_boundary`` keeps the decoder stacks that agree best with the structure and breaks ties by norm kernels,
coverage, fewer types, the distance after the last GEMM, rarity. A candidate whose phases already show that it
cannot change that answer (``_Sure``: it covers less than a stack found so far and cannot agree better) is not
assembled. ``structure_check`` is the ``check`` of the result."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ...steps.resolve import median_ns
from .alignment import EDIT_FRACTION
from .assembly import Assembly, assemble
from .segments import K_MAX, Phased, phased_segments
from .sequences import Context

MIN_COUNT = 3  # a boundary candidate occurs at least this often in some step
MIN_LAYER_KERNELS = 3  # a layer has at least this many main-stream kernels on average
NORM_PREFERENCE = 0.9  # a norm boundary wins when it covers at least this share of the best coverage
MAX_TYPES_FLOOR, MAX_TYPES_SHARE = 3, 0.25  # a stack of layers: at most this many distinct types (_stack_like)
NORM_FAMILY = "norm"
GEMM_FAMILY = "gemm"
STRUCTURE_SLACK = 0.05  # a boundary whose layers agree with the structure this much less than the best is out


def _stack_like(asm: Assembly) -> bool:
    """A stack of decoder layers repeats a few layer types many times: at most max(3, a quarter of the layers per
    step) distinct types (a CNN's training step repeats, but with a new shape at every stage), of at least
    MIN_LAYER_KERNELS main-stream kernels each on average."""
    t = asm.table
    n_steps = max(len(set(asm.step_ids)), 1)
    n_layers = t.lo.size / n_steps
    n_types = t.sig_first.size
    # the mean layer size as np.mean would give it: covered (the exact integer sum) over the count
    if not t.lo.size or asm.covered / t.lo.size < MIN_LAYER_KERNELS:
        return False  # one GEMM three times in a row is no stack of layers
    return n_types <= max(MAX_TYPES_FLOOR, MAX_TYPES_SHARE * n_layers)


def _measure(ctx: Context, asm: Assembly) -> Assembly:
    """The structure of an assembly's layers: how many hold exactly one mixer -> FFN transition, and whether they
    form a decoder stack (some layer holds an attention / linear-attention / state-space kernel, and every layer
    type holds a mixer or an FFN kernel: a cut inside a layer leaves types with neither). One pass over every step's
    layers in flat positions (a step's transitions lie within it: the counts of earlier steps cancel); a type is
    judged by its first layer."""
    t, fl = asm.table, ctx.flat
    roles = _roles(ctx)
    base = fl.lo[t.step]
    lo, hi = t.lo + base, t.hi + base
    inside = np.searchsorted(roles.trans_ffn, hi, side="left") - np.searchsorted(roles.trans_mixer, lo, side="left")
    first = t.sig_first
    has_mixer = roles.mixer_n[hi[first]] > roles.mixer_n[lo[first]]
    has_part = has_mixer | (roles.ffn_n[hi[first]] > roles.ffn_n[lo[first]])
    asm.layers_n, asm.agree, asm.n_types = int(t.lo.size), int((inside == 1).sum()), int(first.size)
    asm.decoder = bool(first.size) and bool(has_mixer.any()) and bool(has_part.all())
    return asm


@dataclass
class _Roles:
    """Per trace (kept on the flat sequences): every step's mixer -> FFN transitions in flat positions, the running
    counts of mixer and FFN kernels (0 first) and the GEMM kernels' positions."""

    trans_mixer: np.ndarray
    trans_ffn: np.ndarray
    mixer_n: np.ndarray
    ffn_n: np.ndarray
    gemm: np.ndarray
    ffn_before: np.ndarray = None  # made for _no_agreement
    mixer_before: np.ndarray = None


def _roles(ctx: Context) -> _Roles:
    fl = ctx.flat
    if fl.roles is None:
        cats = ctx.cat_of_code[fl.codes]
        shift = fl.lo[:-1].tolist()
        z = np.zeros(1, np.int64)
        tm = np.concatenate([s.trans_mixer + b for s, b in zip(ctx.seqs, shift)] + [z[:0]]).astype(np.int64)
        tf = np.concatenate([s.trans_ffn + b for s, b in zip(ctx.seqs, shift)] + [z[:0]]).astype(np.int64)
        gemm_cat = np.array([f == GEMM_FAMILY for f in ctx.family_of_cat], dtype=bool)
        fl.roles = _Roles(
            tm,
            tf,
            np.concatenate([z, np.cumsum(ctx.mixer_cat[cats], dtype=np.int64)]),
            np.concatenate([z, np.cumsum(ctx.ffn_cat[cats], dtype=np.int64)]),
            np.flatnonzero(gemm_cat[cats]) if gemm_cat.size else z[:0],
        )
    return fl.roles


def _share(asm: Assembly) -> float:
    return asm.agree / asm.layers_n if asm.layers_n else 0.0


def _candidates(ctx: Context) -> Counter:
    """The boundary candidates: name code -> the most times it occurs in one step, for those occurring at least
    MIN_COUNT times in some step."""
    fl = ctx.flat
    n_codes = len(ctx.names) + 1
    step_of = np.repeat(np.arange(len(ctx.seqs), dtype=np.int64), np.diff(fl.lo))
    key = step_of * n_codes + fl.codes
    # few enough (step, code) pairs to count in one array, and no name-less kernel (code -1)
    if len(ctx.seqs) * n_codes <= 4 * key.size + 4096 and int(fl.codes.min(initial=0)) >= 0:
        per = np.bincount(key, minlength=len(ctx.seqs) * n_codes).reshape(len(ctx.seqs), n_codes)
        most = np.where(per >= MIN_COUNT, per, 0).max(axis=0, initial=0).astype(np.int64)
        return Counter({int(c): int(most[c]) for c in np.flatnonzero(most)})
    keys, per_step = np.unique(key, return_counts=True)
    big = per_step >= MIN_COUNT
    most = np.zeros(n_codes, dtype=np.int64)
    np.maximum.at(most, keys[big] % n_codes, per_step[big])
    return Counter({int(c): int(most[c]) for c in np.flatnonzero(most)})


def choose_boundary(ctx: Context) -> Assembly | None:
    """The boundary kernel whose layers are a decoder stack that agrees best with the structure (one mixer -> FFN
    transition per layer, counted without any boundary kernel), then (within STRUCTURE_SLACK of that agreement) a
    norm kernel covering NORM_PREFERENCE of the best coverage, then the most main-stream kernels covered, the fewest
    layer types, the kernel closest after the last GEMM before it (a decomposed norm's first kernel, not one inside
    it), the rarest kernel. A kernel that repeats inside a layer (an elementwise kernel three times per
    layer) cuts layers without an attention or an FFN part, or with no transition in most of them: it loses."""
    counts = _candidates(ctx)
    if not counts or not any(ctx.mixer_cat[ctx.cat_of_code[s.codes]].any() for s in ctx.seqs if s.codes.size):
        return None  # no attention, linear-attention or state-space kernel: no decoder stack
    is_norm = {tok: ctx.family_of_cat[ctx.cat_of_code[tok]] == NORM_FAMILY for tok in counts}
    total = sum(seq.codes.size for seq in ctx.seqs)
    sure = _Sure(ctx, total)

    def build(tokens, wait: bool = True) -> list[Assembly]:
        out = []
        for tok in tokens:
            p = phased_segments(ctx, tok)
            if wait and sure.waits(p, is_norm[tok]):
                continue
            a = assemble(ctx, tok, p)
            if a.covered and _stack_like(a) and _measure(ctx, a).decoder:
                out.append(a)
                sure.add(a, is_norm[tok])
        return out

    results = build(tok for tok in sorted(counts) if is_norm[tok])
    # a norm boundary covering 90 % of all main-stream kernels, every layer holding one transition, wins whatever
    # the others cover: skip them
    if not any(a.covered >= NORM_PREFERENCE * total and _share(a) >= 1.0 - STRUCTURE_SLACK for a in results):
        results += build(tok for tok in sorted(counts) if not is_norm[tok])
    if not results:
        return None
    top = max(_share(a) for a in results)
    results += build(sure.late(top), wait=False)  # their shares are at most top
    results = [a for a in results if _share(a) >= top - STRUCTURE_SLACK]
    roles = sure.roles

    def after_gemm(a: Assembly) -> float:
        """Median main-stream kernels between a layer's first kernel and the last GEMM before it: a layer starts
        right after the previous layer's last GEMM (and its residual add), not inside its own input norm. In flat
        positions: the GEMM before must lie in the layer's step."""
        t, g = a.table, roles.gemm
        base = ctx.flat.lo[t.step]
        lo = t.lo + base
        k = np.searchsorted(g, lo) - 1
        ok = k >= np.searchsorted(g, base)
        d = (lo - g[np.clip(k, 0, None)])[ok] if g.size else lo[:0]
        return float(np.median(d)) if d.size else math.inf

    def key(a: Assembly):
        return (a.covered, -a.n_types, -after_gemm(a), -counts[a.token], -a.token)

    def top_of(cands: list[Assembly]) -> Assembly:
        """max(cands, key=key), after_gemm measured only for those first in (covered, -n_types): the rest cannot be
        the (first) maximum."""
        head = max((a.covered, -a.n_types) for a in cands)
        return max([a for a in cands if (a.covered, -a.n_types) == head], key=key)

    best = top_of(results)
    norms = [a for a in results if is_norm[a.token] and a.covered >= NORM_PREFERENCE * best.covered]
    if norms:
        best = top_of(norms)
    return best


def _region(p: Phased) -> tuple[np.ndarray, np.ndarray] | None:
    """Per step holding a phased segment, the first and last segment a layer can hold whole: runs start and end at
    phased segments, and a run's last layer takes the segment after it only when it lacks its last phase (phase
    k - 2) and that segment is unphased (_Runs._right). None: no phased segment, no run, no layer."""
    s = p.segs
    r = np.flatnonzero(s.ph >= 0)
    if not r.size:
        return None
    st = s.step[r]
    if st[0] == st[-1]:  # one step (segments are in step order)
        first, last = r[:1], r[-1:]
    else:
        edge = np.flatnonzero(st[1:] != st[:-1])
        first, last = r[np.concatenate([[0], edge + 1])], r[np.append(edge, r.size - 1)]
    after = np.minimum(last + 1, s.b.size - 1)
    takes = (s.ph[last] == s.k[last] - 2) & (s.step[after] == s.step[last]) & (s.ph[after] < 0)
    return first, np.where(takes, after, last)


def _cover_bound(ctx: Context, p: Phased, reg=False, limit: float | None = None) -> int:
    """At least the main-stream kernels the assembly covers (its ``covered``), from the phases alone: per step, the
    segments of ``_region``, and the segment before them when the run starting there can recover its first layer's
    start from it (_Runs._left: at a phase other than 0, and only when the missing labels, at least ``need`` kernels
    long, can align with it within their edit budget: no longer than it by more than the budget). A later run's
    embedding kernels lie after the step's earlier layers; layers are disjoint. ``reg``: _region(p), when made;
    ``limit``: the recovery is looked at only when it decides whether the bound is below that."""
    reg = _region(p) if reg is False else reg
    if reg is None:
        return 0
    first, last = reg
    s = p.segs
    inner = int((s.b[last] - s.a[first]).sum())
    before = np.maximum(first - 1, 0)
    ph0 = s.ph[first]
    can = (ph0 > 0) & (s.step[before] == s.step[first])
    if not can.any():
        return inner
    room = s.a[first] - s.a[before]  # the segment before (0 where it is in another step: can is False there)
    loose = inner + int(room[can].sum())
    if limit is not None and (loose < limit or inner >= limit):
        return loose
    seq = p.label_seq
    size = seq.lengths().astype(np.float64)  # each label's length
    key = np.where(p.phase_l >= 0, p.comp_l * K_MAX + p.phase_l, -1)
    shortest = np.full((len(p.k_of) + 1) * K_MAX, np.inf)
    np.minimum.at(shortest, key[key >= 0], size[key >= 0])
    need = np.concatenate([np.zeros((len(p.k_of) + 1, 1)), np.cumsum(shortest.reshape(-1, K_MAX), axis=1)], axis=1)[
        s.comp[first], ph0
    ]  # the missing phases 0 .. ph0 - 1 (inf: one has none)
    with np.errstate(invalid="ignore"):  # inf - inf: a phase without labels, no recovery either way
        can &= ~(np.isinf(need) | (need - np.maximum(1.0, EDIT_FRACTION * need) > room + 1e-6))
    return inner + int(room[can].sum())


def _no_agreement(ctx: Context, p: Phased, roles: _Roles, reg=False) -> bool:
    """Whether no layer of the assembly can hold exactly one mixer -> FFN transition (its ``agree`` is 0): every
    layer holds a whole segment of ``_region`` at phase 0 or k - 1, and every transition such a segment holds, so
    when each of those segments holds two or more, so does each layer. ``reg``: _region(p), when made."""
    reg = _region(p) if reg is False else reg
    if reg is None:
        return True
    s = p.segs
    if roles.ffn_before is None:  # per flat position, the transitions ending before it and starting before it
        n = ctx.flat.codes.size
        roles.ffn_before = np.concatenate([[0], np.cumsum(np.bincount(roles.trans_ffn, minlength=n))])
        roles.mixer_before = np.concatenate([[0], np.cumsum(np.bincount(roles.trans_mixer, minlength=n))])
    few = np.flatnonzero(roles.ffn_before[s.b] - roles.mixer_before[s.a] < 2)  # _measure's count, per segment
    first, last = reg
    j = np.searchsorted(first, few, side="right") - 1  # the steps' regions are disjoint and in order
    few = few[(j >= 0) & (few <= last[np.maximum(j, 0)])]
    if not few.size:
        return True
    # a layer starts at a segment of phase 0, or (a run's first layer, its start recovered) ends at one of phase
    # k - 1, each segment's phase in its run as _Runs.layers_into counts it: only those segments need two
    r = np.flatnonzero(s.ph >= 0)
    prev = r[np.searchsorted(r, few, side="right") - 1]  # the phased segment at or before (a region starts at one)
    k = np.maximum(s.k[prev], 1)
    cph = (s.ph[prev] + few - prev) % k
    return not ((cph == 0) | (cph == k - 1)).any()


class _Sure:
    """What the decoder stacks assembled so far settle about ``choose_boundary``'s answer, so that a candidate that
    cannot change it waits, unassembled (the answer does not depend on the order the candidates are tried in).

    With ``top`` the best share so far and ``covered`` the most main-stream kernels any stack within
    STRUCTURE_SLACK of it covers: a candidate whose share cannot exceed ``top`` (at most 1; 0 when no layer can hold
    exactly one transition, _no_agreement) and that covers less than ``covered`` (``_cover_bound``; a norm: less than
    NORM_PREFERENCE of it and of all kernels, or less than ``norm_covered``, the most a kept norm covers, when it
    cannot end the search itself) is not the best, nor the best of the norms that win, nor one that ends the search,
    as long as no later stack raises ``top`` (the kept stacks then only gain members). ``late`` names those that
    waited while ``top`` was lower than the final one: they are assembled after all. A candidate that covers
    nothing is never a stack."""

    def __init__(self, ctx: Context, total: int):
        self.ctx, self.total, self.roles = ctx, total, _roles(ctx)
        self.built: list[tuple[float, int, bool]] = []  # (share, covered, is a norm) of every stack so far
        self.top, self.covered, self.norm_covered, self.ended = None, -1, -1, False
        self.waiting: list[tuple[int, float]] = []  # (token, top when it began to wait)

    def add(self, a: Assembly, norm: bool) -> None:
        share = _share(a)
        self.built.append((share, a.covered, norm))
        self.ended = self.ended or (
            norm and a.covered >= NORM_PREFERENCE * self.total and share >= 1.0 - STRUCTURE_SLACK
        )
        if self.top is None or share > self.top:  # the kept stacks change: counted again
            self.top = share
            kept = [(c, nm) for sh, c, nm in self.built if sh >= share - STRUCTURE_SLACK]
            self.covered = max(c for c, _ in kept)
            self.norm_covered = max((c for c, nm in kept if nm), default=-1)
        elif share >= self.top - STRUCTURE_SLACK:
            self.covered = max(self.covered, a.covered)
            self.norm_covered = max(self.norm_covered, a.covered) if norm else self.norm_covered

    def waits(self, p, norm: bool) -> bool:
        reg = _region(p)
        if reg is None:
            return True  # no layer: not a stack, whatever the others do
        if self.top is None:
            return False
        # a norm: not among the winning norms (below NORM_PREFERENCE of the best), or covering less than a norm kept
        # so far (then not the best of them; one of them is kept as long as any norm is)
        out = min(NORM_PREFERENCE * self.covered, NORM_PREFERENCE * self.total) if norm else self.covered
        limit = max(out, self.norm_covered) if norm else out
        bound = _cover_bound(self.ctx, p, reg, limit)
        if not bound < limit:
            return False
        none_agree = self.top < 1.0
        if none_agree and not _no_agreement(self.ctx, p, self.roles, reg):
            return False
        if norm and not bound < out and not (bound < NORM_PREFERENCE * self.total or none_agree or self.ended):
            return False  # it might end the search for the others itself
        self.waiting.append((p.token, self.top))
        return True

    def late(self, top: float) -> list[int]:
        return [tok for tok, t in self.waiting if t < top]


CHECK_COMPARED = "layers vs attention -> MLP/MoE transitions per step, one in every layer"


def structure_check(ctx: Context, asm: Assembly | None) -> dict:
    """The layers against the structure counted without them: per step the mixer -> FFN transitions on the main
    stream (one per decoder layer) and the layers found; ``agrees`` when every step has as many layers as
    transitions and every layer holds exactly one."""
    trans = np.array([s.trans_mixer.size for s in ctx.seqs], dtype=np.int64)
    found = np.array([len(asm.layers.get(s.step, [])) if asm is not None else 0 for s in ctx.seqs], dtype=np.int64)
    one = asm.agree if asm is not None else 0
    total = int(found.sum())
    agrees = bool(total > 0 and np.array_equal(trans, found) and one == total)
    return {
        "compared": CHECK_COMPARED,
        "layers_per_step": median_ns(found) if found.size else 0,
        "transitions_per_step": median_ns(trans) if trans.size else 0,
        "layers_with_one_transition": one,
        "layers": total,
        "steps_disagreeing": int((trans != found).sum()),
        "agrees": agrees,
    }
